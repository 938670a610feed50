package steer

import (
	"cmp"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/egret-gw/egret/control/plan"
)

// A pod whose owner depends on the destination (plan.Pod.Dest) is steered
// by marks, not by a rule per address: nftables maps its address to its
// class (one per distinct Dest.Key), the class maps the destination to a
// mark through disjoint intervals (the Dest's longest-prefix rules
// flattened), and one `ip rule fwmark <mark> lookup <table>` per object
// sends marked packets to the object's table. The mark is decided on a
// connection's first packet and kept in its conntrack mark, so a change of
// destinations moves only new connections.

// Class is the destinations of the pods one set of objects selects (one
// plan.Dest): which mark each destination gets.
type Class struct {
	// ID names the class's chain and maps in the kernel.
	ID uint32
	// Key is the Dest's key (not read back from the kernel).
	Key string
	// Intervals are disjoint, sorted, IPv4 before IPv6; a destination in
	// none gets no mark, and the filter holds it in (fail closed).
	Intervals []Interval
}

// Interval is the destinations From through To (inclusive) and their mark.
type Interval struct {
	From, To netip.Addr
	Mark     uint32
}

// ClassPod is a local pod address classified by destination.
type ClassPod struct {
	Addr  netip.Addr
	Class uint32
}

// MarkRule sends packets carrying Mark (under the agent's mark mask) to
// Table: one ip rule per family.
type MarkRule struct {
	Mark, Table uint32
}

// DefaultMarkMask are the mark bits the agent owns by default: 12 bits
// above the ones kube-proxy (0x4000, 0x8000) and Cilium (0x0f00) use.
const DefaultMarkMask = 0x0fff0000

// Marks under the mask, as multiples of its lowest bit: 0 is "not decided
// yet", markNode leaves by the node's own routing, markDrop is dropped and
// counted by the filter, and objects get firstObjectMark and up.
const (
	markNode        = 1
	markDrop        = 2
	firstObjectMark = 3
)

// marks are the mark values under one mask.
type marks struct{ mask uint32 }

func (m marks) shift() uint32 { return uint32(bits.TrailingZeros32(m.mask)) }

// value is the n-th mark value.
func (m marks) value(n uint32) uint32 { return n << m.shift() }

// objects is how many object marks the mask holds.
func (m marks) objects() uint32 {
	n := m.mask >> m.shift()
	if n < firstObjectMark {
		return 0
	}
	return n - firstObjectMark + 1
}

func (m marks) node() uint32 { return m.value(markNode) }
func (m marks) drop() uint32 { return m.value(markDrop) }

type classifiedPod struct {
	addr netip.Addr
	dest *plan.Dest
}

// destObject is what classify needs of an object of the node's plan.
type destObject struct {
	name  string
	hops  [2]bool // a usable gateway per family
	table uint32
	// used says some classified pod may use it and it has a table.
	used bool
}

