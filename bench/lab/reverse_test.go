package main

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/gateway/header"
)

var (
	testWire = wire{outerSrc: netip.MustParseAddr("192.0.2.11"), outerDst: netip.MustParseAddr("192.0.2.21"), vni: 100, port: 4789,
		pod: netip.MustParseAddr("198.18.1.2"), server: netip.MustParseAddr("198.51.100.10"), podMTU: 1430,
		outerSrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, outerDstMAC: [6]byte{2, 0, 0, 0, 0, 2}}
	testBack = back{srcMAC: [6]byte{2, 0, 0, 0, 0, 3}, dstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		server: netip.MustParseAddr("198.51.100.10"), egress: netip.MustParseAddr("192.0.2.100")}
)

// sumOK reports whether the transport checksum of an IPv4 packet is valid
// (ICMP: over the message; TCP and UDP: with the pseudo-header).
func sumOK(ip []byte) bool {
	l := int(ip[2])<<8 | int(ip[3])
	p := ip[20:l]
	var ps uint32
	if ip[9] != protoICMP {
		ps = header.PseudoHeaderChecksum(ip[9], ip[12:16], ip[16:20], uint16(len(p)))
	}
	return header.ChecksumFold(header.Checksum(ip[:20], 0)) == 0 && header.ChecksumFold(header.Checksum(p, ps)) == 0
}

// The frames from outside, with gopacket as the oracle: the server's UDP
// answer, the ICMP error quoting the flow's packet as the gateway sent it,
// and the SYN-ACK acknowledging the pod's SYN; every checksum valid.
func TestBuildFromOutside(t *testing.T) {
	const flow, seq, ts = 123_456, 987_654_321, 5_000_000_007
	sport, dport := flowPorts(flow)
	buf := make([]byte, 2048)
	for i := range buf {
		buf[i] = 0xee
	}

	n := testBack.buildReply(buf, 64, flow, seq, ts)
	pkt := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if n+fcsLen != 64 || ip == nil || udp == nil || ip.SrcIP.String() != "198.51.100.10" || ip.DstIP.String() != "192.0.2.100" ||
		uint16(udp.SrcPort) != dport || uint16(udp.DstPort) != sport || !sumOK(buf[ethLen:n]) {
		t.Fatalf("reply: %d bytes, %v", n, pkt)
	}

	n = testBack.buildFragNeeded(buf, 64, flow, seq, ts)
	pkt = gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
	icmp, _ := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if icmp == nil || icmp.TypeCode != layers.CreateICMPv4TypeCode(3, fragNeeded) || !sumOK(buf[ethLen:n]) {
		t.Fatalf("frag-needed: %v", pkt)
	}
	q := gopacket.NewPacket(icmp.Payload, layers.LayerTypeIPv4, gopacket.Default)
	qip, _ := q.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if qip == nil || qip.SrcIP.String() != "192.0.2.100" || qip.DstIP.String() != "198.51.100.10" ||
		header.ChecksumFold(header.Checksum(icmp.Payload[:20], 0)) != 0 {
		t.Fatalf("frag-needed quotes %v", q)
	}
	if qu := icmp.Payload[20:]; int(qu[0])<<8|int(qu[1]) != int(sport) || int(qu[2])<<8|int(qu[3]) != int(dport) {
		t.Fatalf("frag-needed quotes ports %v, want %d→%d", qu[:4], sport, dport)
	}

	n = testWire.buildSYN(buf, 64, flow, seq, ts)
	vx := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeVXLAN)
	if vx == nil {
		t.Fatal("SYN: no VXLAN layer")
	}
	inner := vx.LayerPayload()
	pkt = gopacket.NewPacket(inner, layers.LayerTypeEthernet, gopacket.Default)
	syn, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if len(inner)+fcsLen != 64 || syn == nil || !syn.SYN || syn.ACK || uint16(syn.SrcPort) != sport || uint16(syn.DstPort) != dport ||
		!sumOK(inner[ethLen:]) {
		t.Fatalf("SYN: %d-byte inner frame %v", len(inner), pkt)
	}
	checkSums(t, "SYN outer", buf[:n])

	// The responder reads the SYN as the gateway sent it out (from the
	// egress IP) and answers it.
	out := append([]byte(nil), inner...)
	copy(out[ethLen+12:ethLen+16], testBack.egress.AsSlice())
	ps, pd, pseq, ok := parseSYN(out, testBack.egress)
	if !ok || ps != sport || pd != dport || pseq != syn.Seq {
		t.Fatalf("parseSYN: %d→%d seq %d ok=%v, want %d→%d seq %d", ps, pd, pseq, ok, sport, dport, syn.Seq)
	}
	if _, _, _, ok := parseSYN(out, testBack.server); ok {
		t.Fatal("parseSYN took a SYN from another source")
	}
	n = testBack.buildSynAck(buf, pd, ps, pseq+1)
	pkt = gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
	sa, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if n+fcsLen != 64 || sa == nil || !sa.SYN || !sa.ACK || sa.Ack != syn.Seq+1 || uint16(sa.SrcPort) != dport || uint16(sa.DstPort) != sport ||
		!sumOK(buf[ethLen:n]) {
		t.Fatalf("SYN-ACK: %v (the SYN's seq %d)", pkt, syn.Seq)
	}
	if _, _, _, ok := parseSYN(buf[:n], testBack.server); ok {
		t.Fatal("parseSYN took a SYN-ACK")
	}
}

