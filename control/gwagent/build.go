// Package gwagent is the gateway agent: it follows the EgressIP objects, Nodes,
// Namespaces and Pods (from the Kubernetes API or a directory of YAML files),
// builds the data plane's configuration from them (which worker nodes may
// tunnel to this gateway, which of their pods use which policy, which egress
// IPs are hosted here), reloads the engine when it changes, claims and
// releases egress IPs, serves the gRPC health check and fences itself off
// when it loses contact with its source. docs/gateway-agent.md describes the
// behaviour.
package gwagent

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/config"
	corev1 "k8s.io/api/core/v1"
)

// Result is the built configuration with what was left out and why.
type Result struct {
	// Spec is base with Nodes and Policies filled (and VTEPs and InnerMAC
	// defaulted from this node's Node object when base has none): typed
	// values the engine settles as they are, without parsing them again.
	Spec config.Spec
	// Hosted are the egress IPs hosted here, sorted.
	Hosted []netip.Addr
	// Problems are inputs that were skipped; the rest is still built.
	Problems []error
}

// Options are the agent's settings that Build depends on.
type Options struct {
	// TrustPodIPs accepts a pod's addresses as the API gives them, even
	// outside its Node's spec.podCIDRs (for CNIs whose IPAM ignores them:
	// Calico IPAM, AWS VPC CNI). By default such addresses are refused,
	// so a node cannot claim another node's pod address (docs/security.md).
	TrustPodIPs bool
}

