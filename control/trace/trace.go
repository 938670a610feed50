// Package trace is the model behind `egret trace`: for one pod and one
// destination, the decision chain of a new connection as the code decides
// it. Which objects select the pod and which owns it is the egress plan's
// (control/plan, through control/status, the same value the agents
// render); the destination's checks are the steer agents' unsteered
// networks and the gateways' own deny-list (gateway.CheckDestination); the
// flow limits are the gateways' configuration. docs/status.md describes
// the output.
package trace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/egret-gw/egret/conntrack"
	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/control/status"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	corev1 "k8s.io/api/core/v1"
)

// Query is the connection to trace.
type Query struct {
	Namespace, Pod string
	Dst            netip.Addr
	// Port is the destination port (0: none given).
	Port uint16
	// Proto is tcp, udp or icmp.
	Proto string
}

// ParseQuery reads `NS/POD` and `DEST[:PORT][/tcp|udp|icmp]` (an IPv6
// address with a port in brackets: [2001:db8::1]:443/tcp). The protocol
// defaults to tcp; icmp takes no port.
func ParseQuery(pod, dest string) (Query, error) {
	var q Query
	ns, name, ok := strings.Cut(pod, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return q, fmt.Errorf("pod %q: give it as NAMESPACE/NAME", pod)
	}
	q.Namespace, q.Pod, q.Proto = ns, name, "tcp"
	if d, p, ok := strings.Cut(dest, "/"); ok {
		dest, q.Proto = d, strings.ToLower(p)
		if q.Proto != "tcp" && q.Proto != "udp" && q.Proto != "icmp" {
			return q, fmt.Errorf("destination %q: protocol %q: use tcp, udp or icmp", dest+"/"+p, p)
		}
	}
	if a, err := netip.ParseAddr(dest); err == nil {
		q.Dst = a
	} else if ap, err := netip.ParseAddrPort(dest); err == nil {
		if ap.Port() == 0 {
			return q, fmt.Errorf("destination %q: port 0 is not a destination port", dest)
		}
		q.Dst, q.Port = ap.Addr(), ap.Port()
	} else {
		return q, fmt.Errorf("destination %q: give an IP address, optionally with :PORT (IPv6 as [ADDR]:PORT)", dest)
	}
	if q.Dst.Zone() != "" {
		return q, fmt.Errorf("destination %q: an address with a zone never leaves through a gateway", dest)
	}
	q.Dst = q.Dst.Unmap()
	if q.Proto == "icmp" && q.Port != 0 {
		return q, fmt.Errorf("destination %q: icmp has no port", dest)
	}
	return q, nil
}

// Network is a destination network the steer agents never steer, with
// the configuration key that lists it.
type Network struct {
	Prefix netip.Prefix
	Key    string
}

// Inputs are what a Trace is computed from besides the View.
type Inputs struct {
	// Plan are the settings the agents build their plan with.
	Plan plan.Options
	// Unsteered are the cluster, service and node networks of the steer
	// agents' configuration; SteerConfig says where it was read from, or
	// why not (then Unsteered is nil and the check says so).
	Unsteered   []Network
	SteerConfig string
	SteerRead   bool
	// NoEgressIP is the steer agents' noEgressIP setting ("" or block,
	// node): what a selected address without an egress IP of its family
	// does, unless its object's egret.io/no-egress-ip annotation says.
	NoEgressIP string
	// Gateway returns the data plane configuration gateway node runs:
	// the static configuration (GatewayConfig) with the plan's part the
	// gateway agent adds (control/gwagent.Build).
	Gateway func(node string) config.Spec
	// GatewayConfig says where the gateways' static configuration was
	// read from (the file or ConfigMap to edit), or why it was not.
	GatewayConfig string
}

