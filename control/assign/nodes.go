package assign

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/hostsubnet"
)

// The nodes an assignment may use: their interfaces, subnets and capacity.

type subnetGroup struct {
	prefix netip.Prefix // masked
	nodes  []int32      // eligible nodes with this subnet, in name order
}

// candidateNodes returns the eligible nodes with a subnet containing ip, in
// name order (n.match still decides the exact interface). The result may
// alias the index or a scratch buffer: it must not be modified and is valid
// until the next call, unless fresh asks for a copy of its own.
func (a *assigner) candidateNodes(ip netip.Addr, fresh bool) []int32 {
	var buf []int32
	if !fresh {
		buf = a.scratchNodes[:0]
	}
	var first []int32
	merged := false
	for i := range a.groups {
		g := &a.groups[i]
		if !g.prefix.Contains(ip) {
			continue
		}
		switch {
		case first == nil:
			first = g.nodes
		case !merged:
			buf = append(append(buf[:0], first...), g.nodes...)
			merged = true
		default:
			buf = append(buf, g.nodes...)
		}
	}
	if !merged {
		if fresh {
			return slices.Clone(first)
		}
		return first
	}
	slices.Sort(buf)
	buf = slices.Compact(buf)
	if !fresh {
		a.scratchNodes = buf
	}
	return buf
}

type nodeState struct {
	name     string
	eligible bool
	why      string // why not eligible
	primary  cluster.IfAddr
	host     []netip.Prefix // longest prefix first
	cloud    *cluster.CloudConfig
	n4, n6   int // egress IPs assigned per family
	s4, s6   int // egress IPs it is the standby of, per family
}

func (n *nodeState) load() int { return n.n4 + n.n6 }

func (n *nodeState) standbyLoad() int { return n.s4 + n.s6 }

// hasRoom reports whether the node's cloud capacity allows one more IP of
// the family; minus4/minus6 are subtracted first (an IP about to move away).
func (n *nodeState) hasRoom(is4 bool, minus4, minus6 int) bool {
	if n.cloud == nil {
		return true
	}
	c := n.cloud.Capacity
	n4, n6 := n.n4-minus4, n.n6-minus6
	if c.Total {
		return n4+n6 < c.IP
	}
	if is4 {
		return n4 < c.IPv4
	}
	return n6 < c.IPv6
}

// match finds the interface of node n that can carry a.
func (n *nodeState) match(a netip.Addr) (Interface, bool) {
	if n.cloud != nil {
		if p, ok := hostsubnet.Pick(n.cloud.IfAddr.IPv4, n.cloud.IfAddr.IPv6, nil, a); ok {
			return Interface{Kind: Cloud, Name: n.cloud.Interface, Subnet: p}, true
		}
		return Interface{}, false
	}
	// The gateway agent claims a on the interface holding the same pick
	// (control/gwagent), so the two agree by construction.
	p, ok := hostsubnet.Pick(n.primary.IPv4, n.primary.IPv6, n.host, a)
	switch {
	case !ok:
		return Interface{}, false
	case p == n.primary.IPv4 || p == n.primary.IPv6:
		return Interface{Kind: Primary, Subnet: p}, true
	}
	return Interface{Kind: Secondary, Subnet: p}, true
}

