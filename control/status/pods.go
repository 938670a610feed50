package status

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	corev1 "k8s.io/api/core/v1"
)

// planView answers, for one plan, what the agents of each node render of
// it; each node's part is computed once.
type planView struct {
	pl       *plan.Plan
	workers  map[string]plan.WorkerPart
	gateways map[string]plan.GatewayPart
}

// worker is node's part as its steer agent sees it, with the node's VTEP
// (IPv4 first) as the agent's local endpoint: the address a steer agent
// takes from its underlay interface, IPv4 first.
func (v *planView) worker(node string) plan.WorkerPart {
	if w, ok := v.workers[node]; ok {
		return w
	}
	var local netip.Addr
	if n := v.pl.Nodes[node]; n != nil {
		local, _ = n.VTEP(true, true)
	}
	w := v.pl.Worker(node, local)
	v.workers[node] = w
	return w
}

// gateway is node's part as its gateway agent sees it, with the node's
// VTEPs, as the agent takes them when its configuration names none.
func (v *planView) gateway(node string) plan.GatewayPart {
	if g, ok := v.gateways[node]; ok {
		return g
	}
	var vteps []netip.Addr
	if n := v.pl.Nodes[node]; n != nil {
		for _, a := range []netip.Addr{n.VTEP4, n.VTEP6} {
			if a.IsValid() {
				vteps = append(vteps, a)
			}
		}
	}
	g := v.pl.Gateway(node, vteps)
	v.gateways[node] = g
	return g
}

// pods is every pod of v, in namespace/name order.
func pods(v cluster.View, pl *plan.Plan) []Pod {
	pv := &planView{pl: pl, workers: map[string]plan.WorkerPart{}, gateways: map[string]plan.GatewayPart{}}
	planned := make(map[string]*plan.Pod, len(pl.Pods))
	for i := range pl.Pods {
		planned[pl.Pods[i].Key()] = &pl.Pods[i]
	}
	nsKnown := map[string]bool{}
	for _, ns := range v.Namespaces {
		if ns != nil {
			nsKnown[ns.Name] = true
		}
	}
	var sel *cluster.Selector // for host-network pods only, built on first use
	all := slices.DeleteFunc(slices.Clone(v.Pods), func(p *corev1.Pod) bool { return p == nil })
	slices.SortFunc(all, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	out := make([]Pod, 0, len(all))
	for _, p := range all {
		ips := cluster.PodIPs(p)
		st := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, PodIPs: ips, Sources: []Source{}, Problems: []string{}}
		if st.PodIPs == nil {
			st.PodIPs = []netip.Addr{}
		}
		// The same order as the plan's filter (plan.buildPods).
		switch pp := planned[p.Namespace+"/"+p.Name]; {
		case pp != nil:
			pv.planned(&st, pp)
		case p.Spec.HostNetwork:
			st.State = StateHostNetwork
			if sel == nil {
				sel, _ = cluster.NewSelector(v.EgressIPs)
			}
			if name := selectedBy(v, sel, p); name != "" {
				st.Problems = append(st.Problems, fmt.Sprintf("EgressIP %s selects it, but it uses its node's network: it leaves as its node's address", name))
			}
		case cluster.PodDone(p):
			st.State = StateCompleted
		case len(ips) == 0:
			st.State = StatePending
		default:
			st.State = StateNamespaceUnknown
			if !nsKnown[p.Namespace] {
				st.Problems = append(st.Problems, fmt.Sprintf("namespace %s is not known yet: no EgressIP's namespaceSelector is applied to the pod", p.Namespace))
			}
		}
		st.Problems = compact(st.Problems)
		out = append(out, st)
	}
	return out
}

// selectedBy is the object that would own host-network pod p, "" if none.
func selectedBy(v cluster.View, sel *cluster.Selector, p *corev1.Pod) string {
	for _, ns := range v.Namespaces {
		if ns != nil && ns.Name == p.Namespace {
			if i := sel.Owner(ns.Labels, p.Labels); i >= 0 {
				return sel.Object(i).Name
			}
		}
	}
	return ""
}

// planned fills st from the plan's pod pp: the egress IPs of its owner that
// its node's steer agent routes it to, on gateways whose agent takes its
// traffic.
func (v *planView) planned(st *Pod, pp *plan.Pod) {
	for _, err := range v.pl.Problems {
		if mentions(err.Error(), "pod "+pp.Key()) {
			st.Problems = append(st.Problems, err.Error())
		}
	}
	if !pp.Selected() {
		st.State = StateNotSelected
		return
	}
	if pp.Owner != "" {
		owner := pp.Owner
		st.EgressIP = &owner
	}
	if pp.Dest != nil {
		for _, r := range pp.Dest.Rules {
			st.Destinations = append(st.Destinations, Destination{Network: r.Prefix, EgressIP: r.Owner, Excluded: r.Exclude})
		}
	}
	if v.pl.Nodes[pp.Node] == nil {
		st.State = StateNodeUnknown
		if pp.Node == "" {
			st.Problems = append(st.Problems, "it is not scheduled to a node: its traffic is blocked")
		} else {
			st.Problems = append(st.Problems, fmt.Sprintf("node %s is not known (no Node object): no gateway takes its tunnel traffic", pp.Node))
		}
		return
	}
	closed := len(pp.Refused)
	for _, ip := range pp.Refused {
		why := fmt.Sprintf("address %v may not use the egress IPs: its traffic is blocked (fail closed)", ip)
		if !slices.ContainsFunc(st.Problems, func(p string) bool { return mentions(p, ip.String()) }) {
			st.Problems = append(st.Problems, why)
		}
	}
	w := v.worker(pp.Node)
	ok, none := 0, 0
	for _, owner := range pp.Owners() {
		var route *plan.Route
		if i := slices.IndexFunc(w.Objects, func(r plan.Route) bool { return r.Name == owner }); i >= 0 {
			route = &w.Objects[i]
		}
		for _, ip := range pp.IPs {
			srcs := v.sources(st, pp, owner, route, ip)
			if len(srcs) == 0 {
				none++
				continue
			}
			ok++
			for _, s := range srcs {
				if !slices.ContainsFunc(st.Sources, func(x Source) bool { return x.IP == s.IP }) {
					st.Sources = append(st.Sources, s)
				}
			}
		}
	}
	slices.SortFunc(st.Sources, func(a, b Source) int { return a.IP.Compare(b.IP) })
	switch {
	case ok > 0 && closed+none == 0:
		st.State = StateEgress
	case ok > 0:
		st.State = StatePartial
	case closed > 0:
		st.State = StateFailClosed
	default:
		st.State = StateNoNode
	}
}

