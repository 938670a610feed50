package gateway

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sort"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket"
	"github.com/google/gopacket/ip4defrag"
	"github.com/google/gopacket/layers"
)

// udpHead is a UDP header (ports 5000 → 53) and n-8 bytes after it.
func udpHead(n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint16(b[0:], 5000)
	binary.BigEndian.PutUint16(b[2:], 53)
	binary.BigEndian.PutUint16(b[4:], uint16(n))
	return b
}

// rawFrag4 builds one IPv4 fragment: payload at byte offset off of the
// datagram with identification id, MF set if more.
func rawFrag4(t testing.TB, src, dst netip.Addr, proto layers.IPProtocol, id uint16, off int, more bool, payload []byte) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, Id: id, FragOffset: uint16(off / 8),
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	if more {
		ip.Flags = layers.IPv4MoreFragments
	}
	return serialize(t, ip, gopacket.Payload(payload))
}

// rawFrag6 builds one IPv6 fragment (a fragment header, then payload).
func rawFrag6(t testing.TB, src, dst netip.Addr, proto uint8, id uint32, off int, more bool, payload []byte) []byte {
	fh := []byte{proto, 0, 0, 0, 0, 0, 0, 0}
	fo := uint16(off)
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(fh[2:], fo)
	binary.BigEndian.PutUint32(fh[4:], id)
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	return serialize(t, ip, gopacket.Payload(append(fh, payload...)))
}

// fragment cuts the whole IP packet's payload at the byte offsets cuts
// (multiples of 8) into fragments of identification id, in order.
func fragment(t testing.TB, whole []byte, id uint32, cuts ...int) [][]byte {
	v4 := whole[0]>>4 == 4
	hl := header.IPv6Len
	if v4 {
		hl = int(whole[0]&0xf) * 4
	}
	body := whole[hl:]
	var src, dst netip.Addr
	var proto uint8
	if v4 {
		src, dst, proto = netip.AddrFrom4([4]byte(whole[12:16])), netip.AddrFrom4([4]byte(whole[16:20])), whole[9]
	} else {
		src, dst, proto = netip.AddrFrom16([16]byte(whole[8:24])), netip.AddrFrom16([16]byte(whole[24:40])), whole[6]
	}
	bounds := append(append([]int{0}, cuts...), len(body))
	var out [][]byte
	for i := 0; i+1 < len(bounds); i++ {
		part, more := body[bounds[i]:bounds[i+1]], i+2 < len(bounds)
		if v4 {
			out = append(out, rawFrag4(t, src, dst, layers.IPProtocol(proto), uint16(id), bounds[i], more, part))
		} else {
			out = append(out, rawFrag6(t, src, dst, proto, id, bounds[i], more, part))
		}
	}
	return out
}

// reassemble puts IP fragments (IPv4 through gopacket's ip4defrag, IPv6 by
// offset) back together and returns the transport payload with the
// addresses of the datagram.
func reassemble(t *testing.T, frags [][]byte) (src, dst netip.Addr, l4 []byte) {
	t.Helper()
	if frags[0][0]>>4 == 4 {
		d := ip4defrag.NewIPv4Defragmenter()
		for _, f := range frags {
			p := gopacket.NewPacket(f, layers.LayerTypeIPv4, gopacket.Default)
			ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			whole, err := d.DefragIPv4(ip)
			if err != nil {
				t.Fatalf("gopacket refuses to reassemble: %v", err)
			}
			if whole != nil {
				return netip.AddrFrom4([4]byte(whole.SrcIP.To4())), netip.AddrFrom4([4]byte(whole.DstIP.To4())), whole.Payload
			}
		}
		t.Fatal("gopacket found the datagram incomplete")
	}
	type part struct {
		off  int
		data []byte
	}
	var parts []part
	for _, f := range frags {
		p := gopacket.NewPacket(f, layers.LayerTypeIPv6, gopacket.Default)
		fh, ok := p.Layer(layers.LayerTypeIPv6Fragment).(*layers.IPv6Fragment)
		if !ok {
			t.Fatalf("output is not an IPv6 fragment: % x", f)
		}
		parts = append(parts, part{int(fh.FragmentOffset) * 8, fh.Payload})
		src, dst = netip.AddrFrom16([16]byte(f[8:24])), netip.AddrFrom16([16]byte(f[24:40]))
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].off < parts[j].off })
	for _, p := range parts {
		if p.off != len(l4) {
			t.Fatalf("fragments leave a gap or overlap at %d", len(l4))
		}
		l4 = append(l4, p.data...)
	}
	return src, dst, l4
}

