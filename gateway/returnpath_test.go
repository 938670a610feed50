package gateway

import (
	"sync"
	"testing"
)

// Flows of one pod that arrive with different tunnel types and VNIs each get
// their replies back with their own pair, and the pairs are numbered once
// (at Swap) however many flows use them.
func TestReturnPathPerTunnel(t *testing.T) {
	pairs := []tunnelID{{TunnelVXLAN, testVNI}, {TunnelGeneve, testVNI}, {TunnelVXLAN, 7}, {TunnelGeneve, 1<<24 - 1}}
	cfg := testConfig()
	cfg.Tunnels = nil
	for _, id := range pairs {
		cfg.Tunnels = append(cfg.Tunnels, TunnelVNI{id.kind, id.vni})
	}
	f := newFixture(t, 1024, cfg)
	for round := 0; round < 3; round++ {
		for i, pr := range pairs {
			tu := podTun()
			tu.kind, tu.vni = pr.kind, pr.vni
			if pr.kind == TunnelGeneve {
				tu.geneveOpts = geneveOpts()
			}
			p := udpFrom(pod1v4, server4)
			p.sport, p.dport = uint16(20000+round*len(pairs)+i), 9000
			r, out := f.run(t, tunnelFrame(t, tu, p.build(t)))
			mustTx(t, r, outHop.Ifindex)
			natPort := uint16(out[14+20]) << 8 // the NAT port: UDP source port of the forwarded packet
			natPort |= uint16(out[14+20+1])
			rep := pkt{src: server4, dst: egress4, ttl: 50, proto: "udp", sport: p.dport, dport: natPort, payload: []byte("a")}
			r, out = f.run(t, plainFrame(t, rep.build(t)))
			mustTx(t, r, underlayHop.Ifindex)
			checkEncap(t, out, node1VTEP, node1MAC, pr.kind, pr.vni)
		}
	}
	if n := f.p.tunnels.count.Load(); n != uint32(len(pairs)) {
		t.Fatalf("%d (tunnel, VNI) pairs numbered, want %d", n, len(pairs))
	}
}

// Aux packing round-trips the largest VTEP index and tunnel number.
func TestPackAux(t *testing.T) {
	for _, c := range [][2]uint32{{0, 0}, {MaxVTEPs - 1, MaxTunnelIDs - 1}, {12345, 17}} {
		if v, tn := unpackAux(packAux(c[0], c[1])); v != c[0] || tn != c[1] {
			t.Errorf("packAux(%d, %d) unpacks to %d, %d", c[0], c[1], v, tn)
		}
	}
}

// Workers numbering overlapping pairs at once: each pair gets one number,
// numbers are dense and distinct, ids maps them back, and past the limit
// nothing more is numbered.
func TestTunnelNumbersConcurrent(t *testing.T) {
	var tt tunnelTable
	const workers = 4
	got := make([][]uint32, workers)
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := uint32(0); v < MaxTunnelIDs+100; v++ {
				// Every worker walks the pairs from another start.
				vni := (v + uint32(g)*1000) % (MaxTunnelIDs + 100)
				n, ok := tt.number(tunnelID{TunnelVXLAN, vni})
				if ok {
					got[g] = append(got[g], vni<<16|n)
				}
			}
		}()
	}
	wg.Wait()
	if c := tt.count.Load(); c != MaxTunnelIDs {
		t.Fatalf("%d pairs numbered, want %d", c, MaxTunnelIDs)
	}
	numOf := map[uint32]uint32{}
	for _, gs := range got {
		for _, x := range gs {
			vni, n := x>>16, x&0xffff
			if prev, seen := numOf[vni]; seen && prev != n {
				t.Fatalf("VNI %d numbered %d and %d", vni, prev, n)
			}
			numOf[vni] = n
			if id := tt.ids[n]; id != (tunnelID{TunnelVXLAN, vni}) {
				t.Fatalf("ids[%d] = %+v, want VNI %d", n, id, vni)
			}
		}
	}
	if len(numOf) != MaxTunnelIDs {
		t.Fatalf("%d distinct pairs got numbers, want %d", len(numOf), MaxTunnelIDs)
	}
}
