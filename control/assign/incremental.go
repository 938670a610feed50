package assign

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"unsafe"
)

// Incremental is Assign with a memory of its last call, for a controller
// that reassigns on every change: when nothing it reads changed it returns
// the last result, and when only a few objects changed with the nodes the
// same it recomputes those objects alone. Its result is always exactly what
// Assign returns for the same arguments (TestIncrementalMatchesFull
// compares them on random sequences of changes); wherever the shortcut
// cannot be shown equal cheaply, it runs Assign.
//
// The zero value is ready to use. It is not safe for concurrent use.
type Incremental struct {
	a     *assigner // the state of last; nil before the first call
	nodes map[string]Node
	avoid bool // Options.AvoidCordoned of last
	objs  map[string]*entry
	gen   uint64 // counts calls, to find the objects no longer listed
	last  Result
}

// entry is one object as last given and its result.
type entry struct {
	in      Object
	res     ObjectResult
	settled bool   // in holds res as its status and standbys
	seen    uint64 // the last call that listed it
}

// Delta says what one Incremental.Assign call did.
type Delta struct {
	// Full is true when the whole assignment was recomputed: any object's
	// result may have changed.
	Full bool
	// Objects, when !Full, names the objects whose result was recomputed
	// (added, changed or deleted ones), sorted; every other object's
	// result is the previous call's.
	Objects []string
}

// Assign returns Assign(objects, nodes, opts), and what it had to recompute.
//
// An object needs nothing when its input is the last one, or is its last
// result fed back (its own status write, seen again): Assign keeps a valid
// assignment exactly (TestPropertyRandomClusters), so such an input gives
// the same result. When any input differs, every object whose input is not
// its result fed back is recomputed, even one whose input did not change
// (a status not yet written): Assign places it again, after the others'
// changes.
func (x *Incremental) Assign(objects []Object, nodes []Node, opts Options) (Result, Delta, error) {
	if !x.sameNodes(nodes, opts) {
		return x.full(objects, nodes, opts)
	}
	x.gen++
	identical := true
	var dirty []string
	changed := map[string]Object{} // the dirty objects that are listed
	var fedBack []Object
	matched := 0
	for _, o := range objects {
		e := x.objs[o.Name]
		switch {
		case e == nil:
			if _, dup := changed[o.Name]; dup {
				return x.full(objects, nodes, opts) // Assign names the duplicate
			}
			identical = false
			dirty, changed[o.Name] = append(dirty, o.Name), o
			continue
		case e.seen == x.gen:
			return x.full(objects, nodes, opts)
		}
		e.seen = x.gen
		matched++
		if sameObject(e.in, o) {
			if !e.settled {
				dirty, changed[o.Name] = append(dirty, o.Name), o
			}
			continue
		}
		identical = false
		if e.in.Created.Equal(o.Created) && slices.Equal(e.in.EgressIPs, o.EgressIPs) && settled(o, e.res) {
			fedBack = append(fedBack, o)
			continue
		}
		dirty, changed[o.Name] = append(dirty, o.Name), o
	}
	if matched != len(x.objs) { // some are gone
		identical = false
		for name, e := range x.objs {
			if e.seen != x.gen {
				dirty = append(dirty, name)
			}
		}
	}
	if identical {
		return x.last, Delta{}, nil // the same input gives the same result
	}
	slices.Sort(dirty)
	if !x.othersStand(dirty) || len(dirty) > 0 && !x.update(changed, dirty) {
		return x.full(objects, nodes, opts)
	}
	for _, o := range fedBack {
		x.objs[o.Name].in = o
	}
	if len(dirty) == 0 {
		return x.last, Delta{}, nil // only results fed back: the last result stands
	}
	return x.last, Delta{Objects: dirty}, nil
}

