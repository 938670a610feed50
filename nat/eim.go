package nat

// epTable maps a pod endpoint src:sport to its endpoint-independent mapping
// (external port and the number of live flows using it). Open addressing with
// linear probing and backward-shift deletion: no tombstones, no pointers, and
// no allocation once it has grown to the live population.
type epTable struct {
	slots []epSlot
	n     int
}

type epSlot struct {
	src   Addr
	sport uint16
	port  uint16 // 0 marks an empty slot: a mapping never uses port 0
	flows uint32
}

const epTableMin = 256

func epHome(src *Addr, sport uint16, mask int) int {
	return int(EndpointHash(0, *src, sport)) & mask
}

// find returns the slot index of src:sport, or -1.
func (t *epTable) find(src *Addr, sport uint16) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := epHome(src, sport, mask); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.port == 0 {
			return -1
		}
		if s.sport == sport && s.src == *src {
			return i
		}
	}
}

// insert adds src:sport → port with one flow; src:sport must be absent.
func (t *epTable) insert(src *Addr, sport, port uint16) {
	if (t.n+1)*2 > len(t.slots) {
		t.grow()
	}
	t.place(epSlot{src: *src, sport: sport, port: port, flows: 1})
	t.n++
}

func (t *epTable) place(e epSlot) {
	mask := len(t.slots) - 1
	i := epHome(&e.src, e.sport, mask)
	for t.slots[i].port != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = e
}

func (t *epTable) grow() {
	size := 2 * len(t.slots)
	if size < epTableMin {
		size = epTableMin
	}
	old := t.slots
	t.slots = make([]epSlot, size)
	for _, e := range old {
		if e.port != 0 {
			t.place(e)
		}
	}
}

// remove deletes slot i and shifts back the entries of its probe run that
// would otherwise become unreachable.
func (t *epTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].port != 0; j = (j + 1) & mask {
		k := epHome(&t.slots[j].src, t.slots[j].sport, mask)
		// The entry at j may stay only if its home lies cyclically in (i, j].
		stays := (i <= j && i < k && k <= j) || (i > j && (k > i || k <= j))
		if !stays {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = epSlot{}
	t.n--
}