// Verdicts of a trace.
const (
	// VerdictEgress: the connection leaves as an egress IP.
	VerdictEgress = "egress"
	// VerdictNode: it leaves as the pod's node's address (not selected,
	// host network, or no egress IP with egret.io/no-egress-ip: node).
	VerdictNode = "node"
	// VerdictDirect: the destination is a cluster, service or node
	// network; it is not steered to a gateway.
	VerdictDirect = "direct"
	// VerdictBlocked: the pod's node holds it in (fail closed, no egress
	// IP of the family).
	VerdictBlocked = "blocked"
	// VerdictDropped: the gateway refuses the flow (deny-list, hairpin).
	VerdictDropped = "dropped"
	// VerdictNone: the pod cannot open it at all (no address of the
	// destination's family, not running).
	VerdictNone = "none"
)

// Trace is what `egret trace` prints: the JSON shape of docs/status.md.
type Trace struct {
	Pod         string `json:"pod"`
	Node        string `json:"node"`
	Destination string `json:"destination"`
	// PodIP is the pod's address of the destination's family; invalid
	// when it has none.
	PodIP netip.Addr `json:"podIP"`
	// SelectedBy are the EgressIP objects whose selectors match the pod,
	// in name order; EgressIP is the one that owns it (nil: none).
	SelectedBy []string `json:"selectedBy"`
	EgressIP   *string  `json:"egressIP"`
	// Checks are the steps of the decision, in the order the connection
	// meets them; the one with Decides set made a verdict other than
	// egress (which takes every step).
	Checks []Check `json:"checks"`
	// Gateways are the candidate gateways with the egress IP each gives
	// the connection and their flow limits.
	Gateways []Gateway `json:"gateways"`
	// Spread says how one of several candidates is picked.
	Spread string `json:"spread,omitempty"`
	// Verdict sums it up (the Verdict constants); SeenAs is the source
	// address the outside sees, Reason why, Setting what changes it.
	Verdict string `json:"verdict"`
	SeenAs  string `json:"seenAs"`
	Reason  string `json:"reason"`
	Setting string `json:"setting,omitempty"`
}

// Check is one step of the decision.
type Check struct {
	Name string `json:"name"`
	// Result is pass, fail or unknown.
	Result string `json:"result"`
	Detail string `json:"detail"`
	// Decides marks the step that made the verdict.
	Decides bool `json:"decides,omitempty"`
}

// Check results.
const (
	ResultPass    = "pass"
	ResultFail    = "fail"
	ResultUnknown = "unknown"
)

// Gateway is a candidate gateway of the connection.
type Gateway struct {
	Node     string     `json:"node"`
	EgressIP netip.Addr `json:"egressIP"`
	// Limits are its flow limits, defaults applied.
	ConntrackMax      int `json:"conntrackMax"`
	PodFlowLimit      int `json:"podFlowLimit"`
	EgressIPFlowLimit int `json:"egressIPFlowLimit"`
}

// Build traces q in the cluster of v. It modifies nothing in v.
func Build(v cluster.View, in Inputs, q Query) (*Trace, error) {
	var pod *corev1.Pod
	for _, p := range v.Pods {
		if p != nil && p.Namespace == q.Namespace && p.Name == q.Pod {
			pod = p
		}
	}
	if pod == nil {
		return nil, fmt.Errorf("no pod %s/%s", q.Namespace, q.Pod)
	}
	r := status.Build(v, status.Inputs{Plan: in.Plan})
	i := slices.IndexFunc(r.Pods, func(p status.Pod) bool { return p.Namespace == q.Namespace && p.Name == q.Pod })
	st := r.Pods[i]
	t := &Trace{Pod: q.Namespace + "/" + q.Pod, Node: st.Node, Destination: destString(q), SelectedBy: []string{}, Checks: []Check{}, Gateways: []Gateway{}, EgressIP: st.EgressIP}
	pl := plan.Build(v, in.Plan)
	tr := tracer{t: t, v: v, in: in, q: q, st: st, nodeNets: pl.NodeNetworks}
	if i := slices.IndexFunc(pl.Pods, func(p plan.Pod) bool { return p.Namespace == q.Namespace && p.Name == q.Pod }); i >= 0 {
		tr.pp = &pl.Pods[i]
	}
	tr.run(pod)
	return t, nil
}

