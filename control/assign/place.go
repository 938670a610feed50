package assign

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Placing egress IPs on nodes: keeping valid status, balancing, and moving
// an object's other IPs to make room.

func (a *assigner) place(o *objState, ip netip.Addr, node int32, iface Interface) {
	n := &a.nodes[node]
	if ip.Is4() {
		n.n4++
	} else {
		n.n6++
	}
	i, _ := slices.BinarySearchFunc(o.placed, ip, func(p placed, t netip.Addr) int { return p.addr.Compare(t) })
	o.placed = slices.Insert(o.placed, i, placed{addr: ip, node: node, iface: iface, standby: -1})
}

func (a *assigner) unplace(o *objState, i int) {
	p := o.placed[i]
	n := &a.nodes[p.node]
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
func (a *assigner) keep(o *objState, items []StatusItem) {
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

// placeObject places o's owned IPs that have no node yet.
func (a *assigner) placeObject(o *objState) {
	o.reasons = o.reasons[:0]
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
		a.fail(o, ip, a.explain(o, ip))
	}
}

func (a *assigner) fail(o *objState, ip netip.Addr, why string) {
	o.reasons = append(o.reasons, Event{Object: o.name, Reason: ReasonNoMatchingNodeFound, EgressIP: o.rawOf(ip),
		Message: fmt.Sprintf("egress IP %s is not assigned: %s", ip, why)})
}

// candidates counts the nodes that could take ip for o now.
func (a *assigner) candidates(o *objState, ip netip.Addr) int {
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
func (a *assigner) pick(o *objState, ip netip.Addr) (int32, Interface, bool) {
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
func (a *assigner) augment(o *objState, ip netip.Addr, movable []netip.Addr) bool {
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
