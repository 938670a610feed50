package conntrack

import (
	"math/bits"
	"time"
)

// Change marks let a reader that mirrors the table elsewhere (the flow
// sync) look only at the slots that changed since it last looked, instead
// of every flow: its cost then follows the churn, not the table's size.
//
// A slot is an entry's index; a flow keeps its slot from insert to removal.
// A slot is marked when a flow is put in it, when its flow's state changes
// and when its flow is removed. A timer refresh is not a change: a reader
// that cares how far a flow's deadline moved sweeps the slots (RangeSlots)
// at a pace its tolerance allows. The marks are one bit per slot, set with
// an atomic OR by whoever changes the entry (under its shard's lock); there
// is one reader: TakeChanged clears what it takes.

// markChanged marks slot g (its shard locked).
func (t *Table) markChanged(g uint32) {
	t.changed[g>>6].Or(1 << (g & 63))
}

// Slots is the number of entry slots, the bound of every slot number: a
// slot set (TakeChanged, RangeSlots) has (Slots()+63)/64 words.
func (t *Table) Slots() int { return len(t.entries) }

// TakeChanged adds to set (bit i of word i/64 is slot i) the slots whose
// flow was inserted, changed state or was removed since the previous
// call, and clears their marks. Words past the end of set are not taken.
func (t *Table) TakeChanged(set []uint64) {
	n := min(len(set), len(t.changed))
	for i := range n {
		// Most words are zero: a load costs less than a swap and leaves
		// the line shared with the writers.
		if t.changed[i].Load() != 0 {
			set[i] |= t.changed[i].Swap(0)
		}
	}
}

// Tracked reports whether a flow with original tuple orig is in the table.
func (t *Table) Tracked(orig *Tuple) bool { return t.has(orig, Original) }

// RangeSlots calls fn for each slot in set (every slot when set is nil)
// that a flow has ever used, in slot order: with the flow and its remaining
// lifetime relative to now (negative once past its deadline, until Expire
// removes it), or with a nil flow when the slot is empty now; it stops when
// fn returns false. Slots no flow has used yet are skipped. Locking is as
// in Range: a shard at most exportChunk slots at a time, fn outside the
// locks; fn must not keep f.
func (t *Table) RangeSlots(now int64, set []uint64, fn func(slot uint32, f *Flow, remaining time.Duration) bool) {
	var fs [exportChunk]Flow
	var rem [exportChunk]time.Duration
	var slots [exportChunk]uint32
	var live [exportChunk]bool
	for si := range t.shards {
		s := &t.shards[si]
		next := s.base // the next slot to look at
		for {
			n := 0
			s.mu.Lock()
			end := s.base + s.bump // the bump only grows
			for next < end && n < exportChunk {
				g := next
				if set != nil {
					if g = nextSet(set, g, end); g >= end {
						next = end
						break
					}
				}
				next = g + 1
				e := &t.entries[g]
				slots[n], live[n], rem[n] = g, e.state != uint8(StateNone), 0
				if live[n] {
					e.toFlow(&fs[n])
					rem[n] = untilDeadline(e.deadline, now)
				}
				n++
			}
			done := next >= end
			s.mu.Unlock()
			for i := range n {
				f := &fs[i]
				if !live[i] {
					f = nil
				}
				if !fn(slots[i], f, rem[i]) {
					return
				}
			}
			if done {
				break
			}
		}
	}
}

// nextSet returns the first slot at or after g whose bit is set in set, or
// a slot at or past end if there is none before end.
func nextSet(set []uint64, g, end uint32) uint32 {
	w := g >> 6
	if int(w) >= len(set) {
		return end
	}
	word := set[w] &^ (1<<(g&63) - 1)
	for word == 0 {
		w++
		if w<<6 >= end || int(w) >= len(set) {
			return end
		}
		word = set[w]
	}
	return w<<6 + uint32(bits.TrailingZeros64(word))
}