func destString(q Query) string {
	s := q.Dst.String()
	if q.Port != 0 {
		s = netip.AddrPortFrom(q.Dst, q.Port).String()
	}
	return s + "/" + q.Proto
}

type tracer struct {
	t  *Trace
	v  cluster.View
	in Inputs
	q  Query
	st status.Pod
	// nodeNets are the plan's node networks, which the gateway agent adds
	// to every gateway's deniedDestinations.
	nodeNets []netip.Prefix
	// pp is the pod in the plan, nil when the plan left it out.
	pp *plan.Pod
	// owner is the object whose egress IPs the connection uses, once the
	// selection and destination steps found it.
	owner string
}

func (tr *tracer) check(name, result, detail string) {
	tr.t.Checks = append(tr.t.Checks, Check{Name: name, Result: result, Detail: detail})
}

// decide ends the trace at the last check.
func (tr *tracer) decide(verdict, seenAs, reason, setting string) {
	tr.t.Checks[len(tr.t.Checks)-1].Decides = true
	tr.t.Verdict, tr.t.SeenAs, tr.t.Reason, tr.t.Setting = verdict, seenAs, reason, setting
}

// nodeAddr is how the outside sees a connection that leaves as the pod's
// node: its InternalIP of the destination's family, as far as the Node
// object says (the node's own routing and SNAT decide).
func (tr *tracer) nodeAddr() string {
	for _, n := range tr.v.Nodes {
		if n == nil || n.Name != tr.st.Node {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && ip.Unmap().Is4() == tr.q.Dst.Is4() {
				return fmt.Sprintf("node %s's address (%v, if the node masquerades pod traffic)", tr.st.Node, ip.Unmap())
			}
		}
	}
	return fmt.Sprintf("node %s's address (if the node masquerades pod traffic)", tr.st.Node)
}

const selectorSetting = "an EgressIP whose namespaceSelector and podSelector match the pod (egret status names the objects)"

