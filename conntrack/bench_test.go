package conntrack

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchTable is a table of about n flows shared by the benchmarks of one
// size: flows with ids [oldest, next) are in it.
type benchTable struct {
	tb           *Table
	oldest, next uint32
}

// insertBatch is how many flows BenchmarkInsert adds before it deletes the
// same number of the oldest (with the timer stopped), so the table keeps
// between n-insertBatch and n flows.
const insertBatch = 4096

var (
	benchMu     sync.Mutex
	benchTables = map[int]*benchTable{}
)

func getBenchTable(b *testing.B, n int) *benchTable {
	benchMu.Lock()
	defer benchMu.Unlock()
	if bt := benchTables[n]; bt != nil {
		return bt
	}
	tb, err := New(Config{MaxFlows: n})
	if err != nil {
		b.Fatal(err)
	}
	bt := &benchTable{tb: tb}
	for bt.next = 0; bt.next < uint32(n-insertBatch); bt.next++ {
		f := flowN(bt.next, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, 0); err != nil {
			b.Fatal(err)
		}
	}
	benchTables[n] = bt
	return bt
}

// cpuClock measures the benchmark goroutine's thread CPU time, so that a
// figure stays meaningful on a machine shared with other jobs (wall-clock
// ns/op counts the time the thread waited for a core).
type cpuClock struct {
	start, paused int64
}

// threadCPU is the thread's CPU clock in nanoseconds. Not getrusage: on a
// kernel with tick-based accounting its thread times move in whole ticks
// (4 ms at HZ=250), a step of 4 ns/op over a million lookups.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

func startCPU() *cpuClock {
	runtime.LockOSThread()
	return &cpuClock{start: threadCPU()}
}

func (c *cpuClock) pause()  { c.paused -= threadCPU() }
func (c *cpuClock) resume() { c.paused += threadCPU() }

// report adds cpu-ns/op: thread CPU time per operation.
func (c *cpuClock) report(b *testing.B) {
	d := threadCPU() - c.start - c.paused
	runtime.UnlockOSThread()
	b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
}

func dropBenchTables() {
	benchMu.Lock()
	benchTables = map[int]*benchTable{}
	benchMu.Unlock()
	runtime.GC()
}

var benchSizes = []struct {
	name string
	n    int
}{{"1M", 1 << 20}, {"10M", 10_000_000}}

// pick maps i to a pseudo-random id in [lo, hi) without a division.
func pick(i int, lo, hi uint32) uint32 {
	x := uint32(i) * 0x9E3779B1
	return lo + uint32((uint64(x)*uint64(hi-lo))>>32)
}

// benchKey is the key lookup i of the benchmarks reads: flow pick(i, lo, hi),
// its original tuple for even i and its reply tuple for odd i (unless
// origOnly).
func benchKey(i int, lo, hi uint32, origOnly bool) Tuple {
	f := flowN(pick(i, lo, hi), ProtoTCP)
	if i&1 == 1 && !origOnly {
		return f.Reply()
	}
	return f.Orig
}

// maxBenchKeys bounds the keys benchKeys builds (160 MB); longer runs reuse
// them from the start, by then in random order over the flows anyway.
const maxBenchKeys = 1 << 22

// benchKeys returns the keys lookups 0..n-1 read (benchKey), built before
// the timer starts. Building a key from a flow number (flowN, Reply) costs
// about 30 ns, as much as a batched lookup: it is the benchmark's work, not
// the table's, and a data plane has the key from parsing anyway. Reading
// the slice in order costs ~1 ns per key (the hardware prefetcher streams
// it; baseline_dram/hash measures it together with the hash).
func benchKeys(n int, lo, hi uint32, origOnly bool) []Tuple {
	keys := make([]Tuple, min(n, maxBenchKeys))
	for i := range keys {
		keys[i] = benchKey(i, lo, hi, origOnly)
	}
	return keys
}

// lookupBatch is the batch size the lookup benchmarks use.
const lookupBatch = 32

// Lookup benchmark modes.
const (
	modeUnbatched = iota // Track alone
	modeBatch            // TrackBatch over lookupBatch keys
	modeRefresh          // Track alone, every hit moves the timer (locked path)
	modeBatchSeq         // TrackBatch with sequence numbers, as the gateway calls it
)