// sameNodes reports whether the nodes and options are those of the last
// result, and allow a partial recomputation at all.
func (x *Incremental) sameNodes(nodes []Node, opts Options) bool {
	if x.a == nil || opts.AvoidCordoned != x.avoid || len(nodes) != len(x.nodes) {
		return false
	}
	for _, n := range nodes {
		// A hold-down ends with time (Options.Now), and cloud capacity makes
		// one object's placement decide another's: both need the full order.
		if !n.HoldDownUntil.IsZero() || n.Cloud != nil {
			return false
		}
		if prev, ok := x.nodes[n.Name]; !ok || !reflect.DeepEqual(prev, n) {
			return false
		}
	}
	return true
}

// othersStand reports whether every object outside dirty (sorted) keeps
// its last result: not if one of its IPs waits for room (no node or no
// standby), which Assign tries again and which what the dirty objects free
// could let in. Without such IPs, Events are a function of the specs,
// claims and nodes.
func (x *Incremental) othersStand(dirty []string) bool {
	isDirty := func(name string) bool {
		_, ok := slices.BinarySearch(dirty, name)
		return ok
	}
	for _, ev := range x.last.Events {
		if ev.Reason == ReasonNoMatchingNodeFound && !isDirty(ev.Object) {
			return false
		}
	}
	for _, ev := range x.last.NoStandby {
		if !isDirty(ev.Object) {
			return false
		}
	}
	return true
}

// full recomputes everything with Assign's own code and keeps its state.
func (x *Incremental) full(objects []Object, nodes []Node, opts Options) (Result, Delta, error) {
	x.a, x.objs = nil, nil
	a, err := assignAll(objects, nodes, opts)
	if err != nil {
		return Result{}, Delta{}, err
	}
	r := a.result()
	x.a, x.avoid, x.last = a, opts.AvoidCordoned, r
	x.nodes = make(map[string]Node, len(nodes))
	for _, n := range nodes {
		x.nodes[n.Name] = n
	}
	x.objs = make(map[string]*entry, len(objects))
	for _, o := range objects {
		x.objs[o.Name] = &entry{in: o, seen: x.gen}
	}
	for _, res := range r.Objects {
		e := x.objs[res.Name]
		e.res, e.settled = res, settled(e.in, res)
	}
	return r, Delta{Full: true}, nil
}

func sameObject(x, y Object) bool {
	return x.Name == y.Name && x.Created.Equal(y.Created) && sameSlice(x.EgressIPs, y.EgressIPs) &&
		sameSlice(x.Status, y.Status) && sameStandbys(x.Standbys, y.Standbys)
}

// sameSlice is slices.Equal, quick when both share their elements (a
// caller passing what it passed last time).
func sameSlice[T comparable](x, y []T) bool {
	if len(x) != len(y) {
		return false
	}
	if len(x) == 0 || unsafe.SliceData(x) == unsafe.SliceData(y) {
		return true
	}
	return slices.Equal(x, y)
}

// sameStandbys is maps.Equal, quick when both are one map.
func sameStandbys(x, y map[netip.Addr]string) bool {
	if len(x) != len(y) {
		return false
	}
	if len(x) == 0 || reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() {
		return true
	}
	return maps.Equal(x, y)
}

// settled reports whether o's status and recorded standbys are exactly r.
func settled(o Object, r ObjectResult) bool {
	if len(o.Status) != len(r.Status) {
		return false
	}
	n := 0
	for _, a := range r.Status {
		if !slices.Contains(o.Status, StatusItem{Node: a.Node, EgressIP: a.EgressIP}) {
			return false
		}
		if a.Standby != "" {
			n++
			if s, ok := o.Standbys[a.Addr]; !ok || s != a.Standby {
				return false
			}
		}
	}
	return len(o.Standbys) == n
}

