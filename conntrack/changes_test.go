package conntrack

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A mirror kept only from the change marks (TakeChanged, then RangeSlots
// of those slots) equals the table after any mix of inserts, state
// changes, refreshes, deletes, expiry, early drops and imports: no change
// but a timer refresh goes unmarked.
func TestChangeMarksKeepAMirror(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tb := mustNew(t, Config{MaxFlows: 2000, Shards: 4})
	words := (tb.Slots() + 63) / 64
	mirror := map[uint32]Flow{}
	set := make([]uint64, words)
	sync := func(step int) (looked int) {
		clear(set)
		tb.TakeChanged(set)
		tb.RangeSlots(0, set, func(slot uint32, f *Flow, _ time.Duration) bool {
			looked++
			if f == nil {
				delete(mirror, slot)
			} else {
				mirror[slot] = *f
			}
			return true
		})
		truth := map[uint32]Flow{}
		tb.RangeSlots(0, nil, func(slot uint32, f *Flow, _ time.Duration) bool {
			if f != nil {
				truth[slot] = *f
			}
			return true
		})
		if len(truth) != len(mirror) || len(truth) != tb.Len() {
			t.Fatalf("step %d: mirror has %d flows, table %d (Len %d)", step, len(mirror), len(truth), tb.Len())
		}
		for slot, f := range truth {
			if mirror[slot] != f {
				t.Fatalf("step %d: slot %d: mirror %+v, table %+v", step, slot, mirror[slot], f)
			}
		}
		return looked
	}
	var out Flow
	looked, steps := 0, 0
	for step := range 60000 {
		f := randFlow(r)
		now := int64(step) * int64(time.Millisecond)
		switch op := r.IntN(20); {
		case op < 8:
			tb.Insert(&f, 0, now)
		case op < 10:
			tb.Delete(&f.Orig, &out)
		case op < 13:
			rt := f.Reply()
			tb.Track(Reply, &rt, 0, now, &out) // UDP unreplied → replied
		case op < 16:
			tb.Track(Original, &f.Orig, 0, now, &out) // a refresh at most
		case op < 17:
			tb.Expire(now+int64(6*time.Minute), 3, nil)
		case op < 18:
			tb.EarlyDrop(&f.Orig, now, &out)
		case op < 19:
			f.State = StateUDPReplied
			tb.ImportFlow(&f, time.Minute, now)
		default:
			tcp := flowN(uint32(r.IntN(200)), ProtoTCP)
			if tb.Insert(&tcp, FlagSYN, now) != nil {
				// An existing one: the next segment moves its state.
				rt := tcp.Reply()
				tb.Track(Reply, &rt, FlagSYN|FlagACK, now, &out)
			}
		}
		if step%97 == 0 {
			looked += sync(step)
			steps++
		}
	}
	sync(-1)
	// The marks are what makes the mirror cheap: it looked at a small share
	// of the slots per round.
	if per := looked / steps; per > tb.Slots()/4 {
		t.Fatalf("a round looked at %d slots of %d: the marks cover far more than the changes", per, tb.Slots())
	}
	t.Logf("%d flows, %d slots looked at per round of 97 operations", tb.Len(), looked/steps)
}

// A refresh of a flow's timer is not a change; its state moving is.
func TestRefreshIsNotAChange(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 64, Shards: 1})
	set := make([]uint64, (tb.Slots()+63)/64)
	taken := func() int {
		clear(set)
		tb.TakeChanged(set)
		n := 0
		tb.RangeSlots(0, set, func(uint32, *Flow, time.Duration) bool { n++; return true })
		return n
	}
	f := flowN(1, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); err != nil {
		t.Fatal(err)
	}
	if n := taken(); n != 1 {
		t.Fatalf("after an insert %d slots changed, want 1", n)
	}
	if n := taken(); n != 0 {
		t.Fatalf("taken twice: %d slots, want 0", n)
	}
	var out Flow
	for i := 1; i <= 10; i++ {
		tb.Track(Original, &f.Orig, 0, int64(i)*int64(time.Second), &out)
	}
	if n := taken(); n != 0 {
		t.Fatalf("refreshes marked %d slots, want 0", n)
	}
	rt := f.Reply()
	tb.Track(Reply, &rt, 0, int64(11*time.Second), &out)
	if n := taken(); n != 1 || out.State != StateUDPReplied {
		t.Fatalf("a reply (state %v) marked %d slots, want 1", out.State, n)
	}
}

// RangeSlots visits exactly the used slots a set names, in order, and
// nextSet agrees with a bit-by-bit search.
func TestRangeSlotsSet(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tb := mustNew(t, Config{MaxFlows: 3000, Shards: 8})
	for i := range 1500 {
		f := flowN(uint32(i), ProtoUDP)
		tb.Insert(&f, 0, 0)
	}
	used := map[uint32]bool{}
	tb.RangeSlots(0, nil, func(slot uint32, _ *Flow, _ time.Duration) bool { used[slot] = true; return true })
	if len(used) != 1500 {
		t.Fatalf("a full range saw %d used slots, want 1500", len(used))
	}
	set := make([]uint64, (tb.Slots()+63)/64)
	for round := range 50 {
		clear(set)
		want := map[uint32]bool{}
		for range r.IntN(400) {
			s := uint32(r.IntN(tb.Slots()))
			set[s>>6] |= 1 << (s & 63)
			if used[s] {
				want[s] = true
			}
		}
		last, n := int64(-1), 0
		tb.RangeSlots(0, set, func(slot uint32, _ *Flow, _ time.Duration) bool {
			if !want[slot] || int64(slot) <= last {
				t.Fatalf("round %d: slot %d visited (in set and used: %v; previous %d)", round, slot, want[slot], last)
			}
			last = int64(slot)
			n++
			return true
		})
		// A walk stopped by fn goes no further.
		stopAt, after := len(want)/2, 0
		k := 0
		tb.RangeSlots(0, set, func(uint32, *Flow, time.Duration) bool {
			k++
			if k > stopAt+1 {
				after++
			}
			return k <= stopAt
		})
		if after != 0 || len(want) > 0 && k != stopAt+1 {
			t.Fatalf("round %d: stopped after %d of %d slots, %d seen past the stop", round, k, len(want), after)
		}
		if n != len(want) {
			t.Fatalf("round %d: %d slots visited, want %d", round, n, len(want))
		}
		for range 20 {
			g := uint32(r.IntN(tb.Slots()))
			end := g + uint32(r.IntN(300))
			naive := end
			for s := g; s < end && int(s>>6) < len(set); s++ {
				if set[s>>6]&(1<<(s&63)) != 0 {
					naive = s
					break
				}
			}
			if got := nextSet(set, g, end); got != naive && (got < end || naive < end) {
				t.Fatalf("nextSet(%d, %d) = %d, want %d", g, end, got, naive)
			}
		}
	}
}