func (tr *tracer) run(pod *corev1.Pod) {
	t, st, q := tr.t, tr.st, tr.q
	fam := familyName(q.Dst)
	// 1. The pod.
	switch st.State {
	case status.StatePending, status.StateCompleted, status.StateNamespaceUnknown:
		tr.check("pod", ResultFail, "the pod is "+st.State+strings.Join(append([]string{""}, st.Problems...), "; "))
		tr.decide(VerdictNone, "", "the pod is "+st.State+": it opens no connection the plan knows of", "")
		return
	case status.StateHostNetwork:
		tr.check("pod", ResultFail, "the pod uses its node's network (hostNetwork)")
		tr.decide(VerdictNode, tr.nodeAddr(), "a host-network pod is its node: no EgressIP applies to it", "spec.hostNetwork: false")
		return
	}
	if i := slices.IndexFunc(st.PodIPs, func(a netip.Addr) bool { return plan.Family(a) == plan.Family(q.Dst) }); i >= 0 {
		t.PodIP = st.PodIPs[i]
		tr.check("pod", ResultPass, fmt.Sprintf("on node %s, %s address %v", st.Node, fam, t.PodIP))
	} else {
		tr.check("pod", ResultFail, fmt.Sprintf("on node %s, addresses %v: none is %s", st.Node, st.PodIPs, fam))
		tr.decide(VerdictNone, "", "the pod has no "+fam+" address", "")
		return
	}

	// 2. The objects that select it; the plan's owner wins.
	t.SelectedBy = tr.selectedBy(pod)
	switch {
	case tr.pp == nil || !tr.pp.Selected():
		tr.check("selection", ResultFail, "no EgressIP selects the pod")
		tr.decide(VerdictNode, tr.nodeAddr(), "no EgressIP selects the pod: it leaves through its node's routing", selectorSetting)
		return
	case tr.pp.Dest != nil:
		tr.check("selection", ResultPass, fmt.Sprintf("selected by EgressIP %s; the destination decides which owns the connection", strings.Join(t.SelectedBy, ", ")))
	case len(t.SelectedBy) > 1:
		tr.check("selection", ResultPass, fmt.Sprintf("selected by EgressIP %s; %s owns it (the first by name)", strings.Join(t.SelectedBy, ", "), *st.EgressIP))
	default:
		tr.check("selection", ResultPass, "EgressIP "+*st.EgressIP+" selects and owns the pod")
	}
	if tr.pp.Dest == nil {
		tr.owner = *st.EgressIP
	} else if tr.destination() {
		return
	}
	t.EgressIP = &tr.owner

	// 3. The steer agent: cluster, service and node networks stay direct.
	if !tr.in.SteerRead {
		tr.check("unsteered-networks", ResultUnknown, "the steer agents' configuration was not read ("+tr.in.SteerConfig+"): whether "+q.Dst.String()+" is a cluster, service or node network is not checked")
	} else if i := slices.IndexFunc(tr.in.Unsteered, func(n Network) bool { return n.Prefix.Contains(q.Dst) }); i >= 0 {
		n := tr.in.Unsteered[i]
		tr.check("unsteered-networks", ResultFail, fmt.Sprintf("%v is in %s entry %v: the steer agent does not steer it", q.Dst, n.Key, n.Prefix))
		tr.decide(VerdictDirect, "the pod's own address "+t.PodIP.String()+" (inside the cluster)",
			fmt.Sprintf("%v is in the steer agents' %s (%v): it is cluster traffic and never goes to a gateway", q.Dst, n.Key, n.Prefix),
			fmt.Sprintf("%s in the steer agents' configuration (%s)", n.Key, tr.in.SteerConfig))
		return
	} else {
		tr.check("unsteered-networks", ResultPass, fmt.Sprintf("%v is in none of the steer agents' clusterCIDRs, serviceCIDRs, nodeCIDRs (%s)", q.Dst, tr.in.SteerConfig))
	}

	// 4. The egress IPs of the destination's family that serve the pod.
	var srcs []status.Source
	for _, s := range st.Sources {
		if s.IP.Is4() == q.Dst.Is4() && s.Object == tr.owner {
			srcs = append(srcs, s)
		}
	}
	if len(srcs) == 0 {
		why := slices.DeleteFunc(slices.Clone(st.Problems), func(p string) bool {
			return !strings.Contains(p, t.PodIP.String()) || strings.Contains(p, "EgressIP ") && !strings.Contains(p, "EgressIP "+tr.owner+" ")
		})
		if len(why) == 0 {
			why = st.Problems
		}
		reason := strings.Join(why, "; ")
		tr.check("egress-ips", ResultFail, fmt.Sprintf("the pod's %s address has no egress IP (%s)", fam, st.State))
		switch {
		case st.State == status.StateFailClosed, strings.Contains(reason, "fail closed"), strings.Contains(reason, "does not use the egress IPs"):
			tr.decide(VerdictBlocked, "", reason, "the pod's address must be in its node's spec.podCIDRs and no other pod's or node's (or trustPodIPs on the agents)")
		case strings.Contains(reason, "leaves as its node's address"), tr.noEgressIPNode():
			if !strings.Contains(reason, "leaves as its node's address") {
				reason = strings.ReplaceAll(reason, "; its traffic is blocked", "") + "; the steer agents' noEgressIP: node lets it leave as its node's address (" + tr.in.SteerConfig + ")"
			}
			tr.decide(VerdictNode, tr.nodeAddr(), reason, "an egress IP of the family on EgressIP "+tr.owner+", assignable to a node (egret status)")
		default:
			tr.decide(VerdictBlocked, "", reason, "an "+fam+" egress IP on EgressIP "+tr.owner+" that a node can host (egret status); or the annotation egret.io/no-egress-ip: node on it, or noEgressIP: node in the steer agents' configuration, to leave as the node")
		}
		return
	}
	var ips []string
	for _, s := range srcs {
		ips = append(ips, fmt.Sprintf("%v on %s", s.IP, strings.Join(s.Gateways, ",")))
	}
	tr.check("egress-ips", ResultPass, "the pod's "+fam+" address leaves as "+strings.Join(ips, "; "))

	// 5. The gateways' checks of a new flow, in the data plane's order
	// (newFlow): hairpin, then the deny-list.
	for _, s := range srcs {
		for _, g := range s.Gateways {
			t.Gateways = append(t.Gateways, tr.gateway(g, s.IP))
		}
	}
	if tr.hairpin() {
		return
	}
	if tr.denied() {
		return
	}

	// 6. Flow limits and the source the outside sees.
	var lim []string
	for _, g := range t.Gateways {
		lim = append(lim, fmt.Sprintf("%s: podFlowLimit %d, egressIPFlowLimit %d, conntrackMax %d", g.Node, g.PodFlowLimit, g.EgressIPFlowLimit, g.ConntrackMax))
	}
	tr.check("flow-limits", ResultPass, "a new flow is refused when the pod or the egress IP is at its limit on that gateway (drops pod_flow_limit, egressip_flow_limit): "+strings.Join(lim, "; ")+" ("+tr.in.GatewayConfig+")")
	if len(t.Gateways) > 1 {
		t.Spread = "per connection: the pod's node spreads new connections over the candidate gateways with its kernel's multipath hash over the 5-tuple, which includes the source port the pod picks, so which one a connection takes cannot be told in advance; it keeps it for life"
	}
	var seen []string
	for _, g := range t.Gateways {
		seen = append(seen, g.EgressIP.String())
	}
	seen = slices.Compact(seen)
	port := ""
	if q.Proto != "icmp" {
		port = ":<the pod's source port if free on it, else another>"
	}
	t.Verdict, t.SeenAs = VerdictEgress, strings.Join(seen, " or ")+port
	t.Reason = fmt.Sprintf("EgressIP %s owns the pod and the gateways let %v through", tr.owner, q.Dst)
	if tr.pp.Dest != nil {
		t.Reason = fmt.Sprintf("EgressIP %s owns the pod's connections to %v and the gateways let it through", tr.owner, q.Dst)
	}
}

