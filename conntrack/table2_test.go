package conntrack

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// A full table refuses new flows with ErrFull and keeps every old one.
func TestFullTable(t *testing.T) {
	for _, shards := range []int{1, 8, 0} {
		const n = 50000
		tb := mustNew(t, Config{MaxFlows: n, Shards: shards})
		for i := uint32(0); i < n; i++ {
			f := flowN(i, ProtoTCP)
			if err := tb.Insert(&f, FlagSYN, 0); err != nil {
				t.Fatalf("shards=%d: insert %d of %d: %v", shards, i, n, err)
			}
		}
		if tb.Len() != n || tb.Cap() != n {
			t.Fatalf("Len %d Cap %d, want %d", tb.Len(), tb.Cap(), n)
		}
		for i := uint32(n); i < n+100; i++ {
			f := flowN(i, ProtoTCP)
			if err := tb.Insert(&f, FlagSYN, 0); !errors.Is(err, ErrFull) {
				t.Fatalf("insert into full table: %v", err)
			}
			if tb.ReplyInUse(&f.Orig) {
				t.Fatal("refused flow is visible")
			}
		}
		var out Flow
		for i := uint32(0); i < n; i++ {
			f := flowN(i, ProtoTCP)
			r := f.Reply()
			if !tb.Track(Reply, &r, synack, 1, &out) || out.Aux != f.Aux {
				t.Fatalf("old flow %d lost after ErrFull", i)
			}
		}
		f0 := flowN(0, ProtoTCP)
		if !tb.Delete(&f0.Orig, &out) {
			t.Fatal("delete")
		}
		f := flowN(n+5, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, 0); err != nil {
			t.Fatalf("insert after delete: %v", err)
		}
	}
}

// A flow whose reply tuple is another flow's original tuple (or vice versa)
// is refused: every tuple names at most one flow.
func TestTupleUniqueAcrossDirections(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 8})
	a := flowN(1, ProtoUDP)
	if err := tb.Insert(&a, 0, 0); err != nil {
		t.Fatal(err)
	}
	ar := a.Reply()
	var b Flow
	b.Orig = ar // b's original tuple is a's reply tuple
	b.NATAddr, b.NATPort = addr("203.0.113.9"), 9
	if err := tb.Insert(&b, 0, 0); !errors.Is(err, ErrExists) {
		t.Fatalf("got %v, want ErrExists", err)
	}
	var c Flow
	c.Orig = Tuple{Src: addr("10.9.9.9"), Dst: a.Orig.Dst, SrcPort: 1, DstPort: a.Orig.DstPort, Proto: ProtoUDP}
	c.NATAddr, c.NATPort = a.NATAddr, a.NATPort // same reply tuple as a
	if err := tb.Insert(&c, 0, 0); !errors.Is(err, ErrExists) {
		t.Fatalf("got %v, want ErrExists", err)
	}
	var d Flow
	d.Orig = Tuple{Src: addr("10.0.0.1"), Dst: addr("10.0.0.1"), SrcPort: 5, DstPort: 5, Proto: ProtoUDP}
	d.NATAddr, d.NATPort = d.Orig.Src, 5
	if err := tb.Insert(&d, 0, 0); !errors.Is(err, ErrInvalidFlow) {
		t.Fatalf("got %v, want ErrInvalidFlow", err)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len %d", tb.Len())
	}
}

// randFlow makes flows whose tuples collide often (few addresses, ports)
// so that the index sees long probe chains and many shared shards.
func randFlow(r *rand.Rand) Flow {
	f := flowN(0, ProtoUDP)
	f.Orig.Src[15] = byte(r.IntN(4))
	f.Orig.SrcPort = uint16(r.IntN(64))
	f.Orig.Dst[15] = byte(r.IntN(4))
	f.NATAddr[15] = byte(r.IntN(2))
	f.NATPort = uint16(r.IntN(64))
	f.Aux = r.Uint32()
	return f
}

