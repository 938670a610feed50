package conntrack

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOptimisticReadsAgainstLockedTruth runs the lock-free read path (the
// one production runs on amd64; the race detector build takes the locked
// path instead, so no -race run checks it) against writers that delete and
// re-insert flows all the time, so that entries are freed and reused by
// other keys under the readers' feet. Every answer the unlocked path
// decides on its own is checked against the history the writers recorded
// under the table's locks:
//   - a hit returns a whole flow of the key, never a mix of two entries
//     (each generation of a key has its own NAT address and Aux, derived
//     from the key and the generation), and that generation was in the
//     table at some moment between the read's start and end;
//   - a miss is answered only if the key was absent at some moment of it.
//
// It is bounded by iterations and time, and runs in plain go test.
func TestOptimisticReadsAgainstLockedTruth(t *testing.T) {
	if !optimisticReads {
		t.Skip("this build takes the locked path for every read (race detector, or not amd64)")
	}
	const (
		keys     = 96 // deleted and inserted again all the time
		stable   = 32 // inserted once: a miss on one is always wrong
		writers  = 2
		readers  = 2
		reads    = 150_000 // per reader
		maxSpell = 20 * time.Second
		now      = int64(1)
	)
	tb := mustNew(t, Config{MaxFlows: 4 * (keys + stable), Shards: 4})
	var clock atomic.Int64 // orders writer and reader events
	tick := func() int64 { return clock.Add(1) }

	// life is one generation of a key: it may be visible from insStart to
	// delEnd and is visible from insEnd to delStart (0: never deleted).
	type life struct{ gen, insStart, insEnd, delStart, delEnd int64 }
	hist := make([][]life, keys+stable)    // hist[k] is written by key k's writer only
	var latest [keys + stable]atomic.Int64 // the generation last inserted: a reader's guess for reply tuples
	flowOf := func(k int, gen int64) Flow {
		f := flowN(uint32(k), ProtoUDP)
		binary.BigEndian.PutUint32(f.NATAddr[12:], uint32(gen))
		f.NATPort = uint16(1024 + k)
		f.Aux = uint32(gen)
		return f
	}

	for k := keys; k < keys+stable; k++ {
		f := flowOf(k, 1)
		if err := tb.Insert(&f, 0, now); err != nil {
			t.Fatal(err)
		}
		var out Flow
		rt := f.Reply()
		tb.Track(Reply, &rt, 0, now, &out)
		hist[k] = []life{{gen: 1}}
		latest[k].Store(1)
	}

	stop := make(chan struct{})
	var wwg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wwg.Add(1)
		go func(w int) {
			defer wwg.Done()
			gens := make([]int64, keys)
			var out Flow
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := w + writers*(i%(keys/writers))
				h := hist[k]
				if n := len(h); n > 0 && h[n-1].delEnd == 0 {
					f := flowOf(k, h[n-1].gen)
					h[n-1].delStart = tick()
					if !tb.Delete(&f.Orig, &out) {
						panic(fmt.Sprintf("key %d: its flow was not there to delete", k))
					}
					h[n-1].delEnd = tick()
					continue
				}
				gens[k]++
				f := flowOf(k, gens[k])
				l := life{gen: gens[k], insStart: tick()}
				if err := tb.Insert(&f, 0, now); err != nil {
					panic(fmt.Sprintf("key %d: insert: %v", k, err))
				}
				// A reply makes the flow UDP-replied, a state further
				// packets of either direction leave alone, so that reply
				// lookups take the unlocked path too.
				rt := f.Reply()
				if !tb.Track(Reply, &rt, 0, now, &out) {
					panic(fmt.Sprintf("key %d: its reply tuple was not found", k))
				}
				l.insEnd = tick()
				latest[k].Store(gens[k])
				hist[k] = append(h, l)
			}
		}(w)
	}

	type read struct {
		k      int
		hit    bool
		gen    int64 // a hit's generation; for a miss the one asked for, -1: any
		t0, t1 int64
	}
	results := make([][]read, readers)
	decided := make([]int, readers)
	deadline := time.Now().Add(maxSpell)
	var rwg sync.WaitGroup
	for r := 0; r < readers; r++ {
		rwg.Add(1)
		go func(r int) {
			defer rwg.Done()
			rs := make([]read, 0, reads)
			var out Flow
			for i := 0; i < reads && (i%1024 != 0 || time.Now().Before(deadline)); i++ {
				k := (i*7 + r*13) % (keys + stable)
				f := flowOf(k, 0)
				dir, key, want := Original, f.Orig, int64(-1) // -1: any generation
				if i%3 == 0 {
					// A reply tuple names one generation (its NAT address):
					// ask for the one inserted last, most likely still there.
					want = latest[k].Load()
					f = flowOf(k, want)
					dir, key = Reply, f.Reply()
				}
				hsh := tb.h.hash(&key)
				t0 := tick()
				hit, ok := tb.trackFast(hsh, dir, &key, &seg{}, now, &out)
				t1 := tick()
				if !ok {
					continue
				}
				decided[r]++
				if hit {
					if out.Orig != f.Orig || out.NATPort != f.NATPort || out.NATAddr != flowOf(k, int64(out.Aux)).NATAddr ||
						(want >= 0 && int64(out.Aux) != want) {
						panic(fmt.Sprintf("key %d (%v): torn or foreign flow %+v", k, dir, out))
					}
					rs = append(rs, read{k: k, hit: true, gen: int64(out.Aux), t0: t0, t1: t1})
				} else {
					rs = append(rs, read{k: k, gen: want, t0: t0, t1: t1})
				}
			}
			results[r] = rs
		}(r)
	}
	rwg.Wait()
	close(stop)
	wwg.Wait()

	checked, hits := 0, 0
	for r := range results {
		for _, rd := range results[r] {
			checked++
			h := hist[rd.k]
			if rd.hit {
				hits++
				ok := false
				for _, l := range h {
					if l.gen == rd.gen {
						ok = l.insStart <= rd.t1 && (l.delEnd == 0 || l.delEnd >= rd.t0)
						break
					}
				}
				if !ok {
					t.Fatalf("key %d: hit on generation %d during [%d, %d], which was not in the table then: %+v", rd.k, rd.gen, rd.t0, rd.t1, h)
				}
				continue
			}
			for _, l := range h {
				if (rd.gen < 0 || l.gen == rd.gen) && l.insEnd <= rd.t0 && (l.delStart == 0 || l.delStart >= rd.t1) {
					t.Fatalf("key %d: miss during [%d, %d] while generation %d was in the table throughout", rd.k, rd.t0, rd.t1, l.gen)
				}
			}
		}
	}
	if hits < 1000 || checked-hits < 1000 {
		t.Fatalf("test too weak: %d optimistic answers, %d hits", checked, hits)
	}
	t.Logf("%d optimistic answers checked (%d hits), of %d+%d reads", checked, hits, reads, reads)
}
