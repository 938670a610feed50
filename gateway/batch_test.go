package gateway

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket/layers"
)

// framePool is a small set of distinct frames whose random mixes exercise
// every dependency between the frames of one batch: a flow created by one
// frame and used by the next (retransmitted SYN, the server's SYN-ACK, a
// reply, an ICMP error about it), IPv4 fragments after (or before) their
// first fragment in both directions, ICMP errors to pods beyond the rate
// limit, NAT port collisions between two pods, and drops of every kind.
// The second slice is the frames that the gateway answers with an ICMP
// error to the pod, for bursts that exceed the rate limit.
func framePool(t testing.TB) (fs, answered [][]byte) {
	add := func(fr []byte) { fs = append(fs, fr) }
	tu2 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
	for p := uint16(0); p < 6; p++ {
		sp := 40000 + p
		for _, fl := range []string{"S", "A"} {
			add(tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: sp, dport: 443, flags: fl}.build(t)))
			add(tunnelFrame(t, tu2, pkt{src: pod2v6, dst: server6, proto: "tcp", sport: sp, dport: 443, flags: fl}.build(t)))
		}
		// Another pod's segment on the same ports: picked up while pod1v4's
		// flow does not hold the port, reset while it does.
		add(tunnelFrame(t, tu2, pkt{src: pod2v4, dst: server4, proto: "tcp", sport: sp, dport: 443, flags: "A"}.build(t)))
		add(plainFrame(t, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: sp, flags: "SA"}.build(t)))
		add(plainFrame(t, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: sp, flags: "A"}.build(t)))
		add(plainFrame(t, pkt{src: server6, dst: egress6, proto: "tcp", sport: 443, dport: sp, flags: "SA"}.build(t)))

		up := 5000 + p
		add(tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "udp", sport: up, dport: 53, payload: []byte("q")}.build(t)))
		add(tunnelFrame(t, tu2, pkt{src: pod2v4, dst: server4, proto: "udp", sport: up, dport: 53, payload: []byte("q")}.build(t)))
		add(tunnelFrame(t, podTun(), pkt{src: pod1v6, dst: server6, proto: "udp", sport: up, dport: 53, payload: []byte("q")}.build(t)))
		add(plainFrame(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: up, payload: []byte("a")}.build(t)))
		add(plainFrame(t, pkt{src: server6, dst: egress6, proto: "udp", sport: 53, dport: up, payload: []byte("a")}.build(t)))
		// Too big for a 1500-byte underlay once encapsulated (smallUnderlay).
		add(plainFrame(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: up, payload: make([]byte, 1472), df: true}.build(t)))
		quote := pkt{src: egress4, dst: server4, proto: "udp", sport: up, dport: 53, payload: []byte("q")}.build(t)[:28]
		add(plainFrame(t, pkt{src: server4, dst: egress4, proto: "icmperr", icmpType: 3, icmpCode: 4, mtu: 1400, quote: quote}.build(t)))

		id := 1 + p
		add(tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "echo", sport: id}.build(t)))
		add(plainFrame(t, pkt{src: server4, dst: egress4, proto: "echoreply", sport: id}.build(t)))
	}
	for p := uint16(0); p < 3; p++ {
		payload := bytes.Repeat([]byte("0123456789abcdef"), 20)
		f1, f2 := fragments(t, pkt{src: pod1v4, dst: server4, proto: "udp", sport: 5000 + p, dport: 53, payload: payload}.build(t), 160)
		add(tunnelFrame(t, podTun(), f1))
		add(tunnelFrame(t, podTun(), f2))
		f1, f2 = fragments(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 5000 + p, payload: payload}.build(t), 160)
		add(plainFrame(t, f1))
		add(plainFrame(t, f2))
	}
	ttl1 := pkt{src: pod1v4, dst: server4, proto: "udp", sport: 33434, dport: 33435, ttl: 1, payload: make([]byte, 100)}
	answered = append(answered, tunnelFrame(t, podTun(), ttl1.build(t)))
	ttl1.src, ttl1.dst = pod2v6, server6
	answered = append(answered, tunnelFrame(t, tu2, ttl1.build(t)))
	answered = append(answered, tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "udp", sport: 6000, dport: 53, payload: make([]byte, 1600), df: true}.build(t)))
	fs = append(fs, answered...)
	add(tunnelFrame(t, podTun(), udpFrom(pod2v4, server4).build(t)))    // spoofed
	add(tunnelFrame(t, podTun(), udpFrom(pod1Unsel, server4).build(t))) // not selected
	add(tunnelFrame(t, podTun(), udpFrom(pod1v4, egress4).build(t)))    // hairpin
	rep := udpFrom(server4, egress4)
	rep.ttl = 1
	add(plainFrame(t, rep.build(t)))
	add(plainFrame(t, pkt{src: server4, dst: gwVTEP4, proto: "tcp", sport: 50000, dport: 22, flags: "S"}.build(t))) // pass
	add(tunnelFrame(t, podTun(), rawIP(t, pod1v4, server4, layers.IPProtocolSCTP, make([]byte, 32))))
	add(fs[0][:40]) // truncated
	return fs, answered
}

