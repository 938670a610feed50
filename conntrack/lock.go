package conntrack

import (
	"runtime"
	"sync/atomic"
)

// seqLock is a shard's lock and its version in one word: even while free,
// odd while held, and every hold adds two. A reader that loads the same
// even value before and after reading the shard without the lock knows no
// writer ran in between, so lookups that change nothing need no atomic
// read-modify-write at all (see trackFast). Taking and releasing it costs
// what an uncontended sync.Mutex does (one CAS, one atomic add); holders
// never block inside, so a waiter spins briefly and then yields.
type seqLock struct {
	v atomic.Uint32
}

// Lock takes l, spinning (then yielding to the scheduler) while it is held.
func (l *seqLock) Lock() {
	if v := l.v.Load(); v&1 != 0 || !l.v.CompareAndSwap(v, v+1) {
		l.lockSlow()
	}
}

func (l *seqLock) lockSlow() {
	for i := 0; ; i++ {
		v := l.v.Load()
		if v&1 == 0 && l.v.CompareAndSwap(v, v+1) {
			return
		}
		if i >= 32 {
			// The holder may have been descheduled; let it run.
			runtime.Gosched()
		}
	}
}

// TryLock takes l if it is free and reports whether it did.
func (l *seqLock) TryLock() bool {
	v := l.v.Load()
	return v&1 == 0 && l.v.CompareAndSwap(v, v+1)
}

// Unlock releases l; the caller must hold it.
func (l *seqLock) Unlock() {
	l.v.Add(1)
}

// version returns l's current value for an optimistic read: odd means a
// writer holds it and the read must not start.
func (l *seqLock) version() uint32 { return l.v.Load() }

// unchanged reports whether no one took l since version returned v.
func (l *seqLock) unchanged(v uint32) bool { return l.v.Load() == v }
