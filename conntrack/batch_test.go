package conntrack

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// TrackBatch gives exactly the answers of Track called once per packet in
// order: hits, misses, expired replies, invalid directions, state changes
// and several packets of one flow in one batch. Two tables hold the same
// flows; one answers batches, the other single calls.
func TestTrackBatchMatchesTrack(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	a := mustNew(t, Config{MaxFlows: 4000, Shards: 8})
	b := mustNew(t, Config{MaxFlows: 4000, Shards: 8})
	var flows []Flow
	for len(flows) < 1500 {
		f := randFlow(r)
		f.Orig.Proto = []uint8{ProtoTCP, ProtoUDP, ProtoICMP}[r.IntN(3)]
		now := int64(r.IntN(100)) * sec
		ea, eb := a.Insert(&f, FlagSYN, now), b.Insert(&f, FlagSYN, now)
		if (ea == nil) != (eb == nil) {
			t.Fatalf("insert: %v vs %v", ea, eb)
		}
		if ea == nil {
			flows = append(flows, f)
		}
	}
	flagSet := []uint8{0, FlagSYN, FlagSYN | FlagACK, FlagACK, FlagFIN | FlagACK, FlagRST, FlagACK, FlagACK}
	batch := make([]Lookup, 0, 3*MaxBatch)
	var out Flow
	hitsSeen, missesSeen := 0, 0
	now := int64(100) * sec
	for round := 0; round < 400; round++ {
		now += int64(r.IntN(40)) * sec // long gaps: some replies find expired flows
		batch = batch[:r.IntN(cap(batch)+1)]
		for i := range batch {
			f := flows[r.IntN(len(flows))]
			if i > 0 && r.IntN(4) == 0 {
				f = flows[0] // the same flow several times per batch
			}
			l := &batch[i]
			*l = Lookup{Key: f.Orig, Dir: Original, Flags: flagSet[r.IntN(len(flagSet))]}
			switch r.IntN(8) {
			case 0, 1, 2:
				l.Key, l.Dir = f.Reply(), Reply
			case 3:
				l.Key.SrcPort ^= 0x4000 // a miss
			case 4:
				l.Dir = Reply // an original tuple asked as a reply: a miss
			case 5:
				l.Dir = Dir(2 + r.IntN(250)) // invalid: a miss
			}
		}
		hits := a.TrackBatch(batch, now)
		n := 0
		for i := range batch {
			l := &batch[i]
			want := b.Track(l.Dir, &l.Key, l.Flags, now, &out)
			if l.Hit != want {
				t.Fatalf("round %d item %d (dir %d): batch hit %v, Track %v", round, i, l.Dir, l.Hit, want)
			}
			if want {
				n++
				if l.Flow != out {
					t.Fatalf("round %d item %d: batch flow %+v, Track %+v", round, i, l.Flow, out)
				}
				hitsSeen++
			} else {
				missesSeen++
			}
		}
		if hits != n {
			t.Fatalf("TrackBatch returned %d, %d hits", hits, n)
		}
	}
	if hitsSeen < 1000 || missesSeen < 1000 {
		t.Fatalf("test too weak: %d hits, %d misses", hitsSeen, missesSeen)
	}
	if a.TrackBatch(nil, now) != 0 {
		t.Fatal("empty batch")
	}
}