type frameOutcome struct {
	r   Result
	out []byte
}

// flowRecords is the table's content, sorted, for comparing two tables.
func flowRecords(t *testing.T, ct *conntrack.Table, now int64) []string {
	var buf bytes.Buffer
	if _, err := ct.Export(&buf, now); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[4:]
	var rs []string
	for len(b) > 0 {
		_, _, n, err := conntrack.DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, string(b[:n]))
		b = b[n:]
	}
	slices.Sort(rs)
	return rs
}

// TestBatchMatchesOneByOne is the batch path's oracle: random mixes of
// frames, in receive batches of 1 to 150 frames (so across the 64-lookup
// chunks too), must give exactly the results, output bytes, counters, flows
// and NAT ports that one Track per frame gives (the path before batching).
func TestBatchMatchesOneByOne(t *testing.T) {
	for _, cfg := range []struct {
		name string
		cfg  func() Config
	}{{"jumbo_underlay", testConfig}, {"small_underlay", smallUnderlay}} {
		t.Run(cfg.name, func(t *testing.T) {
			pool, answered := framePool(t)
			rng := rand.New(rand.NewPCG(1, 2))
			batched := newFixture(t, 4096, cfg.cfg())
			single := newFixture(t, 4096, cfg.cfg())
			single.single = true
			out := make([][]byte, 150)
			for i := range out {
				out[i] = make([]byte, 2048)
			}
			res := make([]Result, 150)
			now := testNow
			frames := 0
			for round := 0; round < 300; round++ {
				k := 1 + rng.IntN(150)
				if round%3 == 0 {
					k = 1 + rng.IntN(conntrack.MaxBatch) // plenty of batches within one chunk
				}
				in := make([][]byte, k)
				for i := range in {
					in[i] = pool[rng.IntN(len(pool))]
					if round%10 == 5 && rng.IntN(2) == 0 {
						in[i] = answered[rng.IntN(len(answered))] // a burst
					}
				}
				batched.process(now, in, out[:k], res[:k])
				var got []frameOutcome
				for i := range in {
					got = append(got, frameOutcome{res[i], slices.Clone(out[i][:res[i].Len])})
				}
				for i := range in {
					single.process(now, in[i:i+1], out[:1], res[:1])
					want := frameOutcome{res[0], slices.Clone(out[0][:res[0].Len])}
					if got[i].r != want.r || !bytes.Equal(got[i].out, want.out) {
						t.Fatalf("round %d (batch of %d), frame %d: batched %+v, one by one %+v (outputs equal: %v)",
							round, k, i, got[i].r, want.r, bytes.Equal(got[i].out, want.out))
					}
				}
				frames += k
				now += int64(rng.IntN(3)) * int64(time.Millisecond) // ICMP tokens come back
				if round%25 == 24 {
					// All flows expire, so that new flows (and the
					// frames that depend on them) keep coming.
					now += int64(3 * time.Hour)
					if nb, ns := batched.w.Expire(now, 1<<20), single.w.Expire(now, 1<<20); nb != ns || batched.ct.Len() != 0 {
						t.Fatalf("expired %d batched, %d one by one; %d flows left", nb, ns, batched.ct.Len())
					}
				}
			}
			bs, ss := batched.p.Stats(), single.p.Stats()
			if bs != ss {
				t.Errorf("counters differ:\nbatched    %+v\none by one %+v", bs, ss)
			}
			if bs.Count(CounterRx) != uint64(frames) {
				t.Errorf("rx %d, want %d", bs.Count(CounterRx), frames)
			}
			// The mix must have reached the interesting paths, or the
			// comparison proves little.
			for _, c := range []Counter{CounterForwarded, CounterReplied, CounterICMPSent, CounterICMPXlated, CounterFlowsNew, CounterFlowsPickedUp, CounterTCPResetsSent} {
				if bs.Count(c) == 0 {
					t.Errorf("the mix never hit %v", c)
				}
			}
			for _, r := range []DropReason{DropICMPRateLimited, DropFragNoFirst, DropTCPNoFlow, DropNoFlow, DropHairpin, DropSpoofedSource} {
				if bs.Drop(r) == 0 {
					t.Errorf("the mix never hit drop %v", r)
				}
			}
			if !slices.Equal(flowRecords(t, batched.ct, now), flowRecords(t, single.ct, now)) {
				t.Error("the flow tables differ")
			}
			for _, a := range []netip.Addr{egress4, egress6} {
				for _, proto := range []uint8{header.ProtoTCP, header.ProtoUDP, header.ProtoICMPv4, header.ProtoICMPv6} {
					b, s := batched.p.NAT().PortsInUse(nat.Addr(addr16(a)), proto), single.p.NAT().PortsInUse(nat.Addr(addr16(a)), proto)
					if b != s {
						t.Errorf("%v proto %d: %d ports in use batched, %d one by one", a, proto, b, s)
					}
				}
			}
			t.Logf("%d frames, %d flows, stats %v", frames, batched.ct.Len(), bs.Counters)
		})
	}
}

