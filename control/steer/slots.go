package steer

import (
	"net/netip"
	"slices"
)

// A pod's connections are spread over its object's gateways by the kernel's
// multipath route, hash-threshold style: each next hop owns a contiguous
// share of the flow-hash space, in the order the route lists them, sized by
// its weight. Rebuilding the list sorted whenever the set changes would move
// the shares of gateways that did not change, and their established flows
// would reach a gateway that holds no state for them. So the agent keeps
// each gateway's slot: the share space is cut in equal units, one per
// gateway at first; a gateway that leaves leaves its units vacant (served,
// until someone takes them, by the neighbouring gateway), and a new gateway
// takes vacant units before any other. Only the flows of the gateway that
// left move.

// maxSlots bounds the units of one route; past it the layout starts afresh.
const maxSlots = 64

// placeHops returns the units of a route whose previous units were prev (an
// invalid Addr: vacant) and whose next hops are now want (sorted): every
// unit of a hop still wanted keeps it; a hop no longer wanted leaves its
// units vacant; each new hop takes the first vacant unit, else the last
// unit of the hop holding the most units (one that had taken over a vacancy
// earlier), else a new unit at the end.
func placeHops(prev []netip.Addr, want []netip.Addr) []netip.Addr {
	if len(want) == 0 {
		return nil
	}
	kept := false
	for _, a := range prev {
		if a.IsValid() && slices.Contains(want, a) {
			kept = true
			break
		}
	}
	if !kept || len(prev) > maxSlots {
		return slices.Clone(want)
	}
	units := slices.Clone(prev)
	for i, a := range units {
		if !slices.Contains(want, a) {
			units[i] = netip.Addr{}
		}
	}
	for _, h := range want {
		if slices.Contains(units, h) {
			continue
		}
		if i := slices.IndexFunc(units, func(a netip.Addr) bool { return !a.IsValid() }); i >= 0 {
			units[i] = h
			continue
		}
		if i := lastOfLargest(units); i >= 0 {
			units[i] = h
			continue
		}
		units = append(units, h)
	}
	return units
}

// lastOfLargest is the index of the last unit of the hop holding the most
// units, if it holds more than one; -1 otherwise.
func lastOfLargest(units []netip.Addr) int {
	best, bestN := -1, 1
	for i, a := range units {
		n := 0
		last := i
		for j, b := range units {
			if b == a {
				n++
				last = j
			}
		}
		if n > bestN {
			best, bestN = last, n
		}
	}
	return best
}

// weighted is one next hop of a route as programmed: its address and how
// many units of the share space it serves.
type weighted struct {
	addr   netip.Addr
	weight int
}

// runs turns units into the route's next hops in order: a vacant unit is
// served by the hop before it (the one after it at the start), and
// neighbouring units of one hop become one next hop with their count as
// weight.
func runs(units []netip.Addr) []weighted {
	filled := slices.Clone(units)
	for i := range filled {
		if !filled[i].IsValid() && i > 0 {
			filled[i] = filled[i-1]
		}
	}
	for i := len(filled) - 2; i >= 0; i-- {
		if !filled[i].IsValid() {
			filled[i] = filled[i+1]
		}
	}
	var out []weighted
	for _, a := range filled {
		if !a.IsValid() {
			continue
		}
		if n := len(out); n > 0 && out[n-1].addr == a {
			out[n-1].weight++
			continue
		}
		out = append(out, weighted{addr: a, weight: 1})
	}
	return out
}
