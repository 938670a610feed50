package assign

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/egret-gw/egret/control/cluster"
)

// Assigner holds one assignment and its indexes so that a change to one
// EgressIP object is re-assigned without looking at the others. It is not
// safe for concurrent use.
//
// The state after Upsert(o) equals Assign of all objects, with o replaced
// and every other object's status as the Assigner last computed it (the
// agreement test checks this on random clusters). A node change rebuilds
// everything (SetNodes), as a node can move many IPs at once.
type Assigner struct {
	opts   Options
	nodes  []nodeState // ordered by name
	byName map[string]int
	// eligible indexes nodes that may host egress IPs, in name order.
	eligible []int32
	// groups index the eligible nodes by subnet, so an IP is checked only
	// against the nodes that can possibly hold it.
	groups []subnetGroup
	// nodeAddrs are the nodes' own addresses; an egress IP equal to one is a conflict.
	nodeAddrs map[netip.Addr]string

	objs  map[string]*objState
	names []string // object names, sorted

	claims map[netip.Addr][]*objState // every object listing the IP
	owner  map[netip.Addr]*objState   // the claimant allowed to use it
	multi  map[netip.Addr]struct{}    // IPs with two or more claimants
	// pending holds objects with an IP that failed only because nodes were
	// at capacity: another object giving up an IP may let it in, so they
	// are retried on every change. IPs with no subnet match or whose nodes
	// all host the object's other IPs wait for a node or object change.
	pending map[*objState]struct{}

	nodeProblems []Event
	// Explanations precomputed per node set for NoMatchingNodeFound messages.
	noEligibleMsg string
	subnetList    [2]string // per family (0: IPv4, 1: IPv6)

	scratchAddrs []netip.Addr
	scratchNodes []int32
	visited      []bool
	// before records the loads of capacity-limited nodes before an Upsert
	// took IPs off them, to tell whether capacity was freed.
	before []nodeLoad
}

type nodeLoad struct {
	node   int32
	n4, n6 int
}

// capacityFreed reports whether a capacity-limited node holds fewer IPs of
// a family than before the current Upsert.
func (a *Assigner) capacityFreed() bool {
	for _, b := range a.before {
		n := &a.nodes[b.node]
		if n.n4 < b.n4 || n.n6 < b.n6 {
			return true
		}
	}
	return false
}

type subnetGroup struct {
	prefix netip.Prefix // masked
	nodes  []int32      // eligible nodes with this subnet, in name order
}

// candidateNodes returns the eligible nodes with a subnet containing ip, in
// name order (n.match still decides the exact interface). The result may
// alias the index or a scratch buffer: it must not be modified and is valid
// until the next call, unless fresh asks for a copy of its own.
func (a *Assigner) candidateNodes(ip netip.Addr, fresh bool) []int32 {
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
}

func (n *nodeState) load() int { return n.n4 + n.n6 }

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

// hostable reports whether a is a usable host address of p: not the
// network or broadcast address of an IPv4 subnet of /30 and wider, not the
// Subnet-Router anycast address (RFC 4291 2.6.1) of an IPv6 subnet.
func hostable(p netip.Prefix, a netip.Addr) bool {
	if !p.IsValid() || !p.Contains(a) {
		return false
	}
	if a.Is6() && p.Bits() < 127 && a == p.Masked().Addr() {
		return false
	}
	if a.Is4() && p.Bits() <= 30 {
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:])
		mask := ^uint32(0) << (32 - p.Bits())
		if v&^mask == 0 || v|mask == ^uint32(0) {
			return false
		}
	}
	return true
}

// match finds the interface of node n that can carry a.
func (n *nodeState) match(a netip.Addr) (Interface, bool) {
	if n.cloud != nil {
		p := n.cloud.IfAddr.IPv4
		if a.Is6() {
			p = n.cloud.IfAddr.IPv6
		}
		if hostable(p, a) {
			return Interface{Kind: Cloud, Name: n.cloud.Interface, Subnet: p}, true
		}
		return Interface{}, false
	}
	p := n.primary.IPv4
	if a.Is6() {
		p = n.primary.IPv6
	}
	if hostable(p, a) {
		return Interface{Kind: Primary, Subnet: p}, true
	}
	for _, h := range n.host {
		if hostable(h, a) {
			return Interface{Kind: Secondary, Subnet: h}, true
		}
	}
	return Interface{}, false
}