func (a *assigner) setNodes(nodes []Node) error {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(x, y Node) int { return strings.Compare(x.Name, y.Name) })
	a.nodes = make([]nodeState, len(sorted))
	a.byName = make(map[string]int, len(sorted))
	a.eligible = a.eligible[:0]
	a.nodeAddrs = map[netip.Addr]string{}
	a.nodeProblems = nil
	a.unannotated = a.unannotated[:0]
	var labelled int
	var why []string
	subnets := [2]map[netip.Prefix]struct{}{{}, {}}
	groups := map[netip.Prefix][]int32{}
	for i, n := range sorted {
		if _, dup := a.byName[n.Name]; dup {
			return fmt.Errorf("node %q is listed twice; each node must appear once", n.Name)
		}
		a.byName[n.Name] = i
		ns := nodeState{name: n.Name, primary: n.PrimaryIfAddr, cloud: n.Cloud}
		ns.host = slices.Clone(n.HostCIDRs)
		slices.SortFunc(ns.host, func(x, y netip.Prefix) int {
			if c := cmp.Compare(y.Bits(), x.Bits()); c != 0 {
				return c
			}
			return x.Addr().Compare(y.Addr())
		})
		for _, p := range []netip.Prefix{n.PrimaryIfAddr.IPv4, n.PrimaryIfAddr.IPv6} {
			if p.IsValid() {
				a.addNodeAddr(p.Addr(), n.Name)
			}
		}
		for _, p := range n.HostCIDRs {
			if p.IsValid() {
				a.addNodeAddr(p.Addr(), n.Name)
			}
		}
		switch {
		case !n.Assignable:
			ns.why = "is not labelled " + cluster.LabelEgressAssignable
		case n.Excluded != "":
			ns.why = n.Excluded
		case n.AnnotationErr != nil:
			ns.why = "has a broken annotation: " + n.AnnotationErr.Error()
		case len(ns.subnets()) == 0:
			ns.why = unannotated
			a.unannotated = append(a.unannotated, n.Name)
		case !n.Ready:
			ns.why = "is not Ready"
		case !n.Reachable:
			ns.why = "failed the reachability check"
		case a.opts.AvoidCordoned && n.Cordoned:
			ns.why = "is cordoned (being drained)"
		case !n.HoldDownUntil.IsZero() && a.opts.Now.Before(n.HoldDownUntil):
			ns.why = "recovered recently and is held down until " + n.HoldDownUntil.UTC().Format(time.RFC3339)
		default:
			ns.eligible = true
		}
		if n.AnnotationErr != nil {
			a.nodeProblems = append(a.nodeProblems, Event{Object: n.Name, Reason: ReasonInvalidNodeAnnotation,
				Message: fmt.Sprintf("node %s hosts no egress IP until its annotations are fixed: %v", n.Name, n.AnnotationErr)})
		}
		if n.Assignable {
			labelled++
			if !ns.eligible {
				why = append(why, n.Name+" "+ns.why)
			}
		}
		if ns.eligible {
			a.eligible = append(a.eligible, int32(i))
			for _, p := range ns.subnets() {
				f := 0
				if p.Addr().Is6() {
					f = 1
				}
				subnets[f][p.Masked()] = struct{}{}
				if l := groups[p.Masked()]; len(l) == 0 || l[len(l)-1] != int32(i) {
					groups[p.Masked()] = append(l, int32(i))
				}
			}
		}
		a.nodes[i] = ns
	}
	switch {
	case labelled == 0:
		a.noEligibleMsg = "no node is labelled " + cluster.LabelEgressAssignable + "; label the nodes that should host egress IPs"
	case len(a.eligible) == 0:
		a.noEligibleMsg = fmt.Sprintf("none of the %d nodes labelled %s can host egress IPs: %s", labelled, cluster.LabelEgressAssignable, listSome(why, 5))
	}
	a.groups = a.groups[:0]
	for p, l := range groups {
		a.groups = append(a.groups, subnetGroup{prefix: p, nodes: l})
	}
	slices.SortFunc(a.groups, func(x, y subnetGroup) int {
		return cmp.Or(cmp.Compare(y.prefix.Bits(), x.prefix.Bits()), x.prefix.Addr().Compare(y.prefix.Addr()))
	})
	for f := range subnets {
		var l []string
		for p := range subnets[f] {
			l = append(l, p.String())
		}
		slices.Sort(l)
		a.subnetList[f] = listSome(l, 8)
	}
	return nil
}

// unannotated says why a labelled node without interface subnets hosts
// nothing, and who should have published them.
const unannotated = "has no interface subnets: neither OVN-Kubernetes (" + cluster.AnnotationPrimaryIfAddr + ", " +
	cluster.AnnotationHostCIDRs + ") nor Egret's gateway agent (" + cluster.AnnotationEgretPrimaryIfAddr + ", " +
	cluster.AnnotationEgretHostCIDRs + ") annotated it; check that egret-gateway runs there and may patch its Node"

func (a *assigner) addNodeAddr(ip netip.Addr, node string) {
	if prev, ok := a.nodeAddrs[ip]; !ok || node < prev {
		a.nodeAddrs[ip] = node
	}
}

// subnets lists the prefixes an eligible node can host egress IPs from.
func (n *nodeState) subnets() []netip.Prefix {
	var out []netip.Prefix
	if n.cloud != nil {
		for _, p := range []netip.Prefix{n.cloud.IfAddr.IPv4, n.cloud.IfAddr.IPv6} {
			if p.IsValid() {
				out = append(out, p)
			}
		}
		return out
	}
	for _, p := range []netip.Prefix{n.primary.IPv4, n.primary.IPv6} {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return append(out, n.host...)
}

func listSome(l []string, max int) string {
	if len(l) == 0 {
		return "none"
	}
	if len(l) <= max {
		return strings.Join(l, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(l[:max], "; "), len(l)-max)
}
