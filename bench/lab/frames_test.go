package main

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/gateway/header"
)

// TestBuildDecodes checks the generator's frames with gopacket as the
// oracle: the layers a VTEP would send, the fields the flow and stamp set,
// and every checksum valid, over both underlays and the frame sizes.
func TestBuildDecodes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		outer, pods [2]string
	}{
		{"ipv4", [2]string{"192.0.2.11", "192.0.2.21"}, [2]string{"198.18.1.2", "198.51.100.10"}},
		{"ipv6", [2]string{"2001:db8:2::11", "2001:db8:2::21"}, [2]string{"2001:db8:18:1::2", "2001:db8:5100::10"}},
	} {
		w := wire{outerSrc: netip.MustParseAddr(tc.outer[0]), outerDst: netip.MustParseAddr(tc.outer[1]), vni: 100, port: 4789,
			pod: netip.MustParseAddr(tc.pods[0]), server: netip.MustParseAddr(tc.pods[1]), podMTU: 1430,
			outerSrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, outerDstMAC: [6]byte{2, 0, 0, 0, 0, 2}}
		for _, size := range []int{64, 512, 1500} {
			buf := make([]byte, 2048)
			for i := range buf {
				buf[i] = 0xee // build must not depend on a clean buffer
			}
			const flow, seq, ts = 123_456, 987_654_321, 5_000_000_007
			n := w.build(buf, size, flow, seq, ts)
			f := buf[:n]
			pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
			vx, _ := pkt.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
			if vx == nil || vx.VNI != 100 {
				t.Fatalf("%s/%d: no VXLAN layer with VNI 100: %v", tc.name, size, pkt)
			}
			inner := vx.LayerPayload()
			if want := w.innerFrameLen(size); len(inner) != want {
				t.Errorf("%s/%d: inner frame %d bytes, want %d", tc.name, size, len(inner), want)
			}
			if tc.name == "ipv4" && size != 1500 && len(inner)+fcsLen != size {
				t.Errorf("%s/%d: inner frame with FCS is %d bytes", tc.name, size, len(inner)+fcsLen)
			}
			ip := gopacket.NewPacket(inner, layers.LayerTypeEthernet, gopacket.Default)
			udp, _ := ip.Layer(layers.LayerTypeUDP).(*layers.UDP)
			sport, dport := flowPorts(flow)
			if udp == nil || uint16(udp.SrcPort) != sport || uint16(udp.DstPort) != dport {
				t.Fatalf("%s/%d: inner UDP %v, want ports %d→%d", tc.name, size, udp, sport, dport)
			}
			st, ok := parseOut(inner)
			if !ok || st.seq != seq || st.ts != ts || st.src != w.pod {
				t.Errorf("%s/%d: stamp %+v ok=%v", tc.name, size, st, ok)
			}
			checkSums(t, tc.name, f)
			checkSums(t, tc.name+" inner", inner)
		}
	}
}

// checkSums verifies the IP header checksum (IPv4) and the UDP checksum of
// an Ethernet frame (which must be set over IPv6, may be 0 over IPv4).
func checkSums(t *testing.T, name string, f []byte) {
	t.Helper()
	var u []byte
	var ps uint32
	if f[12] == 0x08 {
		ip := f[14:34]
		if header.ChecksumFold(header.Checksum(ip, 0)) != 0 {
			t.Errorf("%s: bad IPv4 header checksum", name)
		}
		u = f[34 : 14+(int(ip[2])<<8|int(ip[3]))]
		ps = header.PseudoHeaderChecksum(17, ip[12:16], ip[16:20], uint16(len(u)))
		if u[6] == 0 && u[7] == 0 {
			return
		}
	} else {
		ip := f[14:54]
		u = f[54:]
		ps = header.PseudoHeaderChecksum(17, ip[8:24], ip[24:40], uint16(len(u)))
		if u[6] == 0 && u[7] == 0 {
			t.Errorf("%s: UDP over IPv6 without a checksum", name)
		}
	}
	if header.ChecksumFold(header.Checksum(u, ps)) != 0 {
		t.Errorf("%s: bad UDP checksum", name)
	}
}

// Every flow's source port is one a gateway may preserve (never a tunnel
// port), and flows are distinct 5-tuples.
func TestFlowPortsSkipTunnelPorts(t *testing.T) {
	seen := map[[2]uint16]bool{}
	for i := uint64(0); i < 2*srcPorts; i++ {
		s, d := flowPorts(i)
		if s == 4789 || s == 6081 || s < srcPortBase {
			t.Fatalf("flow %d has source port %d", i, s)
		}
		if seen[[2]uint16{s, d}] {
			t.Fatalf("flow %d repeats ports %d→%d", i, s, d)
		}
		seen[[2]uint16{s, d}] = true
	}
}
