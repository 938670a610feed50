// Package plan computes the egress plan: from one view of the cluster, who
// leaves as what. Which EgressIP owns each pod, which of its addresses may
// use it, which nodes host which egress IPs, which tunnel endpoint each node
// sends from and which networks are the nodes' own are decided here once,
// as a pure function of the view. The steer agent renders a worker's part
// (Worker) into routes and rules, the gateway agent a gateway's part
// (Gateway) into the data plane's configuration; neither decides ownership
// itself, so the two cannot disagree on who leaves as what.
package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Options are the cluster-wide settings the plan depends on.
type Options struct {
	// TrustPodIPs accepts a pod's addresses as the API gives them, even
	// outside its Node's spec.podCIDRs (for CNIs whose IPAM ignores them:
	// Calico IPAM, AWS VPC CNI). By default such addresses are refused, so
	// that a node cannot claim another node's pod address (docs/security.md).
	TrustPodIPs bool
}

// Plan is who leaves as what. Build makes it; nothing modifies it after.
type Plan struct {
	// Objects are the usable EgressIP objects, in name order.
	Objects []Object
	// Nodes are the cluster's nodes by name.
	Nodes map[string]*Node
	// Pods are the running, non-host-network pods with an address whose
	// namespace is known, in namespace/name order.
	Pods []Pod
	// NodeNetworks are the destinations pods may not reach through a
	// gateway because they are the cluster's nodes: every node's
	// InternalIP addresses and interface subnets (host-cidrs).
	NodeNetworks []netip.Prefix
	// Conflicts are destinations claimed by two objects that select a pod
	// in common, in the order found.
	Conflicts []Conflict
	// Problems are the inputs that were refused or could only be used in
	// part, each as one sentence; the rest of the plan is still built.
	Problems []error

	dests        map[string]*Dest          // by Dest.Key
	trafficCache map[string][]netip.Prefix // EgressIPTraffic name → usable networks
}

// Object is a usable EgressIP object.
type Object struct {
	Name     string
	EgressIP *egressv1.EgressIP
	// Placements are its status items that can be used, sorted by address:
	// the address is one of its spec's egress IPs and a source address,
	// and no object whose name sorts first is placed on it.
	Placements []Placement
	// Standbys maps an egress IP to its standby node (the controller's
	// egret.io/standby annotation).
	Standbys map[netip.Addr]string
	// Destinations are what its trafficSelector picks, nil when it has
	// none (it serves every destination).
	Destinations *Destinations
}

// Placement is an egress IP on the node that hosts it.
type Placement struct {
	IP   netip.Addr
	Node string
}

// Node is what the plan knows of a node.
type Node struct {
	Name string
	// VTEP4 and VTEP6 are the node's tunnel endpoints of each family
	// (invalid when it has none or another node claimed the address first).
	VTEP4, VTEP6 netip.Addr
	// PodCIDRs are its spec.podCIDRs.
	PodCIDRs []netip.Prefix
	// Object is the Node itself.
	Object *corev1.Node
}

// Pod is a pod and what it leaves as.
type Pod struct {
	Namespace, Name, Node string
	// UID is the Pod object's: what the gateway names it by in drop
	// samples and Events.
	UID types.UID
	// Owner is the EgressIP object without a trafficSelector that owns the
	// pod's traffic (to destinations Dest does not decide), "" when none.
	Owner string
	// Dest maps the pod's destinations to the objects with a
	// trafficSelector that select it, nil when none does.
	Dest *Dest
	// IPs are the addresses that leave as the owners' egress IPs (all the
	// pod's usable addresses when the pod is not Selected).
	IPs []netip.Addr
	// Refused are selected addresses that may not use the owner's egress
	// IPs (outside the node's pod networks, used by another pod, a node's
	// or an egress IP's address, not scheduled): they
	// are held in rather than let out as anything.
	Refused []netip.Addr
}

// Key is the pod's namespace/name.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// Selected says some object uses its egress IPs for some of the pod's
// traffic.
func (p Pod) Selected() bool { return p.Owner != "" || p.Dest != nil }

// Owners are the objects whose egress IPs some of the pod's traffic uses,
// in name order.
func (p Pod) Owners() []string {
	if p.Dest != nil {
		return p.Dest.Owners()
	}
	if p.Owner != "" {
		return []string{p.Owner}
	}
	return nil
}

// OwnerFor returns the object whose egress IPs the pod's traffic to dst
// uses, "" when it uses none; excluded says an exclusion of the object
// decided that (its no-egress-IP mode applies), rather than no object
// claiming dst.
func (p Pod) OwnerFor(dst netip.Addr) (owner string, excluded bool) {
	if p.Dest == nil {
		return p.Owner, false
	}
	if r, ok := p.Dest.Choose(dst); ok {
		if r.Exclude {
			return r.Owner, true
		}
		return r.Owner, false
	}
	return p.Dest.Fallback, false
}

