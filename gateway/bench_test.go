package gateway

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/natlog"
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
	mustTxTB("syn4", processOne(f.w, testNow, tunnelFrame(t, podTun(), syn4.build(t)), out))
	natPort4 := uint16(out[34])<<8 | uint16(out[35])
	mustTxTB("syn6", processOne(f.w, testNow, tunnelFrame(t, tu6, syn6.build(t)), out))
	sa4 := pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: natPort4, flags: "SA", payload: payload}
	mustTxTB("synack4", processOne(f.w, testNow, plainFrame(t, sa4.build(t)), out))
	sa6 := pkt{src: server6, dst: egress6, proto: "tcp", sport: 443, dport: 40000, flags: "SA"}
	mustTxTB("synack6", processOne(f.w, testNow, plainFrame(t, sa6.build(t)), out))
	ack4, ack6 := syn4, syn6
	ack4.flags, ack6.flags = "A", "A"
	fs["established_v4"] = tunnelFrame(t, podTun(), ack4.build(t))
	fs["established_v6"] = tunnelFrame(t, tu6, ack6.build(t))
	rep := sa4
	rep.flags = "A"
	fs["reply_v4"] = plainFrame(t, rep.build(t))
	mustTxTB("established_v4", processOne(f.w, testNow, fs["established_v4"], out))
	fwd := append([]byte(nil), out[14:14+20+20+len(payload)]...)
	fs["icmp_error_v4"] = plainFrame(t, pkt{src: server4, dst: egress4, proto: "icmperr", icmpType: 3, icmpCode: 4, mtu: 1400, quote: fwd[:28]}.build(t))
	for n, fr := range fs {
		mustTxTB(n, processOne(f.w, testNow, fr, out))
	}
	return fs
}

