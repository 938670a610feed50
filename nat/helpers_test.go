package nat

import (
	"errors"
	"sync"
	"testing"
)

// v4 returns a.b.c.d IPv4-mapped.
func v4(a, b, c, d byte) Addr {
	return Addr{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}
}

// v6 returns 2001:db8::<hi>:<lo>.
func v6(hi, lo byte) Addr {
	return Addr{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 14: hi, 15: lo}
}

type replyKey struct {
	proto  uint8
	remote Addr
	rport  uint16
	nat    Addr
	nport  uint16
}

// flows is the map-backed stand-in for the conntrack table: it holds the
// reply tuples of live flows, as the data plane would after Insert.
type flows struct {
	mu    sync.Mutex
	m     map[replyKey]struct{}
	calls int // ReplyInUse calls, to see how hard the allocator searched
}

func newFlows() *flows { return &flows{m: map[replyKey]struct{}{}} }

func (f *flows) ReplyInUse(proto uint8, remote Addr, rport uint16, nat Addr, nport uint16) bool {
	f.mu.Lock()
	_, ok := f.m[replyKey{proto, remote, rport, nat, nport}]
	f.calls++
	f.mu.Unlock()
	return ok
}

// insert adds a reply tuple; false if it is already there (what conntrack's
// Insert reports as ErrExists).
func (f *flows) insert(k replyKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[k]; ok {
		return false
	}
	f.m[k] = struct{}{}
	return true
}

func (f *flows) remove(k replyKey) {
	f.mu.Lock()
	delete(f.m, k)
	f.mu.Unlock()
}

// flow is a pod-side 5-tuple leaving on one egress IP.
type flow struct {
	proto      uint8
	src        Addr
	sport      uint16
	dst        Addr
	dport      uint16
	nat        Addr
	natPort    uint16 // filled by open
	allocation error
}

// open allocates f's port and records its reply tuple like the data plane:
// a duplicate reply tuple is a bug in the allocator and fails the test.
func open(t testing.TB, a *Allocator, tab *flows, f *flow, rnd uint64) {
	t.Helper()
	p, err := a.Allocate(f.proto, f.src, f.sport, f.dst, f.dport, f.nat, rnd)
	f.natPort, f.allocation = p, err
	if err != nil {
		return
	}
	if p == 0 {
		t.Fatalf("Allocate returned port 0 without error for %+v", f)
	}
	if !tab.insert(replyKey{f.proto, f.dst, f.dport, f.nat, p}) {
		t.Fatalf("Allocate returned port %d whose reply tuple is already in use (flow %+v)", p, f)
	}
}

// mustOpen is open that fails the test on an allocation error.
func mustOpen(t testing.TB, a *Allocator, tab *flows, f *flow, rnd uint64) uint16 {
	t.Helper()
	open(t, a, tab, f, rnd)
	if f.allocation != nil {
		t.Fatalf("Allocate(%+v): %v", f, f.allocation)
	}
	return f.natPort
}

func closeFlow(a *Allocator, tab *flows, f *flow) {
	tab.remove(replyKey{f.proto, f.dst, f.dport, f.nat, f.natPort})
	a.Release(f.proto, f.src, f.sport, f.dst, f.dport, f.nat, f.natPort)
}

func newAlloc(t testing.TB, cfg Config, tab *flows) *Allocator {
	t.Helper()
	a, err := NewAllocator(cfg, tab)
	if err != nil {
		t.Fatalf("NewAllocator: %v", err)
	}
	return a
}

// rng is a deterministic per-test random source (splitmix64).
type rng uint64

func (r *rng) next() uint64 {
	var out uint64
	*(*uint64)(r), out = splitmix(uint64(*r))
	return out
}

func isExhausted(err error) bool { return errors.Is(err, ErrExhausted) }
