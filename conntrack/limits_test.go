package conntrack

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// podFlow is flow i of pod p (10.1.0.p), NATed to egress IP n.
func podFlow(p byte, i uint32, n byte, proto uint8) Flow {
	f := flowN(i, proto)
	f.Orig.Src = addr("10.1.0.0")
	f.Orig.Src[15] = p
	f.Orig.SrcPort = uint16(1024 + i)
	f.NATAddr = addr("198.51.100.0")
	f.NATAddr[15] = n
	f.NATPort = uint16(1024 + i)
	f.Orig.Dst[14], f.Orig.Dst[15] = p, n // pods and IPs never share a reply tuple
	return f
}

// One pod or one egress IP stops at its limit, with its own error, and the
// others keep opening flows; every way a flow leaves gives its place back.
func TestSourceAndNATLimits(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 4096, SourceLimit: 10, NATLimit: 25})
	a, b := podFlow(1, 0, 1, ProtoUDP), podFlow(2, 0, 1, ProtoUDP)
	for i := uint32(0); i < 10; i++ {
		f := podFlow(1, i, 1, ProtoUDP)
		if err := tb.Insert(&f, 0, 0); err != nil {
			t.Fatalf("pod 1 flow %d: %v", i, err)
		}
	}
	f := podFlow(1, 10, 1, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("pod 1 over its limit: %v, want ErrSourceLimit", err)
	}
	if err := tb.Admit(&a.Orig.Src, &a.NATAddr); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("Admit for pod 1: %v", err)
	}
	if err := tb.Admit(&b.Orig.Src, &b.NATAddr); err != nil {
		t.Fatalf("Admit for pod 2: %v", err)
	}
	// Pods 2 and 3 fill egress IP 1 to 25; egress IP 2 is not affected.
	for i := uint32(0); i < 15; i++ {
		f := podFlow(2+byte(i%2), i, 1, ProtoUDP)
		if err := tb.Insert(&f, 0, 0); err != nil {
			t.Fatalf("pod %d flow %d: %v", 2+i%2, i, err)
		}
	}
	f = podFlow(4, 0, 1, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); !errors.Is(err, ErrNATLimit) {
		t.Fatalf("egress IP over its limit: %v, want ErrNATLimit", err)
	}
	f = podFlow(4, 0, 2, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); err != nil {
		t.Fatalf("another egress IP: %v", err)
	}
	if tb.Len() != 26 {
		t.Fatalf("Len %d, want 26: a refused flow was kept", tb.Len())
	}
	// Delete gives a place back.
	var out Flow
	d := podFlow(1, 3, 1, ProtoUDP)
	if !tb.Delete(&d.Orig, &out) {
		t.Fatal("delete")
	}
	f = podFlow(1, 20, 2, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); err != nil {
		t.Fatalf("pod 1 after one of its flows ended: %v", err)
	}
	// Export, expire everything, import: imported flows are counted (pod 1
	// is at its limit again) but none is refused for a limit.
	var buf bytes.Buffer
	if _, err := tb.Export(&buf, 0); err != nil {
		t.Fatal(err)
	}
	for tb.Len() > 0 {
		tb.Expire(int64(time.Hour), 100, nil)
	}
	if err := tb.Admit(&a.Orig.Src, &a.NATAddr); err != nil {
		t.Fatalf("Admit after every flow expired: %v", err)
	}
	small := mustNew(t, Config{MaxFlows: 4096, SourceLimit: 5, NATLimit: 25})
	if n, err := small.Import(bytes.NewReader(buf.Bytes()), 0); err != nil || n != 26 {
		t.Fatalf("import under smaller limits: %d flows, %v; want all 26", n, err)
	}
	f = podFlow(1, 30, 2, ProtoUDP)
	if err := small.Insert(&f, 0, 0); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("pod 1 after import: %v, want ErrSourceLimit", err)
	}
}

