package flowsync

import (
	"math/bits"
	"testing"
	"time"
)

// The sweep's shares cover the table: each scan marks its share (rounded
// up) right after the last one's, wrapping at the end, so that
// sweepEvery's worth of scans marks every slot.
func TestSweepCoversTheTable(t *testing.T) {
	for _, slots := range []int{1, 63, 64, 65, 127, 1000, 4242, 1 << 16} {
		for _, iv := range []time.Duration{time.Millisecond, 10 * time.Millisecond, DefaultInterval, time.Second, 10 * time.Second} {
			s := &Sync{cfg: Config{Interval: iv}}
			words := (slots + 63) / 64
			share := slots
			if iv < sweepEvery {
				share = int((int64(slots)*int64(iv) + int64(sweepEvery) - 1) / int64(sweepEvery))
			}
			seen := make([]int, slots)
			scans := (slots + share - 1) / share
			for range scans {
				s.visit = make([]uint64, words)
				s.markSweep(slots)
				n := 0
				for w, v := range s.visit {
					n += bits.OnesCount64(v)
					for v != 0 {
						b := bits.TrailingZeros64(v)
						if w*64+b >= slots {
							t.Fatalf("%d slots, interval %v: slot %d marked, past the table", slots, iv, w*64+b)
						}
						seen[w*64+b]++
						v &= v - 1
					}
				}
				if n != min(share, slots) {
					t.Fatalf("%d slots, interval %v: a scan marked %d slots, want its share %d", slots, iv, n, share)
				}
			}
			for i, c := range seen {
				if c == 0 {
					t.Fatalf("%d slots, interval %v: slot %d not marked in %d scans", slots, iv, i, scans)
				}
			}
		}
	}
}
