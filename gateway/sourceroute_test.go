package gateway

import (
	"encoding/binary"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
)

// withIPv4Options returns IPv4 packet ip with opts (a multiple of 4 bytes)
// after its fixed header, the lengths and the header checksum fixed.
func withIPv4Options(ip, opts []byte) []byte {
	b := append(append(append([]byte(nil), ip[:header.IPv4MinLen]...), opts...), ip[header.IPv4MinLen:]...)
	h := header.IPv4(b)
	h.SetHeaderLength(header.IPv4MinLen + len(opts))
	h.SetTotalLength(uint16(len(b)))
	h.SetChecksum(0)
	h.SetChecksum(h.CalculateChecksum())
	return b
}

// withRoutingHeader returns IPv6 packet ip with a Routing header of type typ
// and Segments Left sl, listing 64:ff9b::a9fe:a9fe as the next segment,
// after its fixed header.
func withRoutingHeader(ip []byte, typ, sl uint8) []byte {
	rh := make([]byte, 24)
	rh[0], rh[1], rh[2], rh[3] = ip[6], 2, typ, sl
	copy(rh[8:], []byte{0, 0x64, 0xff, 0x9b, 12: 169, 254, 169, 254})
	b := append(append(append([]byte(nil), ip[:header.IPv6Len]...), rh...), ip[header.IPv6Len:]...)
	b[6] = header.ProtoRouting
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-header.IPv6Len))
	return b
}

// An option list that routes through the metadata address: NOP, then LSRR
// (or SSRR) with one hop, 169.254.169.254.
func srrOption(typ byte) []byte { return []byte{1, typ, 7, 4, 169, 254, 169, 254} }

// TestSourceRouteDropped: a pod's packet to an allowed server that source
// routes on (IPv4 LSRR or SSRR, IPv6 Routing header type 0 or SRv6 with
// segments left) is dropped as source_route before any flow exists, and so
// is such a reply from outside on an existing flow; the same packets with
// options that route nowhere (record route, Segments Left 0) pass.
func TestSourceRouteDropped(t *testing.T) {
	v4 := func(t *testing.T) []byte { return udpFrom(pod1v4, server4).build(t) }
	v6 := func(t *testing.T) []byte { return udpFrom(pod1v6, server6).build(t) }
	rep4 := func(t *testing.T) []byte {
		return pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 5000, payload: []byte("a")}.build(t)
	}
	rep6 := func(t *testing.T) []byte {
		return pkt{src: server6, dst: egress6, proto: "udp", sport: 53, dport: 5000, payload: []byte("a")}.build(t)
	}
	cases := []struct {
		name    string
		pod     func(*testing.T) []byte // the pod's packet, opening the flow
		reply   func(*testing.T) []byte // the server's answer
		mangle  func([]byte) []byte
		routed  bool
		badOpts bool
	}{
		{"v4 LSRR", v4, rep4, func(b []byte) []byte { return withIPv4Options(b, srrOption(0x83)) }, true, false},
		{"v4 SSRR", v4, rep4, func(b []byte) []byte { return withIPv4Options(b, srrOption(0x89)) }, true, false},
		{"v4 LSRR after NOPs and record route", v4, rep4, func(b []byte) []byte {
			return withIPv4Options(b, append([]byte{1, 1, 1, 7, 7, 4, 0, 0, 0, 0}, append(srrOption(0x83)[1:], 0, 0, 0)...))
		}, true, false},
		{"v6 RH0", v6, rep6, func(b []byte) []byte { return withRoutingHeader(b, 0, 1) }, true, false},
		{"v6 SRH", v6, rep6, func(b []byte) []byte { return withRoutingHeader(b, 4, 1) }, true, false},
		{"v4 record route", v4, rep4, func(b []byte) []byte { return withIPv4Options(b, []byte{7, 7, 4, 0, 0, 0, 0, 0}) }, false, false},
		{"v4 LSRR after the end of the list", v4, rep4, func(b []byte) []byte { return withIPv4Options(b, append([]byte{0, 0, 0, 0}, srrOption(0x83)...)) }, false, false},
		{"v6 RH0 segments left 0", v6, rep6, func(b []byte) []byte { return withRoutingHeader(b, 0, 0) }, false, false},
		{"v4 option past the header", v4, rep4, func(b []byte) []byte { return withIPv4Options(b, []byte{1, 0x83, 9, 4, 1, 2, 3, 4}) }, false, true},
		{"v4 option length 1", v4, rep4, func(b []byte) []byte { return withIPv4Options(b, []byte{0x44, 1, 0, 0}) }, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := DropNone
			switch {
			case c.routed:
				want = DropSourceRoute
			case c.badOpts:
				want = DropMalformed
			}
			f := newFixture(t, 64, testConfig())
			r, _ := f.run(t, tunnelFrame(t, podTun(), c.mangle(c.pod(t))))
			if want == DropNone {
				mustTx(t, r, outHop.Ifindex)
			} else {
				if r.Verdict != VerdictDrop || r.Reason != want {
					t.Fatalf("pod packet: %v %v, want drop %v", r.Verdict, r.Reason, want)
				}
				if st := f.p.Stats(); st.Drop(want) != 1 {
					t.Fatalf("%v counted %d times, want 1", want, st.Drop(want))
				}
				if f.ct.Len() != 0 {
					t.Fatal("a source-routed packet opened a flow")
				}
				// The flow, opened by a plain packet: its answer is checked too.
				r, _ = f.run(t, tunnelFrame(t, podTun(), c.pod(t)))
				mustTx(t, r, outHop.Ifindex)
			}
			r, _ = f.run(t, plainFrame(t, c.mangle(c.reply(t))))
			if want == DropNone {
				mustTx(t, r, underlayHop.Ifindex)
				return
			}
			if r.Verdict != VerdictDrop || r.Reason != want {
				t.Fatalf("reply: %v %v, want drop %v", r.Verdict, r.Reason, want)
			}
			if st := f.p.Stats(); st.Drop(want) != 2 {
				t.Fatalf("%v counted %d times, want 2", want, st.Drop(want))
			}
		})
	}
}