// The table against a Go map model under random insert/delete/expire.
func TestAgainstModel(t *testing.T) {
	testAgainstModel(t, Config{MaxFlows: 3000, Shards: 4}, false)
}

// The same with per-address limits and a table small enough to fill (one
// shard, so that it holds exactly MaxFlows): the model says which limit
// refuses a flow, and when the table is full, which flows early drop may
// take (never an answered one).
func TestAgainstModelLimitsEarlyDrop(t *testing.T) {
	testAgainstModel(t, Config{MaxFlows: 300, Shards: 1, SourceLimit: 80, NATLimit: 155}, true)
}

func testAgainstModel(t *testing.T, cfg Config, early bool) {
	r := rand.New(rand.NewPCG(1, 2))
	tb := mustNew(t, cfg)
	model := map[Tuple]Flow{} // by original tuple; State as the table should have it
	replies := map[Tuple]Tuple{}
	perSrc, perNAT := map[Addr]int{}, map[Addr]int{}
	forget := func(m Flow) {
		delete(model, m.Orig)
		delete(replies, m.Reply())
		perSrc[m.Orig.Src]--
		perNAT[m.NATAddr]--
	}
	var out Flow
	drops, ownDrops, limited := 0, 0, 0
	for step := 0; step < 200000; step++ {
		f := randFlow(r)
		rt := f.Reply()
		switch op := r.IntN(10); {
		case op < 5:
			err := tb.Insert(&f, 0, 0)
			_, o1 := model[f.Orig]
			_, o2 := replies[f.Orig]
			_, r1 := model[rt]
			_, r2 := replies[rt]
			exists := o1 || o2 || r1 || r2
			if early && !exists && errors.Is(err, ErrFull) && len(model) == cfg.MaxFlows {
				anyDroppable := false
				for _, m := range model {
					anyDroppable = anyDroppable || m.State == StateUDPUnreplied
				}
				var v Flow
				if !tb.EarlyDrop(&f.Orig, 1, &v) {
					if !anyDroppable {
						break // full of answered flows: refused, as it should be
					}
					// The search is bounded; nothing to check but that the
					// table is unchanged (Len below).
					break
				}
				m, ok := model[v.Orig]
				if !ok || m.State != StateUDPUnreplied || v.NATPort != m.NATPort || v.Aux != m.Aux {
					t.Fatalf("step %d: early drop took %+v, model has it %v in state %v", step, v.Orig, ok, m.State)
				}
				forget(m)
				drops++
				err = tb.Insert(&f, 0, 0)
			}
			if early && !exists && (errors.Is(err, ErrSourceLimit) || errors.Is(err, ErrNATLimit)) && r.IntN(2) == 0 {
				// A source or NAT address at its limit gives up one of its
				// own unanswered flows, never another's (half the time:
				// the other half checks the refusal itself).
				srcFull := perSrc[f.Orig.Src] >= cfg.SourceLimit
				natFull := perNAT[f.NATAddr] >= cfg.NATLimit
				var v Flow
				if tb.EarlyDropOwn(&f.Orig, &f.Orig.Src, &f.NATAddr, 1, &v) {
					m, ok := model[v.Orig]
					if !ok || m.State != StateUDPUnreplied || v.NATPort != m.NATPort || v.Aux != m.Aux {
						t.Fatalf("step %d: own early drop took %+v, model has it %v in state %v", step, v.Orig, ok, m.State)
					}
					if srcFull && v.Orig.Src != f.Orig.Src || natFull && v.NATAddr != f.NATAddr {
						t.Fatalf("step %d: own early drop for %v via %v (full: source %v, NAT %v) took %v via %v",
							step, f.Orig.Src, f.NATAddr, srcFull, natFull, v.Orig.Src, v.NATAddr)
					}
					forget(m)
					ownDrops++
					err = tb.Insert(&f, 0, 0)
				}
			}
			switch {
			case exists && errors.Is(err, ErrExists):
			case !exists && cfg.SourceLimit > 0 && perSrc[f.Orig.Src] >= cfg.SourceLimit:
				if !errors.Is(err, ErrSourceLimit) {
					t.Fatalf("step %d: source at its limit %d: insert err %v", step, cfg.SourceLimit, err)
				}
				limited++
			case !exists && cfg.NATLimit > 0 && perNAT[f.NATAddr] >= cfg.NATLimit:
				if !errors.Is(err, ErrNATLimit) {
					t.Fatalf("step %d: NAT address at its limit %d: insert err %v", step, cfg.NATLimit, err)
				}
				limited++
			case !exists && err == nil:
				f.State = StateUDPUnreplied
				model[f.Orig] = f
				replies[rt] = f.Orig
				perSrc[f.Orig.Src]++
				perNAT[f.NATAddr]++
			case !exists && errors.Is(err, ErrFull) && len(model) >= cfg.MaxFlows-cfg.MaxFlows/30:
			default:
				t.Fatalf("step %d: insert err %v, model exists=%v len=%d", step, err, exists, len(model))
			}
		case op < 7:
			m, ok := model[f.Orig]
			got := tb.Delete(&f.Orig, &out)
			if got != ok || ok && (out.Aux != m.Aux || out.NATPort != m.NATPort) {
				t.Fatalf("step %d: delete %v, model %v", step, got, ok)
			}
			if ok {
				forget(m)
			}
		case op < 8:
			o, ok := replies[rt]
			if got := tb.Track(Reply, &rt, 0, 1, &out); got != ok || ok && out.Orig != o {
				t.Fatalf("step %d: reply lookup %v, model %v", step, got, ok)
			}
			if ok {
				m := model[o]
				m.State = StateUDPReplied
				model[o] = m
			}
		default:
			m, ok := model[f.Orig]
			if got := tb.Track(Original, &f.Orig, 0, 1, &out); got != ok || ok && (out.Aux != m.Aux || out.State != m.State) {
				t.Fatalf("step %d: lookup %v (%v), model %v (%v)", step, got, out.State, ok, m.State)
			}
		}
		if tb.Len() != len(model) {
			t.Fatalf("step %d: Len %d, model %d", step, tb.Len(), len(model))
		}
	}
	t.Logf("%d early drops, %d within a source or NAT address, %d refused for a limit", drops, ownDrops, limited)
	if early && (drops == 0 || ownDrops == 0 || limited == 0) {
		t.Fatalf("the run never exercised early drop (%d), its own-flow form (%d) or the limits (%d)", drops, ownDrops, limited)
	}
	// Everything expires, every flow exactly once.
	n := 0
	for tb.Len() > 0 {
		n += tb.Expire(int64(time.Hour), 50, func(f *Flow) {
			if _, ok := model[f.Orig]; !ok {
				t.Fatalf("expired unknown flow %+v", f.Orig)
			}
			delete(model, f.Orig)
		})
	}
	if len(model) != 0 {
		t.Fatalf("%d flows never expired", len(model))
	}
	for i := range tb.shards {
		s := &tb.shards[i]
		if s.keys != 0 || s.used != 0 {
			t.Fatalf("shard keeps %d keys %d entries after emptying", s.keys, s.used)
		}
	}
	// Every flow's count was given back: a fresh source takes its limit.
	for _, c := range []*addrCounts{&tb.srcCounts, &tb.natCounts} {
		for i := range c.cells {
			if v := c.cells[i].Load(); v != 0 {
				t.Fatalf("count cell %d is %d after the table emptied", i, v)
			}
		}
	}
}

