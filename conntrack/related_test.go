package conntrack

import (
	"testing"
	"time"
)

// A Related lookup (an ICMP error quoting the flow) finds the flow and
// changes neither its state nor its timer, in every state a flow can be
// in when an error about it arrives: the flow expires on the timeout of
// its last real packet, and after that a Related lookup is a miss like any
// packet from outside. Race builds run this on the locked path, others on
// the lock-free one.
func TestRelatedLookupChangesNothing(t *testing.T) {
	cases := []struct {
		proto uint8
		flags uint8
		want  State
	}{
		{ProtoUDP, 0, StateUDPUnreplied},
		{ProtoICMP, 0, StateICMPUnreplied},
		{ProtoTCP, FlagSYN, StateSynSent},
		{ProtoTCP, FlagACK, StatePickedUp},
		{ProtoTCP, FlagSYN | FlagACK, StateSynRecv},
	}
	for i, c := range cases {
		t.Run(c.want.String(), func(t *testing.T) {
			tb := mustNew(t, Config{MaxFlows: 64})
			f := flowN(uint32(i), c.proto)
			t0 := int64(1000) * sec
			if err := tb.Insert(&f, c.flags, t0); err != nil {
				t.Fatal(err)
			}
			timeout := tb.Timeout(c.want)
			var b [3]Lookup
			for k := int64(1); k <= 4; k++ {
				now := t0 + k*int64(timeout)/5
				for j := range b {
					// Any flags the quoted segment had: ignored.
					b[j] = Lookup{Key: f.Reply(), Dir: Reply, Flags: []uint8{0, FlagRST, FlagSYN | FlagACK}[j], Related: true,
						HasSeq: j == 1, Seq: 1, Ack: 1}
				}
				if n := tb.TrackBatch(b[:], now); n != len(b) {
					t.Fatalf("%d of %d related lookups hit", n, len(b))
				}
				for j := range b {
					if b[j].Flow.State != c.want || b[j].Flow.Orig != f.Orig {
						t.Fatalf("related lookup %d: flow %+v, want state %v", j, b[j].Flow, c.want)
					}
				}
				var left time.Duration
				tb.Range(now, func(g *Flow, rem time.Duration) {
					if g.State != c.want {
						t.Fatalf("flow in %v after related lookups, want %v", g.State, c.want)
					}
					left = rem
				})
				if max := timeout - time.Duration(now-t0) + time.Duration(refreshSlack) + time.Second; left > max {
					t.Fatalf("%v left after related lookups at +%v, want at most %v: the timer moved", left, time.Duration(now-t0), max)
				}
			}
			end := t0 + int64(timeout) + int64(refreshSlack) + sec
			b[0] = Lookup{Key: f.Reply(), Dir: Reply, Related: true}
			if tb.TrackBatch(b[:1], end) != 0 {
				t.Fatal("a related lookup found an expired flow")
			}
			if n := tb.Expire(end, 64, nil); n != 1 {
				t.Fatalf("%d flows expired at the timeout of the first packet, want 1", n)
			}
		})
	}
}