func TestPipelineAllocs(t *testing.T) {
	f := newFixture(t, 1<<12, testConfig())
	out := make([]byte, 2048)
	for name, fr := range hotFrames(t, f) {
		if n := testing.AllocsPerRun(200, func() { processOne(f.w, testNow, fr, out) }); n != 0 {
			t.Errorf("%s: %v allocations per packet", name, n)
		}
	}
	// New flows: a different source port each run.
	frames := newFlowFrames(t, 300)
	i := 0
	if n := testing.AllocsPerRun(200, func() {
		if r := processOne(f.w, testNow, frames[i], out); r.Verdict != VerdictTx {
			t.Fatalf("new flow %d: %v", i, r.Reason)
		}
		i++
	}); n != 0 {
		t.Errorf("new_flow: %v allocations per packet", n)
	}
	// Drops and expiry too.
	drop := tunnelFrame(t, podTun(), udpFrom(pod2v4, server4).build(t))
	if n := testing.AllocsPerRun(100, func() { processOne(f.w, testNow, drop, out) }); n != 0 {
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

func benchLoop(b *testing.B, w *Processor, in [][]byte) {
	benchFrames(b, w, false, in, benchBatch, nil)
}

// million is a pipeline with 1M established TCP flows (pod1v4 to 17
// servers, pod ports 1024-65535) and frames of random flows of it. Built
// once per test binary: filling it takes seconds.
type million struct {
	w        *Processor
	ct       *conntrack.Table
	est, rep [][]byte // pod → server ACKs and server → egress IP ACKs, 64 KiB random flows each
	syn      [][]byte // SYNs of millionNew flows the table does not hold (flows millionFlows...)
}

// millionNew is how many new flows new_flow_v4_1M opens before it deletes
// them again (with the timer stopped); the table has room for 1/8 more
// than its million flows.
const millionNew = 1 << 16

const (
	millionFlows  = 1 << 20
	millionFrames = 1 << 16 // 8.5 MB of frames: more than L2, like a busy receive ring
	millionPorts  = 65536 - 1024
)

var millionOnce struct {
	sync.Once
	m   *million
	err error
}

func getMillion(b *testing.B) *million {
	millionOnce.Do(func() { millionOnce.m, millionOnce.err = buildMillion(b) })
	if millionOnce.err != nil {
		b.Fatal(millionOnce.err)
	}
	return millionOnce.m
}

// millionFlow returns flow i's server address (IPv4-mapped) and pod port.
func millionFlow(i int) ([16]byte, uint16) {
	a := netip.MustParseAddr("198.18.0.0").As16()
	a[14], a[15] = byte(i/millionPorts>>8), byte(i/millionPorts)
	return a, uint16(1024 + i%millionPorts)
}

func buildMillion(tb testing.TB) (*million, error) {
	f := newFixture(tb, millionFlows+millionFlows/8, testConfig())
	payload := make([]byte, 64)
	syn := tunnelFrame(tb, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 1, dport: 443, flags: "S", payload: payload}.build(tb))
	ack := tunnelFrame(tb, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 1, dport: 443, flags: "A", payload: payload}.build(tb))
	synack := plainFrame(tb, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: 1, flags: "SA", payload: payload}.build(tb))
	rack := plainFrame(tb, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: 1, flags: "A", payload: payload}.build(tb))
	// Where the server address and the pod-side port are in each template.
	var pk Parsed
	pk.Decode(syn)
	podDst, podPort := pk.L3+16, pk.L4
	pk.Decode(synack)
	srvSrc, srvPort := pk.L3+12, pk.L4+2
	podFrame := func(dst []byte, tmpl []byte, i int) []byte {
		dst = append(dst[:0], tmpl...)
		srv, port := millionFlow(i)
		copy(dst[podDst:], srv[12:])
		binary.BigEndian.PutUint16(dst[podPort:], port)
		return dst
	}
	srvFrame := func(dst []byte, tmpl []byte, i int) []byte {
		dst = append(dst[:0], tmpl...)
		srv, port := millionFlow(i)
		copy(dst[srvSrc:], srv[12:])
		binary.BigEndian.PutUint16(dst[srvPort:], port) // the NAT port: preserved, checked below
		return dst
	}

	// The handshake of every flow, 64 frames at a time.
	const batch = conntrack.MaxBatch
	in, out := make([][]byte, batch), make([][]byte, batch)
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]Result, batch)
	for _, step := range []struct {
		name string
		mk   func(dst []byte, i int) []byte
	}{
		{"syn", func(d []byte, i int) []byte { return podFrame(d, syn, i) }},
		{"synack", func(d []byte, i int) []byte { return srvFrame(d, synack, i) }},
		{"ack", func(d []byte, i int) []byte { return podFrame(d, ack, i) }},
	} {
		for i := 0; i < millionFlows; i += batch {
			for j := range in {
				in[j] = step.mk(in[j], i+j)
			}
			f.process(testNow, in, out, res)
			for j, r := range res {
				if r.Verdict != VerdictTx {
					return nil, fmt.Errorf("%s of flow %d: %v %v", step.name, i+j, r.Verdict, r.Reason)
				}
				if step.name == "syn" {
					if _, port := millionFlow(i + j); binary.BigEndian.Uint16(out[j][header.EthernetLen+20:]) != port {
						return nil, fmt.Errorf("flow %d: NAT port not preserved", i+j)
					}
				}
			}
		}
	}
	if n := f.ct.Len(); n != millionFlows {
		return nil, fmt.Errorf("%d flows, want %d", n, millionFlows)
	}
	m := &million{w: f.w, ct: f.ct}
	m.syn = make([][]byte, millionNew)
	for i := range m.syn {
		m.syn[i] = podFrame(nil, syn, millionFlows+i)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, fs := range []struct {
		dst *[][]byte
		mk  func(dst []byte, i int) []byte
	}{
		{&m.est, func(d []byte, i int) []byte { return podFrame(d, ack, i) }},
		{&m.rep, func(d []byte, i int) []byte { return srvFrame(d, rack, i) }},
	} {
		fl := len(fs.mk(nil, 0))
		buf := make([]byte, millionFrames*fl)
		*fs.dst = make([][]byte, millionFrames)
		for i := range *fs.dst {
			(*fs.dst)[i] = fs.mk(buf[i*fl:i*fl:(i+1)*fl], rng.IntN(millionFlows))
		}
	}
	return m, nil
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
	// A realistic table: 1M established flows, a random one per packet, so
	// nearly every lookup misses the CPU caches. The same frames go through
	// the batched path (one TrackBatch per 64 frames) and the one-lookup-
	// per-frame path it replaced, in the same run, so their ratio is the
	// gain.
	for _, name := range []string{"established_v4_1M", "reply_v4_1M"} {
		for _, single := range []bool{false, true} {
			sub := name
			if single {
				sub += "_single"
			}
			b.Run(sub, func(b *testing.B) {
				m := getMillion(b)
				in := m.est
				if name == "reply_v4_1M" {
					in = m.rep
				}
				benchFrames(b, m.w, single, in, conntrack.MaxBatch, nil)
			})
		}
	}
	// New flows into the 1M-flow table: a TCP SYN of a flow it does not
	// hold, so the miss, the NAT port check (the reply tuple's index line)
	// and the insert meet cold cache lines as they would on a busy gateway.
	for _, single := range []bool{false, true} {
		sub := "new_flow_v4_1M"
		if single {
			sub += "_single"
		}
		b.Run(sub, func(b *testing.B) {
			m := getMillion(b)
			var pk Parsed
			var fl conntrack.Flow
			benchFrames(b, m.w, single, m.syn, conntrack.MaxBatch, func(n int) {
				for _, fr := range m.syn[:n] {
					pk.Decode(fr)
					k := conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst),
						SrcPort: pk.SrcPort, DstPort: pk.DstPort, Proto: pk.Proto}
					if !m.ct.Delete(&k, &fl) {
						b.Fatal("new flow not in the table")
					}
					m.w.releaseFlow(&fl)
				}
			})
		})
	}
	// new_flow_v4_natlog: the same with the NAT log on, its writer draining
	// between rounds (off the clock, as it runs on another core): what
	// recording a binding costs the worker.
	for _, logged := range []bool{false, true} {
		name := "new_flow_v4"
		if logged {
			name += "_natlog"
		}
		b.Run(name, func(b *testing.B) {
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
			var l *natlog.Log
			if logged {
				if l, err = natlog.New(natlog.Config{Dir: b.TempDir(), Gateway: "bench", RingSize: 4 * round}); err != nil {
					b.Fatal(err)
				}
				p.SetNATLog(l)
			}
			w := p.NewProcessor(3)
			benchFrames(b, w, false, frames, benchBatch, func(int) {
				w.Expire(testNow+1e15, 2*round) // remove the round's flows and release ports
				if ct.Len() != 0 {
					b.Fatalf("%d flows left after expiry", ct.Len())
				}
				if l != nil {
					l.Flush()
				}
			})
			if l != nil {
				if st := l.Stats(); st.Dropped != 0 {
					b.Fatalf("%d records dropped", st.Dropped)
				}
			}
		})
	}
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