// destination finds the object that owns the connection of a pod whose
// selecting objects have trafficSelectors, and decides the trace when none
// does or an exclusion claims the destination. It reports whether it
// decided.
func (tr *tracer) destination() bool {
	q, d := tr.q, tr.pp.Dest
	owner, excluded := tr.pp.OwnerFor(q.Dst)
	r, ok := d.Choose(q.Dst)
	switch {
	case excluded:
		tr.owner = owner
		tr.check("destination", ResultFail, fmt.Sprintf("%v is in %v, an exclusion of EgressIP %s (egret.io/exclude on the EgressIPTraffic it selects)", q.Dst, r.Prefix, owner))
		reason := fmt.Sprintf("EgressIP %s excludes %v: its egress IPs are not used there", owner, r.Prefix)
		// Only the object's own annotation blocks an exclusion; the steer
		// agents' noEgressIP is for an object without a usable egress IP.
		if !tr.annotatedBlock(owner) {
			tr.decide(VerdictNode, tr.nodeAddr(), reason+"; it leaves as its node's address", "the EgressIPTraffic objects EgressIP "+owner+"'s trafficSelector picks")
		} else {
			tr.decide(VerdictBlocked, "", reason+"; its traffic there is blocked (egret.io/no-egress-ip: block on EgressIP "+owner+")", "the egret.io/no-egress-ip annotation on EgressIP "+owner+", or the EgressIPTraffic objects its trafficSelector picks")
		}
		return true
	case owner == "":
		tr.check("destination", ResultFail, fmt.Sprintf("%v is in no network of the EgressIPTraffic objects that EgressIP %s pick, and none of them lacks a trafficSelector", q.Dst, strings.Join(tr.t.SelectedBy, ", ")))
		tr.decide(VerdictNode, tr.nodeAddr(), fmt.Sprintf("no EgressIP that selects the pod claims %v: it leaves through its node's routing", q.Dst),
			"an EgressIPTraffic with "+q.Dst.String()+" in spec.destinationNetworks, picked by the trafficSelector of an EgressIP that selects the pod")
		return true
	case ok:
		tr.check("destination", ResultPass, fmt.Sprintf("%v is in %v, which EgressIP %s's trafficSelector picks (the longest match)", q.Dst, r.Prefix, owner))
	default:
		tr.check("destination", ResultPass, fmt.Sprintf("%v is in no network the trafficSelectors pick: EgressIP %s, which has none, serves it", q.Dst, owner))
	}
	tr.owner = owner
	return false
}

