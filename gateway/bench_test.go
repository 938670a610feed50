package gateway

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/nat"
)

const benchBatch = 32

// hotFrames sets up flows and returns, per bench case, one frame whose
// processing is the measured path.
func hotFrames(t testing.TB, f *fixture) map[string][]byte {
	mustTxTB := func(what string, r Result) {
		if r.Verdict != VerdictTx {
			t.Fatalf("%s: %v %v", what, r.Verdict, r.Reason)
		}
	}
	out := make([]byte, 2048)
	payload := make([]byte, 64)
	fs := map[string][]byte{}
	// IPv4 over IPv4 VXLAN, and IPv6 over IPv6 Geneve, TCP handshakes done.
	tu6 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
	syn4 := pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "S", payload: payload}
	syn6 := pkt{src: pod2v6, dst: server6, proto: "tcp", sport: 40000, dport: 443, flags: "S", payload: payload}
	mustTxTB("syn4", f.w.ProcessOne(testNow, tunnelFrame(t, podTun(), syn4.build(t)), out))
	natPort4 := uint16(out[34])<<8 | uint16(out[35])
	mustTxTB("syn6", f.w.ProcessOne(testNow, tunnelFrame(t, tu6, syn6.build(t)), out))
	sa4 := pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: natPort4, flags: "SA", payload: payload}
	mustTxTB("synack4", f.w.ProcessOne(testNow, plainFrame(t, sa4.build(t)), out))
	sa6 := pkt{src: server6, dst: egress6, proto: "tcp", sport: 443, dport: 40000, flags: "SA"}
	mustTxTB("synack6", f.w.ProcessOne(testNow, plainFrame(t, sa6.build(t)), out))
	ack4, ack6 := syn4, syn6
	ack4.flags, ack6.flags = "A", "A"
	fs["established_v4"] = tunnelFrame(t, podTun(), ack4.build(t))
	fs["established_v6"] = tunnelFrame(t, tu6, ack6.build(t))
	rep := sa4
	rep.flags = "A"
	fs["reply_v4"] = plainFrame(t, rep.build(t))
	mustTxTB("established_v4", f.w.ProcessOne(testNow, fs["established_v4"], out))
	fwd := append([]byte(nil), out[14:14+20+20+len(payload)]...)
	fs["icmp_error_v4"] = plainFrame(t, pkt{src: server4, dst: egress4, proto: "icmperr", icmpType: 3, icmpCode: 4, mtu: 1400, quote: fwd[:28]}.build(t))
	for n, fr := range fs {
		mustTxTB(n, f.w.ProcessOne(testNow, fr, out))
	}
	return fs
}

func TestPipelineAllocs(t *testing.T) {
	f := newFixture(t, 1<<12, testConfig())
	out := make([]byte, 2048)
	for name, fr := range hotFrames(t, f) {
		if n := testing.AllocsPerRun(200, func() { f.w.ProcessOne(testNow, fr, out) }); n != 0 {
			t.Errorf("%s: %v allocations per packet", name, n)
		}
	}
	// New flows: a different source port each run.
	frames := newFlowFrames(t, 300)
	i := 0
	if n := testing.AllocsPerRun(200, func() {
		if r := f.w.ProcessOne(testNow, frames[i], out); r.Verdict != VerdictTx {
			t.Fatalf("new flow %d: %v", i, r.Reason)
		}
		i++
	}); n != 0 {
		t.Errorf("new_flow: %v allocations per packet", n)
	}
	// Drops and expiry too.
	drop := tunnelFrame(t, podTun(), udpFrom(pod2v4, server4).build(t))
	if n := testing.AllocsPerRun(100, func() { f.w.ProcessOne(testNow, drop, out) }); n != 0 {
		t.Errorf("drop: %v allocations", n)
	}
	if n := testing.AllocsPerRun(10, func() { f.w.Expire(testNow+1e15, 64) }); n != 0 {
		t.Errorf("Expire: %v allocations", n)
	}
}

