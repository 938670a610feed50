package conntrack

// Early drop: a full table gives up a flow that has not shown it is wanted
// before it refuses a new one, as Linux's nf_conntrack early_drop does, so
// that a flood of unanswered flows (a scan, a SYN flood, UDP to nowhere)
// cannot lock out new connections that would be answered. A pod or NAT
// address at its own limit does the same within its own flows
// (EarlyDropOwn): it is not locked out by its own unanswered flows, and it
// never takes another's.

// earlyDropScan bounds the entries one EarlyDrop call examines in a shard,
// and earlyDropShards the shards it tries: the work per refused flow stays
// a few cache lines however large the table.
const (
	earlyDropScan   = 64
	earlyDropShards = 4
)

// earlyDroppable reports whether a flow in state s may be evicted to make
// room: it was never answered (UDP and ICMP unreplied, TCP SYN_SENT and
// PICKED_UP), is
// still opening (SYN_RECV), or is closing with nothing left to carry
// (LAST_ACK, TIME_WAIT, CLOSE). Never an answered UDP or ICMP flow, never an
// established TCP connection, nor a half-closed one (FIN_WAIT, CLOSE_WAIT),
// which may still carry data one way for a long time.
func earlyDroppable(s State) bool {
	switch s {
	case StateUDPUnreplied, StateICMPUnreplied, StateSynSent, StateSynRecv, StatePickedUp,
		StateLastAck, StateTimeWait, StateClose:
		return true
	}
	return false
}

// removable reports whether entry e may be removed now: it is in use and
// expired, or (early) early-droppable.
func removable(e *entry, now int64, early bool) bool {
	return e.state != uint8(StateNone) &&
		(expired(now, e.deadline) || early && earlyDroppable(State(e.state)))
}

// EarlyDrop makes room for one new flow whose original tuple is k after
// Insert refused it with ErrFull: it removes one expired or early-droppable
// flow, the one nearest its deadline among at most earlyDropScan entries
// of k's shard (then of up to earlyDropShards-1 next ones, until one has a
// candidate), copies it to out and reports true; the caller releases what
// it held (its NAT port) and inserts again. It reports false, and changes
// nothing, when none was found: the table is full of live, answered flows,
// and the new flow is refused.
func (t *Table) EarlyDrop(k *Tuple, now int64, out *Flow) bool {
	si := uint32(t.h.hash(k) & t.shardMask)
	for i := 0; i < earlyDropShards && i < len(t.shards); i++ {
		if t.dropIn(si, now, nil, nil, out) {
			return true
		}
		si = (si + 1) & uint32(t.shardMask)
	}
	return false
}

// EarlyDropOwn makes room under the per-address limits for a new flow
// (original tuple k) from src bound to nat after Admit refused it with
// ErrSourceLimit or ErrNATLimit: it removes one expired or early-droppable
// flow that counts against every limit that is full (the same source if
// src is at SourceLimit, the same NAT address if nat is at NATLimit), so
// the new flow takes the place of one of its own and never of another
// source's or NAT address's. The search and its bound are EarlyDrop's
// (the one nearest its deadline among at most earlyDropScan entries of a
// shard, up to earlyDropShards shards from k's), with the entries that do
// not match skipped; it copies the flow to out and reports true, and the
// caller releases the flow's NAT port and asks Admit again. It reports
// false, and changes nothing, when no limit is full or the bounded search
// found none: the address's flows are answered (or rare among the entries
// searched) and the new flow is refused.
func (t *Table) EarlyDropOwn(k *Tuple, src, nat *Addr, now int64, out *Flow) bool {
	var ms, mn *Addr
	if t.srcCounts.on() && t.srcCounts.full(t.h.addrHash(src)) {
		ms = src
	}
	if t.natCounts.on() && t.natCounts.full(t.h.addrHash(nat)) {
		mn = nat
	}
	if ms == nil && mn == nil {
		return false
	}
	si := uint32(t.h.hash(k) & t.shardMask)
	for i := 0; i < earlyDropShards && i < len(t.shards); i++ {
		if t.dropIn(si, now, ms, mn, out) {
			return true
		}
		si = (si + 1) & uint32(t.shardMask)
	}
	return false
}

// dropIn is the early-drop search in shard si: among flows from src (if
// not nil) bound to nat (if not nil).
func (t *Table) dropIn(si uint32, now int64, src, nat *Addr, out *Flow) bool {
	s := &t.shards[si]
	s.mu.Lock()
	var best uint32
	var bestLeft int32
	found := false
	c := s.dropAt
	for n := uint32(0); n < earlyDropScan && n < s.bump; n++ {
		if c >= s.bump {
			c = 0
		}
		if e := &t.entries[s.base+c]; removable(e, now, true) &&
			(src == nil || e.src == *src) && (nat == nil || e.nat == *nat) {
			// Signed tick difference, as expired compares: the flow that
			// has least left (an expired one first) goes.
			if left := int32(e.deadline - tickFloor(now)); !found || left < bestLeft {
				best, bestLeft, found = c, left, true
			}
		}
		c++
	}
	s.dropAt = c
	ok := found && t.removeOne(si, s.base+best, now, true, out)
	s.mu.Unlock()
	return ok
}
