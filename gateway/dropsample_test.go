package gateway

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/natlog"
)

var deniedDst = netip.MustParseAddr("169.254.169.254")

// namedConfig is testConfig with pod1v4 named, as the gateway agent names
// pods.
func namedConfig() Config {
	cfg := testConfig()
	cfg.Nodes[0].Pods[0].Ref = natlog.Pod{Namespace: "shop", Name: "web-1", UID: "u-1"}
	return cfg
}

// processAt hands frames to f's processor as one Process call at now.
func (f *fixture) processAt(now int64, frames ...[]byte) []Result {
	out := make([][]byte, len(frames))
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]Result, len(frames))
	f.w.Process(now, frames, out, res)
	return res
}

func repeat(fr []byte, n int) [][]byte {
	in := make([][]byte, n)
	for i := range in {
		in[i] = fr
	}
	return in
}

// drain returns what sub holds now, without waiting.
func drain(sub *DropSubscription) []DropSample {
	var out []DropSample
	for {
		select {
		case s, ok := <-sub.C:
			if !ok {
				return out
			}
			out = append(out, s)
		default:
			return out
		}
	}
}

// TestDropSampleDecoded: a denied UDP packet and a denied echo request of
// a named pod arrive as samples with their reason, headers, tunnel and
// pod; an unnamed pod's sample has no pod.
func TestDropSampleDecoded(t *testing.T) {
	f := newFixture(t, 64, namedConfig())
	sub := f.p.SubscribeDrops(100, 16)
	defer sub.Close()
	udp := tunnelFrame(t, podTun(), udpFrom(pod1v4, deniedDst).build(t))
	echo := tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: deniedDst, proto: "echo", sport: 9}.build(t))
	v6 := tunnelFrame(t, podTun(), udpFrom(pod1v6, netip.MustParseAddr("fe80::1")).build(t))
	before := time.Now()
	for i, r := range f.processAt(testNow, udp, echo, v6) {
		if r.Verdict != VerdictDrop || r.Reason != DropDeniedDestination {
			t.Fatalf("frame %d: %v %v, want drop denied_destination", i, r.Verdict, r.Reason)
		}
	}
	got := drain(sub)
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3", len(got))
	}
	u := got[0]
	want := DropSample{Time: u.Time, Reason: DropDeniedDestination, Len: len(udp), Tunnel: TunnelVXLAN, VNI: testVNI,
		OuterSrc: node1VTEP, OuterDst: gwVTEP4, Proto: 17, Src: pod1v4, Dst: deniedDst, SrcPort: 5000, DstPort: 53, HasPorts: true,
		Pod: natlog.Pod{Namespace: "shop", Name: "web-1", UID: "u-1"}}
	if u != want {
		t.Errorf("UDP sample\n got %+v\nwant %+v", u, want)
	}
	if u.Time.Before(before) || u.Time.After(time.Now()) {
		t.Errorf("sample time %v outside the call", u.Time)
	}
	if e := got[1]; e.Proto != 1 || !e.HasICMP || e.ICMPType != 8 || e.HasPorts || e.Pod.Name != "web-1" {
		t.Errorf("echo sample %+v, want ICMP type 8 of shop/web-1", e)
	}
	if s := got[2]; s.Src != pod1v6 || s.Pod != (natlog.Pod{}) {
		t.Errorf("v6 sample %+v, want src %v and no pod", s, pod1v6)
	}
}

// TestDropSampleRate: a subscription gets at most its rate, in bursts of
// at most one second's worth, whatever the number of drops.
func TestDropSampleRate(t *testing.T) {
	f := newFixture(t, 64, namedConfig())
	sub := f.p.SubscribeDrops(4, 1000)
	defer sub.Close()
	fr := tunnelFrame(t, podTun(), udpFrom(pod1v4, deniedDst).build(t))
	steps := []struct {
		at   int64 // ns after testNow
		want int
	}{
		{0, 4},                    // the burst
		{1, 0},                    // spent
		{250e6, 1},                // one interval later: one
		{300e6, 0},                // not yet the next
		{10e9, 4},                 // long idle: a full burst, no more
		{10e9 + 999_999_999, 3},   // the burst's three intervals have passed
		{10e9 + 1_000_000_000, 1}, // and the next
	}
	for _, s := range steps {
		f.processAt(testNow+s.at, repeat(fr, 100)...)
		if n := len(drain(sub)); n != s.want {
			t.Fatalf("at +%dns: %d samples, want %d", s.at, n, s.want)
		}
	}
	if sub.Lost() != 0 {
		t.Fatalf("lost %d with room in the channel", sub.Lost())
	}
	if st := f.p.Stats(); st.Drop(DropDeniedDestination) != 700 {
		t.Fatalf("counted %d drops, want 700: sampling must not change counting", st.Drop(DropDeniedDestination))
	}
}

// TestDropSampleReasons: a subscription gets only its reasons; several
// subscriptions are served independently.
func TestDropSampleReasons(t *testing.T) {
	f := newFixture(t, 64, namedConfig())
	denied := f.p.SubscribeDrops(100, 16, DropDeniedDestination)
	defer denied.Close()
	notSel := f.p.SubscribeDrops(100, 16, DropNotSelected)
	defer notSel.Close()
	all := f.p.SubscribeDrops(100, 16)
	defer all.Close()
	f.processAt(testNow,
		tunnelFrame(t, podTun(), udpFrom(pod1v4, deniedDst).build(t)),
		tunnelFrame(t, podTun(), udpFrom(pod1Unsel, netip.MustParseAddr("198.51.100.20")).build(t)))
	for _, c := range []struct {
		sub  *DropSubscription
		want []DropReason
	}{{denied, []DropReason{DropDeniedDestination}}, {notSel, []DropReason{DropNotSelected}}, {all, []DropReason{DropDeniedDestination, DropNotSelected}}} {
		got := drain(c.sub)
		if len(got) != len(c.want) {
			t.Fatalf("%d samples, want %v", len(got), c.want)
		}
		for i := range got {
			if got[i].Reason != c.want[i] {
				t.Errorf("sample %d: %v, want %v", i, got[i].Reason, c.want[i])
			}
		}
	}
}

