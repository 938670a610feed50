package gateway

import (
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/nat"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// decodedReset is an RST frame the gateway sent to a node, decoded by
// gopacket, its checksums verified by gopacket too.
type decodedReset struct {
	outerSrc, outerDst netip.Addr
	udpDst             layers.UDPPort
	vni                uint32
	src, dst           netip.Addr
	tcp                *layers.TCP
}

// decodeReset decodes frame, an encapsulated TCP segment to a pod, with
// gopacket alone, and checks every checksum of it against gopacket's own
// computation: the outer IPv4 header's (or the outer UDP's over IPv6), the
// inner IPv4 header's and the TCP checksum.
func decodeReset(t *testing.T, frame []byte) decodedReset {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("gopacket cannot decode the frame: %v", el.Error())
	}
	var d decodedReset
	var ips []gopacket.NetworkLayer
	var udp *layers.UDP
	for _, l := range p.Layers() {
		switch l := l.(type) {
		case *layers.IPv4:
			ips = append(ips, l)
			want := l.Checksum
			if err := l.SerializeTo(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
				t.Fatal(err)
			}
			if l.Checksum != want {
				t.Errorf("IPv4 %v→%v: header checksum %#04x, gopacket computes %#04x", l.SrcIP, l.DstIP, want, l.Checksum)
			}
		case *layers.IPv6:
			ips = append(ips, l)
		case *layers.UDP:
			udp = l
		case *layers.VXLAN:
			d.vni = l.VNI
		case *layers.Geneve:
			d.vni = l.VNI
		case *layers.TCP:
			d.tcp = l
		}
	}
	if len(ips) != 2 || udp == nil || d.tcp == nil {
		t.Fatalf("want outer IP, UDP, tunnel, inner IP, TCP; got %v", p.Layers())
	}
	addr := func(n gopacket.NetworkLayer) (netip.Addr, netip.Addr) {
		s, _ := netip.AddrFromSlice(n.NetworkFlow().Src().Raw())
		ds, _ := netip.AddrFromSlice(n.NetworkFlow().Dst().Raw())
		return s, ds
	}
	d.outerSrc, d.outerDst = addr(ips[0])
	d.src, d.dst = addr(ips[1])
	d.udpDst = udp.DstPort
	// gopacket recomputes a checksum when it serializes a layer; a
	// difference from the received one is a wrong checksum.
	recompute := func(what string, l interface {
		gopacket.SerializableLayer
		SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
	}, nl gopacket.NetworkLayer, payload []byte, get func() uint16) {
		want := get()
		if err := l.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		if err := gopacket.SerializeLayers(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{ComputeChecksums: true}, l, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		if got := get(); got != want {
			t.Errorf("%s checksum %#04x, gopacket computes %#04x", what, want, got)
		}
	}
	if _, v6 := ips[0].(*layers.IPv6); v6 {
		recompute("outer UDP", udp, ips[0], udp.Payload, func() uint16 { return udp.Checksum })
	} else if udp.Checksum != 0 {
		t.Errorf("outer UDP checksum over IPv4 %#04x, want 0", udp.Checksum)
	}
	recompute("TCP", d.tcp, ips[1], d.tcp.Payload, func() uint16 { return d.tcp.Checksum })
	return d
}

// newFixtureNoPickUp is a gateway without port preservation, so that a
// pod's segment of an unknown flow cannot be picked up (TestPickUp) and is
// reset instead, as it is when the pod's port is taken.
func newFixtureNoPickUp(t *testing.T, cfg Config) *fixture {
	nc := nat.DefaultConfig()
	nc.PreservePort = false
	return newFixtureNAT(t, 64, cfg, nc)
}

// TestResetForUnknownFlow: a TCP segment from a pod for a flow the gateway
// does not hold and cannot pick up (here: a fresh gateway, as after a restart) is answered
// with an RST from its destination, encapsulated to the pod's node with the
// segment's tunnel and VNI, with the sequence numbers of RFC 9293
// §3.10.7.1; the segment is counted as tcp_no_flow and the RST as
// tcp_resets_sent, and no flow is made. Before, the segment was dropped in
// silence and the pod's connection hung until its own timeout.
func TestResetForUnknownFlow(t *testing.T) {
	tu6 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
	cases := []struct {
		name          string
		tu            tun
		p             pkt
		seq, ack      uint32
		ackFlag       bool
		outer, udpDst uint16
	}{
		{"ack_v4_vxlan", podTun(), pkt{src: pod1v4, dst: server4, flags: "A", seq: 5000, ack: 777, payload: make([]byte, 10)}, 777, 0, false, 4, 4789},
		{"data_no_ack", podTun(), pkt{src: pod1v4, dst: server4, flags: "", seq: 5000, payload: make([]byte, 10)}, 0, 5010, true, 4, 4789},
		{"fin_no_ack", podTun(), pkt{src: pod1v4, dst: server4, flags: "F", seq: 5000}, 0, 5001, true, 4, 4789},
		{"fin_data_no_ack", podTun(), pkt{src: pod1v4, dst: server4, flags: "F", seq: 5000, payload: make([]byte, 3)}, 0, 5004, true, 4, 4789},
		{"fin_ack", podTun(), pkt{src: pod1v4, dst: server4, flags: "FA", seq: 5000, ack: 1 << 31}, 1 << 31, 0, false, 4, 4789},
		{"syn_fin_no_ack", podTun(), pkt{src: pod1v4, dst: server4, flags: "SF", seq: 5000}, 0, 5002, true, 4, 4789},
		{"seq_wraps", podTun(), pkt{src: pod1v4, dst: server4, flags: "", seq: 0xffffffff, payload: make([]byte, 2)}, 0, 1, true, 4, 4789},
		{"ack_v6_geneve", tu6, pkt{src: pod2v6, dst: server6, flags: "A", seq: 5000, ack: 4242}, 4242, 0, false, 6, 6081},
		{"data_no_ack_v6", tu6, pkt{src: pod2v6, dst: server6, flags: "", seq: 9, payload: make([]byte, 100)}, 0, 109, true, 6, 6081},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixtureNoPickUp(t, testConfig())
			c.p.proto, c.p.sport, c.p.dport = "tcp", 40000, 443
			out := make([]byte, 2048)
			r := processOne(f.w, testNow, tunnelFrame(t, c.tu, c.p.build(t)), out)
			if r.Verdict != VerdictTx || r.Ifindex != underlayHop.Ifindex {
				t.Fatalf("got %v %v to ifindex %d, want an RST sent to ifindex %d", r.Verdict, r.Reason, r.Ifindex, underlayHop.Ifindex)
			}
			d := decodeReset(t, out[:r.Len])
			if d.outerSrc != c.tu.outerDst || d.outerDst != c.tu.outerSrc || int(d.udpDst) != int(c.udpDst) || d.vni != c.tu.vni {
				t.Errorf("encapsulated %v→%v port %d VNI %d, want %v→%v port %d VNI %d",
					d.outerSrc, d.outerDst, d.udpDst, d.vni, c.tu.outerDst, c.tu.outerSrc, c.udpDst, c.tu.vni)
			}
			if d.src != c.p.dst || d.dst != c.p.src || d.tcp.SrcPort != 443 || d.tcp.DstPort != 40000 {
				t.Errorf("RST %v:%d→%v:%d, want %v:443→%v:40000", d.src, d.tcp.SrcPort, d.dst, d.tcp.DstPort, c.p.dst, c.p.src)
			}
			tc := d.tcp
			if !tc.RST || tc.ACK != c.ackFlag || tc.SYN || tc.FIN || tc.PSH || tc.URG || tc.Seq != c.seq || tc.Ack != c.ack || len(tc.Payload) != 0 {
				t.Errorf("RST flags R=%v A=%v S=%v F=%v seq %d ack %d, %d bytes; want R, A=%v, seq %d ack %d, no data",
					tc.RST, tc.ACK, tc.SYN, tc.FIN, tc.Seq, tc.Ack, len(tc.Payload), c.ackFlag, c.seq, c.ack)
			}
			s := f.p.Stats()
			if s.Drop(DropTCPNoFlow) != 1 || s.Count(CounterTCPResetsSent) != 1 || s.Count(CounterFlowsNew) != 0 || f.ct.Len() != 0 {
				t.Errorf("tcp_no_flow %d, tcp_resets_sent %d, flows created %d, in table %d; want 1, 1, 0, 0",
					s.Drop(DropTCPNoFlow), s.Count(CounterTCPResetsSent), s.Count(CounterFlowsNew), f.ct.Len())
			}
		})
	}
}

