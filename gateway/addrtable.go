package gateway

import "encoding/binary"

// addrTable is an immutable open-addressing table keyed by 16-byte
// addresses, built once per snapshot. A lookup is one multiply-hash and
// usually one slot compare: cheaper than a Go map's memhash for this key,
// and the slots hold no pointers when V holds none.
type addrTable[V any] struct {
	slots []addrSlot[V]
	mask  uint64
}

type addrSlot[V any] struct {
	key  [16]byte
	used bool
	val  V
}

func hashAddr(k *[16]byte) uint64 {
	lo := binary.LittleEndian.Uint64(k[0:8])
	hi := binary.LittleEndian.Uint64(k[8:16])
	h := (lo*0x9e3779b97f4a7c15 ^ hi) * 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

// newAddrTable builds a table from m with at most 50% load.
func newAddrTable[V any](m map[[16]byte]V) addrTable[V] {
	n := 2
	for n < 2*len(m) {
		n <<= 1
	}
	t := addrTable[V]{slots: make([]addrSlot[V], n), mask: uint64(n - 1)}
	for k, v := range m {
		i := hashAddr(&k) & t.mask
		for t.slots[i].used {
			i = (i + 1) & t.mask
		}
		t.slots[i] = addrSlot[V]{key: k, used: true, val: v}
	}
	return t
}

// get returns the value stored for k.
func (t *addrTable[V]) get(k *[16]byte) (*V, bool) {
	i := hashAddr(k) & t.mask
	for {
		s := &t.slots[i]
		if !s.used {
			return nil, false
		}
		if s.key == *k {
			return &s.val, true
		}
		i = (i + 1) & t.mask
	}
}

// has reports whether k is in the table.
func (t *addrTable[V]) has(k *[16]byte) bool {
	_, ok := t.get(k)
	return ok
}
