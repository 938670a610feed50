package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Destinations are the networks an object with a trafficSelector uses its
// egress IPs for, less its exclusions.
type Destinations struct {
	// Include are the networks of the selected EgressIPTraffic objects not
	// marked egret.io/exclude, sorted, each once. When the selector picks
	// only exclusions, Include is every address (0.0.0.0/0 and ::/0): "all
	// but these".
	Include []netip.Prefix
	// Exclude are the networks of the selected objects marked exclude.
	Exclude []netip.Prefix
	// Traffic names the selected EgressIPTraffic objects, sorted.
	Traffic []string
}

// Dest is how the destinations of a pod selected by one set of objects map
// to those objects. Pods selected by the same set share one Dest.
type Dest struct {
	// Key names the set of objects that select the pods, in name order,
	// joined by commas: pods with equal keys have equal Dests.
	Key string
	// Rules are the destination networks, sorted by address then length.
	// A destination is decided by the longest rule containing it.
	Rules []DestRule
	// Fallback is the object without a trafficSelector that serves the
	// destinations no rule contains, "" when none does: those leave as
	// the node, as for a pod no object selects.
	Fallback string

	owners []string // Owners, computed once with the rules
}

// DestRule is a destination network and the object that decides it.
type DestRule struct {
	Prefix netip.Prefix
	// Owner is the object whose trafficSelector picked the network.
	Owner string
	// Exclude says the network is one of Owner's exclusions: traffic there
	// does not use any egress IP; it leaves as the node, or is dropped when
	// Owner is annotated egret.io/no-egress-ip: block.
	Exclude bool
}

// Choose returns the rule deciding dst: the longest rule containing it. ok
// is false when none does (the Fallback object decides).
func (d *Dest) Choose(dst netip.Addr) (r DestRule, ok bool) {
	dst = dst.Unmap()
	for _, x := range d.Rules {
		if x.Prefix.Contains(dst) && (!ok || x.Prefix.Bits() > r.Prefix.Bits()) {
			r, ok = x, true
		}
	}
	return r, ok
}

// Owners are the objects whose egress IPs some destination uses: the
// rules' non-excluding owners and the fallback, in name order, each once.
// The slice is shared: callers must not modify it.
func (d *Dest) Owners() []string {
	if d.owners == nil { // a Dest not built by the plan (a literal)
		return d.computeOwners()
	}
	return d.owners
}