// TestNoResetForReset: an RST (with or without ACK) of an unknown flow is
// never answered (RFC 9293 §3.10.7.1): two gateways, or a gateway and a
// pod, would otherwise answer each other's RSTs.
func TestNoResetForReset(t *testing.T) {
	for _, flags := range []string{"R", "RA"} {
		f := newFixtureNoPickUp(t, testConfig())
		p := pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: flags, ack: 5}
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), p.build(t)), make([]byte, 2048))
		if r.Verdict != VerdictDrop || r.Reason != DropTCPNoFlow {
			t.Errorf("%s: %v %v, want drop tcp_no_flow", flags, r.Verdict, r.Reason)
		}
		if s := f.p.Stats(); s.Count(CounterTCPResetsSent) != 0 || s.Drop(DropTCPNoFlow) != 1 {
			n := s.Count(CounterTCPResetsSent)
			t.Errorf("%s: %d RSTs sent, tcp_no_flow %d; want 0, 1", flags, n, s.Drop(DropTCPNoFlow))
		}
	}
}

// TestResetRateLimited: RSTs come from a per-source bucket
// (tcpResetSrcBurst, one more every tcpResetSrcEvery) and a per-processor
// one (tcpResetBurst); a segment over either limit is only dropped as
// tcp_no_flow. One pod using up its own bucket leaves the other pods'
// answers alone.
func TestResetRateLimited(t *testing.T) {
	const pods = 16 // pods*tcpResetSrcBurst > tcpResetBurst: the processor's limit shows too
	cfg := testConfig()
	var srcs []netip.Addr
	for i := range pods {
		a := netip.AddrFrom4([4]byte{10, 244, 1, byte(100 + i)})
		srcs = append(srcs, a)
		cfg.Nodes[0].Pods = append(cfg.Nodes[0].Pods, Pod{Addr: a, Policy: "web"})
	}
	f := newFixtureNoPickUp(t, cfg)
	// Distinct buckets for the test's pods, so the counts below are exact.
	for {
		seen := map[int]bool{}
		for _, a := range srcs {
			b := a.As16()
			seen[f.w.resets.slot(&b)] = true
		}
		if len(seen) == pods {
			break
		}
		f.w.resets.init()
	}
	send := func(now int64, src netip.Addr, n int) (sent int) {
		fr := tunnelFrame(t, podTun(), pkt{src: src, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "A", ack: 9}.build(t))
		in, out, res := make([][]byte, n), make([][]byte, n), make([]Result, n)
		for i := range in {
			in[i], out[i] = fr, make([]byte, 2048)
		}
		f.process(now, in, out, res)
		for i, r := range res {
			switch {
			case r.Verdict == VerdictTx:
				sent++
			case r.Verdict != VerdictDrop || r.Reason != DropTCPNoFlow:
				t.Fatalf("frame %d: %v %v, want an RST or tcp_no_flow", i, r.Verdict, r.Reason)
			}
		}
		return sent
	}
	if n := send(testNow, srcs[0], 100); n != tcpResetSrcBurst {
		t.Errorf("one pod, 100 segments: %d RSTs, want its burst %d", n, tcpResetSrcBurst)
	}
	if n := send(testNow, srcs[1], 10); n != 10 {
		t.Errorf("another pod after the first used up its bucket: %d RSTs of 10", n)
	}
	if n := send(testNow+3*tcpResetSrcEvery, srcs[0], 10); n != 3 {
		t.Errorf("the first pod %d ns later: %d RSTs, want 3", 3*tcpResetSrcEvery, n)
	}
	// Every other pod at its burst at the same time: the processor's
	// bucket, full again after 30 ms (150 tokens back) less the first
	// pod's 3, caps the sum.
	total := 0
	for _, a := range srcs[2:] {
		total += send(testNow+3*tcpResetSrcEvery, a, tcpResetSrcBurst)
	}
	if want := tcpResetBurst - 3; total != want {
		t.Errorf("%d pods at once: %d RSTs, want the processor's remaining %d", pods-2, total, want)
	}
	s := f.p.Stats()
	if sent := s.Count(CounterTCPResetsSent); s.Drop(DropTCPNoFlow) != 100+10+10+uint64((pods-2)*tcpResetSrcBurst) || sent != uint64(tcpResetSrcBurst+10+3+total) {
		t.Errorf("tcp_no_flow %d, tcp_resets_sent %d", s.Drop(DropTCPNoFlow), sent)
	}
}

// TestResetAllocs: answering with an RST allocates nothing.
func TestResetAllocs(t *testing.T) {
	f := newFixtureNoPickUp(t, testConfig())
	fr := tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "A", ack: 9}.build(t))
	out := make([]byte, 2048)
	now := testNow
	if n := testing.AllocsPerRun(200, func() {
		now += tcpResetSrcEvery // one token per run: every run sends an RST
		if r := processOne(f.w, now, fr, out); r.Verdict != VerdictTx {
			t.Fatalf("%v %v, want an RST", r.Verdict, r.Reason)
		}
	}); n != 0 {
		t.Errorf("%v allocations per RST", n)
	}
}