// annotatedBlock says EgressIP name is annotated egret.io/no-egress-ip
// with anything but node (steer blocks on a bad value too).
func (tr *tracer) annotatedBlock(name string) bool {
	for _, e := range tr.v.EgressIPs {
		if e != nil && e.Name == name {
			a, ok := e.Annotations[egressv1.AnnotationNoEgressIP]
			return ok && a != "node"
		}
	}
	return false
}

// noEgressIPNode says a selected address of the pod without an egress IP
// leaves as its node: the owner's annotation says node, or it says nothing
// and the steer agents' noEgressIP does.
func (tr *tracer) noEgressIPNode() bool {
	for _, e := range tr.v.EgressIPs {
		if e != nil && e.Name == tr.owner {
			if a, ok := e.Annotations[egressv1.AnnotationNoEgressIP]; ok {
				return a == "node"
			}
		}
	}
	return tr.in.NoEgressIP == "node"
}

// selectedBy are the objects whose selectors match pod, in name order.
func (tr *tracer) selectedBy(pod *corev1.Pod) []string {
	sel, _ := cluster.NewSelector(tr.v.EgressIPs)
	var nsLabels map[string]string
	for _, ns := range tr.v.Namespaces {
		if ns != nil && ns.Name == pod.Namespace {
			nsLabels = ns.Labels
		}
	}
	out := []string{}
	for _, i := range sel.Match(nsLabels, pod.Labels) {
		out = append(out, sel.Object(i).Name)
	}
	return out
}

