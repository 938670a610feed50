package assign

import (
	"fmt"
	"net/netip"
	"slices"
)

// Standbys: for each assigned IP a second node that holds a copy of its
// flows and becomes its owner when the owner fails.

// standbyRoom reports whether the node's cloud capacity allows it to stand
// by for one more IP of the family, counting the IPs it hosts and those it
// already stands by for: a takeover must always fit.
func (n *nodeState) standbyRoom(is4 bool) bool {
	return n.hasRoom(is4, -n.s4, -n.s6)
}

// canStandby reports whether node ni may be the standby of p, an IP of o:
// eligible, a subnet that holds the IP, no IP of o on it (the owner
// included, so a takeover never puts two IPs of one object on a node) and
// capacity for the takeover.
func (a *assigner) canStandby(o *objState, p *placed, ni int32) bool {
	n := &a.nodes[ni]
	if !n.eligible || ni == p.node || o.placedOn(ni) || !n.standbyRoom(p.addr.Is4()) {
		return false
	}
	_, ok := n.match(p.addr)
	return ok
}

func (a *assigner) setStandby(p *placed, ni int32) {
	n := &a.nodes[ni]
	if p.addr.Is4() {
		n.s4++
	} else {
		n.s6++
	}
	p.standby = ni
}

func (a *assigner) unsetStandby(p *placed) {
	n := &a.nodes[p.standby]
	if p.addr.Is4() {
		n.s4--
	} else {
		n.s6--
	}
	p.standby = -1
}

// takeOver places each owned IP of o that lost its node on its recorded
// standby when that node can host it: the standby holds the IP's flows,
// so its connections survive the move. An IP absent from status had no
// node, so no flows to carry: it is placed like any new IP (a cloud attach
// still pending keeps it out of status, and sending it to its standby would
// move it away from the node being attached on every cycle).
func (a *assigner) takeOver(o *objState) {
	for _, ip := range o.addrs {
		if a.owner[ip] != o || o.placedIdx(ip) >= 0 {
			continue
		}
		if _, had := slices.BinarySearchFunc(o.status, ip, netip.Addr.Compare); !had {
			continue
		}
		ni, ok := a.byName[o.standbys[ip]]
		if !ok {
			continue
		}
		n := &a.nodes[ni]
		if !n.eligible || o.placedOn(int32(ni)) || !n.hasRoom(ip.Is4(), 0, 0) {
			continue
		}
		if iface, ok := n.match(ip); ok {
			a.place(o, ip, int32(ni), iface)
		}
	}
}

// chooseStandbys gives every placed IP a standby: the recorded one while
// it still qualifies (kept first, for all objects, so a new choice never
// takes the room a kept one needs), else the qualifying node with the
// fewest standbys, then the fewest IPs, then the first name. New choices
// are then evened out: one moves while another node qualifies with at
// least two standbys fewer.
func (a *assigner) chooseStandbys() {
	a.noStandby = a.noStandby[:0]
	for _, name := range a.names {
		o := a.objs[name]
		for i := range o.placed {
			p := &o.placed[i]
			p.standby = -1
			if ni, ok := a.byName[o.standbys[p.addr]]; ok && a.canStandby(o, p, int32(ni)) {
				a.setStandby(p, int32(ni))
			}
		}
	}
	objs := make([]*objState, len(a.names))
	for i, name := range a.names {
		objs[i] = a.objs[name]
	}
	a.pickStandbys(objs)
}

// pickStandbys chooses a standby for every placed IP of objs (in name
// order) that kept none, then evens the new choices out.
func (a *assigner) pickStandbys(objs []*objState) {
	type choice struct {
		o *objState
		p *placed
	}
	var fresh []choice
	for _, o := range objs {
		for i := range o.placed {
			p := &o.placed[i]
			if p.standby >= 0 {
				continue
			}
			ni, ok := a.pickStandby(o, p)
			if !ok {
				a.noStandby = append(a.noStandby, Event{Object: o.name, Reason: ReasonNoStandbyNode, EgressIP: o.rawOf(p.addr),
					Message: fmt.Sprintf("egress IP %s on node %s has no standby, so its connections break if %s fails: %s",
						p.addr, a.nodes[p.node].name, a.nodes[p.node].name, a.explainNoStandby(o, p))})
				continue
			}
			a.setStandby(p, ni)
			fresh = append(fresh, choice{o, p})
		}
	}
	// Each move lowers the sum of the squared standby counts, so this ends.
	for moved := true; moved; {
		moved = false
		for _, c := range fresh {
			ni, ok := a.pickStandby(c.o, c.p)
			if ok && a.nodes[ni].standbyLoad()+2 <= a.nodes[c.p.standby].standbyLoad() {
				a.unsetStandby(c.p)
				a.setStandby(c.p, ni)
				moved = true
			}
		}
	}
}

// pickStandby chooses the standby for p, an IP of o: the qualifying node
// with the fewest standbys, then the fewest IPs, then the first name.
func (a *assigner) pickStandby(o *objState, p *placed) (int32, bool) {
	best := int32(-1)
	for _, ni := range a.candidateNodes(p.addr, false) {
		if best >= 0 {
			n, b := &a.nodes[ni], &a.nodes[best]
			if n.standbyLoad() > b.standbyLoad() || n.standbyLoad() == b.standbyLoad() && n.load() >= b.load() {
				continue
			}
		}
		if ni != p.standby && a.canStandby(o, p, ni) {
			best = ni
		}
	}
	return best, best >= 0
}

// explainNoStandby says why no node qualifies as the standby of p.
func (a *assigner) explainNoStandby(o *objState, p *placed) string {
	var others, hostsOwn, full int
	for _, ni := range a.candidateNodes(p.addr, false) {
		n := &a.nodes[ni]
		if ni == p.node {
			continue
		}
		if _, ok := n.match(p.addr); !ok {
			continue
		}
		others++
		switch {
		case o.placedOn(ni):
			hostsOwn++
		case !n.standbyRoom(p.addr.Is4()):
			full++
		}
	}
	switch {
	case others == 0:
		return "no other eligible node has an interface subnet containing it; label another node on that subnet"
	case hostsOwn == others:
		return fmt.Sprintf("the %d other eligible nodes on its subnet each host another egress IP of %s, and a takeover must not put two IPs of one EgressIP on a node; label more nodes on that subnet",
			others, o.name)
	case full == others:
		return fmt.Sprintf("the %d other eligible nodes on its subnet are at their cloud IP capacity, counting the IPs they already stand by for; add nodes on that subnet", others)
	}
	return fmt.Sprintf("of the %d other eligible nodes on its subnet, %d host another egress IP of %s and %d are at their cloud IP capacity counting the IPs they stand by for; add nodes on that subnet",
		others, hostsOwn, o.name, full)
}