func TestLimitsConfig(t *testing.T) {
	for _, c := range []Config{
		{MaxFlows: 10, SourceLimit: -1},
		{MaxFlows: 10, SourceLimit: 11},
		{MaxFlows: 10, NATLimit: -1},
		{MaxFlows: 10, NATLimit: 11},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// A full table gives up an unanswered or closing flow for a new one, the
// one nearest its deadline, and never an answered one.
func TestEarlyDrop(t *testing.T) {
	const n = 64
	tb := mustNew(t, Config{MaxFlows: n, Shards: 1})
	var out Flow
	for i := uint32(0); i < n; i++ {
		f := podFlow(byte(i%4), i, 1, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, int64(i)*int64(time.Second)); err != nil {
			t.Fatal(err)
		}
		r := f.Reply()
		switch i % 4 {
		case 0, 1: // established: answered
			tb.Track(Reply, &r, synack, 0, &out)
			tb.Track(Original, &f.Orig, FlagACK, 0, &out)
		case 2: // half closed: still carries data
			tb.Track(Reply, &r, synack, 0, &out)
			tb.Track(Original, &f.Orig, FlagACK, 0, &out)
			tb.Track(Reply, &r, FlagFIN|FlagACK, 0, &out)
		}
		// 3: SYN_SENT, never answered
	}
	now := int64(n) * int64(time.Second)
	nf := podFlow(9, 100, 1, ProtoTCP)
	if err := tb.Insert(&nf, FlagSYN, now); !errors.Is(err, ErrFull) {
		t.Fatalf("insert into a full table: %v", err)
	}
	var v Flow
	if !tb.EarlyDrop(&nf.Orig, now, &v) {
		t.Fatal("no early drop with 16 SYN_SENT flows in the table")
	}
	if v.State != StateSynSent || v.Orig != podFlow(3, 3, 1, ProtoTCP).Orig {
		t.Fatalf("early drop took %v flow %+v, want the oldest SYN_SENT one (pod 3 flow 3)", v.State, v.Orig)
	}
	if err := tb.Insert(&nf, FlagSYN, now); err != nil {
		t.Fatalf("insert after early drop: %v", err)
	}
	// Take the remaining SYN_SENT flows, then nothing more goes.
	for i := 0; i < 15; i++ {
		if !tb.EarlyDrop(&nf.Orig, now, &v) || v.State != StateSynSent {
			t.Fatalf("early drop %d: %v", i, v.State)
		}
	}
	if !tb.EarlyDrop(&nf.Orig, now, &v) || v.Orig != nf.Orig {
		t.Fatalf("the new SYN_SENT flow is the last one early drop may take, got %+v", v.Orig)
	}
	before := tb.Len()
	if tb.EarlyDrop(&nf.Orig, now, &v) {
		t.Fatalf("early drop took a %v flow", v.State)
	}
	if tb.Len() != before || before != n-16 {
		t.Fatalf("Len %d, want %d", tb.Len(), n-16)
	}
}

// A table full of picked-up flows nobody answered gives them up for a new
// flow, as it gives up SYN_SENT ones; once the server answers, a picked-up
// flow is established and kept.
func TestEarlyDropPickedUp(t *testing.T) {
	const n = 16
	tb := mustNew(t, Config{MaxFlows: n, Shards: 1})
	var out Flow
	for i := uint32(0); i < n; i++ {
		f := podFlow(byte(i%4), i, 1, ProtoTCP)
		if err := tb.Insert(&f, FlagACK, int64(i)*int64(time.Second)); err != nil {
			t.Fatal(err)
		}
		if f.State != StatePickedUp {
			t.Fatalf("a flow opened by an ACK is %v, want PICKED_UP", f.State)
		}
		if i%2 == 0 { // the server answers half of them
			r := f.Reply()
			tb.Track(Reply, &r, FlagACK, 0, &out)
		}
	}
	now := int64(n) * int64(time.Second)
	nf := podFlow(9, 100, 1, ProtoTCP)
	if err := tb.Insert(&nf, FlagSYN, now); !errors.Is(err, ErrFull) {
		t.Fatalf("insert into a full table: %v", err)
	}
	for i := 0; i < n/2; i++ {
		var v Flow
		if !tb.EarlyDrop(&nf.Orig, now, &v) || v.State != StatePickedUp {
			t.Fatalf("early drop %d: %v %v, want an unanswered PICKED_UP flow", i, v.State, v.Orig)
		}
	}
	var v Flow
	if tb.EarlyDrop(&nf.Orig, now, &v) {
		t.Fatalf("early drop took %v flow %+v; the answered picked-up flows are established", v.State, v.Orig)
	}
}

// A pod at its limit gives up its own oldest unanswered flow for a new one:
// never another pod's (older, and just as unanswered), never one of its
// answered ones; once only answered flows are left, it is refused. An
// egress IP at its limit does the same among its own flows. The search
// allocates nothing.
func TestEarlyDropOwn(t *testing.T) {
	const limit = 16
	tb := mustNew(t, Config{MaxFlows: 4096, SourceLimit: limit, NATLimit: 3 * limit})
	var out Flow
	sec := int64(time.Second)
	// Pod 2's unanswered flows are the oldest in the table.
	for i := uint32(0); i < 8; i++ {
		f := podFlow(2, i, 1, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, int64(i)*sec); err != nil {
			t.Fatal(err)
		}
	}
	// Pod 1: even flows established, odd ones SYN_SENT.
	for i := uint32(0); i < limit; i++ {
		f := podFlow(1, i, 1, ProtoTCP)
		if err := tb.Insert(&f, FlagSYN, int64(100+i)*sec); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			r := f.Reply()
			tb.Track(Reply, &r, synack, int64(100+i)*sec, &out)
			tb.Track(Original, &f.Orig, FlagACK, int64(100+i)*sec, &out)
		}
	}
	now := 200 * sec
	nf := podFlow(1, 100, 1, ProtoTCP)
	if err := tb.Admit(&nf.Orig.Src, &nf.NATAddr); !errors.Is(err, ErrSourceLimit) {
		t.Fatalf("pod 1 at its limit: Admit %v", err)
	}
	for i := uint32(1); i < limit; i += 2 {
		var v Flow
		if !tb.EarlyDropOwn(&nf.Orig, &nf.Orig.Src, &nf.NATAddr, now, &v) {
			t.Fatalf("no own early drop with pod 1's SYN_SENT flow %d in the table", i)
		}
		if want := podFlow(1, i, 1, ProtoTCP); v.Orig != want.Orig || v.State != StateSynSent {
			t.Fatalf("own early drop took %v flow %+v, want pod 1's oldest SYN_SENT one (flow %d)", v.State, v.Orig, i)
		}
		if err := tb.Admit(&nf.Orig.Src, &nf.NATAddr); err != nil {
			t.Fatalf("Admit after own early drop: %v", err)
		}
		nf = podFlow(1, 100+i, 1, ProtoTCP)
		if err := tb.Insert(&nf, FlagSYN, now); err != nil {
			t.Fatalf("insert after own early drop: %v", err)
		}
		r := nf.Reply() // the new flows are answered: only the old ones go
		tb.Track(Reply, &r, synack, now, &out)
		tb.Track(Original, &nf.Orig, FlagACK, now, &out)
		nf = podFlow(1, 200+i, 1, ProtoTCP)
	}
	before := tb.Len()
	var v Flow
	if tb.EarlyDropOwn(&nf.Orig, &nf.Orig.Src, &nf.NATAddr, now, &v) {
		t.Fatalf("own early drop took pod 1's %v flow %+v; its flows are all answered", v.State, v.Orig)
	}
	if tb.Len() != before || before != limit+8 {
		t.Fatalf("Len %d, want %d: pod 2's flows were touched", tb.Len(), limit+8)
	}
	// A pod under its limit has nothing to make room for.
	p2 := podFlow(2, 100, 1, ProtoTCP)
	if tb.EarlyDropOwn(&p2.Orig, &p2.Orig.Src, &p2.NATAddr, now, &v) {
		t.Fatalf("own early drop for pod 2, under every limit, took %+v", v.Orig)
	}

	// Egress IP 1 holds 24 flows; pods 3 and 4 fill it to 48 with
	// unanswered flows, then pod 5's new flow takes the oldest of them.
	for i := uint32(0); i < 2*limit-8; i++ {
		f := podFlow(3+byte(i%2), i, 1, ProtoUDP)
		if err := tb.Insert(&f, 0, now+int64(i)*sec); err != nil {
			t.Fatalf("pod %d flow %d: %v", 3+i%2, i, err)
		}
	}
	p5 := podFlow(5, 0, 1, ProtoUDP)
	if err := tb.Admit(&p5.Orig.Src, &p5.NATAddr); !errors.Is(err, ErrNATLimit) {
		t.Fatalf("egress IP 1 at its limit: Admit %v", err)
	}
	if !tb.EarlyDropOwn(&p5.Orig, &p5.Orig.Src, &p5.NATAddr, now+time.Hour.Nanoseconds(), &v) {
		t.Fatal("no own early drop on an egress IP full of unanswered flows")
	}
	if v.NATAddr != p5.NATAddr || v.State != StateSynSent || v.Orig != podFlow(2, 0, 1, ProtoTCP).Orig {
		t.Fatalf("egress IP's early drop took %v flow %+v via %v, want its oldest unanswered one (pod 2 flow 0)", v.State, v.Orig, v.NATAddr)
	}

	if n := testing.AllocsPerRun(100, func() {
		tb.EarlyDropOwn(&nf.Orig, &nf.Orig.Src, &nf.NATAddr, now, &v)
	}); n != 0 {
		t.Fatalf("EarlyDropOwn allocates %v times", n)
	}
}

// Workers opening flows for a few pods at their limits at once, each
// early-dropping its pod's own flows to make room: no pod ever holds more
// than its limit, and every flow taken was the same pod's. Run with -race.
func TestEarlyDropOwnConcurrent(t *testing.T) {
	const limit, pods, workers = 64, 3, 4
	tb := mustNew(t, Config{MaxFlows: 4096, Shards: 4, SourceLimit: limit})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	var drops atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				p := byte(1 + (w+i)%pods)
				f := podFlow(p, uint32(w*100000+i), 1, ProtoUDP)
				now := int64(i) * int64(time.Millisecond)
				if err := tb.Admit(&f.Orig.Src, &f.NATAddr); err != nil {
					var v Flow
					if !tb.EarlyDropOwn(&f.Orig, &f.Orig.Src, &f.NATAddr, now, &v) {
						continue
					}
					drops.Add(1)
					if v.Orig.Src != f.Orig.Src {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("pod %v's early drop took pod %v's flow", f.Orig.Src, v.Orig.Src))
						mu.Unlock()
					}
				}
				if err := tb.Insert(&f, 0, now); err != nil && !errors.Is(err, ErrSourceLimit) {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %s", len(errs), errs[0])
	}
	var buf bytes.Buffer
	if _, err := tb.Export(&buf, 0); err != nil {
		t.Fatal(err)
	}
	per := map[Addr]int{}
	for b := buf.Bytes()[4:]; len(b) > 0; {
		f, _, k, err := DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		per[f.Orig.Src]++
		b = b[k:]
	}
	for src, n := range per {
		if n > limit {
			t.Errorf("pod %v holds %d flows, over its limit %d", src, n, limit)
		}
	}
	if len(per) != pods || drops.Load() == 0 {
		t.Fatalf("%d pods hold flows, %d own early drops: the test did not run as meant", len(per), drops.Load())
	}
}