// BenchmarkLookup: a hit on a random flow, alternating original and reply
// direction; the keys are built before the timer starts (benchKeys), for the
// table and the Go map baseline alike.
//
//	flows=N_batch      TrackBatch over a batch of 32 keys
//	flows=N_batch_seq  the same with each segment's sequence numbers, as the
//	                   gateway passes them: the pod's ACKs (every other
//	                   lookup) read and move the flow's sequence state, a
//	                   second line, prefetched with the entry
//	flows=N_unbatched  Track alone
//	flows=N_refresh    Track alone on original tuples, with the clock moving
//	                   1 ms per lookup so every hit must write the timer
//	                   (the locked path)
//
// Except in _refresh, now is the flows' insertion time: the steady state of
// a busy flow whose previous packet was less than refreshSlack ago, where a
// hit changes nothing and takes no lock.
func BenchmarkLookup(b *testing.B) {
	modes := []struct {
		suffix string
		mode   int
	}{{"_batch", modeBatch}, {"_batch_seq", modeBatchSeq}, {"_unbatched", modeUnbatched}, {"_refresh", modeRefresh}}
	for _, sz := range benchSizes {
		for _, md := range modes {
			b.Run("flows="+sz.name+md.suffix, func(b *testing.B) {
				benchLookup(b, sz.n, md.mode)
			})
		}
	}
	// The floors over buffers the size of the 1M- and the 10M-flow table:
	// the larger one also pays the misses of the address translation.
	b.Run("baseline_dram", func(b *testing.B) { benchDRAM(b, 1<<20) })
	b.Run("baseline_dram_10M", func(b *testing.B) { benchDRAM(b, 10_000_000) })
	// The same keys in a Go map (both tuples → index into a []Flow).
	b.Run("baseline_gomap", func(b *testing.B) {
		const n = 1 << 20
		flows := make([]Flow, n)
		m := make(map[Tuple]int32, 2*n)
		for i := range flows {
			flows[i] = flowN(uint32(i), ProtoTCP)
			m[flows[i].Orig] = int32(i)
			m[flows[i].Reply()] = int32(i)
		}
		keys := benchKeys(b.N, 0, n, false)
		var out Flow
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i++ {
			j, ok := m[keys[i%len(keys)]]
			if !ok {
				b.Fatal("miss")
			}
			out = flows[j]
			out.State = StateEstablished
		}
		c.report(b)
		_ = out
	})
}

func benchLookup(b *testing.B, n, mode int) {
	bt := getBenchTable(b, n)
	tb := bt.tb
	lo, hi := bt.oldest, bt.next
	keys := benchKeys(b.N, lo, hi, mode == modeRefresh)
	var out Flow
	var batch [lookupBatch]Lookup
	now := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	c := startCPU()
	for i := 0; i < b.N; i += lookupBatch {
		m := min(lookupBatch, b.N-i)
		if mode == modeBatch || mode == modeBatchSeq {
			for j := 0; j < m; j++ {
				l := &batch[j]
				l.Key = keys[(i+j)%len(keys)]
				l.Dir, l.Flags = Dir((i+j)&1), FlagACK
				if mode == modeBatchSeq {
					// The ACK grows with i: a flow's next ACK is usually
					// a new highest one, which the lookup stores.
					l.Seq, l.Ack, l.Len, l.HasSeq = uint32(i), uint32(i+j), 0, true
				}
			}
			if tb.TrackBatch(batch[:m], now) != m {
				b.Fatal("miss")
			}
			continue
		}
		for j := 0; j < m; j++ {
			k := &keys[(i+j)%len(keys)]
			dir := Dir((i + j) & 1)
			if mode == modeRefresh {
				// Packets from the pod: an expired flow is revived, so
				// the clock may run past the flows' timeouts.
				now = int64(i+j) * int64(time.Millisecond)
				dir = Original // its keys are all original tuples
			}
			if !tb.Track(dir, k, FlagACK, now, &out) {
				b.Fatal("miss")
			}
		}
	}
	c.report(b)
	b.ReportMetric(float64(tb.Bytes())/float64(tb.Cap()), "bytes/flow")
}

