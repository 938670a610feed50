package gateway

import (
	"testing"
)

// TestTunnelIDsOnlyConfigured: (tunnel, VNI) pairs are numbered for the
// pipeline's life, and a flow's return path keeps the number. Numbering
// every pair a node sent let one node use all MaxTunnelIDs numbers with
// VNIs of its choice and lock every other node out of new flows. Only the
// configured pairs are numbered now: the others are tunnel_mismatch drops,
// and the configured pairs keep working however many others arrive.
func TestTunnelIDsOnlyConfigured(t *testing.T) {
	f := newFixture(t, 1024, testConfig())
	configured := f.p.tunnels.count.Load()
	if int(configured) != len(testTunnels) {
		t.Fatalf("%d pairs numbered after Swap, want the %d configured", configured, len(testTunnels))
	}
	tu := podTun()
	p := udpFrom(pod1v4, server4)
	for v := uint32(0); v < MaxTunnelIDs+16; v++ {
		tu.kind, tu.vni = TunnelGeneve, 1000+v
		p.sport = uint16(1024 + v%50000)
		r, _ := f.run(t, tunnelFrame(t, tu, p.build(t)))
		if r.Verdict != VerdictDrop || r.Reason != DropTunnelMismatch {
			t.Fatalf("Geneve VNI %d (not configured): %v %v, want tunnel_mismatch", tu.vni, r.Verdict, r.Reason)
		}
	}
	if n := f.p.tunnels.count.Load(); n != configured {
		t.Fatalf("%d pairs numbered after other VNIs arrived, want %d", n, configured)
	}
	if got := f.p.Stats().Drops[DropTunnelMismatch]; got != MaxTunnelIDs+16 {
		t.Fatalf("tunnel_mismatch counted %d, want %d", got, MaxTunnelIDs+16)
	}
	// Node 2's pod still opens flows with its configured pair.
	tu2 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
	if r, _ := f.run(t, tunnelFrame(t, tu2, udpFrom(pod2v4, server4).build(t))); r.Verdict != VerdictTx {
		t.Fatalf("configured pair after the flood: %v %v", r.Verdict, r.Reason)
	}
}

// TestSwapRefusesTunnelConfig: a configuration naming no tunnel, too many,
// or an invalid one is refused with an error, not installed.
func TestSwapRefusesTunnelConfig(t *testing.T) {
	many := make([]TunnelVNI, MaxTunnels+1)
	for i := range many {
		many[i] = TunnelVNI{TunnelVXLAN, uint32(i)}
	}
	for name, ts := range map[string][]TunnelVNI{
		"none":     nil,
		"too_many": many,
		"type":     {{TunnelNone, 1}},
		"vni":      {{TunnelVXLAN, 1 << 24}},
	} {
		cfg := testConfig()
		cfg.Tunnels = ts
		if _, err := NewSnapshot(cfg); err == nil {
			t.Errorf("%s: NewSnapshot accepted tunnels %v", name, ts)
		}
	}
}