// benchFrames processes b.N frames of frames, in order, batch per Process
// call (per processSingly call if single: the one-frame baseline), and
// checks that every one is sent. With clear nil it goes round
// robin. Otherwise frames are the SYNs of flows the table does not hold:
// once all are sent, benchFrames calls clear(n) with both clocks stopped to
// remove the n flows they opened and release their ports, and starts over;
// it clears the last round too, so a shared table is left as it was.
func benchFrames(b *testing.B, w *Processor, single bool, frames [][]byte, batch int, clear func(n int)) {
	out := make([][]byte, batch)
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]Result, batch)
	b.ReportAllocs()
	c := startCPU(b)
	next := 0
	for done := 0; done < b.N; done += batch {
		k := min(batch, b.N-done)
		if next+k > len(frames) {
			if clear != nil {
				c.pause()
				clear(next)
				c.resume()
			}
			next = 0
		}
		if single {
			processSingly(w, testNow, frames[next:next+k], out[:k], res[:k])
		} else {
			w.Process(testNow, frames[next:next+k], out[:k], res[:k])
		}
		next += k
		for i := range res[:k] {
			if res[i].Verdict != VerdictTx {
				b.Fatalf("frame %d not sent: %v %v", next-k+i, res[i].Verdict, res[i].Reason)
			}
		}
	}
	c.stop()
	if clear != nil {
		clear(next)
	}
}