// Build computes the plan of the cluster in v. It is a pure function: it
// reads v and modifies nothing in it.
//
// A pod is selected by the objects whose namespaceSelector matches its
// namespace's labels and whose podSelector matches its labels. Objects
// with a trafficSelector own the destinations they pick (the longest
// network wins, Dest); of those without, the one whose name sorts first
// owns the rest.
func Build(v cluster.View, opt Options) *Plan {
	p := &Plan{Nodes: map[string]*Node{}}
	p.buildNodes(v.Nodes)
	sel := p.buildObjects(v.EgressIPs, v.Traffic)
	p.buildPods(v, sel, opt)
	return p
}

func (p *Plan) problem(format string, a ...any) {
	p.Problems = append(p.Problems, fmt.Errorf(format, a...))
}

// buildNodes reads every node's tunnel endpoints and pod networks; an
// endpoint another node (by name) already has is refused.
func (p *Plan) buildNodes(nodes []*corev1.Node) {
	nodes = slices.DeleteFunc(slices.Clone(nodes), func(n *corev1.Node) bool { return n == nil })
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	vtepOwner := map[netip.Addr]string{}
	for _, n := range nodes {
		if p.Nodes[n.Name] != nil {
			continue
		}
		node := &Node{Name: n.Name, PodCIDRs: cluster.NodePodCIDRs(n), Object: n}
		for _, c := range n.Spec.PodCIDRs {
			if pc, err := netip.ParsePrefix(c); err != nil || pc.Addr().Zone() != "" || pc.Addr().Is4In6() {
				p.problem("Node %s: spec.podCIDRs entry %q is not a network; ignored", n.Name, c)
			}
		}
		p.Nodes[n.Name] = node
		vteps, err := cluster.NodeVTEPs(n)
		if err != nil {
			p.Problems = append(p.Problems, err)
		}
		for _, v := range vteps {
			v = v.Unmap()
			if !v.IsValid() || v.IsUnspecified() || v.IsMulticast() || v.IsLoopback() {
				continue
			}
			slot := &node.VTEP6
			if v.Is4() {
				slot = &node.VTEP4
			}
			if slot.IsValid() {
				continue // the first of each family
			}
			if other, dup := vtepOwner[v]; dup {
				p.problem("node %s: VTEP %v is also node %s's; only %s's is used", n.Name, v, other, other)
				continue
			}
			vtepOwner[v] = n.Name
			*slot = v
		}
		// OVN-Kubernetes' or Egret's subnets, whichever the node has; a
		// half-broken annotation still yields what parsed.
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				ip = ip.Unmap().WithZone("")
				p.NodeNetworks = append(p.NodeNetworks, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
		_, host, _, _ := cluster.NodeInterfaces(n.Annotations)
		for _, h := range host {
			p.NodeNetworks = append(p.NodeNetworks, h.Masked())
		}
	}
}

// buildObjects compiles the selectors and keeps each object's usable
// placements: an egress IP is placed for at most one object (the first by
// name) on one node.
func (p *Plan) buildObjects(eips []*egressv1.EgressIP, traffic []*egressv1.EgressIPTraffic) *cluster.Selector {
	traffic = slices.DeleteFunc(slices.Clone(traffic), func(t *egressv1.EgressIPTraffic) bool { return t == nil })
	slices.SortFunc(traffic, func(a, b *egressv1.EgressIPTraffic) int { return cmp.Compare(a.Name, b.Name) })
	sel, problems := cluster.NewSelector(eips)
	p.Problems = append(p.Problems, problems...)
	placedFor := map[netip.Addr]string{}
	for i := range sel.Len() {
		e := sel.Object(i)
		o := Object{Name: e.Name, EgressIP: e}
		inSpec := map[netip.Addr]bool{}
		for _, s := range e.Spec.EgressIPs {
			if a, err := egressv1.ParseEgressIP(s); err == nil {
				inSpec[a] = true
			}
		}
		for _, item := range e.Status.Items {
			a, err := egressv1.ParseEgressIP(item.EgressIP)
			switch {
			case err != nil:
				p.problem("EgressIP %s: status item %q on node %q: %v; not used", e.Name, item.EgressIP, item.Node, err)
				continue
			case !inSpec[a]:
				p.problem("EgressIP %s: status item %q on node %q is not one of its egress IPs; not used", e.Name, item.EgressIP, item.Node)
				continue
			}
			if other, dup := placedFor[a]; dup {
				if other != e.Name {
					p.problem("EgressIP %s: %v is also placed for EgressIP %s; used for %s (first by name)", e.Name, a, other, other)
				}
				continue
			}
			placedFor[a] = e.Name
			o.Placements = append(o.Placements, Placement{IP: a, Node: item.Node})
		}
		slices.SortFunc(o.Placements, func(a, b Placement) int { return a.IP.Compare(b.IP) })
		sb, err := egressv1.Standbys(e)
		if err != nil {
			p.Problems = append(p.Problems, err)
		}
		o.Standbys = sb
		o.Destinations = p.destinations(e, traffic)
		p.Objects = append(p.Objects, o)
	}
	return sel
}

// buildPods decides each pod's owner and which of its addresses use it.
func (p *Plan) buildPods(v cluster.View, sel *cluster.Selector, opt Options) {
	nsLabels := make(map[string]map[string]string, len(v.Namespaces))
	for _, ns := range v.Namespaces {
		if ns != nil {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	// Addresses no pod may use as its own: the nodes' and the egress IPs.
	reserved := map[netip.Addr]string{}
	for _, n := range p.Nodes {
		for _, a := range n.Object.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				reserved[ip.Unmap().WithZone("")] = "an address of node " + n.Name
			}
		}
		for _, vt := range []netip.Addr{n.VTEP4, n.VTEP6} {
			if vt.IsValid() {
				reserved[vt] = "node " + n.Name + "'s VTEP"
			}
		}
	}
	for _, o := range p.Objects {
		for _, pl := range o.Placements {
			reserved[pl.IP] = "an egress IP of EgressIP " + o.Name
		}
	}

	pods := slices.DeleteFunc(slices.Clone(v.Pods), func(p *corev1.Pod) bool { return p == nil })
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	usedBy := map[netip.Addr]string{}
	for _, pod := range pods {
		ips := cluster.PodIPs(pod)
		if pod.Spec.HostNetwork || cluster.PodDone(pod) || len(ips) == 0 {
			continue
		}
		nl, ok := nsLabels[pod.Namespace]
		if !ok {
			continue // arrives with its namespace
		}
		out := Pod{Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName, UID: pod.UID}
		matches := sel.Match(nl, pod.Labels)
		for _, i := range matches {
			o := &p.Objects[i]
			if o.Destinations != nil {
				continue
			}
			if out.Owner == "" {
				out.Owner = o.Name
				continue
			}
			p.problem("pod %s is selected by EgressIP %s and %s; it uses %s (first by name; neither has a trafficSelector)", out.Key(), out.Owner, o.Name, out.Owner)
		}
		if d := p.dest(matches, out.Key()); d != nil && len(d.Rules) > 0 {
			out.Dest = d
		}
		owner := out.Owner // for the problems below
		if owner == "" && out.Dest != nil {
			owner = strings.Join(out.Dest.Owners(), ", ")
		}
		node := p.Nodes[out.Node]
		for _, ip := range ips {
			if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() {
				if out.Selected() {
					p.problem("pod %s: address %v cannot be a pod source; not used", out.Key(), ip)
				}
				continue
			}
			if !out.Selected() {
				out.IPs = append(out.IPs, ip)
				continue
			}
			why := ""
			switch {
			case out.Node == "":
				why = "the pod is not scheduled"
			case reserved[ip] != "":
				why = "it is " + reserved[ip]
			case usedBy[ip] != "":
				why = "it is also pod " + usedBy[ip] + "'s"
			case node != nil && !opt.TrustPodIPs && !cluster.InPodCIDRs(node.PodCIDRs, ip):
				why = fmt.Sprintf("it is outside node %s's pod networks %v", out.Node, node.PodCIDRs)
			}
			if why != "" {
				if out.Node != "" {
					p.problem("pod %s (EgressIP %s): address %v does not use the egress IPs: %s; its traffic is blocked", out.Key(), owner, ip, why)
				}
				out.Refused = append(out.Refused, ip)
				continue
			}
			usedBy[ip] = out.Key()
			out.IPs = append(out.IPs, ip)
		}
		p.Pods = append(p.Pods, out)
	}
}

// VTEP returns the node's tunnel endpoint that a peer with endpoints of the
// families have4/have6 talks to: IPv4 preferred.
func (n *Node) VTEP(have4, have6 bool) (netip.Addr, bool) {
	switch {
	case have4 && n.VTEP4.IsValid():
		return n.VTEP4, true
	case have6 && n.VTEP6.IsValid():
		return n.VTEP6, true
	}
	return netip.Addr{}, false
}

// Family is 0 for IPv4 and 1 for IPv6 addresses.
func Family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
}