// classify fills st's Classes, Classified and Marks for the pods whose
// owner depends on the destination.
func classify(st *State, pl *plan.Plan, pods []classifiedPod, objs []destObject, p Params, problem func(string, ...any)) {
	m := marks{p.MarkMask}
	if m.mask == 0 {
		m.mask = DefaultMarkMask
	}
	// Marks: a stable hash of the name, like tables, so a mark a
	// connection keeps names the same object after objects come and go.
	byName := map[string]*destObject{}
	markOf := map[string]uint32{}
	usedMarks := map[uint32]bool{}
	for i := range objs {
		o := &objs[i]
		byName[o.name] = o
		if !o.used {
			continue
		}
		n, ok := tableFor(o.name, firstObjectMark, m.objects(), usedMarks)
		if !ok {
			problem("EgressIP %s: all %d marks of the mark mask %#x are in use; traffic of pods sent to it by destination is held", o.name, m.objects(), m.mask)
			continue
		}
		markOf[o.name] = m.value(n)
		st.Marks = append(st.Marks, MarkRule{Mark: m.value(n), Table: o.table})
	}
	mode := map[string]string{}
	modeOf := func(name string) string {
		if v, ok := mode[name]; ok {
			return v
		}
		v := NoEgressIPBlock
		if i := slices.IndexFunc(pl.Objects, func(o plan.Object) bool { return o.Name == name }); i >= 0 {
			v = noEgressIP(pl.Objects[i].EgressIP, p.NoEgressIP, problem)
		} else if p.NoEgressIP == NoEgressIPNode {
			v = NoEgressIPNode
		}
		mode[name] = v
		return v
	}
	// excludeMode is what an exclusion of object name does: an exclusion
	// is the admin's "not through the egress IPs" for those destinations,
	// so its traffic leaves as the node unless the object's own
	// egret.io/no-egress-ip says block; the cluster's noEgressIP is for
	// an object without a usable egress IP, not for this (docs/api.md).
	excludeMode := func(name string) string {
		if i := slices.IndexFunc(pl.Objects, func(o plan.Object) bool { return o.Name == name }); i >= 0 {
			return noEgressIP(pl.Objects[i].EgressIP, NoEgressIPNode, problem)
		}
		return NoEgressIPNode
	}
	// verdict is the mark of traffic of family f that rule r decides (ok)
	// or the fallback does (!ok); 0 holds it in.
	verdict := func(d *plan.Dest, f int) func(r plan.DestRule, ok bool) uint32 {
		return func(r plan.DestRule, ok bool) uint32 {
			owner := d.Fallback
			if ok {
				if r.Exclude {
					if excludeMode(r.Owner) == NoEgressIPNode {
						return m.node()
					}
					return m.drop()
				}
				owner = r.Owner
			}
			if owner == "" {
				return m.node()
			}
			if o := byName[owner]; o != nil && !o.hops[f] && modeOf(owner) == NoEgressIPNode {
				return m.node()
			}
			return markOf[owner]
		}
	}
	// Classes: one per Dest, IDs hashed from the key.
	dests := map[string]*plan.Dest{}
	for _, c := range pods {
		dests[c.dest.Key] = c.dest
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range dests {
			if !yield(k) {
				return
			}
		}
	})
	ids := map[string]uint32{}
	usedIDs := map[uint32]bool{}
	for _, k := range keys {
		id, _ := tableFor(k, 1, 1<<16, usedIDs)
		ids[k] = id
		d := dests[k]
		c := Class{ID: id, Key: k}
		for f := range 2 {
			c.Intervals = append(c.Intervals, flatten(d, f, verdict(d, f))...)
		}
		st.Classes = append(st.Classes, c)
	}
	for _, c := range pods {
		st.Classified = append(st.Classified, ClassPod{Addr: c.addr, Class: ids[c.dest.Key]})
	}
}

// flatten turns d's rules of family f (0 IPv4, 1 IPv6) into disjoint
// intervals covering the family: each address gets verdict(d.Choose(addr)).
// Intervals of mark 0 are left out; neighbours of equal mark are merged.
//
// Rules are sorted by address then length, so the rules containing an
// address form a stack of nested prefixes: one pass with that stack finds
// every boundary.
func flatten(d *plan.Dest, f int, verdict func(r plan.DestRule, ok bool) uint32) []Interval {
	first := netip.IPv4Unspecified()
	if f == 1 {
		first = netip.IPv6Unspecified()
	}
	var out []Interval
	emit := func(from, to netip.Addr, mark uint32) {
		if mark == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Mark == mark && out[n-1].To.Next() == from {
			out[n-1].To = to
			return
		}
		out = append(out, Interval{From: from, To: to, Mark: mark})
	}
	fallback := verdict(plan.DestRule{}, false)
	var stack []plan.DestRule
	cur, done := first, false // cur: the first address not emitted yet
	top := func() uint32 {
		if len(stack) == 0 {
			return fallback
		}
		return verdict(stack[len(stack)-1], true)
	}
	// closeTo emits up to the end of the rules on the stack that end
	// before a (all of them when a is invalid).
	closeTo := func(a netip.Addr) {
		for len(stack) > 0 && !done {
			r := stack[len(stack)-1]
			last := lastAddr(r.Prefix)
			if a.IsValid() && a.Compare(last) <= 0 {
				return
			}
			if cur.Compare(last) <= 0 {
				emit(cur, last, top())
			}
			stack = stack[:len(stack)-1]
			if cur = last.Next(); !cur.IsValid() {
				done = true
			}
		}
	}
	for _, r := range d.Rules {
		if famIndex(r.Prefix.Addr()) != f {
			continue
		}
		closeTo(r.Prefix.Addr())
		if done {
			break
		}
		if start := r.Prefix.Addr(); cur.Compare(start) < 0 {
			emit(cur, start.Prev(), top())
			cur = start
		}
		stack = append(stack, r)
	}
	closeTo(netip.Addr{})
	stack = stack[:0]
	if !done {
		emit(cur, lastAddr(netip.PrefixFrom(first, 0)), fallback)
	}
	return out
}

func intervalCmp(a, b Interval) int {
	return cmp.Or(a.From.Compare(b.From), a.To.Compare(b.To), cmp.Compare(a.Mark, b.Mark))
}