type placed struct {
	addr  netip.Addr
	node  int32
	iface Interface
}

type objState struct {
	name    string
	created time.Time
	addrs   []netip.Addr // valid, unique, sorted
	raw     []string     // as written, parallel to addrs
	static  []Event      // InvalidEgressIP and node-address conflicts
	placed  []placed     // sorted by addr
	// status is what ownership ranking treats as "already in status": the
	// input status while loading, the placed addresses afterwards.
	status  []netip.Addr
	reasons []Event // NoMatchingNodeFound of the last placement
	// capacityBound is true when a reason counted nodes at capacity.
	capacityBound bool
}

func (o *objState) placedOn(node int32) bool {
	for i := range o.placed {
		if o.placed[i].node == node {
			return true
		}
	}
	return false
}

func (o *objState) placedIdx(a netip.Addr) int {
	for i := range o.placed {
		if o.placed[i].addr == a {
			return i
		}
	}
	return -1
}

func (o *objState) hasStatus(a netip.Addr) bool {
	_, ok := slices.BinarySearchFunc(o.status, a, netip.Addr.Compare)
	return ok
}

func (o *objState) rawOf(a netip.Addr) string {
	if i, ok := slices.BinarySearchFunc(o.addrs, a, netip.Addr.Compare); ok {
		return o.raw[i]
	}
	return a.String()
}

// NewAssigner builds an Assigner over nodes with no objects yet. It fails
// only on two nodes with one name.
func NewAssigner(nodes []Node, opts Options) (*Assigner, error) {
	a := &Assigner{
		opts:    opts,
		objs:    map[string]*objState{},
		claims:  map[netip.Addr][]*objState{},
		owner:   map[netip.Addr]*objState{},
		multi:   map[netip.Addr]struct{}{},
		pending: map[*objState]struct{}{},
	}
	if err := a.setNodes(nodes); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Assigner) setNodes(nodes []Node) error {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(x, y Node) int { return strings.Compare(x.Name, y.Name) })
	a.nodes = make([]nodeState, len(sorted))
	a.byName = make(map[string]int, len(sorted))
	a.eligible = a.eligible[:0]
	a.nodeAddrs = map[netip.Addr]string{}
	a.nodeProblems = nil
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
		case n.AnnotationErr != nil:
			ns.why = "has a broken annotation: " + n.AnnotationErr.Error()
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

