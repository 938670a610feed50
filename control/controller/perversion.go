package controller

// perVersion caches a value computed from one version of a named object.
// The cache hands out a new pointer for every version of an object, so the
// pointer says whether the value is still the object's: a cycle converts
// only the objects that changed since the last.
type perVersion[O, V any] struct {
	m map[string]versioned[O, V]
}

type versioned[O, V any] struct {
	obj *O
	v   V
}

// get returns f(obj) for the object named name, computed once per version;
// old is the value of the version before and computed whether f ran.
func (p *perVersion[O, V]) get(name string, obj *O, f func(*O) V) (v, old V, computed bool) {
	if p.m == nil {
		p.m = map[string]versioned[O, V]{}
	}
	c, ok := p.m[name]
	if ok && c.obj == obj {
		return c.v, c.v, false
	}
	v = f(obj)
	p.m[name] = versioned[O, V]{obj: obj, v: v}
	return v, c.v, true
}

// keep forgets the objects whose name has not got live, reporting how many.
func (p *perVersion[O, V]) keep(live func(name string) bool) int {
	n := 0
	for name := range p.m {
		if !live(name) {
			delete(p.m, name)
			n++
		}
	}
	return n
}
