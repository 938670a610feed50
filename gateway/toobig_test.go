package gateway

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// smallUnderlay is testConfig with a 1500-byte underlay towards the nodes,
// so a full-sized packet from the outside does not fit once encapsulated.
func smallUnderlay() Config {
	cfg := testConfig()
	u := underlayHop
	u.MTU = 1500
	cfg.Routes = route.NewStatic(
		route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: outHop},
		route.Static{Prefix: netip.MustParsePrefix("::/0"), Hop: outHop},
		route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: u},
		route.Static{Prefix: netip.MustParsePrefix("fd00::/64"), Hop: u},
	)
	return cfg
}

// TestTooBigToOutside: a reply from the server that does not fit the tunnel
// after encapsulation is answered to the server, from the egress IP it was
// sent to, with ICMP frag-needed (IPv4, DF) or packet-too-big (IPv6)
// carrying underlay MTU − encapsulation overhead and quoting the packet as
// received; IPv4 without DF, and ICMP errors, are dropped and counted.
func TestTooBigToOutside(t *testing.T) {
	cases := []struct {
		name          string
		pod, server   netip.Addr
		egress        netip.Addr
		tu            tun
		mtu, maxError int
	}{
		{"v4_over_v4", pod1v4, server4, egress4, podTun(), 1500 - 50, maxICMPv4Error},
		{"v6_over_v6", pod2v6, server6, egress6, tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelVXLAN, vni: testVNI}, 1500 - 70, maxICMPv6Error},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 64, smallUnderlay())
			_, fwd := f.run(t, tunnelFrame(t, c.tu, udpFrom(c.pod, c.server).build(t)))
			p := gopacket.NewPacket(fwd, layers.LayerTypeEthernet, gopacket.Default)
			natPort := uint16(p.Layer(layers.LayerTypeUDP).(*layers.UDP).SrcPort)

			big := pkt{src: c.server, dst: c.egress, proto: "udp", sport: 53, dport: natPort, payload: make([]byte, 1500-8-ipHdr(c.server)), df: true}.build(t)
			if len(big) != 1500 {
				t.Fatalf("test packet is %d bytes", len(big))
			}
			r, out := f.run(t, plainFrame(t, big))
			mustTx(t, r, outHop.Ifindex)
			q := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
			if el := q.ErrorLayer(); el != nil {
				t.Fatalf("ICMP error does not decode: %v", el.Error())
			}
			eth := q.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if [6]byte(eth.DstMAC) != outHop.DstMAC || [6]byte(eth.SrcMAC) != outHop.SrcMAC {
				t.Errorf("Ethernet %v→%v, want the outside next hop", eth.SrcMAC, eth.DstMAC)
			}
			ip := out[header.EthernetLen:]
			checkIPChecksums(t, "too big to outside", ip)
			src, dst, _ := ipOf(netLayers(q)[0])
			if src != c.egress || dst != c.server {
				t.Errorf("ICMP %v→%v, want %v→%v (from the egress IP the packet was sent to)", src, dst, c.egress, c.server)
			}
			if len(ip) > c.maxError {
				t.Errorf("ICMP error of %d bytes exceeds %d", len(ip), c.maxError)
			}
			var quote []byte
			var mtu int
			if c.server.Is4() {
				ic := q.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if ic.TypeCode != layers.CreateICMPv4TypeCode(3, 4) {
					t.Errorf("type %v, want frag needed", ic.TypeCode)
				}
				mtu, quote = int(ic.Seq), ic.Payload
			} else {
				ic := q.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				if ic.TypeCode != layers.CreateICMPv6TypeCode(2, 0) {
					t.Errorf("type %v, want packet too big", ic.TypeCode)
				}
				mtu, quote = int(binary.BigEndian.Uint32(ic.Payload)), ic.Payload[4:]
			}
			if mtu != c.mtu {
				t.Errorf("MTU %d, want %d (underlay 1500 − encapsulation)", mtu, c.mtu)
			}
			if len(quote) < 48 || !bytes.HasPrefix(big, quote) {
				t.Errorf("quote (%d bytes) is not the server's packet as received", len(quote))
			}
			if s := f.p.Stats(); s.Count(CounterICMPSent) != 1 || s.Count(CounterReplied) != 0 {
				t.Errorf("icmp sent %d, replied %d; want 1, 0", s.Count(CounterICMPSent), s.Count(CounterReplied))
			}

			// One byte less than the MTU it announced fits and reaches the pod.
			fits := pkt{src: c.server, dst: c.egress, proto: "udp", sport: 53, dport: natPort, payload: make([]byte, c.mtu-8-ipHdr(c.server)), df: true}.build(t)
			r, _ = f.run(t, plainFrame(t, fits))
			mustTx(t, r, underlayHop.Ifindex)
		})
	}

	t.Run("v4_no_df_dropped", func(t *testing.T) {
		f := newFixture(t, 64, smallUnderlay())
		_, fwd := f.run(t, tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t)))
		natPort := uint16(gopacket.NewPacket(fwd, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeUDP).(*layers.UDP).SrcPort)
		big := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: natPort, payload: make([]byte, 1472)}.build(t)
		if r, _ := f.run(t, plainFrame(t, big)); r.Verdict != VerdictDrop || r.Reason != DropMTUExceeded {
			t.Fatalf("%v %v, want drop mtu_exceeded (the gateway does not fragment)", r.Verdict, r.Reason)
		}
		if s := f.p.Stats(); s.Drop(DropMTUExceeded) != 1 || s.Count(CounterICMPSent) != 0 {
			t.Errorf("mtu_exceeded %d, icmp sent %d; want 1, 0", s.Drop(DropMTUExceeded), s.Count(CounterICMPSent))
		}
	})

	t.Run("rate_limited", func(t *testing.T) {
		f := newFixture(t, 64, smallUnderlay())
		_, fwd := f.run(t, tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t)))
		natPort := uint16(gopacket.NewPacket(fwd, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeUDP).(*layers.UDP).SrcPort)
		frame := plainFrame(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: natPort, payload: make([]byte, 1472), df: true}.build(t))
		out := make([]byte, 2048)
		sent := 0
		for i := 0; i < 3*icmpOutBurst; i++ {
			if processOne(f.w, testNow, frame, out).Verdict == VerdictTx {
				sent++
			}
		}
		if sent != icmpOutBurst {
			t.Errorf("%d ICMP errors in one instant, want the burst of %d", sent, icmpOutBurst)
		}
		if r := processOne(f.w, testNow+10*icmpOutEvery, frame, out); r.Verdict != VerdictTx {
			t.Errorf("no ICMP error after the bucket refilled: %v %v", r.Verdict, r.Reason)
		}
	})
}

func ipHdr(a netip.Addr) int {
	if a.Is4() {
		return 20
	}
	return 40
}
