package gateway

import (
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
)

// builderCase is one family's inputs to the packet builders.
type builderCase struct {
	name string
	pk   Parsed
	node snapNode
}

func builderCases() []builderCase {
	gw4 := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}
	n4 := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 2}
	gw6 := [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	n6 := [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 2}
	gwMAC, nodeMAC := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	var cs []builderCase
	for _, c := range []struct {
		name         string
		ver, fam     uint8
		src, dst     [16]byte
		gwVTEP, vtep [16]byte
	}{
		{"v4", 4, 0, [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 5}, [16]byte{10: 0xff, 11: 0xff, 12: 203, 14: 113, 15: 7}, gw4, n4},
		{"v6", 6, 1, [16]byte{0xfd, 15: 5}, [16]byte{0x20, 0x01, 0x0d, 0xb8, 1, 15: 7}, gw6, n6},
	} {
		pk := Parsed{IPVer: c.ver, Src: c.src, Dst: c.dst, SrcPort: 40000, DstPort: 443,
			TCPFlags: header.TCPFlagACK, TCPSeq: 1000, TCPAck: 2000, TCPLen: 100}
		node := snapNode{vtep: c.vtep, innerMAC: nodeMAC, fam: c.fam,
			encap: newEncapTemplate(c.fam, &c.gwVTEP, &c.vtep, &gwMAC, &nodeMAC)}
		cs = append(cs, builderCase{c.name, pk, node})
	}
	return cs
}

// BenchmarkBuilders times the builders of the packets the gateway writes
// itself: TCP RSTs to pods, ICMP errors, and the encapsulation in front of
// every packet to a node.
func BenchmarkBuilders(b *testing.B) {
	hop := route.Hop{DstMAC: [6]byte{2, 0, 0, 0, 0, 3}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 4}}
	quoted := make([]byte, 548)
	for _, c := range builderCases() {
		pk := c.pk
		ip := make([]byte, tcpResetLen(pk.IPVer))
		b.Run("tcpreset/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				writeTCPReset(ip, &pk)
			}
		})
		icmp := make([]byte, 576)
		b.Run("icmperror/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				writeICMPError(icmp, quoted, pk.IPVer, &pk.Dst, &pk.Src, icmpTooBig, 1400)
			}
		})
		out := make([]byte, encapLen(c.node.fam)+100)
		b.Run("encap/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				writeEncap(out, &c.node, TunnelVXLAN, 42, &hop, pk.IPVer, 50000)
			}
		})
	}
}