// The receiver's reading of what the gateway sends back: the answer and
// the ICMP error inside VXLAN, translated to the pod, give back the stamp
// and the server as source; the sample filter's offset lands on the
// sequence number's low byte.
func TestParseIn(t *testing.T) {
	const flow, ts = 42, 77_000_001
	var seq uint64 = 0x1234_5678_9abc
	for _, c := range []struct {
		name  string
		build builder
		icmp  bool
	}{{"reply", testBack.buildReply, false}, {"frag-needed", testBack.buildFragNeeded, true}} {
		var plain [256]byte
		n := c.build(plain[:], 64, flow, seq, ts)
		// As the gateway sends it to w1: in VXLAN, to the pod.
		var f [512]byte
		o := testWire.outerLen()
		testWire.putOuter(f[:], o+n, flow)
		copy(f[o+12:o+n], plain[12:n])
		copy(f[o+ethLen+16:], testWire.pod.AsSlice())
		st, ok := parseIn(f[:o+n])
		if !ok || st.seq != seq || st.ts != ts || st.src != testBack.server {
			t.Fatalf("%s: parseIn %+v ok=%v", c.name, st, ok)
		}
		if got := f[inStampOffset(c.icmp)]; got != byte(seq) {
			t.Fatalf("%s: sample offset reads %#x, want the sequence number's low byte %#x", c.name, got, byte(seq))
		}
		if _, ok := parseIn(plain[:n]); ok {
			t.Fatalf("%s: parseIn took a frame without VXLAN", c.name)
		}
	}
}

// Which directions each kind of traffic sends in, and how its batches go out.
func TestPlan(t *testing.T) {
	r := &rig{}
	for _, c := range []struct {
		tr       traffic
		fwd, rev bool // the legs that receive
		sends    int  // the legs the generator sends on
	}{
		{traffic{}, true, false, 1},
		{traffic{Dir: dirReply}, false, true, 1},
		{traffic{Dir: dirBoth}, true, true, 2},
		{traffic{Kind: kindICMPErr}, false, true, 1},
		// The generator sends the SYNs; the responder the SYN-ACKs.
		{traffic{Kind: kindTCPSYN, New: true}, true, true, 1},
	} {
		fwd, rev := c.tr.legs()
		legs, builds := r.plan(c.tr)
		if fwd != c.fwd || rev != c.rev || len(legs) != c.sends || len(builds) != c.sends {
			t.Errorf("%+v: legs fwd %v rev %v (plan %d legs), want %v %v %d", c.tr, fwd, rev, len(legs), c.fwd, c.rev, c.sends)
		}
		if fwd && legs[0] != &r.fwd || !fwd && legs[0] != &r.rev {
			t.Errorf("%+v: the plan's first leg is not the first receiving one", c.tr)
		}
	}
}

// The queue-scaling line compares each side's two-queue run with its own
// one-queue run, and is absent without both.
func TestScalingLine(t *testing.T) {
	rep := &report{}
	if got := rep.scaling(); got != "" {
		t.Fatalf("no results, scaling %q", got)
	}
	add := func(mode, name string, ndr, pdr float64) {
		r := &result{Scenario: scenario{Name: name, Underlay: "ipv4"}, Mode: mode}
		r.NDR.Rate, r.PDR.Rate = ndr, pdr
		rep.Results = append(rep.Results, r)
	}
	add("kernel", "est-10k", 100, 200)
	add("egret", "est-10k", 150, 300)
	add("egret", "est-10k-2q", 270, 450)
	want := "\nTwo gateway queues against one (est-10k-2q / est-10k): egret NDR 1.80x, PDR 1.50x.\n"
	if got := rep.scaling(); got != want {
		t.Fatalf("scaling %q, want %q", got, want)
	}
}