// TestBatchDependencies pins what a frame sees of an earlier frame in the
// same batch, with absolute expectations (not only equality with the
// one-by-one path).
func TestBatchDependencies(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 20)
	syn := func(t *testing.T) []byte {
		return tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "S"}.build(t))
	}
	f1, f2 := func(t *testing.T) ([]byte, []byte) {
		a, b := fragments(t, pkt{src: pod1v4, dst: server4, proto: "udp", sport: 7000, dport: 9000, payload: payload}.build(t), 160)
		return tunnelFrame(t, podTun(), a), tunnelFrame(t, podTun(), b)
	}(t)
	cases := []struct {
		name    string
		frames  func(t *testing.T) [][]byte
		want    []DropReason // DropNone: sent
		flows   int
		created uint64
	}{
		{"syn_then_server_synack", func(t *testing.T) [][]byte {
			return [][]byte{syn(t), plainFrame(t, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: 40000, flags: "SA"}.build(t))}
		}, []DropReason{DropNone, DropNone}, 1, 1},
		{"syn_retransmitted", func(t *testing.T) [][]byte {
			return [][]byte{syn(t), syn(t)}
		}, []DropReason{DropNone, DropNone}, 1, 1},
		{"udp_then_icmp_error_about_it", func(t *testing.T) [][]byte {
			quote := pkt{src: egress4, dst: server4, proto: "udp", sport: 5000, dport: 53, payload: []byte("q")}.build(t)[:28]
			return [][]byte{tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t)),
				plainFrame(t, pkt{src: server4, dst: egress4, proto: "icmperr", icmpType: 3, icmpCode: 4, mtu: 1400, quote: quote}.build(t))}
		}, []DropReason{DropNone, DropNone}, 1, 1},
		{"fragments_in_order", func(t *testing.T) [][]byte { return [][]byte{f1, f2} },
			[]DropReason{DropNone, DropNone}, 1, 1},
		{"later_fragment_first", func(t *testing.T) [][]byte { return [][]byte{f2, f1} },
			[]DropReason{DropFragNoFirst, DropNone}, 1, 1},
		{"rst_before_syn", func(t *testing.T) [][]byte {
			// A RST opens nothing (an ACK would be picked up: newFlow).
			rst := tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "R"}.build(t))
			ack := tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "A"}.build(t))
			return [][]byte{rst, syn(t), ack}
		}, []DropReason{DropTCPNoFlow, DropNone, DropNone}, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 64, testConfig())
			in := c.frames(t)
			out := make([][]byte, len(in))
			for i := range out {
				out[i] = make([]byte, 2048)
			}
			res := make([]Result, len(in))
			f.process(testNow, in, out, res)
			for i, r := range res {
				if c.want[i] == DropTCPNoFlow && r.Verdict == VerdictTx {
					// Answered with an RST to the pod (resetToPod).
					if !decodeReset(t, out[i][:r.Len]).tcp.RST {
						t.Errorf("frame %d: sent, but not an RST", i)
					}
					continue
				}
				if c.want[i] == DropNone && r.Verdict != VerdictTx || c.want[i] != DropNone && (r.Verdict != VerdictDrop || r.Reason != c.want[i]) {
					t.Errorf("frame %d: %v %v, want %s", i, r.Verdict, r.Reason, wantString(c.want[i]))
				}
			}
			if s := f.p.Stats(); f.ct.Len() != c.flows || s.Count(CounterFlowsNew) != c.created {
				t.Errorf("%d flows, %d created; want %d, %d", f.ct.Len(), s.Count(CounterFlowsNew), c.flows, c.created)
			}
		})
	}
}

