package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestICMPToPodRateLimited: ICMP errors to pods (time exceeded, too big)
// come from a per-worker bucket of icmpPodBurst refilled at one every
// icmpPodEvery; what is over the limit is dropped as icmp_rate_limited. The
// bucket is separate from the one for errors to the outside.
func TestICMPToPodRateLimited(t *testing.T) {
	ttl1 := pkt{src: pod1v4, dst: server4, proto: "udp", sport: 33434, dport: 33435, ttl: 1, payload: make([]byte, 100)}
	tooBig := pkt{src: pod1v4, dst: server4, proto: "udp", sport: 6000, dport: 53, payload: make([]byte, 1600), df: true}
	batchOf := func(fr []byte, n int) ([][]byte, [][]byte, []Result) {
		in, out := make([][]byte, n), make([][]byte, n)
		for i := range in {
			in[i], out[i] = fr, make([]byte, 2048)
		}
		return in, out, make([]Result, n)
	}
	count := func(res []Result) (sent, limited int) {
		for _, r := range res {
			switch {
			case r.Verdict == VerdictTx:
				sent++
			case r.Verdict == VerdictDrop && r.Reason == DropICMPRateLimited:
				limited++
			}
		}
		return
	}

	t.Run("burst_then_refill", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		in, out, res := batchOf(tunnelFrame(t, podTun(), ttl1.build(t)), 100)
		f.process(testNow, in, out, res)
		for i, r := range res {
			if i < icmpPodBurst && r.Verdict != VerdictTx || i >= icmpPodBurst && r.Reason != DropICMPRateLimited {
				t.Fatalf("frame %d: %v %v; want the first %d answered, the rest icmp_rate_limited", i, r.Verdict, r.Reason, icmpPodBurst)
			}
		}
		s := f.p.Stats()
		if s.Count(CounterICMPSent) != icmpPodBurst || s.Drop(DropICMPRateLimited) != 100-icmpPodBurst || s.Drop(DropTTLExpired) != 0 {
			t.Errorf("icmp sent %d, rate limited %d, ttl_expired %d; want %d, %d, 0",
				s.Count(CounterICMPSent), s.Drop(DropICMPRateLimited), s.Drop(DropTTLExpired), icmpPodBurst, 100-icmpPodBurst)
		}
		// 10 ms later: 10 tokens, the too-big answers take them too.
		in, out, res = batchOf(tunnelFrame(t, podTun(), tooBig.build(t)), 30)
		f.process(testNow+10*icmpPodEvery, in, out, res)
		if sent, limited := count(res); sent != 10 || limited != 20 {
			t.Errorf("after 10 ms: %d too-big sent, %d limited; want 10, 20", sent, limited)
		}
		// A long idle fills the bucket to the burst, not beyond.
		in, out, res = batchOf(tunnelFrame(t, podTun(), ttl1.build(t)), 100)
		f.process(testNow+int64(time.Hour), in, out, res)
		if sent, limited := count(res); sent != icmpPodBurst || limited != 100-icmpPodBurst {
			t.Errorf("after an hour: %d sent, %d limited; want %d, %d", sent, limited, icmpPodBurst, 100-icmpPodBurst)
		}
	})

	t.Run("independent_of_outside", func(t *testing.T) {
		f := newFixture(t, 64, smallUnderlay())
		_, fwd := f.run(t, tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t)))
		natPort := uint16(gopacket.NewPacket(fwd, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeUDP).(*layers.UDP).SrcPort)
		big := plainFrame(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: natPort, payload: make([]byte, 1472), df: true}.build(t))

		in, out, res := batchOf(tunnelFrame(t, podTun(), ttl1.build(t)), 2*icmpPodBurst)
		f.process(testNow, in, out, res)
		if sent, _ := count(res); sent != icmpPodBurst {
			t.Fatalf("%d time exceeded sent, want %d", sent, icmpPodBurst)
		}
		// The pods' bucket is empty; the outside's is full.
		in, out, res = batchOf(big, 2*icmpOutBurst)
		f.process(testNow, in, out, res)
		sent := 0
		for _, r := range res {
			if r.Verdict == VerdictTx {
				sent++
			} else if r.Reason != DropMTUExceeded {
				t.Fatalf("too big from outside: %v %v", r.Verdict, r.Reason)
			}
		}
		if sent != icmpOutBurst {
			t.Errorf("%d frag-needed to the outside with the pods' bucket empty, want %d", sent, icmpOutBurst)
		}
		s := f.p.Stats()
		if s.Drop(DropICMPRateLimited) != icmpPodBurst || s.Drop(DropMTUExceeded) != icmpOutBurst {
			t.Errorf("rate limited %d, mtu_exceeded %d; want %d, %d", s.Drop(DropICMPRateLimited), s.Drop(DropMTUExceeded), icmpPodBurst, icmpOutBurst)
		}

		// And the other way round: the outside's bucket empty, a pod still
		// gets its answer once its own bucket has a token.
		if r := processOne(f.w, testNow+icmpPodEvery, tunnelFrame(t, podTun(), ttl1.build(t)), make([]byte, 2048)); r.Verdict != VerdictTx {
			t.Errorf("time exceeded with the outside's bucket empty: %v %v", r.Verdict, r.Reason)
		}
	})

	t.Run("no_router_address_takes_no_token", func(t *testing.T) {
		cfg := testConfig()
		cfg.RouterV6 = netip.Addr{} // no IPv6 router address: IPv6 pods get no answer
		f := newFixture(t, 64, cfg)
		p6 := ttl1
		p6.src, p6.dst = pod1v6, server6
		in, out, res := batchOf(tunnelFrame(t, podTun(), p6.build(t)), 100)
		f.process(testNow, in, out, res)
		for i, r := range res {
			if r.Verdict != VerdictDrop || r.Reason != DropTTLExpired {
				t.Fatalf("frame %d: %v %v, want ttl_expired (no router address)", i, r.Verdict, r.Reason)
			}
		}
		in, out, res = batchOf(tunnelFrame(t, podTun(), ttl1.build(t)), icmpPodBurst)
		f.process(testNow, in, out, res)
		if sent, _ := count(res); sent != icmpPodBurst {
			t.Errorf("%d IPv4 answers after the unanswerable IPv6 packets, want the full burst %d", sent, icmpPodBurst)
		}
	})
}