// Many workers insert, track, delete and expire at once; run with -race.
func TestConcurrent(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 20000, Shards: 8})
	workers := 2 * runtime.GOMAXPROCS(0)
	if workers < 4 {
		workers = 4
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			var out Flow
			for i := 0; i < 20000; i++ {
				f := flowN(uint32(r.IntN(30000)), ProtoTCP)
				rt := f.Reply()
				now := int64(i) * sec
				switch r.IntN(6) {
				case 0, 1:
					err := tb.Insert(&f, FlagSYN, now)
					if err != nil && !errors.Is(err, ErrExists) && !errors.Is(err, ErrFull) {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
					}
				case 2:
					if tb.Track(Reply, &rt, synack, now, &out) && out.Orig != f.Orig {
						mu.Lock()
						errs = append(errs, "reply lookup returned another flow")
						mu.Unlock()
					}
				case 3:
					if tb.Track(Original, &f.Orig, ack, now, &out) && out.NATPort != f.NATPort {
						mu.Lock()
						errs = append(errs, "lookup returned another flow")
						mu.Unlock()
					}
				case 4:
					tb.Delete(&f.Orig, &out)
				case 5:
					tb.Expire(now, 4, nil)
					tb.ReplyInUse(&rt)
				}
			}
		}(w)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %s", len(errs), errs[0])
	}
	// Consistency: every flow in the table is reachable by both tuples.
	var buf bytes.Buffer
	n, err := tb.Export(&buf, 0)
	if err != nil || n != tb.Len() {
		t.Fatalf("export %d flows (err %v), Len %d", n, err, tb.Len())
	}
	b := buf.Bytes()[4:]
	var out Flow
	for len(b) > 0 {
		f, _, k, err := DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		b = b[k:]
		rt := f.Reply()
		if !tb.ReplyInUse(&rt) || !tb.ReplyInUse(&f.Orig) || !tb.Track(Original, &f.Orig, 0, 0, &out) {
			t.Fatalf("flow %+v not reachable by both tuples", f.Orig)
		}
	}
	total := 0
	for i := range tb.shards {
		s := &tb.shards[i]
		total += int(s.used)
	}
	if total != tb.Len() {
		t.Fatalf("shards hold %d, Len %d", total, tb.Len())
	}
}

