package steer

// Helpers that only the tests compare or read by; production never needs them.

import "slices"

// Equal reports whether two states program the same kernel configuration
// (Objects, Problems and the fail-closed notes are not compared).
func (st State) Equal(o State) bool {
	return slices.Equal(st.Selected, o.Selected) && slices.Equal(st.Allowed, o.Allowed) &&
		slices.Equal(st.PodCIDRs, o.PodCIDRs) && slices.Equal(st.Rules, o.Rules) &&
		slices.EqualFunc(st.Routes, o.Routes, routeEqual) && slices.Equal(st.Neighs, o.Neighs) &&
		slices.Equal(st.FDB, o.FDB) && slices.Equal(st.TunnelPeers, o.TunnelPeers)
}

func routeEqual(a, b Route) bool {
	return a.Table == b.Table && a.Dst == b.Dst && a.Type == b.Type && slices.Equal(a.NextHops, b.NextHops)
}

// DropsByReason splits Drops: packets of selected pods, and of addresses in
// the node's pod CIDRs the agent has not classified (yet).
func (k *Kernel) DropsByReason() (selected, unclassified uint64, err error) {
	return k.nft.drops()
}

// Actual is the kernel state as Apply reads it, for the tests.
func (k *Kernel) Actual() (State, error) {
	st, _, _, err := k.actual()
	return st, err
}