// BenchmarkLookupParallel: lookups from all Ps at once, to show that the
// shard locks do not serialise workers.
func BenchmarkLookupParallel(b *testing.B) {
	bt := getBenchTable(b, 1<<20)
	tb := bt.tb
	lo, hi := bt.oldest, bt.next
	b.ReportAllocs()
	var seed sync.Mutex
	s := 0
	b.RunParallel(func(pb *testing.PB) {
		seed.Lock()
		i := s * 1_000_003
		s++
		seed.Unlock()
		var out Flow
		for pb.Next() {
			i++
			f := flowN(pick(i, lo, hi), ProtoTCP)
			if !tb.Track(Original, &f.Orig, FlagACK, 1, &out) {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkInsert: adding a new flow to a table holding about n flows. Every
// insertBatch inserts, with the timer stopped, the benchmark deletes the
// insertBatch oldest flows if the next chunk would not fit, and builds the
// next chunk's flows (flowN costs about 30 ns: the benchmark's work, not
// the table's).
//
//	flows=N        Insert, one flow at a time
func BenchmarkInsert(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("flows="+sz.name, func(b *testing.B) { benchInsert(b, sz.n) })
	}
	b.Run("baseline_gomap", func(b *testing.B) {
		const n = 1 << 20
		m := make(map[Tuple]int32, 2*n)
		var next, oldest uint32
		for ; next < n-insertBatch; next++ {
			f := flowN(next, ProtoTCP)
			m[f.Orig] = int32(next)
			m[f.Reply()] = int32(next)
		}
		flows := make([]insertion, insertBatch)
		del := func(g *Flow) {
			delete(m, g.Orig)
			delete(m, g.Reply())
		}
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i++ {
			j := i % insertBatch
			if j == 0 {
				c.pause()
				b.StopTimer()
				refillChunk(flows, next, &oldest, n, del)
				b.StartTimer()
				c.resume()
			}
			f := &flows[j].Flow
			if _, ok := m[f.Orig]; ok {
				b.Fatal("exists")
			}
			m[f.Orig] = int32(next)
			m[f.Reply()] = int32(next)
			next++
		}
		c.report(b)
	})
}

// insertion is one flow BenchmarkInsert adds and its first packet's flags.
type insertion struct {
	Flow  Flow
	Flags uint8
}

// benchInsert is one BenchmarkInsert case.
func benchInsert(b *testing.B, n int) {
	bt := getBenchTable(b, n)
	tb := bt.tb
	var out Flow
	flows := make([]insertion, insertBatch)
	del := func(g *Flow) {
		if !tb.Delete(&g.Orig, &out) {
			b.Fatal("delete")
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	c := startCPU()
	for i := 0; i < b.N; {
		j := i % insertBatch
		if j == 0 {
			c.pause()
			b.StopTimer()
			refillChunk(flows, bt.next, &bt.oldest, n, del)
			b.StartTimer()
			c.resume()
		}
		if err := tb.Insert(&flows[j].Flow, flows[j].Flags, 0); err != nil {
			b.Fatal(err)
		}
		i++
		bt.next++
	}
	c.report(b)
	b.ReportMetric(float64(tb.Bytes())/float64(tb.Cap()), "bytes/flow")
}

// refillChunk prepares BenchmarkInsert's next chunk (the caller stops the
// timer): if the chunk would not fit among the n flows the table or map may
// hold, it deletes the len(fl) oldest flows through del; then it fills fl
// with flows next, next+1, ...
func refillChunk(fl []insertion, next uint32, oldest *uint32, n int, del func(*Flow)) {
	if next-*oldest+uint32(len(fl)) > uint32(n) {
		for range fl {
			g := flowN(*oldest, ProtoTCP)
			*oldest++
			del(&g)
		}
	}
	for k := range fl {
		fl[k] = insertion{Flow: flowN(next+uint32(k), ProtoTCP), Flags: FlagSYN}
	}
}

// BenchmarkGC: the time of one full GC cycle with no table, then with a
// table holding 10M flows. The table holds no pointers, so the two match.
func BenchmarkGC(b *testing.B) {
	var empty time.Duration
	b.Run("empty", func(b *testing.B) {
		dropBenchTables()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			runtime.GC()
		}
		empty = time.Since(start) / time.Duration(b.N)
	})
	b.Run("flows=10M", func(b *testing.B) {
		bt := getBenchTable(b, 10_000_000)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			runtime.GC()
		}
		per := time.Since(start) / time.Duration(b.N)
		if empty > 0 {
			b.ReportMetric(float64(per)/float64(empty), "x_empty")
		}
		b.ReportMetric(float64(bt.tb.Len()), "flows")
		runtime.KeepAlive(bt)
	})
}

// BenchmarkExpire: one incremental Expire call (budget 256) on a 1M-flow
// table where nothing is due, i.e. the steady-state cost of the sweeper.
func BenchmarkExpire(b *testing.B) {
	bt := getBenchTable(b, 1<<20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n := bt.tb.Expire(1, 256, nil); n != 0 {
			b.Fatal(fmt.Sprint("expired ", n))
		}
	}
}