// TestDropSampleSlowReader: a reader that does not keep up loses samples,
// counted, and the worker goes on; another subscription is unaffected.
func TestDropSampleSlowReader(t *testing.T) {
	f := newFixture(t, 64, namedConfig())
	slow := f.p.SubscribeDrops(1000, 2)
	defer slow.Close()
	fast := f.p.SubscribeDrops(1000, 64)
	defer fast.Close()
	fr := tunnelFrame(t, podTun(), udpFrom(pod1v4, deniedDst).build(t))
	f.processAt(testNow, repeat(fr, 10)...)
	if n := len(drain(slow)); n != 2 || slow.Lost() != 8 {
		t.Fatalf("slow reader: %d samples and %d lost, want 2 and 8", n, slow.Lost())
	}
	if n := len(drain(fast)); n != 10 || fast.Lost() != 0 {
		t.Fatalf("fast reader: %d samples and %d lost, want 10 and 0", n, fast.Lost())
	}
	if f.p.DropSamplesLost() != 8 {
		t.Fatalf("pipeline counts %d lost, want 8", f.p.DropSamplesLost())
	}
}

// TestDropSampleClose: once the last subscription is closed the
// processors stop looking (the mask is 0), C is closed, and a close racing
// a processor that is sending neither panics nor blocks.
func TestDropSampleClose(t *testing.T) {
	f := newFixture(t, 64, namedConfig())
	fr := tunnelFrame(t, podTun(), udpFrom(pod1v4, deniedDst).build(t))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		in := repeat(fr, 32)
		for now := testNow; ; now += 1e6 {
			select {
			case <-stop:
				return
			default:
				f.processAt(now, in...)
			}
		}
	}()
	for range 200 {
		sub := f.p.SubscribeDrops(1e6, 1)
		select { // at least one arrives while the worker sends
		case <-sub.C:
		case <-time.After(10 * time.Second):
			t.Fatal("no sample while the worker drops")
		}
		sub.Close()
		sub.Close()
	}
	close(stop)
	wg.Wait()
	if m := f.p.drops.mask.Load(); m != 0 {
		t.Fatalf("mask %#x with nobody subscribed", m)
	}
	sub := f.p.SubscribeDrops(10, 1)
	sub.Close()
	if _, ok := <-sub.C; ok {
		t.Fatal("C delivered after Close")
	}
}

// TestDropSampleZeroAllocs: dropping costs no allocation when nobody
// listens, nor when the listener's rate refuses the sample.
func TestDropSampleZeroAllocs(t *testing.T) {
	f := newFixture(t, 64, namedConfig())
	in := repeat(tunnelFrame(t, podTun(), udpFrom(pod1v4, deniedDst).build(t)), 32)
	out := repeat(make([]byte, 2048), 32)
	res := make([]Result, 32)
	if n := testing.AllocsPerRun(100, func() { f.w.Process(testNow, in, out, res) }); n != 0 {
		t.Fatalf("off: %v allocations per batch", n)
	}
	sub := f.p.SubscribeDrops(1, 1)
	defer sub.Close()
	f.w.Process(testNow, in, out, res) // spends the burst
	if n := testing.AllocsPerRun(100, func() { f.w.Process(testNow, in, out, res) }); n != 0 {
		t.Fatalf("rate-limited: %v allocations per batch", n)
	}
}

// BenchmarkDropSampling is the sampler's cost per frame: off (nobody
// listens: one atomic load per Process call) and listening (the gateway
// agent's deny-only subscription, always there in agent mode), for
// forwarded frames (the results are looked at, none is a drop) and for a
// flood of denied frames, whose samples the rate refuses.
func BenchmarkDropSampling(b *testing.B) {
	f := newFixture(b, 1<<16, namedConfig())
	est := repeat(hotFrames(b, f)["established_v4"], benchBatch)
	denied := repeat(tunnelFrame(b, podTun(), udpFrom(pod1v4, deniedDst).build(b)), benchBatch)
	for _, c := range []struct {
		name   string
		in     [][]byte
		listen bool
		want   Verdict
	}{
		{"established_off", est, false, VerdictTx}, {"established_listening", est, true, VerdictTx},
		{"denied_off", denied, false, VerdictDrop}, {"denied_listening", denied, true, VerdictDrop},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.listen {
				sub := f.p.SubscribeDrops(10, 64, DropDeniedDestination)
				defer sub.Close()
			}
			out := repeat(nil, benchBatch)
			for i := range out {
				out[i] = make([]byte, 2048)
			}
			res := make([]Result, benchBatch)
			b.ReportAllocs()
			for done := 0; done < b.N; done += benchBatch {
				k := min(benchBatch, b.N-done)
				f.w.Process(testNow, c.in[:k], out[:k], res[:k])
				if res[0].Verdict != c.want {
					b.Fatalf("verdict %v (%v), want %v", res[0].Verdict, res[0].Reason, c.want)
				}
			}
		})
	}
}