// The table's memory must be invisible to the garbage collector: building a
// table of 1M flows may not grow the heap the GC has to scan.
func TestTableIsNotScannedByGC(t *testing.T) {
	scan := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			t.Fatal("runtime lacks /gc/scan/heap:bytes")
		}
		return s[0].Value.Uint64()
	}
	before := scan()
	tb := mustNew(t, Config{MaxFlows: 1 << 20})
	for i := uint32(0); i < 1<<20; i++ {
		f := flowN(i, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, 0); err != nil {
			t.Fatal(err)
		}
	}
	after := scan()
	grow := int64(after) - int64(before)
	t.Logf("table %d MiB; scannable heap grew by %d bytes", tb.Bytes()>>20, grow)
	if grow > 1<<20 {
		t.Fatalf("scannable heap grew by %d bytes for a %d-byte table: the table holds pointers", grow, tb.Bytes())
	}
	runtime.KeepAlive(tb)
}

// The data-plane calls allocate nothing.
func TestZeroAllocs(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 1024})
	f := flowN(1, ProtoTCP)
	rt := f.Reply()
	var out Flow
	i := uint32(0)
	allocs := testing.AllocsPerRun(1000, func() {
		g := flowN(i, ProtoTCP)
		i++
		if err := tb.Insert(&g, FlagSYN, 0); err != nil {
			panic(err)
		}
		tb.Track(Original, &g.Orig, 0, 1, &out)
		gr := g.Reply()
		tb.Track(Reply, &gr, synack, 1, &out)
		tb.ReplyInUse(&rt)
		tb.Delete(&g.Orig, &out)
		tb.Expire(1, 4, nil)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet-path round", allocs)
	}
	_ = f
}

