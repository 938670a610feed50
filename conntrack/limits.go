package conntrack

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
)

// Errors Insert and Admit return when a flow would go over a per-address
// limit (Config.SourceLimit, Config.NATLimit). The table is unchanged.
var (
	// ErrSourceLimit means the flow's original source (the pod) already
	// has SourceLimit flows.
	ErrSourceLimit = errors.New("conntrack: the source address has reached its flow limit")
	// ErrNATLimit means the flow's NAT address (the egress IP) already has
	// NATLimit flows.
	ErrNATLimit = errors.New("conntrack: the NAT address has reached its flow limit")
)

// addrCounts counts flows per address in a count-min sketch: two rows of
// counters, each address adding to one counter per row (chosen by a keyed
// hash, independently), its count read as the smaller of the two. It is
// sized up front, holds no keys (so nothing to reclaim when a pod goes away,
// and no lock: every change is one atomic add per row) and never counts an
// address low. It may count one high: only when both its counters are
// shared with addresses that hold many flows, which for a handful of busy
// pods among 2×cells counters is a chance of about (busy/cells)²; the key is
// random per table, so no one can choose addresses that collide.
type addrCounts struct {
	cells []atomic.Int32 // row 0 then row 1, each mask+1 counters
	mask  uint64
	limit int32 // 0: no limit, and cells is nil
}

func newAddrCounts(limit, cells int) addrCounts {
	if limit <= 0 {
		return addrCounts{}
	}
	n := 1
	for n < cells {
		n *= 2
	}
	return addrCounts{cells: make([]atomic.Int32, 2*n), mask: uint64(n - 1), limit: int32(limit)}
}

// on reports whether the limit is in force.
func (c *addrCounts) on() bool { return c.limit > 0 }

// rows returns a's counters in both rows for a hash h of it.
func (c *addrCounts) rows(h uint64) (*atomic.Int32, *atomic.Int32) {
	return &c.cells[h&c.mask], &c.cells[c.mask+1+(h>>32)&c.mask]
}

// full reports whether an address with hash h is at its limit, without
// changing anything (Admit).
func (c *addrCounts) full(h uint64) bool {
	a, b := c.rows(h)
	return min(a.Load(), b.Load()) >= c.limit
}

// take counts one more flow for the address with hash h, or reports false
// and changes nothing when that would go over the limit. Two workers racing
// for the last place cannot both win: each adds first and looks at what it
// added.
func (c *addrCounts) take(h uint64) bool {
	a, b := c.rows(h)
	if min(a.Add(1), b.Add(1)) > c.limit {
		a.Add(-1)
		b.Add(-1)
		return false
	}
	return true
}

// give takes back one flow of the address with hash h.
func (c *addrCounts) give(h uint64) {
	a, b := c.rows(h)
	a.Add(-1)
	b.Add(-1)
}

// addrHash is a keyed hash of one address, for the flow counts: the same
// key as the tuples', mixed differently.
func (h *hasher) addrHash(a *Addr) uint64 {
	x := mum(binary.LittleEndian.Uint64(a[0:8])^h.s[5], binary.LittleEndian.Uint64(a[8:16])^h.s[2])
	x ^= x >> 32
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	return x
}

// DefaultLimits returns the per-address limits for a table of maxFlows
// flows that a gateway uses unless configured otherwise: a pod may hold a
// sixteenth of the table (65,536 flows of the default 1,048,576, as many as
// one pod can use towards one server port through one egress IP anyway) and
// an egress IP half, so that the pods of the other egress IPs hosted on
// the gateway always have the other half.
func DefaultLimits(maxFlows int) (source, nat int) {
	return max(1, maxFlows/16), max(1, maxFlows/2)
}

// Sizes of the count tables: pods on one gateway number in the thousands,
// so 64k counters a row keep them apart; egress IPs hosted on one gateway
// in the tens, so 1024. A small table needs no more counters than flows.
const (
	sourceCells = 1 << 16
	natCells    = 1 << 10
)

// Admit reports whether a new flow from src bound to nat would be refused
// for a per-address limit (ErrSourceLimit, ErrNATLimit), without changing
// anything: a data plane asks before it allocates a NAT port, so a pod at
// its limit costs no allocation. Insert decides for good.
func (t *Table) Admit(src, nat *Addr) error {
	if t.srcCounts.on() && t.srcCounts.full(t.h.addrHash(src)) {
		return ErrSourceLimit
	}
	if t.natCounts.on() && t.natCounts.full(t.h.addrHash(nat)) {
		return ErrNATLimit
	}
	return nil
}

// takeLimits counts a new flow against both limits, or returns the error
// of the first it would go over and counts nothing. enforce false counts
// without refusing (Import: the flow was admitted where it was created).
func (t *Table) takeLimits(src, nat *Addr, enforce bool) error {
	var hs uint64
	if t.srcCounts.on() {
		hs = t.h.addrHash(src)
		if !t.srcCounts.take(hs) {
			if enforce {
				return ErrSourceLimit
			}
			t.srcCounts.force(hs)
		}
	}
	if t.natCounts.on() {
		hn := t.h.addrHash(nat)
		if !t.natCounts.take(hn) {
			if enforce {
				if t.srcCounts.on() {
					t.srcCounts.give(hs)
				}
				return ErrNATLimit
			}
			t.natCounts.force(hn)
		}
	}
	return nil
}

// force counts a flow whatever the limit.
func (c *addrCounts) force(h uint64) {
	a, b := c.rows(h)
	a.Add(1)
	b.Add(1)
}

// giveLimits takes back a removed flow's counts.
func (t *Table) giveLimits(e *entry) {
	if t.srcCounts.on() {
		t.srcCounts.give(t.h.addrHash(&e.src))
	}
	if t.natCounts.on() {
		t.natCounts.give(t.h.addrHash(&e.nat))
	}
}