// Lock-free lookups racing with writers never return a torn or foreign
// flow. Every flow carries Aux = check(tuple, NAT port, state). One writer
// keeps deleting flows and re-inserting them with a new NAT port; another
// rewrites a flow's state and then, after a long pause inside the lock, its
// Aux, so that a reader which does not validate its copy sees the two
// disagree. (Without -race on amd64 this runs the optimistic path; under
// -race the locked one.)
func TestOptimisticLookupsConsistent(t *testing.T) {
	const nflows = 8
	tb := mustNew(t, Config{MaxFlows: 64, Shards: 2})
	check := func(o *Tuple, nport uint16, st State) uint32 {
		return uint32(tb.h.hash(o))*31 + uint32(nport) + uint32(st)<<24
	}
	mk := func(i uint32, gen uint16) Flow {
		f := flowN(i, ProtoTCP)
		f.NATPort = uint16(i)<<4 | gen&15 // unique per flow, new per gen
		f.NATAddr[13] = byte(gen >> 4)
		f.Aux = check(&f.Orig, f.NATPort, StateSynSent)
		return f
	}
	for i := uint32(0); i < nflows; i++ {
		f := mk(i, 0)
		if err := tb.Insert(&f, FlagSYN, 0); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var bad atomic.Value
	var hits, lookups, rewrites atomic.Int64
	fail := func(s string) { bad.CompareAndSwap(nil, s); stop.Store(true) }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // delete and re-insert
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 77))
		var out Flow
		for gen := uint16(1); !stop.Load(); gen++ {
			f := mk(uint32(r.IntN(nflows)), gen)
			tb.Delete(&f.Orig, &out)
			if err := tb.Insert(&f, FlagSYN, 0); err != nil && err != ErrExists {
				fail("insert: " + err.Error())
			}
			runtime.Gosched()
		}
	}()
	go func() { // slow in-place rewrites of state, then Aux
		defer wg.Done()
		r := rand.New(rand.NewPCG(2, 77))
		for !stop.Load() {
			f := flowN(uint32(r.IntN(nflows)), ProtoTCP)
			h := tb.h.hash(&f.Orig)
			si := uint32(h & tb.shardMask)
			s := &tb.shards[si]
			s.mu.Lock()
			if ref := tb.find(s, h, &f.Orig, Original); ref != 0 {
				_, g, _ := tb.refEntry(ref)
				e := &tb.entries[g]
				st := State(1 + r.IntN(int(StateClose)))
				e.state = uint8(st)
				for i := 0; i < 2000; i++ { // the window a torn read needs
					sinkU64 += uint64(i)
				}
				e.aux = check(&f.Orig, e.nport, st)
				rewrites.Add(1)
			}
			s.mu.Unlock()
			runtime.Gosched()
		}
	}()
	readers := max(2, runtime.GOMAXPROCS(0))
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			var out Flow
			var batch [MaxBatch]Lookup
			for !stop.Load() {
				for j := range batch {
					f := flowN(uint32(r.IntN(nflows)), ProtoTCP)
					batch[j] = Lookup{Key: f.Orig, Dir: Original} // flags 0: no state change
				}
				tb.TrackBatch(batch[:], 0)
				for j := range batch {
					l := &batch[j]
					lookups.Add(1)
					if !l.Hit {
						continue
					}
					hits.Add(1)
					if l.Flow.Orig != l.Key || l.Flow.Aux != check(&l.Flow.Orig, l.Flow.NATPort, l.Flow.State) {
						fail("batch lookup returned a torn or foreign flow")
					}
					// Its reply tuple, asked alone, gives the same flow
					// unless a writer replaced it meanwhile.
					rt := l.Flow.Reply()
					if tb.Track(Reply, &rt, 0, 0, &out) &&
						(out.Orig != l.Key || out.NATPort != rt.DstPort || out.Aux != check(&out.Orig, out.NATPort, out.State)) {
						fail("reply lookup returned a torn or foreign flow")
					}
				}
			}
		}(w)
	}
	// At least 700 ms and 200 slow rewrites (a busy machine starves the
	// writers), at most 5 s.
	start := time.Now()
	nstest.Soon(5*time.Second, func() bool {
		return stop.Load() || time.Since(start) >= 700*time.Millisecond && rewrites.Load() >= 200
	})
	stop.Store(true)
	wg.Wait()
	if s := bad.Load(); s != nil {
		t.Fatal(s)
	}
	if hits.Load() < 1000 || rewrites.Load() < 200 {
		t.Fatalf("test too weak: %d hits of %d lookups, %d rewrites", hits.Load(), lookups.Load(), rewrites.Load())
	}
	t.Logf("%d lookups, %d hits, %d slow rewrites", lookups.Load(), hits.Load(), rewrites.Load())
}

// TrackBatch allocates nothing.
func TestTrackBatchZeroAllocs(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 1024})
	var batch [MaxBatch]Lookup
	for i := range batch {
		f := flowN(uint32(i), ProtoUDP)
		if i%2 == 0 {
			if err := tb.Insert(&f, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		batch[i] = Lookup{Key: f.Orig, Dir: Original}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if tb.TrackBatch(batch[:], 1) != MaxBatch/2 {
			panic("wrong hit count")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per TrackBatch", allocs)
	}
}

// An entry rewritten in a tight loop under its lock while another core
// reads it without the lock: every lookup that returns must see one whole
// version (state, Aux and the NAT address's last byte written together),
// never a mix. The entry is one cache line, copied in 16-byte loads; the NAT
// address and the state are in different ones, so with the line bouncing
// between the cores a mixed copy is likely if the version check were
// missing.
func TestOptimisticLookupTornEntry(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps to race a reader against a writer")
	}
	tb := mustNew(t, Config{MaxFlows: 8, Shards: 1})
	f := flowN(1, ProtoTCP)
	if err := tb.Insert(&f, FlagSYN, 0); err != nil {
		t.Fatal(err)
	}
	s := &tb.shards[0]
	_, g, _ := tb.refEntry(tb.find(s, tb.h.hash(&f.Orig), &f.Orig, Original))
	e := &tb.entries[g]
	s.mu.Lock()
	e.aux = uint32(e.state) * 0x01010101
	e.nat[15] = e.state
	s.mu.Unlock()
	var stop atomic.Bool
	var rewrites atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := int64(0)
		for st := uint8(1); !stop.Load(); st = st%uint8(StateClose) + 1 {
			s.mu.Lock()
			e.state = st
			e.aux = uint32(st) * 0x01010101
			e.nat[15] = st
			e.deadline = tickCeil(int64(365*24*time.Hour)) + uint32(st) // far off: lookups need not write
			s.mu.Unlock()
			n++
		}
		rewrites.Store(n)
	}()
	var out Flow
	torn, hits := 0, 0
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		for j := 0; j < 1000; j++ {
			if tb.Track(Original, &f.Orig, 0, 0, &out) {
				hits++
				if out.Aux != uint32(out.State)*0x01010101 || out.NATAddr[15] != uint8(out.State) {
					torn++
				}
			}
		}
	}
	stop.Store(true)
	<-done
	if torn != 0 {
		t.Fatalf("%d of %d lookups returned a torn entry", torn, hits)
	}
	if hits < 1000 || rewrites.Load() < 1000 {
		t.Fatalf("test too weak: %d hits, %d rewrites", hits, rewrites.Load())
	}
	t.Logf("%d hits, %d rewrites, none torn", hits, rewrites.Load())
}