func (d *Dest) computeOwners() []string {
	out := []string{}
	for _, r := range d.Rules {
		if !r.Exclude {
			out = append(out, r.Owner)
		}
	}
	if d.Fallback != "" {
		out = append(out, d.Fallback)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Conflict is destinations two objects that select a pod in common both
// claim: the same network (Tie), or one inside the other (the longer
// wins). Either way the user is told, on both objects. There is one
// Conflict per pair of objects and kind, with the first example found.
type Conflict struct {
	// A and B are the two objects, A before B by name; PrefixA and PrefixB
	// their networks of the example.
	A, B             string
	PrefixA, PrefixB netip.Prefix
	// Count is how many pairs of networks conflict this way.
	Count int
	// Tie says the networks are equal; Winner is the object that decides
	// it (an exclusion first, then the first by name).
	Tie    bool
	Winner string
	// Pod is one pod (namespace/name) both objects select.
	Pod string
}

func (c Conflict) String() string {
	more := ""
	if c.Count > 1 {
		more = fmt.Sprintf(" (and %d more networks)", c.Count-1)
	}
	if c.Tie {
		return fmt.Sprintf("EgressIP %s and %s both claim %v%s for pod %s and any other both select; %s decides it",
			c.A, c.B, c.PrefixA, more, c.Pod, c.Winner)
	}
	return fmt.Sprintf("EgressIP %s's %v and %s's %v overlap%s for pod %s and any other both select; the longer prefix decides",
		c.A, c.PrefixA, c.B, c.PrefixB, more, c.Pod)
}

// destinations compiles e's trafficSelector against the EgressIPTraffic
// objects, nil when e has none. Bad entries are problems and left out.
func (p *Plan) destinations(e *egressv1.EgressIP, traffic []*egressv1.EgressIPTraffic) *Destinations {
	if e.Spec.TrafficSelector == nil {
		return nil
	}
	d := &Destinations{}
	sel, err := metav1.LabelSelectorAsSelector(e.Spec.TrafficSelector)
	if err != nil {
		p.problem("EgressIP %s: spec.trafficSelector: %v; it selects no destination", e.Name, err)
		return d
	}
	for _, t := range traffic {
		if !sel.Matches(labels.Set(t.Labels)) {
			continue
		}
		d.Traffic = append(d.Traffic, t.Name)
		nets := p.trafficNetworks(t)
		if t.Excluded() {
			d.Exclude = append(d.Exclude, nets...)
		} else {
			d.Include = append(d.Include, nets...)
		}
	}
	if len(d.Include) == 0 && len(d.Traffic) > 0 && slices.ContainsFunc(traffic, func(t *egressv1.EgressIPTraffic) bool {
		return t.Excluded() && sel.Matches(labels.Set(t.Labels))
	}) {
		d.Include = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	slices.Sort(d.Traffic)
	d.Include = sortPrefixes(d.Include)
	d.Exclude = sortPrefixes(d.Exclude)
	return d
}

// trafficNetworks are t's usable destinations: its networks and the
// addresses its names last resolved to (each as a host prefix).
func (p *Plan) trafficNetworks(t *egressv1.EgressIPTraffic) []netip.Prefix {
	if d, ok := p.trafficCache[t.Name]; ok {
		return d
	}
	var out []netip.Prefix
	for i, s := range t.Spec.DestinationNetworks {
		n, err := egressv1.ParseDestinationNetwork(s)
		if err != nil {
			p.problem("EgressIPTraffic %s: spec.destinationNetworks[%d]: %v; not used", t.Name, i, err)
			continue
		}
		out = append(out, n)
	}
	names := map[string]bool{}
	for _, n := range t.Spec.DNSNames {
		names[strings.ToLower(strings.TrimSuffix(n, "."))] = true
	}
	for _, r := range t.Status.DNSNames {
		if !names[strings.ToLower(strings.TrimSuffix(r.Name, "."))] {
			continue // resolved before the name left the spec
		}
		for _, s := range r.Addresses {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				p.problem("EgressIPTraffic %s: status address %q of %s is not an IP address; not used", t.Name, s, r.Name)
				continue
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	if p.trafficCache == nil {
		p.trafficCache = map[string][]netip.Prefix{}
	}
	p.trafficCache[t.Name] = out
	return out
}

func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, prefixCmp)
	return slices.Compact(ps)
}

func prefixCmp(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// dest builds the Dest of a pod selected by objs (indexes into p.Objects,
// in name order) and the conflicts among them, or nil when no object of
// objs has a trafficSelector. pod names the first pod seen with this set.
func (p *Plan) dest(objs []int, pod string) *Dest {
	var withSel bool
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = p.Objects[o].Name
		withSel = withSel || p.Objects[o].Destinations != nil
	}
	if !withSel {
		return nil
	}
	key := strings.Join(names, ",")
	if d, ok := p.dests[key]; ok {
		return d
	}
	d := &Dest{Key: key}
	// Every object's entries, then the winner of each network.
	type entry struct {
		DestRule
		order int // the object's place in name order
	}
	var entries []entry
	for i, o := range objs {
		obj := &p.Objects[o]
		if obj.Destinations == nil {
			if d.Fallback == "" {
				d.Fallback = obj.Name
			}
			continue
		}
		for _, n := range obj.Destinations.Include {
			entries = append(entries, entry{DestRule{Prefix: n, Owner: obj.Name}, i})
		}
		for _, n := range obj.Destinations.Exclude {
			entries = append(entries, entry{DestRule{Prefix: n, Owner: obj.Name, Exclude: true}, i})
		}
	}
	// Per network: an exclusion first, then the first object by name.
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(prefixCmp(a.Prefix, b.Prefix), -cmpBool(a.Exclude, b.Exclude), cmp.Compare(a.order, b.order))
	})
	for i, e := range entries {
		if i > 0 && entries[i-1].Prefix == e.Prefix {
			w := d.Rules[len(d.Rules)-1]
			if w.Owner != e.Owner {
				p.conflict(w.Owner, e.Owner, e.Prefix, e.Prefix, true, w.Owner, pod)
			}
			continue
		}
		d.Rules = append(d.Rules, e.DestRule)
	}
	// Nested networks of different objects: the longer wins, by design,
	// but the user is told. Rules are sorted by address then length, so
	// every network that contains rule i comes before it; a stack of
	// enclosing rules finds them in one pass.
	var open []DestRule
	for _, r := range d.Rules {
		for len(open) > 0 && !open[len(open)-1].Prefix.Contains(r.Prefix.Addr()) {
			open = open[:len(open)-1]
		}
		for _, o := range open {
			if o.Owner != r.Owner {
				p.conflict(o.Owner, r.Owner, o.Prefix, r.Prefix, false, r.Owner, pod)
			}
		}
		open = append(open, r)
	}
	d.owners = d.computeOwners() // before the plan is shared: Owners never writes after
	if p.dests == nil {
		p.dests = map[string]*Dest{}
	}
	p.dests[key] = d
	return d
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// conflict counts a Conflict of x's px and y's py.
func (p *Plan) conflict(x, y string, px, py netip.Prefix, tie bool, winner, pod string) {
	c := Conflict{A: x, B: y, PrefixA: px, PrefixB: py, Count: 1, Tie: tie, Winner: winner, Pod: pod}
	if y < x {
		c.A, c.B, c.PrefixA, c.PrefixB = y, x, py, px
	}
	if i := slices.IndexFunc(p.Conflicts, func(o Conflict) bool { return o.A == c.A && o.B == c.B && o.Tie == c.Tie }); i >= 0 {
		p.Conflicts[i].Count++
		return
	}
	p.Conflicts = append(p.Conflicts, c)
}