func newFlowFrames(t testing.TB, n int) [][]byte {
	fs := make([][]byte, n)
	for i := range fs {
		p := pkt{src: pod1v4, dst: server4, proto: "tcp", sport: uint16(1024 + i), dport: 80, flags: "S", payload: make([]byte, 64)}
		fs[i] = tunnelFrame(t, podTun(), p.build(t))
	}
	return fs
}

func benchLoop(b *testing.B, w *Worker, in [][]byte) {
	out := make([][]byte, benchBatch)
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]Result, benchBatch)
	b.ReportAllocs()
	c := startCPU(b)
	for done := 0; done < b.N; done += benchBatch {
		k := min(benchBatch, b.N-done)
		w.Process(testNow, in[:k], out[:k], res[:k])
	}
	c.stop()
	if res[0].Verdict != VerdictTx {
		b.Fatalf("not forwarded: %v", res[0].Reason)
	}
}

// BenchmarkPipeline measures one worker on one core, per packet, batches of
// 32 frames. copy_only is the floor: copying the frame to the output buffer.
func BenchmarkPipeline(b *testing.B) {
	f := newFixture(b, 1<<16, testConfig())
	fs := hotFrames(b, f)
	same := func(fr []byte) [][]byte {
		in := make([][]byte, benchBatch)
		for i := range in {
			in[i] = fr
		}
		return in
	}
	b.Run("copy_only", func(b *testing.B) {
		fr := fs["established_v4"]
		out := make([]byte, 2048)
		b.ReportAllocs()
		b.SetBytes(int64(len(fr)))
		for i := 0; i < b.N; i++ {
			copy(out, fr)
		}
	})
	for _, name := range []string{"established_v4", "established_v6", "reply_v4", "icmp_error_v4"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(fs[name])))
			benchLoop(b, f.w, same(fs[name]))
		})
	}
	b.Run("new_flow_v4", func(b *testing.B) {
		const round = 4096
		frames := newFlowFrames(b, round)
		ct, err := conntrack.New(conntrack.Config{MaxFlows: 2 * round})
		if err != nil {
			b.Fatal(err)
		}
		p, err := NewPipeline(ct, nat.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		s, err := NewSnapshot(testConfig())
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Swap(s); err != nil {
			b.Fatal(err)
		}
		w := p.NewWorker(3)
		out := make([][]byte, benchBatch)
		for i := range out {
			out[i] = make([]byte, 2048)
		}
		res := make([]Result, benchBatch)
		b.ReportAllocs()
		c := startCPU(b)
		next := 0
		for done := 0; done < b.N; done += benchBatch {
			if next == round {
				b.StopTimer()
				w.Expire(testNow+1e15, 2*round) // remove the round's flows and release ports
				if ct.Len() != 0 {
					b.Fatalf("%d flows left after expiry", ct.Len())
				}
				next = 0
				b.StartTimer()
			}
			k := min(benchBatch, b.N-done)
			w.Process(testNow, frames[next:next+k], out[:k], res[:k])
			next += benchBatch
			if res[0].Verdict != VerdictTx {
				b.Fatalf("new flow dropped: %v", res[0].Reason)
			}
		}
		c.stop()
	})
}

// cpuClock measures the benchmark goroutine's own thread CPU time, reported
// as cpu-ns/op beside the wall-clock ns/op: on a shared machine wall time
// includes time other processes held the core.
type cpuClock struct {
	b       *testing.B
	start   int64
	elapsed int64
}

func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

func startCPU(b *testing.B) *cpuClock {
	runtime.LockOSThread()
	b.ResetTimer()
	return &cpuClock{b: b, start: threadCPU()}
}

// The thread clock is read inside the wall-clock timer's window because
// StopTimer and StartTimer themselves read memory statistics.
func (c *cpuClock) pause() {
	c.elapsed += threadCPU() - c.start
	c.b.StopTimer()
}

func (c *cpuClock) resume() {
	c.b.StartTimer()
	c.start = threadCPU()
}

func (c *cpuClock) stop() {
	c.elapsed += threadCPU() - c.start
	c.b.StopTimer()
	runtime.UnlockOSThread()
	c.b.ReportMetric(float64(c.elapsed)/float64(c.b.N), "cpu-ns/op")
}
