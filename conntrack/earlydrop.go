package conntrack

// Early drop: a full table gives up a flow that has not shown it is wanted
// before it refuses a new one, as Linux's nf_conntrack early_drop does, so
// that a flood of unanswered flows (a scan, a SYN flood, UDP to nowhere)
// cannot lock out new connections that would be answered.

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
		if t.dropIn(si, now, out) {
			return true
		}
		si = (si + 1) & uint32(t.shardMask)
	}
	return false
}

// dropIn is EarlyDrop's search in shard si.
func (t *Table) dropIn(si uint32, now int64, out *Flow) bool {
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
		if e := &t.entries[s.base+c]; removable(e, now, true) {
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
