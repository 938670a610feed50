package gateway

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
)

// The encapsulation writer as of commit 2bb272e (every field written and
// the IPv4 header checksum summed per packet), kept only to test the
// template-based one against.

// refWriteEncap is writeEncap as it was before the header templates. It fills the encapsulation headers in front of the inner IP packet
// already at out[encapLen(node.fam):], addressed to node with tunnel type t
// and VNI vni. The outer UDP checksum is 0 over IPv4 and computed over IPv6
// (RFC 8200 §8.1; Linux VXLAN devices reject zero checksums over IPv6 by
// default).
func refWriteEncap(out []byte, s *Snapshot, node *snapNode, t Tunnel, vni uint32, hop *route.Hop, innerVer uint8, sport uint16) {
	n := len(out)
	writeEth(out, &hop.DstMAC, &hop.SrcMAC, 4+2*node.fam)
	var u int
	if node.fam == 0 {
		ip := out[header.EthernetLen : header.EthernetLen+header.IPv4MinLen]
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], uint16(n-header.EthernetLen))
		binary.BigEndian.PutUint32(ip[4:], 0x4000) // id 0, DF
		ip[8], ip[9], ip[10], ip[11] = 64, header.ProtoUDP, 0, 0
		copy(ip[12:16], s.vtep[0][12:])
		copy(ip[16:20], node.vtep[12:])
		binary.BigEndian.PutUint16(ip[10:], header.ChecksumFold(header.Checksum(ip, 0)))
		u = header.EthernetLen + header.IPv4MinLen
	} else {
		ip := out[header.EthernetLen : header.EthernetLen+header.IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(n-header.EthernetLen-header.IPv6Len))
		ip[6], ip[7] = header.ProtoUDP, 64
		copy(ip[8:24], s.vtep[1][:])
		copy(ip[24:40], node.vtep[:])
		u = header.EthernetLen + header.IPv6Len
	}
	udp := out[u : u+header.UDPLen+header.VXLANLen]
	binary.BigEndian.PutUint16(udp[0:], sport)
	if t == TunnelGeneve {
		binary.BigEndian.PutUint16(udp[2:], header.GenevePort)
		binary.BigEndian.PutUint32(udp[8:], uint32(header.EtherTypeTEB)) // ver 0, no options, not OAM/critical
	} else {
		binary.BigEndian.PutUint16(udp[2:], header.VXLANPort)
		binary.BigEndian.PutUint32(udp[8:], 0x08000000) // I flag
	}
	binary.BigEndian.PutUint16(udp[4:], uint16(n-u))
	binary.BigEndian.PutUint16(udp[6:], 0)
	binary.BigEndian.PutUint32(udp[12:], vni<<8)
	writeEth(out[u+header.UDPLen+header.VXLANLen:], &node.innerMAC, &s.innerMAC, innerVer)
	if node.fam == 1 {
		ps := header.PseudoHeaderChecksum(header.ProtoUDP, s.vtep[1][:], node.vtep[:], uint16(n-u))
		c := header.ChecksumFold(header.Checksum(out[u:n], ps))
		binary.BigEndian.PutUint16(udp[6:], header.UDPChecksumValue(c))
	}
}

// TestEncapMatchesReference: the per-node templates give the same bytes as
// writing every field, for both underlay families, both tunnel types, both
// inner families and random VNIs, ports, MACs and lengths (fixed seed).
func TestEncapMatchesReference(t *testing.T) {
	cfg := testConfig()
	cfg.Nodes = append(cfg.Nodes, Node{Name: "node3", VTEP: netip.MustParseAddr("10.0.0.77"), InnerMAC: [6]byte{2, 0, 0, 0, 3, 1}})
	s, err := NewSnapshot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	got, want := make([]byte, 2048), make([]byte, 2048)
	for i := 0; i < 20000; i++ {
		node := &s.nodes[rng.IntN(len(s.nodes))]
		tun := TunnelVXLAN
		if rng.IntN(2) == 0 {
			tun = TunnelGeneve
		}
		innerVer := uint8(4 + 2*rng.IntN(2))
		var hop route.Hop
		binary.LittleEndian.PutUint64(want[:8], rng.Uint64())
		copy(hop.DstMAC[:], want[:6])
		binary.LittleEndian.PutUint64(want[:8], rng.Uint64())
		copy(hop.SrcMAC[:], want[:6])
		vni, sport := rng.Uint32()&0xffffff, uint16(rng.Uint32())
		hl := encapLen(node.fam)
		n := hl + 20 + rng.IntN(1500)
		for j := range got[:n] {
			got[j] = byte(rng.Uint32()) // stale bytes: the template must cover every header byte
		}
		for j := hl; j < n; j++ {
			want[j] = got[j]
		}
		refWriteEncap(want[:n], s, node, tun, vni, &hop, innerVer, sport)
		writeEncap(got[:n], node, tun, vni, &hop, innerVer, sport)
		if !bytes.Equal(got[:n], want[:n]) {
			t.Fatalf("case %d (fam %d, %v, inner v%d, len %d):\ngot  % x\nwant % x", i, node.fam, tun, innerVer, n, got[:hl], want[:hl])
		}
		if node.fam == 0 && header.ChecksumFold(header.Checksum(got[header.EthernetLen:header.EthernetLen+header.IPv4MinLen], 0)) != 0 {
			t.Fatalf("case %d: outer IPv4 header checksum wrong", i)
		}
	}
}
