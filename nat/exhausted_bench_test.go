package nat

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// exhaustedTable stands in for the flow table when some destinations have
// every port taken: a lookup costs a lock and a map probe, as conntrack's
// ReplyInUse costs a shard lock and an index line.
type exhaustedTable struct {
	mu   sync.Mutex
	full map[Addr]bool
}

func (e *exhaustedTable) ReplyInUse(proto uint8, remote Addr, rport uint16, nat Addr, nport uint16) bool {
	e.mu.Lock()
	full := e.full[remote]
	e.mu.Unlock()
	return full
}

// BenchmarkAllocExhausted64 is the allocation latency on an egress IP where
// a pod rotates over 64 exhausted destinations: each iteration is one
// attempt towards the next of them (refused) and one allocation towards a
// healthy destination (then released). It reports the p99 of the refused
// attempts (p99-ns) and of the healthy allocations (healthy-p99-ns), which
// on a shared IP waited behind the refused ones' scans.
func BenchmarkAllocExhausted64(b *testing.B) {
	tab := &exhaustedTable{full: map[Addr]bool{}}
	var dsts [64]Addr
	for i := range dsts {
		dsts[i] = v4(203, 0, 113, byte(i))
		tab.full[dsts[i]] = true
	}
	a, err := NewAllocator(DefaultConfig(), tab)
	if err != nil {
		b.Fatal(err)
	}
	bad := make([]time.Duration, b.N)
	good := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	rnd := uint64(1)
	for i := 0; i < b.N; i++ {
		rnd += 0x9e3779b97f4a7c15
		t0 := time.Now()
		_, err := a.Allocate(tcp, pod1, uint16(40000+i%1000), dsts[i%64], 443, egress, rnd)
		t1 := time.Now()
		if err == nil {
			b.Fatal("allocation towards an exhausted destination succeeded")
		}
		p, err := a.Allocate(tcp, pod2, 50000, server1, 443, egress, rnd)
		t2 := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		a.Release(tcp, pod2, 50000, server1, 443, egress, p)
		bad[i], good[i] = t1.Sub(t0), t2.Sub(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(p99(bad).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(p99(good).Nanoseconds()), "healthy-p99-ns")
}

func p99(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[(len(d)*99)/100]
}