// TestFragmentsBothDirections: a fragmented UDP datagram from a pod, and the
// server's fragmented answer (a large EDNS response), IPv4 and IPv6, with
// the later fragments out of order among themselves. Every fragment is
// translated; reassembled, each datagram has the translated addresses and
// ports and a valid checksum. IPv6 fragments used to be dropped.
func TestFragmentsBothDirections(t *testing.T) {
	for _, c := range []struct {
		name        string
		pod, server netip.Addr
		egress      netip.Addr
	}{{"v4", pod1v4, server4, egress4}, {"v6", pod1v6, server6, egress6}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixtureNAT(t, 64, testConfig(), func() nat.Config { c := nat.DefaultConfig(); c.PreservePort = false; return c }())
			payload := bytes.Repeat([]byte("0123456789abcdef"), 40)
			q := pkt{src: c.pod, dst: c.server, proto: "udp", sport: 7000, dport: 53, payload: payload}.build(t)
			fs := fragment(t, q, 0x1234, 160, 320)
			var outs [][]byte
			for _, fr := range [][]byte{fs[0], fs[2], fs[1]} {
				r, o := f.run(t, tunnelFrame(t, podTun(), fr))
				mustTx(t, r, outHop.Ifindex)
				outs = append(outs, append([]byte(nil), o[14:r.Len]...))
			}
			src, dst, l4 := reassemble(t, outs)
			if src != c.egress || dst != c.server {
				t.Fatalf("reassembled %v → %v, want %v → %v", src, dst, c.egress, c.server)
			}
			if refSum(pseudo(src.AsSlice(), dst.AsSlice(), header.ProtoUDP, len(l4)), l4) != 0xffff {
				t.Error("reassembled outbound datagram has a bad UDP checksum")
			}
			natPort := binary.BigEndian.Uint16(l4)
			if !bytes.Equal(l4[8:], payload) {
				t.Error("outbound payload changed")
			}

			a := pkt{src: c.server, dst: c.egress, proto: "udp", sport: 53, dport: natPort, payload: payload}.build(t)
			fs = fragment(t, a, 0x5678, 240, 480)
			outs = outs[:0]
			for _, fr := range [][]byte{fs[0], fs[2], fs[1]} {
				r, o := f.run(t, plainFrame(t, fr))
				mustTx(t, r, underlayHop.Ifindex)
				outs = append(outs, append([]byte(nil), checkEncap(t, o[:r.Len], node1VTEP, node1MAC, TunnelVXLAN, testVNI)...))
			}
			src, dst, l4 = reassemble(t, outs)
			if src != c.server || dst != c.pod || binary.BigEndian.Uint16(l4[2:]) != 7000 {
				t.Fatalf("reassembled answer %v → %v port %d, want %v → %v port 7000", src, dst, binary.BigEndian.Uint16(l4[2:]), c.server, c.pod)
			}
			if refSum(pseudo(src.AsSlice(), dst.AsSlice(), header.ProtoUDP, len(l4)), l4) != 0xffff {
				t.Error("reassembled answer has a bad UDP checksum")
			}
			if n := f.w.frags.live(); n != 0 {
				t.Errorf("%d fragment entries live after both datagrams completed", n)
			}
		})
	}
}