// update recomputes the dirty objects alone, in the order Assign would
// (remove, claim, keep, take over, place, standbys), or reports false,
// changing nothing, when that could differ from Assign: an IP of a dirty
// object that another object lists, or a status the object did not have
// as its last result (which could take room from objects placed before).
func (x *Incremental) update(in map[string]Object, dirty []string) bool {
	a := x.a
	fresh := make([]*objState, 0, len(dirty))
	claimed := map[netip.Addr]bool{} // by a dirty object
	for _, name := range dirty {
		if old := a.objs[name]; old != nil {
			for _, ip := range old.addrs {
				if len(a.claims[ip]) != 1 {
					return false
				}
			}
		}
		o, ok := in[name]
		if !ok {
			continue
		}
		s := a.parseObject(o)
		for _, ip := range s.addrs {
			c := a.claims[ip]
			if len(c) > 1 || len(c) == 1 && c[0].name != name || claimed[ip] {
				return false
			}
			claimed[ip] = true
		}
		var prev ObjectResult
		if e := x.objs[name]; e != nil {
			prev = e.res
		}
		for _, it := range o.Status {
			if !slices.ContainsFunc(prev.Status, func(p Assignment) bool { return p.Node == it.Node && p.EgressIP == it.EgressIP }) {
				return false
			}
		}
		s.status = statusAddrs(o.Status)
		s.standbys = o.Standbys
		fresh = append(fresh, s)
	}

	for _, name := range dirty {
		old := a.objs[name]
		if old == nil {
			continue
		}
		for i := range old.placed {
			if old.placed[i].standby >= 0 {
				a.unsetStandby(&old.placed[i])
			}
		}
		for i := len(old.placed) - 1; i >= 0; i-- {
			a.unplace(old, i)
		}
		for _, ip := range old.addrs {
			delete(a.claims, ip)
			delete(a.owner, ip)
		}
		delete(a.objs, name)
		if i, ok := slices.BinarySearch(a.names, name); ok {
			a.names = slices.Delete(a.names, i, i+1)
		}
		delete(x.objs, name)
	}
	for _, s := range fresh {
		a.objs[s.name] = s
		i, _ := slices.BinarySearch(a.names, s.name)
		a.names = slices.Insert(a.names, i, s.name)
		a.addClaims(s)
		for _, ip := range s.addrs {
			a.decideOwner(ip)
		}
	}
	for _, s := range fresh {
		a.keep(s, in[s.name].Status)
	}
	for _, s := range fresh {
		a.takeOver(s)
	}
	for _, s := range fresh {
		a.placeObject(s)
	}
	a.noStandby = slices.DeleteFunc(a.noStandby, func(ev Event) bool {
		_, found := slices.BinarySearch(dirty, ev.Object)
		return found
	})
	a.chooseStandbysOf(fresh)

	events := slices.DeleteFunc(slices.Clone(x.last.Events), func(ev Event) bool {
		_, found := slices.BinarySearch(dirty, ev.Object)
		return found
	})
	for _, s := range fresh {
		o := in[s.name]
		res := a.objectResult(s)
		x.objs[s.name] = &entry{in: o, res: res, settled: settled(o, res), seen: x.gen}
		events = a.events(s, events)
	}
	sortEvents(events)
	r := Result{Objects: make([]ObjectResult, len(a.names)), Events: events,
		NodeProblems: x.last.NodeProblems, NoStandby: slices.Clone(a.noStandby)}
	for i, name := range a.names {
		r.Objects[i] = x.objs[name].res
	}
	sortEvents(r.NoStandby)
	x.last = r
	return true
}

// chooseStandbysOf is chooseStandbys for the objects in objs (in name
// order) when every other placed IP keeps its standby: without cloud
// capacity, whether a standby qualifies depends only on its own object,
// so the others' choices stand and these are made as chooseStandbys would.
func (a *assigner) chooseStandbysOf(objs []*objState) {
	for _, o := range objs {
		for i := range o.placed {
			p := &o.placed[i]
			p.standby = -1
			if ni, ok := a.byName[o.standbys[p.addr]]; ok && a.canStandby(o, p, int32(ni)) {
				a.setStandby(p, int32(ni))
			}
		}
	}
	a.pickStandbys(objs)
}