func (a *Assigner) addNodeAddr(ip netip.Addr, node string) {
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

// parseObject validates spec.egressIPs.
func (a *Assigner) parseObject(o Object) *objState {
	s := &objState{name: o.Name, created: o.Created}
	type entry struct {
		addr netip.Addr
		raw  string
	}
	var ok []entry
	for _, raw := range o.EgressIPs {
		ip, msg := parseEgressIP(raw)
		if msg != "" {
			s.static = append(s.static, Event{Object: o.Name, Reason: ReasonInvalidEgressIP, EgressIP: raw,
				Message: fmt.Sprintf("spec.egressIPs entry %q is not usable: %s; fix or remove it (the other egress IPs are assigned)", raw, msg)})
			continue
		}
		if node, isNode := a.nodeAddrs[ip]; isNode {
			s.static = append(s.static, Event{Object: o.Name, Reason: ReasonEgressIPConflict, EgressIP: raw,
				Message: fmt.Sprintf("egress IP %s is the address of node %s and cannot also be an egress IP; choose a free address", ip, node)})
			continue
		}
		ok = append(ok, entry{ip, raw})
	}
	slices.SortFunc(ok, func(x, y entry) int { return cmp.Or(x.addr.Compare(y.addr), strings.Compare(x.raw, y.raw)) })
	for i, e := range ok {
		if i > 0 && ok[i-1].addr == e.addr {
			s.static = append(s.static, Event{Object: o.Name, Reason: ReasonInvalidEgressIP, EgressIP: e.raw,
				Message: fmt.Sprintf("spec.egressIPs lists %s more than once; the duplicate is ignored", e.addr)})
			continue
		}
		s.addrs = append(s.addrs, e.addr)
		s.raw = append(s.raw, e.raw)
	}
	return s
}

// parseEgressIP returns the address, or a message saying why it is unusable.
func parseEgressIP(raw string) (netip.Addr, string) {
	ip, err := netip.ParseAddr(raw)
	switch {
	case err != nil:
		return ip, "it is not an IPv4 or IPv6 address"
	case ip.Zone() != "":
		return ip, "an egress IP cannot carry an IPv6 zone"
	case ip.Is4In6():
		return ip, "IPv4-mapped IPv6 addresses are ambiguous; write the IPv4 address"
	case ip.IsUnspecified():
		return ip, "the unspecified address cannot be a source address"
	case ip.IsLoopback():
		return ip, "a loopback address never leaves the node"
	case ip.IsMulticast():
		return ip, "a multicast address cannot be a source address"
	case ip.IsLinkLocalUnicast():
		return ip, "a link-local address is not routable beyond its link"
	case ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return ip, "the broadcast address cannot be a source address"
	}
	return ip, ""
}

// better reports whether x ranks above y for keeping a contested IP: the
// object that already has it in status, then the older, then the first name.
func better(x, y *objState, ip netip.Addr) bool {
	hx, hy := x.hasStatus(ip), y.hasStatus(ip)
	if hx != hy {
		return hx
	}
	if !x.created.Equal(y.created) {
		return x.created.Before(y.created)
	}
	return x.name < y.name
}

func (a *Assigner) addClaims(o *objState) {
	for _, ip := range o.addrs {
		c := append(a.claims[ip], o)
		a.claims[ip] = c
		if len(c) > 1 {
			a.multi[ip] = struct{}{}
		}
	}
}

func (a *Assigner) removeClaims(o *objState) {
	for _, ip := range o.addrs {
		c := a.claims[ip]
		if i := slices.Index(c, o); i >= 0 {
			c = slices.Delete(c, i, i+1)
		}
		switch len(c) {
		case 0:
			delete(a.claims, ip)
			delete(a.owner, ip)
		case 1:
			delete(a.multi, ip)
			a.claims[ip] = c
		default:
			a.claims[ip] = c
		}
	}
}

// decideOwner recomputes who may use ip; a previous owner that loses it
// gives up its placement. It returns the claimants.
func (a *Assigner) decideOwner(ip netip.Addr) []*objState {
	c := a.claims[ip]
	if len(c) == 0 {
		return nil
	}
	best := c[0]
	for _, o := range c[1:] {
		if better(o, best, ip) {
			best = o
		}
	}
	if prev := a.owner[ip]; prev != nil && prev != best {
		if i := prev.placedIdx(ip); i >= 0 {
			a.unplace(prev, i)
		}
	}
	a.owner[ip] = best
	return c
}

func (a *Assigner) place(o *objState, ip netip.Addr, node int32, iface Interface) {
	n := &a.nodes[node]
	if ip.Is4() {
		n.n4++
	} else {
		n.n6++
	}
	i, _ := slices.BinarySearchFunc(o.placed, ip, func(p placed, t netip.Addr) int { return p.addr.Compare(t) })
	o.placed = slices.Insert(o.placed, i, placed{addr: ip, node: node, iface: iface})
}

func (a *Assigner) unplace(o *objState, i int) {
	p := o.placed[i]
	n := &a.nodes[p.node]
	if n.cloud != nil && !slices.ContainsFunc(a.before, func(b nodeLoad) bool { return b.node == p.node }) {
		a.before = append(a.before, nodeLoad{p.node, n.n4, n.n6})
	}
	if p.addr.Is4() {
		n.n4--
	} else {
		n.n6--
	}
	o.placed = slices.Delete(o.placed, i, i+1)
}

// keep re-validates the current status items of o and keeps those that are
// still valid: owned IP, eligible node, subnet match, one IP of o per node,
// capacity. Items are visited in address order.
func (a *Assigner) keep(o *objState, items []StatusItem) {
	type item struct {
		addr netip.Addr
		node int
	}
	var l []item
	for _, it := range items {
		ip, err := netip.ParseAddr(it.EgressIP)
		if err != nil {
			continue
		}
		ni, ok := a.byName[it.Node]
		if !ok {
			continue
		}
		l = append(l, item{ip, ni})
	}
	slices.SortFunc(l, func(x, y item) int {
		if c := x.addr.Compare(y.addr); c != 0 {
			return c
		}
		return cmp.Compare(x.node, y.node)
	})
	for _, it := range l {
		n := &a.nodes[it.node]
		if a.owner[it.addr] != o || o.placedIdx(it.addr) >= 0 || !n.eligible || o.placedOn(int32(it.node)) ||
			!n.hasRoom(it.addr.Is4(), 0, 0) {
			continue
		}
		iface, ok := n.match(it.addr)
		if !ok {
			continue
		}
		a.place(o, it.addr, int32(it.node), iface)
	}
}

func statusAddrs(items []StatusItem) []netip.Addr {
	var out []netip.Addr
	for _, it := range items {
		if ip, err := netip.ParseAddr(it.EgressIP); err == nil {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func placedAddrs(o *objState) []netip.Addr {
	out := make([]netip.Addr, len(o.placed))
	for i, p := range o.placed {
		out[i] = p.addr
	}
	return out
}

// placeObject places o's owned IPs that have no node yet.
func (a *Assigner) placeObject(o *objState) {
	o.reasons = o.reasons[:0]
	o.capacityBound = false
	todo := a.scratchAddrs[:0]
	for _, ip := range o.addrs {
		if a.owner[ip] == o && o.placedIdx(ip) < 0 {
			todo = append(todo, ip)
		}
	}
	a.scratchAddrs = todo[:0]
	if len(todo) == 0 {
		return
	}
	if len(a.eligible) == 0 {
		for _, ip := range todo {
			a.fail(o, ip, a.noEligibleMsg)
		}
		return
	}
	if len(todo) > 1 {
		// The most constrained IPs go first, so that a dual-stack object's
		// IPv6 is not left without a node by an IPv4 that could go elsewhere.
		counts := make([]int, len(todo))
		for i, ip := range todo {
			counts[i] = a.candidates(o, ip)
		}
		idx := make([]int, len(todo))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(x, y int) int {
			if c := cmp.Compare(counts[x], counts[y]); c != 0 {
				return c
			}
			return todo[x].Compare(todo[y])
		})
		sorted := make([]netip.Addr, len(todo))
		for i, j := range idx {
			sorted[i] = todo[j]
		}
		todo = sorted
	}
	var failed []netip.Addr
	var moved []netip.Addr // placed now, so still free to move
	for _, ip := range todo {
		if ni, iface, ok := a.pick(o, ip); ok {
			a.place(o, ip, ni, iface)
			moved = append(moved, ip)
		} else {
			failed = append(failed, ip)
		}
	}
	for _, ip := range failed {
		if len(moved) > 0 {
			if cap(a.visited) < len(a.nodes) {
				a.visited = make([]bool, len(a.nodes))
			}
			a.visited = a.visited[:len(a.nodes)]
			clear(a.visited)
			if a.augment(o, ip, moved) {
				moved = append(moved, ip)
				continue
			}
		}
		why, full := a.explain(o, ip)
		a.fail(o, ip, why)
		o.capacityBound = o.capacityBound || full
	}
}

func (a *Assigner) fail(o *objState, ip netip.Addr, why string) {
	o.reasons = append(o.reasons, Event{Object: o.name, Reason: ReasonNoMatchingNodeFound, EgressIP: o.rawOf(ip),
		Message: fmt.Sprintf("egress IP %s is not assigned: %s", ip, why)})
}

// candidates counts the nodes that could take ip for o now.
func (a *Assigner) candidates(o *objState, ip netip.Addr) int {
	var k int
	is4 := ip.Is4()
	for _, ni := range a.candidateNodes(ip, false) {
		n := &a.nodes[ni]
		if o.placedOn(ni) || !n.hasRoom(is4, 0, 0) {
			continue
		}
		if _, ok := n.match(ip); ok {
			k++
		}
	}
	return k
}

// pick chooses the eligible node with the fewest egress IPs that can carry
// ip and hosts no other IP of o; ties go to the first name.
func (a *Assigner) pick(o *objState, ip netip.Addr) (int32, Interface, bool) {
	best := int32(-1)
	var bestIface Interface
	bestLoad := 0
	is4 := ip.Is4()
	for _, ni := range a.candidateNodes(ip, false) {
		n := &a.nodes[ni]
		if best >= 0 && n.load() >= bestLoad {
			continue
		}
		if !n.hasRoom(is4, 0, 0) || o.placedOn(ni) {
			continue
		}
		iface, ok := n.match(ip)
		if !ok {
			continue
		}
		best, bestIface, bestLoad = ni, iface, n.load()
	}
	return best, bestIface, best >= 0
}

// augment looks for an augmenting path (Kuhn's matching) that moves IPs of
// o placed in this round so that ip fits too. Only movable IPs move.
func (a *Assigner) augment(o *objState, ip netip.Addr, movable []netip.Addr) bool {
	is4 := ip.Is4()
	for _, ni := range a.candidateNodes(ip, true) {
		if a.visited[ni] {
			continue
		}
		n := &a.nodes[ni]
		iface, ok := n.match(ip)
		if !ok {
			continue
		}
		holder := -1
		for i := range o.placed {
			if o.placed[i].node == ni {
				holder = i
			}
		}
		if holder < 0 {
			if n.hasRoom(is4, 0, 0) {
				a.place(o, ip, ni, iface)
				return true
			}
			continue
		}
		q := o.placed[holder].addr
		if !slices.Contains(movable, q) {
			continue
		}
		m4, m6 := 0, 0
		if q.Is4() {
			m4 = 1
		} else {
			m6 = 1
		}
		if !n.hasRoom(is4, m4, m6) {
			continue
		}
		a.visited[ni] = true
		// Move q elsewhere: take it off ni first so the search skips ni.
		a.unplace(o, holder)
		if a.augment(o, q, movable) {
			a.place(o, ip, ni, iface)
			return true
		}
		qi, _ := n.match(q)
		a.place(o, q, ni, qi)
	}
	return false
}

// explain says why ip found no node for o, and whether nodes at capacity
// were part of the reason.
func (a *Assigner) explain(o *objState, ip netip.Addr) (string, bool) {
	var inSubnet, hostsOwn, full int
	is4 := ip.Is4()
	for _, ni := range a.candidateNodes(ip, false) {
		n := &a.nodes[ni]
		if _, ok := n.match(ip); !ok {
			continue
		}
		inSubnet++
		switch {
		case o.placedOn(ni):
			hostsOwn++
		case !n.hasRoom(is4, 0, 0):
			full++
		}
	}
	f := 0
	if !is4 {
		f = 1
	}
	atCapacity := full > 0
	switch {
	case inSubnet == 0:
		return fmt.Sprintf("none of the %d eligible nodes has an interface subnet containing it (their subnets of this family: %s); use an address from one of them or label a node on its subnet",
			len(a.eligible), a.subnetList[f]), atCapacity
	case hostsOwn == inSubnet:
		return fmt.Sprintf("all %d eligible nodes on its subnet already host another egress IP of %s, and a node hosts at most one IP of an EgressIP; label more nodes on that subnet or list fewer IPs",
			inSubnet, o.name), atCapacity
	case full == inSubnet:
		return fmt.Sprintf("all %d eligible nodes on its subnet are at their cloud IP capacity (cloud.network.openshift.io/egress-ipconfig); add nodes or free egress IPs", inSubnet), atCapacity
	default:
		return fmt.Sprintf("of the %d eligible nodes on its subnet, %d already host another egress IP of %s (a node hosts at most one IP of an EgressIP) and %d are at their cloud IP capacity; add nodes on that subnet",
			inSubnet, hostsOwn, o.name, full), atCapacity
	}
}

func (a *Assigner) insertName(name string) {
	i, found := slices.BinarySearch(a.names, name)
	if !found {
		a.names = slices.Insert(a.names, i, name)
	}
}

func (a *Assigner) removeName(name string) {
	if i, found := slices.BinarySearch(a.names, name); found {
		a.names = slices.Delete(a.names, i, i+1)
	}
}

// load assigns a whole set of objects from scratch (the state must be empty).
func (a *Assigner) load(objects []Object) error {
	seen := make(map[string]struct{}, len(objects))
	for _, o := range objects {
		if _, dup := seen[o.Name]; dup {
			return fmt.Errorf("EgressIP %q is listed twice; each object must appear once", o.Name)
		}
		seen[o.Name] = struct{}{}
	}
	states := make([]*objState, 0, len(objects))
	inputs := make(map[*objState][]StatusItem, len(objects))
	for _, o := range objects {
		s := a.parseObject(o)
		s.status = statusAddrs(o.Status)
		a.objs[o.Name] = s
		inputs[s] = o.Status
		states = append(states, s)
	}
	slices.SortFunc(states, func(x, y *objState) int { return strings.Compare(x.name, y.name) })
	a.names = make([]string, len(states))
	for i, s := range states {
		a.names[i] = s.name
		a.addClaims(s)
	}
	for ip := range a.claims {
		a.decideOwner(ip)
	}
	for _, s := range states {
		a.keep(s, inputs[s])
	}
	for _, s := range states {
		a.placeObject(s)
	}
	for _, s := range states {
		a.settle(s)
	}
	return nil
}

// settle records o's placements as its status and tracks whether it waits
// for a node.
func (a *Assigner) settle(o *objState) {
	o.status = placedAddrs(o)
	if o.capacityBound {
		a.pending[o] = struct{}{}
	} else {
		delete(a.pending, o)
	}
}

// Upsert adds or replaces one object and re-assigns what that affects: the
// object itself, the other objects listing one of its old or new IPs, and
// objects waiting for a node. For an object the Assigner already knows, its
// status is the one the Assigner computed (obj.Status is ignored, as the
// informer's copy may lag); for a new object obj.Status is honoured. It
// returns the names whose result may have changed, sorted.
func (a *Assigner) Upsert(obj Object) []string {
	return a.upsert(obj, false)
}

// Delete removes an object; its IPs become free for other claimants. It
// returns the names whose result may have changed, sorted.
func (a *Assigner) Delete(name string) []string {
	if _, ok := a.objs[name]; !ok {
		return nil
	}
	return a.upsert(Object{Name: name}, true)
}

func (a *Assigner) upsert(obj Object, remove bool) []string {
	touched := map[netip.Addr]struct{}{}
	affected := map[*objState]struct{}{}
	a.before = a.before[:0]
	items := obj.Status
	old := a.objs[obj.Name]
	if old != nil {
		items = make([]StatusItem, len(old.placed))
		for i, p := range old.placed {
			items[i] = StatusItem{Node: a.nodes[p.node].name, EgressIP: p.addr.String()}
		}
		for i := len(old.placed) - 1; i >= 0; i-- {
			a.unplace(old, i)
		}
		a.removeClaims(old)
		for _, ip := range old.addrs {
			touched[ip] = struct{}{}
		}
		delete(a.pending, old)
		delete(a.objs, obj.Name)
	}
	var s *objState
	if !remove {
		s = a.parseObject(obj)
		s.status = statusAddrs(items)
		a.objs[obj.Name] = s
		a.insertName(obj.Name)
		a.addClaims(s)
		for _, ip := range s.addrs {
			touched[ip] = struct{}{}
		}
		affected[s] = struct{}{}
	} else {
		a.removeName(obj.Name)
	}
	// Contested IPs whose owner could not place them are decided afresh, as
	// a full Assign would (nobody has them in status any more).
	for ip := range a.multi {
		if o := a.owner[ip]; o != nil && o.placedIdx(ip) < 0 {
			touched[ip] = struct{}{}
		}
	}
	ips := make([]netip.Addr, 0, len(touched))
	for ip := range touched {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		for _, c := range a.decideOwner(ip) {
			affected[c] = struct{}{}
		}
	}
	if s != nil {
		a.keep(s, items)
	}
	// Objects waiting for capacity are retried only when some was freed;
	// otherwise their placement and explanation cannot change.
	if a.capacityFreed() {
		for o := range a.pending {
			affected[o] = struct{}{}
		}
	}
	order := make([]*objState, 0, len(affected))
	for o := range affected {
		order = append(order, o)
	}
	slices.SortFunc(order, func(x, y *objState) int { return strings.Compare(x.name, y.name) })
	for _, o := range order {
		a.placeObject(o)
	}
	names := make([]string, 0, len(order)+1)
	for _, o := range order {
		a.settle(o)
		names = append(names, o.name)
	}
	if old != nil && s == nil {
		i, _ := slices.BinarySearch(names, obj.Name)
		names = slices.Insert(names, i, obj.Name)
	}
	return names
}

// SetNodes replaces the node set and re-assigns everything, keeping every
// assignment that stays valid. It fails only on two nodes with one name.
func (a *Assigner) SetNodes(nodes []Node, opts Options) error {
	objects := make([]Object, 0, len(a.objs))
	for _, name := range a.names {
		objects = append(objects, a.object(a.objs[name]))
	}
	fresh, err := NewAssigner(nodes, opts)
	if err != nil {
		return err
	}
	if err := fresh.load(objects); err != nil {
		return err
	}
	*a = *fresh
	return nil
}

// object rebuilds the Object an objState came from, with its current status.
func (a *Assigner) object(s *objState) Object {
	o := Object{Name: s.name, Created: s.created}
	for _, e := range s.static {
		o.EgressIPs = append(o.EgressIPs, e.EgressIP)
	}
	o.EgressIPs = append(o.EgressIPs, s.raw...)
	r := a.objectResult(s)
	o.Status = r.Items()
	return o
}

func (a *Assigner) objectResult(s *objState) ObjectResult {
	r := ObjectResult{Name: s.name, Status: make([]Assignment, len(s.placed))}
	for i, p := range s.placed {
		r.Status[i] = Assignment{Node: a.nodes[p.node].name, EgressIP: p.addr.String(), Addr: p.addr, Interface: p.iface}
	}
	return r
}

// ObjectResult returns the current status of one object; ok is false for an
// unknown name.
func (a *Assigner) ObjectResult(name string) (ObjectResult, bool) {
	s, ok := a.objs[name]
	if !ok {
		return ObjectResult{Name: name}, false
	}
	return a.objectResult(s), true
}

// Events returns the current Events of one object, sorted.
func (a *Assigner) Events(name string) []Event {
	s, ok := a.objs[name]
	if !ok {
		return nil
	}
	ev := a.events(s, nil)
	sortEvents(ev)
	return ev
}

func (a *Assigner) events(s *objState, out []Event) []Event {
	out = append(out, s.static...)
	for i, ip := range s.addrs {
		c := a.claims[ip]
		if len(c) < 2 {
			continue
		}
		own := a.owner[ip]
		var others []string
		for _, o := range c {
			if o != s {
				others = append(others, o.name)
			}
		}
		slices.Sort(others)
		var msg string
		if own == s {
			msg = fmt.Sprintf("egress IP %s is also listed by EgressIP %s; it stays with this object (an IP stays with the object that already has it in status, else the oldest, else the first by name); remove it from the others",
				ip, strings.Join(others, ", "))
		} else {
			msg = fmt.Sprintf("egress IP %s is also listed by EgressIP %s, which keeps it (an IP stays with the object that already has it in status, else the oldest, else the first by name); remove it from this object or from %s",
				ip, strings.Join(others, ", "), own.name)
		}
		out = append(out, Event{Object: s.name, Reason: ReasonEgressIPConflict, EgressIP: s.raw[i], Message: msg})
	}
	return append(out, s.reasons...)
}

func sortEvents(ev []Event) {
	slices.SortFunc(ev, func(x, y Event) int {
		return cmp.Or(strings.Compare(x.Object, y.Object), strings.Compare(x.EgressIP, y.EgressIP),
			strings.Compare(string(x.Reason), string(y.Reason)), strings.Compare(x.Message, y.Message))
	})
}

// Result returns the whole current assignment.
func (a *Assigner) Result() Result {
	r := Result{Objects: make([]ObjectResult, 0, len(a.names))}
	for _, name := range a.names {
		s := a.objs[name]
		r.Objects = append(r.Objects, a.objectResult(s))
		r.Events = a.events(s, r.Events)
	}
	sortEvents(r.Events)
	r.NodeProblems = slices.Clone(a.nodeProblems)
	return r
}

// Assign computes, for every EgressIP object, which node hosts each of its
// egress IPs, keeping every current assignment that is still valid and
// balancing new ones over the eligible nodes. It is deterministic: the order
// of objects, nodes, IPs and status items does not matter. It fails only on
// duplicate object or node names, which Kubernetes never produces.
func Assign(objects []Object, nodes []Node, opts Options) (Result, error) {
	a, err := NewAssigner(nodes, opts)
	if err != nil {
		return Result{}, err
	}
	if err := a.load(objects); err != nil {
		return Result{}, err
	}
	return a.Result(), nil
}

// Load replaces all objects of the Assigner and assigns them from scratch,
// honouring their statuses, exactly as Assign does. On error (two objects
// with one name) the Assigner is left empty.
func (a *Assigner) Load(objects []Object) error {
	a.objs = map[string]*objState{}
	a.names = nil
	a.claims = map[netip.Addr][]*objState{}
	a.owner = map[netip.Addr]*objState{}
	a.multi = map[netip.Addr]struct{}{}
	a.pending = map[*objState]struct{}{}
	for i := range a.nodes {
		a.nodes[i].n4, a.nodes[i].n6 = 0, 0
	}
	return a.load(objects)
}