// TestFragmentOrderAndShape: a later fragment before its first is dropped
// (not buffered) and counted; once the first is through it passes. A first
// fragment too small for the TCP header (RFC 1858) and a later fragment
// overlapping the first's bytes (RFC 3128) are dropped, IPv4 and IPv6.
func TestFragmentOrderAndShape(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	q := pkt{src: pod1v6, dst: server6, proto: "udp", sport: 7001, dport: 53, payload: make([]byte, 300)}.build(t)
	fs := fragment(t, q, 99, 160)
	expect := func(what string, fr []byte, want DropReason) {
		t.Helper()
		r, _ := f.run(t, tunnelFrame(t, podTun(), fr))
		if want == DropNone && r.Verdict != VerdictTx || want != DropNone && r.Reason != want {
			t.Fatalf("%s: %v %v, want %v", what, r.Verdict, r.Reason, want)
		}
	}
	expect("later before first", fs[1], DropFragNoFirst)
	expect("first", fs[0], DropNone)
	expect("later after first", fs[1], DropNone)

	tcp := func(src, dst netip.Addr) []byte {
		return pkt{src: src, dst: dst, proto: "tcp", flags: "S", sport: 7002, dport: 80, payload: make([]byte, 40)}.build(t)
	}
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
	}{{"v4", pod1v4, server4}, {"v6", pod1v6, server6}} {
		whole := tcp(c.src, c.dst)
		hl := 20
		if c.src.Is6() {
			hl = 40
		}
		body := whole[hl:]
		mk := func(id uint32, off int, more bool, part []byte) []byte {
			if c.src.Is4() {
				return rawFrag4(t, c.src, c.dst, layers.IPProtocolTCP, uint16(id), off, more, part)
			}
			return rawFrag6(t, c.src, c.dst, header.ProtoTCP, id, off, more, part)
		}
		expect(c.name+" tiny first fragment (ports, no flags)", mk(1, 0, true, body[:8]), DropFragTiny)
		expect(c.name+" first fragment", mk(2, 0, true, body[:24]), DropNone)
		expect(c.name+" fragment at offset 8 over the TCP header", mk(2, 8, true, body[8:24]), DropFragOverlap)
		expect(c.name+" fragment at offset 16 over the first's bytes", mk(2, 16, false, body[16:]), DropFragOverlap)
		expect(c.name+" the real rest", mk(2, 24, false, body[24:]), DropNone)
	}
	st := f.p.Stats()
	if st.Drops[DropFragNoFirst] != 1 || st.Drops[DropFragTiny] != 2 || st.Drops[DropFragOverlap] != 4 {
		t.Fatalf("drops no_first %d tiny %d overlap %d, want 1 2 4", st.Drops[DropFragNoFirst], st.Drops[DropFragTiny], st.Drops[DropFragOverlap])
	}
}

// TestFragmentFloodKeepsOthers: a pod flooding first fragments (that never
// complete) used to evict other pods' entries, whose later fragments were
// then dropped. Now the flood is capped at its share of the table
// (fragment_quota) and another pod's datagrams, begun before or during the
// flood, go through.
func TestFragmentFloodKeepsOthers(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	tu2 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
	victim := func(id uint32) [][]byte {
		q := pkt{src: pod2v4, dst: server4, proto: "udp", sport: 7003, dport: 53, payload: make([]byte, 300)}.build(t)
		return fragment(t, q, id, 160)
	}
	before := victim(1)
	if r, _ := f.run(t, tunnelFrame(t, tu2, before[0])); r.Verdict != VerdictTx {
		t.Fatalf("victim's first fragment: %v %v", r.Verdict, r.Reason)
	}
	floods := 4 * DefaultFragSlots
	for id := range floods {
		f.run(t, tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolUDP, uint16(id), 0, true, udpHead(16))))
	}
	if r, _ := f.run(t, tunnelFrame(t, tu2, before[1])); r.Verdict != VerdictTx {
		t.Fatalf("victim's later fragment after the flood: %v %v", r.Verdict, r.Reason)
	}
	during := victim(2)
	for _, fr := range during {
		if r, _ := f.run(t, tunnelFrame(t, tu2, fr)); r.Verdict != VerdictTx {
			t.Fatalf("victim's datagram during the flood: %v %v", r.Verdict, r.Reason)
		}
	}
	// The flooder holds its share: all but quota of its first fragments
	// are refused. Sources share a quota slot when their keyed hashes
	// collide, so the victim's open datagram may hold one of those entries;
	// and a fragment whose two candidate buckets happen to be full is a
	// table_full drop before the quota is consulted.
	st := f.p.Stats()
	q, full := st.Drops[DropFragQuota], st.Drops[DropFragTableFull]
	admitted := uint64(floods) - q - full
	if quota := uint64(f.w.frags.quota); admitted > quota || admitted+1 < quota {
		t.Fatalf("the flooder got %d fragment entries (fragment_quota drops %d, fragment_table_full %d), want its share of %d (or one less)", admitted, q, full, quota)
	}
}

// TestFragmentEntriesEnd: entries of completed datagrams are freed at once,
// so a pod sending many fragmented datagrams never meets its quota; and an
// incomplete one's entry is swept after the timeout, its quota given back.
func TestFragmentEntriesEnd(t *testing.T) {
	f := newFixture(t, 4096, testConfig())
	for id := range uint32(4 * DefaultFragSlots) {
		q := pkt{src: pod1v4, dst: server4, proto: "udp", sport: uint16(2000 + id%1000), dport: 53, payload: make([]byte, 200)}.build(t)
		for _, fr := range fragment(t, q, id, 104) {
			if r, _ := f.run(t, tunnelFrame(t, podTun(), fr)); r.Verdict != VerdictTx {
				t.Fatalf("datagram %d: %v %v", id, r.Verdict, r.Reason)
			}
		}
	}
	if n := f.w.frags.live(); n != 0 {
		t.Fatalf("%d entries live after every datagram completed", n)
	}
	// A full share of incomplete datagrams, then the timeout.
	for id := range f.w.frags.quota + 1 {
		r, _ := f.run(t, tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolUDP, uint16(id), 0, true, udpHead(16))))
		if want := id < f.w.frags.quota; (r.Verdict == VerdictTx) != want {
			t.Fatalf("incomplete datagram %d: %v %v", id, r.Verdict, r.Reason)
		}
	}
	later := testNow + DefaultFragTimeout + 1
	out := make([]byte, 2048)
	fr := tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolUDP, 60000, 0, true, udpHead(16)))
	if r := processOne(f.w, later, fr, out); r.Verdict != VerdictTx {
		t.Fatalf("first fragment after the others expired: %v %v", r.Verdict, r.Reason)
	}
}