// destBenchConfig is testConfig where pod1v4 has destination rules: three
// policies of 1000 networks each (web's hold server4), the pod's own
// policy web its fallback. n is the networks per policy (0: no rules).
func destBenchConfig(n int) Config {
	cfg := testConfig()
	if n == 0 {
		return cfg
	}
	cfg.Policies = append(cfg.Policies,
		Policy{Name: "db", EgressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.31")}},
		Policy{Name: "api", EgressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.32")}})
	t := DestTable{Name: "web,db,api"}
	for i, pol := range []string{"web", "db", "api"} {
		for j := range n {
			// /24s spread over 100.64/10 ... and web's last one server4's.
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + i*16 + j/256), byte(j % 256), 0}), 24)
			if pol == "web" && j == n-1 {
				p = netip.PrefixFrom(server4, 24).Masked()
			}
			t.Rules = append(t.Rules, DestRule{Prefix: p, Policy: pol})
		}
	}
	cfg.DestTables = []DestTable{t}
	cfg.Nodes[0].Pods[0].Dest = t.Name
	return cfg
}

// BenchmarkDestRules is the per-packet cost of destination rules: a pod
// with 1000 networks per policy (three policies) against the same pod
// without rules, for a new flow (where the rules are looked up) and an
// established one (where they are not), each pair in the same run.
func BenchmarkDestRules(b *testing.B) {
	const round = 4096
	syns := newFlowFrames(b, round)
	for _, name := range []string{"new_flow_v4", "established_v4"} {
		for _, n := range []int{0, 1000} {
			b.Run(fmt.Sprintf("%s/prefixes=%d", name, n), func(b *testing.B) {
				f := newFixture(b, 2*round, destBenchConfig(n))
				if name == "established_v4" {
					fr := hotFrames(b, f)["established_v4"]
					in := make([][]byte, benchBatch)
					for i := range in {
						in[i] = fr
					}
					benchLoop(b, f.w, in)
					return
				}
				// As BenchmarkPipeline/new_flow_v4: each round's flows
				// expire off the clock.
				benchFrames(b, f.w, false, syns, benchBatch, func(int) {
					f.w.Expire(testNow+1e15, 2*round)
					if f.ct.Len() != 0 {
						b.Fatalf("%d flows left after expiry", f.ct.Len())
					}
				})
			})
		}
	}
}

// TestDestRulesAllocs: destination rules cost no allocation, on a new
// flow or an established one.
func TestDestRulesAllocs(t *testing.T) {
	f := newFixture(t, 1<<12, destBenchConfig(1000))
	out := make([]byte, 2048)
	est := hotFrames(t, f)["established_v4"]
	if n := testing.AllocsPerRun(200, func() { processOne(f.w, testNow, est, out) }); n != 0 {
		t.Errorf("established: %v allocations per packet", n)
	}
	frames := newFlowFrames(t, 300)
	i := 0
	if n := testing.AllocsPerRun(200, func() {
		if r := processOne(f.w, testNow, frames[i], out); r.Verdict != VerdictTx {
			t.Fatalf("new flow %d: %v", i, r.Reason)
		}
		i++
	}); n != 0 {
		t.Errorf("new flow: %v allocations per packet", n)
	}
	// The batch path, whose prefetch looks the rules up too.
	in, outs, res := make([][]byte, 1), [][]byte{out}, make([]Result, 1)
	if n := testing.AllocsPerRun(50, func() {
		in[0] = frames[i]
		if f.w.Process(testNow, in, outs, res); res[0].Verdict != VerdictTx {
			t.Fatalf("new flow %d (batch): %v", i, res[0].Reason)
		}
		i++
	}); n != 0 {
		t.Errorf("new flow (batch): %v allocations per packet", n)
	}
}

// BenchmarkDestChoose is the rules' own lookup, the part of a new flow
// they add: destBenchConfig's table (3000 networks), random IPv4
// destinations in and around them.
func BenchmarkDestChoose(b *testing.B) {
	cfg := destBenchConfig(1000)
	d, err := newSnapDest(cfg.DestTables[0], map[string]int32{"web": 0, "db": 1, "api": 2})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	dsts := make([][16]byte, 4096)
	for i := range dsts {
		dsts[i] = netip.AddrFrom4([4]byte{100, byte(64 + rng.IntN(64)), byte(rng.IntN(256)), 1}).As16()
	}
	b.ReportAllocs()
	var sum int32
	for i := 0; i < b.N; i++ {
		sum += d.choose(&dsts[i&4095], true)
	}
	destSink = sum // keeps the lookups
}

var destSink int32
