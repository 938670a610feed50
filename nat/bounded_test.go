package nat

import (
	"sync"
	"testing"
)

// fullDsts stands in for a flow table in which every port towards the
// listed destinations is taken (a pod that exhausted them) and nothing
// else; it counts lookups and records whether any ran while the egress
// IP's lock was held.
type fullDsts struct {
	a      *Allocator
	full   map[Addr]bool
	mu     sync.Mutex
	calls  int
	locked int
}

func (f *fullDsts) ReplyInUse(proto uint8, remote Addr, rport uint16, nat Addr, nport uint16) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if st := f.a.lookup(&nat); st != nil {
		if !st.mu.TryLock() {
			f.locked++
		} else {
			st.mu.Unlock()
		}
	}
	return f.full[remote]
}

func exhaustedSet(n int) map[Addr]bool {
	m := map[Addr]bool{}
	for i := 0; i < n; i++ {
		m[v4(203, 0, byte(i>>8), byte(i))] = true
	}
	return m
}

// A pod rotating over 64 exhausted destinations costs each attempt a
// bounded number of flow-table lookups, none of them under the egress IP's
// lock, and after one round none at all (all 64 are remembered). The old
// allocator scanned the whole range (64k lookups) under the lock on every
// attempt once more than 8 destinations rotated.
func TestExhaustedDestinationsBoundedWork(t *testing.T) {
	in := &fullDsts{full: exhaustedSet(64)}
	a := newAlloc(t, DefaultConfig(), newFlows())
	a.inUse = in
	in.a = a
	mustFail := func(round, i int) {
		t.Helper()
		before := in.calls
		_, err := a.Allocate(tcp, pod1, uint16(40000+i), v4(203, 0, 0, byte(i)), 443, egress, uint64(round*64+i))
		if !isExhausted(err) {
			t.Fatalf("round %d destination %d: %v, want ErrExhausted", round, i, err)
		}
		if n := in.calls - before; n > 1+defaultRandomAttempts+scanProbes {
			t.Fatalf("round %d destination %d: %d flow-table lookups, want at most %d", round, i, n, 1+defaultRandomAttempts+scanProbes)
		}
	}
	for i := 0; i < 64; i++ {
		mustFail(0, i)
	}
	if in.locked != 0 {
		t.Fatalf("%d of %d flow-table lookups ran under the egress IP's lock", in.locked, in.calls)
	}
	calls := in.calls
	for round := 1; round < 3; round++ {
		for i := 0; i < 64; i++ {
			mustFail(round, i)
		}
	}
	if in.calls != calls {
		t.Fatalf("%d more lookups after every destination was found exhausted once, want 0", in.calls-calls)
	}
	// Another destination still gets its port.
	if _, err := a.Allocate(tcp, pod1, 40000, server1, 443, egress, 1); err != nil {
		t.Fatalf("healthy destination: %v", err)
	}
}
