package engine_test

import (
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/engine"
)

// TestTunnelMismatchDropped: with tunnel vxlan and VNI 100 configured, a pod
// packet with VNI 101, or in Geneve, never gets through the gateway: the XDP
// program gives it to the kernel (which has no device for it) and counts it
// on AF_XDP, the pipeline drops and counts it on AF_PACKET; VNI 100 passes.
func TestTunnelMismatchDropped(t *testing.T) {
	for _, mode := range []string{"afxdp", "afpacket"} {
		t.Run(mode, func(t *testing.T) {
			tp := newTopo(t)
			tp.startServer(t)
			cfg := tp.config()
			cfg.Mode = mode
			eng := startEngine(t, tp, cfg, defaultOptions())
			if _, reply := tp.udpRoundTrip(t, 40000, "right tunnel", 20); reply == nil {
				t.Fatalf("VXLAN with VNI %d did not get through; stats %+v", testVNI, eng.Stats())
			}

			// The outer UDP checksum is zeroed (allowed over IPv4) after the edits.
			wrongVNI := tp.podUDP(t, nodeVTEP, podIP, 40001, "wrong vni")
			wrongVNI[48]++ // VNI 100 → 101
			wrongVNI[40], wrongVNI[41] = 0, 0
			geneve := tp.podUDP(t, nodeVTEP, podIP, 40002, "wrong type")
			geneve[36], geneve[37] = 6081>>8, 6081&0xff
			copy(geneve[42:46], []byte{0, 0, 0x65, 0x58}) // Geneve v0, no options, Ethernet payload; same VNI
			geneve[40], geneve[41] = 0, 0
			for range 3 {
				tp.raw.Send(wrongVNI)
				tp.raw.Send(geneve)
			}
			leaked := tp.await(400*time.Millisecond, func(d *decoded) bool {
				return d.vxlan == nil && d.udp != nil && d.udp.DstPort == serverPort && d.udp.SrcPort >= 40001
			})
			if leaked != nil {
				t.Fatalf("a packet of the wrong tunnel got through: %v", leaked.packet)
			}
			waitStat(t, eng, "tunnel mismatches counted", func(s engine.Stats) bool {
				// AF_XDP: passed to the kernel, counted by the program.
				if mode == "afpacket" {
					return s.Pipeline.Drop(gateway.DropTunnelMismatch) >= 6
				}
				var n uint64
				for _, x := range s.XDP {
					n += x.TunnelOther
				}
				return n >= 6
			})
		})
	}
}