// Build computes the engine configuration of gateway node from the view
// in. It is a pure function of its arguments and modifies nothing in in.
//
// Pod selection is cluster.Selector's, as on the workers: a running,
// non-host-network pod with an address is selected by the EgressIP objects
// whose namespaceSelector matches its namespace's labels and whose
// podSelector matches its labels; when several do, the one whose name sorts
// first owns it, and the worker steers it to that object's gateways.
func Build(base config.Spec, node string, in cluster.View, opt Options) Result {
	var r Result
	problem := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Errorf(format, a...)) }
	c := base
	c.Node = node
	c.Nodes, c.Policies = nil, nil
	c.VTEPs = slices.Clone(base.VTEPs)

	var self *corev1.Node
	for _, n := range in.Nodes {
		if n != nil && n.Name == node {
			self = n
		}
	}
	if len(c.VTEPs) == 0 {
		if self == nil {
			problem("no VTEP configured and no Node object %q to take it from", node)
		} else {
			var v4, v6 bool
			vteps, err := cluster.NodeVTEPs(self)
			if err != nil {
				r.Problems = append(r.Problems, err)
			}
			for _, a := range vteps {
				if (a.Is4() && !v4) || (a.Is6() && !v6) {
					c.VTEPs = append(c.VTEPs, a)
					v4, v6 = v4 || a.Is4(), v6 || a.Is6()
				}
			}
			if len(c.VTEPs) == 0 {
				problem("no VTEP configured and Node %q has neither the %s annotation nor an InternalIP", node, cluster.AnnotationVTEP)
			}
		}
	}
	var gwVTEPs []netip.Addr
	for _, a := range c.VTEPs {
		if a.IsValid() {
			gwVTEPs = append(gwVTEPs, a.Unmap())
		}
	}
	if c.InnerMAC == [6]byte{} && len(gwVTEPs) > 0 {
		c.InnerMAC = cluster.VTEPMAC(gwVTEPs[0])
	}

	sel, problems := cluster.NewSelector(in.EgressIPs)
	r.Problems = append(r.Problems, problems...)

	// Policies: every usable object, with the egress IPs its status places here.
	hosted := map[netip.Addr]string{}
	for i := range sel.Len() {
		eip := sel.Object(i)
		inSpec := map[netip.Addr]bool{}
		for _, s := range eip.Spec.EgressIPs {
			if a, err := egressv1.ParseEgressIP(s); err == nil {
				inSpec[a] = true
			}
		}
		p := config.Policy{Name: eip.Name}
		var ips []netip.Addr
		for _, item := range eip.Status.Items {
			if item.Node != node {
				continue
			}
			a, err := egressv1.ParseEgressIP(item.EgressIP)
			switch {
			case err != nil:
				problem("EgressIP %s: status item %q: %v; not hosted", eip.Name, item.EgressIP, err)
				continue
			case !inSpec[a]:
				problem("EgressIP %s: status item %q is not one of its egress IPs; not hosted", eip.Name, item.EgressIP)
				continue
			case a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified():
				problem("EgressIP %s: %v cannot be an egress IP; not hosted", eip.Name, a)
				continue
			case slices.Contains(gwVTEPs, a):
				problem("EgressIP %s: %v is this gateway's VTEP; not hosted", eip.Name, a)
				continue
			}
			if other, dup := hosted[a]; dup {
				if other != eip.Name {
					problem("EgressIP %s: %v is also placed here for EgressIP %s; hosted for %s (first by name)", eip.Name, a, other, other)
				}
				continue
			}
			hosted[a] = eip.Name
			ips = append(ips, a)
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		p.EgressIPs = ips
		r.Hosted = append(r.Hosted, ips...)
		c.Policies = append(c.Policies, p)
	}
	slices.SortFunc(r.Hosted, netip.Addr.Compare)

	// Worker nodes: every other node with a VTEP of a family the gateway has.
	type workerNode struct {
		node     config.Node
		pods     []netip.Addr
		podCIDRs []netip.Prefix
	}
	workers := map[string]*workerNode{}
	vtepOwner := map[netip.Addr]string{}
	nodes := slices.DeleteFunc(slices.Clone(in.Nodes), func(n *corev1.Node) bool { return n == nil })
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	noVTEP := map[string]bool{}
	for _, n := range nodes {
		if n.Name == node || workers[n.Name] != nil {
			continue
		}
		vteps, err := cluster.NodeVTEPs(n)
		if err != nil {
			r.Problems = append(r.Problems, err)
		}
		vtep, ok := pickVTEP(vteps, gwVTEPs)
		if !ok {
			noVTEP[n.Name] = true
			continue
		}
		if slices.Contains(gwVTEPs, vtep) {
			problem("node %s: VTEP %v is this gateway's own; its tunnel traffic is not accepted", n.Name, vtep)
			continue
		}
		if other, dup := vtepOwner[vtep]; dup {
			problem("node %s: VTEP %v is also node %s's; only %s is accepted", n.Name, vtep, other, other)
			continue
		}
		vtepOwner[vtep] = n.Name
		mac, err := cluster.NodeTunnelMAC(n, vtep)
		if err != nil {
			problem("node %s: %v; using %v", n.Name, err, net.HardwareAddr(mac[:]))
		}
		workers[n.Name] = &workerNode{node: config.Node{Name: n.Name, VTEP: vtep, InnerMAC: mac}, podCIDRs: cluster.NodePodCIDRs(n)}
	}

	// Pods: the selected ones, under their node, each address once.
	nsLabels := make(map[string]map[string]string, len(in.Namespaces))
	for _, ns := range in.Namespaces {
		if ns != nil {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	pods := slices.DeleteFunc(slices.Clone(in.Pods), func(p *corev1.Pod) bool { return p == nil })
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	podOwner := map[netip.Addr]string{}
	for _, pod := range pods {
		ips := cluster.PodIPs(pod)
		if pod.Spec.HostNetwork || cluster.PodDone(pod) || len(ips) == 0 {
			continue
		}
		nl, ok := nsLabels[pod.Namespace]
		if !ok {
			continue // arrives with its namespace
		}
		i := sel.Owner(nl, pod.Labels)
		if i < 0 {
			continue
		}
		owner := sel.Object(i).Name
		w := workers[pod.Spec.NodeName]
		if w == nil {
			switch {
			case pod.Spec.NodeName == "":
			case pod.Spec.NodeName == node:
				problem("pod %s/%s (EgressIP %s) runs on this gateway node; its traffic does not come through the tunnel", pod.Namespace, pod.Name, owner)
			case noVTEP[pod.Spec.NodeName]:
				problem("pod %s/%s (EgressIP %s): node %s has no VTEP of this gateway's families; not accepted", pod.Namespace, pod.Name, owner, pod.Spec.NodeName)
			default:
				problem("pod %s/%s (EgressIP %s): node %s is unknown or not accepted", pod.Namespace, pod.Name, owner, pod.Spec.NodeName)
			}
			continue
		}
		for _, ip := range ips {
			key := pod.Namespace + "/" + pod.Name
			switch {
			case !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast():
				problem("pod %s: address %v cannot be a pod source; skipped", key, ip)
				continue
			case hosted[ip] != "" || slices.Contains(gwVTEPs, ip):
				problem("pod %s: address %v is an address of this gateway; skipped", key, ip)
				continue
			case !opt.TrustPodIPs && !cluster.InPodCIDRs(w.podCIDRs, ip):
				problem("pod %s: address %v is outside node %s's pod networks %v; skipped", key, ip, pod.Spec.NodeName, w.podCIDRs)
				continue
			}
			if other, dup := podOwner[ip]; dup {
				problem("pod %s: address %v is also pod %s's; only %s is accepted", key, ip, other, other)
				continue
			}
			podOwner[ip] = key
			w.pods = append(w.pods, ip)
			w.node.Pods = append(w.node.Pods, config.Pod{Addr: ip, Policy: owner})
		}
	}
	for _, n := range nodes {
		if w := workers[n.Name]; w != nil {
			slices.SortFunc(w.node.Pods, func(a, b config.Pod) int { return a.Addr.Compare(b.Addr) })
			c.Nodes = append(c.Nodes, w.node)
			delete(workers, n.Name)
		}
	}
	c.DeniedDestinations = append(slices.Clone(base.DeniedDestinations), nodeNetworks(in.Nodes)...)
	r.Spec = c
	return r
}

// nodeNetworks are the destinations pods may not reach through the gateway
// because they are the cluster's nodes: every node's InternalIP addresses
// and its interface subnets (k8s.ovn.org/host-cidrs or egret.io/host-cidrs), so that
// a pod cannot reach kubelets or node services as the gateway node.
// Config allowedDestinations overrides them.
func nodeNetworks(nodes []*corev1.Node) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range nodes {
		if n == nil {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				ip = ip.Unmap().WithZone("")
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
		// OVN-Kubernetes' or Egret's subnets, whichever the node has; a
		// half-broken annotation still yields what parsed.
		_, host, _, _ := cluster.NodeInterfaces(n.Annotations)
		for _, p := range host {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Fenced returns s with no egress IP hosted: the data plane keeps its nodes,
// pods and policies (and flows) but answers for no address.
func Fenced(s config.Spec) config.Spec {
	out := s
	out.Policies = make([]config.Policy, len(s.Policies))
	for i, p := range s.Policies {
		out.Policies[i] = config.Policy{Name: p.Name}
	}
	return out
}

// pickVTEP is the node VTEP the gateway accepts: the first (IPv4 preferred,
// as the steer agent prefers it) of a family the gateway has a VTEP of.
func pickVTEP(vteps, gw []netip.Addr) (netip.Addr, bool) {
	has := func(v4 bool) bool { return slices.ContainsFunc(gw, func(g netip.Addr) bool { return g.Is4() == v4 }) }
	for _, want4 := range []bool{true, false} {
		for _, v := range vteps {
			v = v.Unmap()
			if v.IsValid() && v.Is4() == want4 && !v.IsUnspecified() && !v.IsMulticast() && !v.IsLoopback() && has(want4) {
				return v, true
			}
		}
	}
	return netip.Addr{}, false
}