// The table holds 10 million flows in at most 96 bytes each, and refuses
// the next one. Skipped with -short and under -race (where it takes minutes).
func TestHolds10MFlows(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("10M-flow fill: skipped with -short and under -race")
	}
	const n = 10_000_000
	tb := mustNew(t, Config{MaxFlows: n})
	defer tb.Close()
	if per := float64(tb.Bytes()) / n; per > 96 {
		t.Fatalf("%.1f bytes per flow, want ≤ 96", per)
	}
	start := time.Now()
	for i := uint32(0); i < n; i++ {
		f := flowN(i, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, 0); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	t.Logf("filled %d flows in %v, %.1f bytes/flow", tb.Len(), time.Since(start), float64(tb.Bytes())/n)
	f := flowN(n, ProtoTCP)
	if err := tb.Insert(&f, FlagSYN, 0); !errors.Is(err, ErrFull) {
		t.Fatalf("insert beyond 10M: %v", err)
	}
	var out Flow
	for _, i := range []uint32{0, 1, n / 2, n - 1} {
		g := flowN(i, ProtoTCP)
		r := g.Reply()
		if !tb.Track(Reply, &r, synack, 1, &out) || out.Aux != g.Aux {
			t.Fatalf("flow %d missing", i)
		}
	}
}

// TestPrefetchIsAHint: Prefetch reads nothing the caller sees and changes
// nothing, for present and absent keys alike, allocates nothing, and is
// safe on a closed table.
func TestPrefetchIsAHint(t *testing.T) {
	tb, err := New(Config{MaxFlows: 1024})
	if err != nil {
		t.Fatal(err)
	}
	f := flowN(1, ProtoTCP)
	if err := tb.Insert(&f, FlagSYN, 0); err != nil {
		t.Fatal(err)
	}
	r, absent := f.Reply(), flowN(2, ProtoTCP).Orig
	if n := testing.AllocsPerRun(100, func() {
		tb.Prefetch(&f.Orig)
		tb.Prefetch(&r)
		tb.Prefetch(&absent)
	}); n != 0 {
		t.Fatalf("Prefetch allocates %v times", n)
	}
	var out Flow
	if tb.Len() != 1 || !tb.ReplyInUse(&r) || tb.ReplyInUse(&absent) || !tb.Track(Original, &f.Orig, FlagACK, 1, &out) {
		t.Fatal("Prefetch changed the table")
	}
	tb.Close()
	tb.Prefetch(&f.Orig)
}

// TestDeleteBinding: the flow goes only if it is still bound to the given
// NAT address and port; otherwise it stays whole (both keys).
func TestDeleteBinding(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 1024})
	f := flowN(7, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); err != nil {
		t.Fatal(err)
	}
	r := f.Reply()
	otherAddr := f.NATAddr
	otherAddr[15]++
	var out Flow
	for _, c := range []struct {
		addr Addr
		port uint16
	}{{f.NATAddr, f.NATPort + 1}, {otherAddr, f.NATPort}} {
		if tb.DeleteBinding(&f.Orig, c.addr, c.port, &out) {
			t.Fatalf("deleted with binding %v:%d, the flow's is %v:%d", c.addr, c.port, f.NATAddr, f.NATPort)
		}
		if tb.Len() != 1 || !tb.ReplyInUse(&r) || !tb.Track(Original, &f.Orig, 0, 1, &out) {
			t.Fatal("a refused DeleteBinding changed the table")
		}
	}
	if !tb.DeleteBinding(&f.Orig, f.NATAddr, f.NATPort, &out) {
		t.Fatal("DeleteBinding with the flow's own binding refused")
	}
	if out.Orig != f.Orig || out.NATAddr != f.NATAddr || out.NATPort != f.NATPort {
		t.Fatalf("deleted %+v, want %+v", out, f)
	}
	if tb.Len() != 0 || tb.ReplyInUse(&r) || tb.ReplyInUse(&f.Orig) {
		t.Fatal("the flow or one of its keys is still there")
	}
	if tb.DeleteBinding(&f.Orig, f.NATAddr, f.NATPort, &out) {
		t.Fatal("deleted a flow twice")
	}
}
