package nat

import (
	"fmt"
	"testing"
)

// BenchmarkAllocatePort measures one Allocate and the matching Release of a
// new flow (the pair keeps the state steady), with a map-backed InUse
// standing in for conntrack's ReplyInUse.
//
//	preserved:  the pod's port is free and kept (one InUse check)
//	reuse_busy: 200k flows already on the IP over 16 servers (every port in
//	            use about 3 times); the new flow's port is taken towards its
//	            server, so a port already used elsewhere is found and reused
//	random:     PreservePort off, ports drawn from rnd
func BenchmarkAllocatePort(b *testing.B) {
	b.Run("preserved", func(b *testing.B) {
		tab := newFlows()
		a := newAlloc(b, DefaultConfig(), tab)
		benchCycle(b, a, func(i int) (uint16, Addr) { return uint16(1024 + i%60000), server1 })
	})
	b.Run("reuse_busy", func(b *testing.B) {
		tab := newFlows()
		a := newAlloc(b, DefaultConfig(), tab)
		r := rng(10)
		for i := 0; i < 200_000; i++ {
			f := flow{proto: tcp, src: v4(10, 7, byte(i>>8), byte(i)), sport: uint16(1024 + r.next()%64512), dst: v4(198, 51, 100, byte(i%16)), dport: 443, nat: egress}
			mustOpen(b, a, tab, &f, r.next())
		}
		// The same source port as a busy flow towards the same server.
		busy := make([]uint16, 0, 1024)
		for k := range tab.m {
			if k.remote == server1 && len(busy) < cap(busy) {
				busy = append(busy, k.nport)
			}
		}
		benchCycle(b, a, func(i int) (uint16, Addr) { return busy[i%len(busy)], server1 })
		b.ReportMetric(float64(a.PortsInUse(egress, tcp)), "ports_in_use")
	})
	b.Run("random", func(b *testing.B) {
		tab := newFlows()
		cfg := DefaultConfig()
		cfg.PreservePort = false
		a := newAlloc(b, cfg, tab)
		benchCycle(b, a, func(i int) (uint16, Addr) { return 40000, server1 })
	})
}

func benchCycle(b *testing.B, a *Allocator, next func(i int) (uint16, Addr)) {
	b.ReportAllocs()
	b.ResetTimer()
	rnd := uint64(1)
	for i := 0; i < b.N; i++ {
		sport, dst := next(i)
		rnd += 0x9e3779b97f4a7c15
		p, err := a.Allocate(tcp, pod1, sport, dst, 443, egress, rnd)
		if err != nil {
			b.Fatal(err)
		}
		a.Release(tcp, pod1, sport, dst, 443, egress, p)
	}
}

// BenchmarkPick is the egress-IP choice for a new flow: FlowHash and Pick.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("ips=%d", n), func(b *testing.B) {
			ips := egressSet(n)
			b.ReportAllocs()
			sum := 0
			for i := 0; i < b.N; i++ {
				sum += Pick(ips, FlowHash(6, pod1, uint16(i), server1, 443))
			}
			if sum < 0 {
				b.Fatal("negative pick")
			}
		})
	}
}