func wantString(r DropReason) string {
	if r == DropNone {
		return "tx"
	}
	return fmt.Sprintf("drop %v", r)
}

// TestBatchAllocs: a whole batch of 64 mixed frames allocates nothing.
func TestBatchAllocs(t *testing.T) {
	f := newFixture(t, 1<<12, testConfig())
	fs := hotFrames(t, f)
	in := make([][]byte, 0, conntrack.MaxBatch)
	for len(in) < cap(in) {
		for _, name := range []string{"established_v4", "established_v6", "reply_v4", "icmp_error_v4"} {
			in = append(in, fs[name])
		}
	}
	out := make([][]byte, len(in))
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]Result, len(in))
	if n := testing.AllocsPerRun(100, func() { f.process(testNow, in, out, res) }); n != 0 {
		t.Errorf("%v allocations per batch", n)
	}
	for i, r := range res {
		if r.Verdict != VerdictTx {
			t.Fatalf("frame %d: %v %v", i, r.Verdict, r.Reason)
		}
	}
}

// joinFrames packs frames into one fuzz input: each frame behind its
// 2-byte big-endian length.
func joinFrames(fs ...[]byte) []byte {
	var b []byte
	for _, f := range fs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b
}

// splitFrames undoes joinFrames; a short tail becomes the last frame.
func splitFrames(b []byte, max int) [][]byte {
	var fs [][]byte
	for len(b) > 0 && len(fs) < max {
		if len(b) < 2 {
			fs = append(fs, b)
			break
		}
		n := min(int(binary.BigEndian.Uint16(b)), len(b)-2)
		fs = append(fs, b[2:2+n])
		b = b[2+n:]
	}
	return fs
}