// gateway is candidate node with the egress IP ip it gives the connection.
func (tr *tracer) gateway(node string, ip netip.Addr) Gateway {
	g := Gateway{Node: node, EgressIP: ip}
	spec := tr.in.Gateway(node)
	g.ConntrackMax = cmpOr(spec.ConntrackMax, config.DefaultConntrackMax)
	src, nat := conntrack.DefaultLimits(g.ConntrackMax)
	g.PodFlowLimit, g.EgressIPFlowLimit = cmpOr(spec.PodFlowLimit, src), cmpOr(spec.EgressIPFlowLimit, nat)
	return g
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// hairpin reports (and decides) a destination that is an egress IP of a
// candidate gateway: the data plane never creates such a flow.
func (tr *tracer) hairpin() bool {
	for _, g := range tr.t.Gateways {
		for _, p := range tr.in.Gateway(g.Node).Policies {
			if slices.Contains(p.EgressIPs, tr.q.Dst) {
				tr.check("hairpin", ResultFail, fmt.Sprintf("%v is an egress IP hosted on gateway %s", tr.q.Dst, g.Node))
				tr.decide(VerdictDropped, "", fmt.Sprintf("%v is an egress IP (of EgressIP %s) that gateway %s hosts: the gateway does not hairpin (drop hairpin)", tr.q.Dst, p.Name, g.Node), "")
				return true
			}
		}
	}
	tr.check("hairpin", ResultPass, fmt.Sprintf("%v is no egress IP of the candidate gateways", tr.q.Dst))
	return false
}

// denied runs each candidate gateway's deny-list (gateway.CheckDestination)
// and reports (and decides) a destination every one of them refuses.
func (tr *tracer) denied() bool {
	var refused, passed []string
	var first gateway.DestinationVerdict
	for _, g := range tr.t.Gateways {
		spec := tr.in.Gateway(g.Node)
		cfg := gateway.Config{VTEPs: spec.VTEPs, DeniedDestinations: spec.DeniedDestinations, AllowedDestinations: spec.AllowedDestinations}
		for _, n := range spec.Nodes {
			cfg.Nodes = append(cfg.Nodes, gateway.Node{Name: n.Name, VTEP: n.VTEP})
		}
		v := gateway.CheckDestination(&cfg, tr.q.Dst)
		if v.Denied {
			if len(refused) == 0 {
				first = v
			}
			refused = append(refused, fmt.Sprintf("%s (entry %v, %s)", g.Node, v.Entry, tr.entrySource(v)))
			continue
		}
		if v.Allowed {
			passed = append(passed, fmt.Sprintf("%s (allowedDestinations entry %v)", g.Node, v.Entry))
		} else {
			passed = append(passed, g.Node)
		}
	}
	via := ""
	if first.Via.IsValid() {
		via = fmt.Sprintf(" (judged by the IPv4 address %v it embeds: NAT64)", first.Via)
	}
	switch {
	case len(refused) == 0:
		tr.check("deny-list", ResultPass, fmt.Sprintf("%v is not on the deny-list of %s", tr.q.Dst, strings.Join(passed, ", ")))
		return false
	case len(passed) > 0:
		tr.check("deny-list", ResultFail, fmt.Sprintf("%v is denied on %s but not on %s: connections through the former are dropped (denied_destination); the gateways' configurations differ", tr.q.Dst, strings.Join(refused, ", "), strings.Join(passed, ", ")))
		return false
	}
	tr.check("deny-list", ResultFail, fmt.Sprintf("%v%s is denied on %s", tr.q.Dst, via, strings.Join(refused, ", ")))
	setting := fmt.Sprintf("allowedDestinations: [%v] (or a narrower entry) in the gateways' configuration (%s)", first.Entry, tr.in.GatewayConfig)
	if first.VTEP {
		setting = "none: a node's tunnel endpoint is always denied"
	}
	tr.decide(VerdictDropped, "", fmt.Sprintf("the gateway's deny-list refuses %v%s: entry %v (%s); the flow is dropped as denied_destination", tr.q.Dst, via, first.Entry, tr.entrySource(first)), setting)
	return true
}

// entrySource says where deny-list entry v.Entry comes from.
func (tr *tracer) entrySource(v gateway.DestinationVerdict) string {
	switch {
	case v.VTEP:
		return "a node's tunnel endpoint (VTEP), always denied"
	case slices.Contains(gateway.DefaultDeniedDestinations(), v.Entry):
		return "built in: " + builtinWhy(v.Entry)
	case slices.ContainsFunc(tr.nodeNets, func(p netip.Prefix) bool { return p.Masked() == v.Entry }):
		return "the nodes' own networks (a Node's InternalIP or k8s.ovn.org/host-cidrs), which the gateway agent denies"
	}
	return "deniedDestinations in the gateways' configuration (" + tr.in.GatewayConfig + ")"
}

// builtinWhy names a built-in deny-list entry's class (gateway.DefaultDeniedDestinations).
func builtinWhy(p netip.Prefix) string {
	switch p.String() {
	case "169.254.0.0/16":
		return "link-local, with the cloud metadata address 169.254.169.254"
	case "127.0.0.0/8", "::1/128":
		return "loopback"
	case "100.100.100.200/32":
		return "Alibaba Cloud metadata"
	case "fd00:ec2::/32":
		return "AWS metadata, DNS and NTP over IPv6"
	case "224.0.0.0/4", "ff00::/8":
		return "multicast"
	case "fe80::/10":
		return "link-local"
	}
	return "special-purpose range"
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
