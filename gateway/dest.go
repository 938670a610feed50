package gateway

// Destination rules: which policy a pod's new flow uses, by destination.
// A table is compiled once per snapshot into sorted disjoint address
// intervals per family, so that a new flow costs one binary search and
// no allocation, however many pods share the table.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// DestTable is a set of destination rules that pods share (Pod.Dest
// names it): pods selected by the same EgressIP objects have one table,
// so ten thousand pods and a thousand networks are a thousand rules.
type DestTable struct {
	Name string
	// Rules map networks to policies; the longest rule containing a
	// destination decides it. A destination no rule contains uses the
	// pod's own Policy (its fallback; "" for none).
	Rules []DestRule
}

// DestRule is one network of a DestTable.
type DestRule struct {
	Prefix netip.Prefix
	// Policy serves Prefix; "" iff Exclude.
	Policy string
	// Exclude says no egress IP serves Prefix: a new flow there is
	// dropped (DropDestNotOwned), even when the pod has a fallback.
	Exclude bool
}

// Values of a destination interval besides a policy index.
const (
	destExcluded int32 = -1 // an exclusion decides the destination
	destNoRule   int32 = -2 // no rule contains it: the pod's fallback policy
)

// u128 is an address as a number (IPv4 in lo).
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

func (a u128) add1() u128 {
	a.lo++
	if a.lo == 0 {
		a.hi++
	}
	return a
}

// snapDest is a compiled DestTable: per family, the start of each interval
// in ascending order and the value of the addresses from there to the
// next start. The first interval starts at 0, so every address has one.
type snapDest struct {
	name   string
	start4 []uint32
	val4   []int32
	start6 []u128
	val6   []int32
	// owners are the policies the rules name, each once: a flow on an
	// egress IP of any of them (or of the pod's fallback) is the pod's
	// and is kept when the rules change.
	owners []int32
}

// choose returns the value of destination dst (IPv4-mapped for IPv4).
func (d *snapDest) choose(dst *[16]byte, v4 bool) int32 {
	if v4 {
		a := binary.BigEndian.Uint32(dst[12:])
		s := d.start4
		lo, hi := 1, len(s) // s[0] == 0 <= a
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if s[m] <= a {
				lo = m + 1
			} else {
				hi = m
			}
		}
		return d.val4[lo-1]
	}
	a := u128{binary.BigEndian.Uint64(dst[:8]), binary.BigEndian.Uint64(dst[8:])}
	s := d.start6
	lo, hi := 1, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !a.less(s[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return d.val6[lo-1]
}

// destRange is a rule as an address range.
type destRange struct {
	start, end u128
	val        int32
}

// newSnapDest compiles t; policyIdx numbers the policies.
func newSnapDest(t DestTable, policyIdx map[string]int32) (snapDest, error) {
	d := snapDest{name: t.Name}
	var r4, r6 []destRange
	seen := make(map[netip.Prefix]bool, len(t.Rules))
	for _, r := range t.Rules {
		p := r.Prefix
		if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() || p.Masked() != p {
			return d, fmt.Errorf("gateway config: destination table %q: %v is not a masked IPv4 or IPv6 prefix", t.Name, p)
		}
		if seen[p] {
			return d, fmt.Errorf("gateway config: destination table %q lists %v twice", t.Name, p)
		}
		seen[p] = true
		val := destExcluded
		switch {
		case r.Exclude && r.Policy != "":
			return d, fmt.Errorf("gateway config: destination table %q: %v is an exclusion and names policy %q; an exclusion uses no policy", t.Name, p, r.Policy)
		case !r.Exclude:
			pi, ok := policyIdx[r.Policy]
			if !ok {
				return d, fmt.Errorf("gateway config: destination table %q: %v names policy %q, which is not configured", t.Name, p, r.Policy)
			}
			val = pi
			if !slices.Contains(d.owners, pi) {
				d.owners = append(d.owners, pi)
			}
		}
		b := p.Addr().As16()
		start := u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
		if p.Addr().Is4() {
			start = u128{0, uint64(binary.BigEndian.Uint32(b[12:]))}
			r4 = append(r4, destRange{start, or128(start, hostMask(32, p.Bits())), val})
		} else {
			r6 = append(r6, destRange{start, or128(start, hostMask(128, p.Bits())), val})
		}
	}
	for _, iv := range intervals(r4, u128{0, 1<<32 - 1}) {
		d.start4 = append(d.start4, uint32(iv.start.lo))
		d.val4 = append(d.val4, iv.val)
	}
	for _, iv := range intervals(r6, u128{^uint64(0), ^uint64(0)}) {
		d.start6 = append(d.start6, iv.start)
		d.val6 = append(d.val6, iv.val)
	}
	return d, nil
}

// hostMask has the low w-bits bits set.
func hostMask(w, bits int) u128 {
	n := uint(w - bits)
	if n >= 64 {
		return u128{1<<(n-64) - 1, ^uint64(0)} // n-64 == 64 shifts to 0: all ones
	}
	return u128{0, 1<<n - 1}
}

func or128(a, b u128) u128 { return u128{a.hi | b.hi, a.lo | b.lo} }

// destInterval is the start of an interval and its value.
type destInterval struct {
	start u128
	val   int32
}

// intervals flattens prefix ranges (nested or disjoint, never partly
// overlapping) over [0, last] into disjoint intervals, each with the value
// of the longest range holding it (destNoRule where none does), adjacent
// equal values merged. Sorted by start with the enclosing range first,
// the ranges nest like brackets: a stack of the open ones gives the value
// wherever an inner one ends.
func intervals(rs []destRange, last u128) []destInterval {
	slices.SortFunc(rs, func(a, b destRange) int {
		if a.start != b.start {
			if a.start.less(b.start) {
				return -1
			}
			return 1
		}
		if a.end == b.end {
			return 0
		}
		if b.end.less(a.end) {
			return -1 // the longer range (shorter prefix) first
		}
		return 1
	})
	out := []destInterval{{u128{}, destNoRule}}
	emit := func(at u128, v int32) {
		n := len(out) - 1
		if out[n].start == at {
			out[n].val = v
			if n > 0 && out[n-1].val == v {
				out = out[:n]
			}
			return
		}
		if out[n].val != v {
			out = append(out, destInterval{at, v})
		}
	}
	var open []destRange
	pop := func() {
		x := open[len(open)-1]
		open = open[:len(open)-1]
		if x.end == last {
			return // nothing after it, nor after any range holding it
		}
		v := destNoRule
		if len(open) > 0 {
			v = open[len(open)-1].val
		}
		emit(x.end.add1(), v)
	}
	for _, r := range rs {
		for len(open) > 0 && open[len(open)-1].end.less(r.start) {
			pop()
		}
		emit(r.start, r.val)
		open = append(open, r)
	}
	for len(open) > 0 {
		pop()
	}
	return out
}