// sources are the egress IPs pod address ip leaves as by object owner:
// those of owner's family-matching placements whose node its steer agent
// routes to (route.Gateways), and whose gateway agent hosts the IP and
// takes the pod's traffic. Each placement left out is a problem of st.
func (v *planView) sources(st *Pod, pp *plan.Pod, owner string, route *plan.Route, ip netip.Addr) []Source {
	f := plan.Family(ip)
	fam := familyName(f)
	var out []Source
	placed := false
	if route != nil {
		for _, pl := range route.Placements {
			if plan.Family(pl.IP) != f {
				continue
			}
			placed = true
			if why := v.unusable(pp, owner, route, f, pl, ip); why != "" {
				st.Problems = append(st.Problems, fmt.Sprintf("%s (%v) is not used: %s", pl.IP, pl.Node, why))
				continue
			}
			out = append(out, Source{Family: fam, IP: pl.IP, Gateways: []string{pl.Node}, Object: owner})
		}
	}
	if len(out) > 0 {
		return out
	}
	why := fmt.Sprintf("address %v leaves as no egress IP: EgressIP %s has no %s egress IP on a node", ip, owner, fam)
	if placed {
		why = fmt.Sprintf("address %v leaves as no egress IP: no node hosting an %s egress IP of EgressIP %s can serve it", ip, fam, owner)
	}
	if route != nil && route.EgressIP.Annotations[egressv1.AnnotationNoEgressIP] == "node" {
		why += fmt.Sprintf("; it leaves as its node's address (%s: node)", egressv1.AnnotationNoEgressIP)
	} else {
		why += "; its traffic is blocked"
	}
	st.Problems = append(st.Problems, why)
	return nil
}

// unusable says why placement pl of pod pp's object owner does not serve
// pod address ip, "" when it does.
func (v *planView) unusable(pp *plan.Pod, owner string, route *plan.Route, f int, pl plan.Placement, ip netip.Addr) string {
	if !slices.ContainsFunc(route.Gateways[f], func(h plan.Hop) bool { return h.Node == pl.Node }) {
		for _, err := range v.worker(pp.Node).Problems {
			if mentions(err.Error(), pl.IP.String()) {
				return "node " + pp.Node + ": " + err.Error()
			}
		}
		return fmt.Sprintf("node %s's steer agent does not route to %s", pp.Node, pl.Node)
	}
	g := v.gateway(pl.Node)
	if !slices.ContainsFunc(g.Policies, func(p plan.Policy) bool { return p.Name == owner && slices.Contains(p.Hosted, pl.IP) }) {
		for _, err := range g.Problems {
			if mentions(err.Error(), pl.IP.String()) {
				return "gateway " + pl.Node + ": " + err.Error()
			}
		}
		return fmt.Sprintf("gateway %s does not host it", pl.Node)
	}
	// A pod on the gateway's own node reaches it through the local port,
	// without the tunnel (docs/gateway.md).
	if pp.Node == pl.Node {
		return ""
	}
	i := slices.IndexFunc(g.Workers, func(w plan.Worker) bool { return w.Name == pp.Node })
	if i >= 0 && slices.ContainsFunc(g.Workers[i].Pods, func(a plan.PodAddr) bool {
		return a.Addr == ip && (a.Owner == owner || a.Dest != nil && slices.Contains(a.Dest.Owners(), owner))
	}) {
		return ""
	}
	for _, err := range g.Problems {
		if mentions(err.Error(), "pod "+pp.Key()) || mentions(err.Error(), "node "+pp.Node) {
			return "gateway " + pl.Node + ": " + err.Error()
		}
	}
	return fmt.Sprintf("gateway %s does not take %v's traffic from node %s", pl.Node, ip, pp.Node)
}

func familyName(f int) string {
	if f == 0 {
		return "IPv4"
	}
	return "IPv6"
}

// compact drops repeated problems, keeping the first of each.
func compact(list []string) []string {
	seen := map[string]bool{}
	return slices.DeleteFunc(list, func(s string) bool {
		dup := seen[s]
		seen[s] = true
		return dup
	})
}