// FuzzBatch feeds arbitrary batches of frames to a batched worker and to a
// worker doing one lookup per frame, on twin pipelines: results, outputs
// and counters must stay identical, nothing may panic, no input is
// modified.
func FuzzBatch(f *testing.F) {
	pool, answered := framePool(f)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 40 {
		fs := make([][]byte, 1+rng.IntN(80))
		for i := range fs {
			fs[i] = pool[rng.IntN(len(pool))]
		}
		f.Add(joinFrames(fs...))
	}
	f.Add(joinFrames(answered...))
	batched := newFixture(f, 1<<12, smallUnderlay())
	single := newFixture(f, 1<<12, smallUnderlay())
	single.single = true
	const maxFrames = 2 * conntrack.MaxBatch
	out := make([][]byte, maxFrames)
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]Result, maxFrames)
	one := [][]byte{make([]byte, 2048)}
	oneRes := make([]Result, 1)
	now := testNow
	f.Fuzz(func(t *testing.T, b []byte) {
		cp := append([]byte(nil), b...)
		in := splitFrames(cp, maxFrames)
		if len(in) == 0 {
			return
		}
		now += int64(time.Millisecond)
		batched.process(now, in, out[:len(in)], res[:len(in)])
		if !bytes.Equal(cp, b) {
			t.Fatal("an input frame was modified")
		}
		for i, fr := range in {
			single.process(now, [][]byte{fr}, one, oneRes)
			if res[i] != oneRes[0] {
				t.Fatalf("frame %d of %d: batched %+v, one by one %+v", i, len(in), res[i], oneRes[0])
			}
			if r := res[i]; r.Verdict == VerdictTx && !bytes.Equal(out[i][:r.Len], one[0][:r.Len]) {
				t.Fatalf("frame %d of %d: outputs differ", i, len(in))
			}
			if r := res[i]; r.Verdict == VerdictDrop && (r.Reason == DropNone || r.Reason >= numDropReasons) {
				t.Fatalf("frame %d: drop without a valid reason: %d", i, r.Reason)
			}
		}
		if bs, ss := batched.p.Stats(), single.p.Stats(); bs != ss {
			t.Fatalf("counters differ:\nbatched    %+v\none by one %+v", bs, ss)
		}
	})
}

// TestNewFlowEgressIPChoice: with several egress IPs in a policy, every new
// flow leaves from the IP nat.Pick gives for its flow hash, in the batched
// path (which makes that choice early, in prefetchNewFlows, and keeps it
// for newFlow) and in the one-frame path alike, and the flows spread over
// all the IPs. It fails if the batch keeps another frame's choice or none.
func TestNewFlowEgressIPChoice(t *testing.T) {
	v4 := []netip.Addr{egress4, netip.MustParseAddr("192.0.2.21"), netip.MustParseAddr("192.0.2.22"), netip.MustParseAddr("192.0.2.23")}
	cfg := testConfig()
	cfg.Policies[0].EgressIPs = append(slices.Clone(v4), egress6)
	ips := make([]nat.Addr, len(v4))
	for i, a := range v4 {
		ips[i] = nat.Addr(a.As16())
	}
	batched := newFixture(t, 4096, cfg)
	single := newFixture(t, 4096, cfg)
	single.single = true

	const n = 192
	in := make([][]byte, n)
	want := make([]netip.Addr, n)
	for i := range in {
		p := pkt{src: pod1v4, dst: server4, sport: uint16(20000 + i), dport: 443}
		proto, dport := uint8(6), p.dport
		switch i % 3 {
		case 0:
			p.proto, p.flags = "tcp", "S"
		case 1:
			p.proto, proto = "udp", 17
		default:
			p.proto, proto, dport = "echo", 1, 0
		}
		in[i] = tunnelFrame(t, podTun(), p.build(t))
		h := nat.FlowHash(proto, nat.Addr(pod1v4.As16()), p.sport, nat.Addr(server4.As16()), dport)
		want[i] = netip.AddrFrom16(ips[nat.Pick(ips, h)]).Unmap()
	}
	seen := map[netip.Addr]int{}
	for _, f := range []*fixture{batched, single} {
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, 2048)
		}
		res := make([]Result, n)
		f.process(testNow, in, out, res)
		for i, r := range res {
			if r.Verdict != VerdictTx {
				t.Fatalf("single=%v frame %d: %v %v", f.single, i, r.Verdict, r.Reason)
			}
			got, _ := netip.AddrFromSlice(out[i][header.EthernetLen+12 : header.EthernetLen+16])
			if got != want[i] {
				t.Fatalf("single=%v frame %d left from %v, want %v (nat.Pick)", f.single, i, got, want[i])
			}
			seen[got]++
		}
	}
	if len(seen) != len(v4) {
		t.Fatalf("flows used %d of the %d egress IPs: %v", len(seen), len(v4), seen)
	}
	if b, s := flowRecords(t, batched.ct, testNow), flowRecords(t, single.ct, testNow); !slices.Equal(b, s) {
		t.Fatal("the batched and the one-frame path made different flows")
	}
}