// TestFragmentHashKeyed: two tables place the same key differently (their
// seeds differ), so slots cannot be aimed at from outside.
func TestFragmentHashKeyed(t *testing.T) {
	var a, b fragTable
	a.init(1024, 1)
	b.init(1024, 1)
	k := fragKey{id: 1}
	same := 0
	for i := range 64 {
		k.id = uint32(i)
		if a.hash(&k) == b.hash(&k) {
			same++
		}
	}
	if same > 1 {
		t.Fatalf("%d of 64 keys hash alike in two tables: the hash is not keyed", same)
	}
}

// fragFrames returns, for pipeline fixture f, a pod's first and later
// fragment and a server's first and later fragment of a reply (IPv4 or
// IPv6), for the allocation test, the benchmark and the fuzz seeds. The
// first fragments have been through f once, so the reply has its flow.
func fragFrames(t testing.TB, f *fixture, v6 bool) (out1, out2, in1, in2 []byte) {
	pod, server, egress := pod1v4, server4, egress4
	if v6 {
		pod, server, egress = pod1v6, server6, egress6
	}
	payload := make([]byte, 400)
	q := pkt{src: pod, dst: server, proto: "udp", sport: 7100, dport: 53, payload: payload}.build(t)
	fs := fragment(t, q, 7, 200)
	out := make([]byte, 2048)
	if r := processOne(f.w, testNow, tunnelFrame(t, podTun(), fs[0]), out); r.Verdict != VerdictTx {
		t.Fatalf("first fragment: %v %v", r.Verdict, r.Reason)
	}
	at := 14 + 20 // the forwarded first fragment's UDP source port
	if v6 {
		at = 14 + 40 + 8 // after the fragment header
	}
	natPort := binary.BigEndian.Uint16(out[at:])
	a := pkt{src: server, dst: egress, proto: "udp", sport: 53, dport: natPort, payload: payload}.build(t)
	as := fragment(t, a, 8, 200)
	return tunnelFrame(t, podTun(), fs[0]), tunnelFrame(t, podTun(), fs[1]), plainFrame(t, as[0]), plainFrame(t, as[1])
}

// TestFragmentAllocs: the fragment path, both directions and families,
// allocates nothing.
func TestFragmentAllocs(t *testing.T) {
	f := newFixture(t, 1<<12, testConfig())
	var frames [][]byte
	for _, v6 := range []bool{false, true} {
		o1, o2, i1, i2 := fragFrames(t, f, v6)
		frames = append(frames, o1, o2, i1, i2)
	}
	out := make([]byte, 2048)
	for _, fr := range frames {
		if r := processOne(f.w, testNow, fr, out); r.Verdict != VerdictTx {
			t.Fatalf("%v %v", r.Verdict, r.Reason)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		for _, fr := range frames {
			processOne(f.w, testNow, fr, out)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run of the fragment path", n)
	}
}

// BenchmarkFragments: one datagram of two fragments per iteration, pod →
// outside and the reply, against a whole packet of the same flow as the
// baseline.
func BenchmarkFragments(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		name := "v4"
		if v6 {
			name = "v6"
		}
		f := newFixture(b, 1<<12, testConfig())
		o1, o2, i1, i2 := fragFrames(b, f, v6)
		frames := [][]byte{o1, o2, i1, i2}
		out := make([]byte, 2048)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, fr := range frames {
					if r := processOne(f.w, testNow, fr, out); r.Verdict != VerdictTx {
						b.Fatalf("%v %v", r.Verdict, r.Reason)
					}
				}
			}
		})
	}
}

// live counts the table's live entries.
func (t *fragTable) live() int {
	n := 0
	for i := range t.slots {
		if t.slots[i].live {
			n++
		}
	}
	return n
}
