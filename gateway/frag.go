package gateway

// Directions of the fragment table: pod → outside and outside → pod.
const (
	fragOut uint8 = 0
	fragIn  uint8 = 1
)

type fragKey struct {
	src, dst [16]byte
	id       uint32
	proto    uint8
	dir      uint8
}

// fragEntry remembers what the first fragment of an IPv4 datagram was
// translated to, so that later fragments (which carry no ports) follow it.
type fragEntry struct {
	key     fragKey
	addr    [16]byte // the address later fragments get (NAT address or pod)
	aux     uint32   // the flow's return path (direction fragIn)
	expires int64
}

// fragTable is a small, bounded, pointer-free, per-processor table with two
// candidate slots per key; when both are live the older one is replaced.
type fragTable struct {
	slots   []fragEntry
	mask    uint32
	timeout int64
}

func (t *fragTable) init(n int, timeout int64) {
	size := 2
	for size < n {
		size <<= 1
	}
	t.slots = make([]fragEntry, size)
	t.mask = uint32(size - 1)
	t.timeout = timeout
}

func fragHash(k *fragKey) uint32 {
	h := uint64(k.id)<<16 ^ uint64(k.proto)<<8 ^ uint64(k.dir)
	for i := 12; i < 16; i++ {
		h = h*31 + uint64(k.src[i])
		h = h*31 + uint64(k.dst[i])
	}
	h *= 0x9e3779b97f4a7c15
	return uint32(h >> 32)
}

func (t *fragTable) lookup(dir uint8, src, dst *[16]byte, id uint32, proto uint8, now int64) *fragEntry {
	k := fragKey{src: *src, dst: *dst, id: id, proto: proto, dir: dir}
	h := fragHash(&k) & t.mask
	for i := uint32(0); i < 2; i++ {
		e := &t.slots[(h+i)&t.mask]
		if e.expires > now && e.key == k {
			return e
		}
	}
	return nil
}

func (t *fragTable) add(dir uint8, src, dst *[16]byte, id uint32, proto uint8, now int64, addr *[16]byte, aux uint32) {
	k := fragKey{src: *src, dst: *dst, id: id, proto: proto, dir: dir}
	h := fragHash(&k) & t.mask
	a, b := &t.slots[h], &t.slots[(h+1)&t.mask]
	e := a
	switch {
	case a.key == k || a.expires <= now:
	case b.key == k || b.expires <= now:
		e = b
	case b.expires < a.expires:
		e = b
	}
	*e = fragEntry{key: k, addr: *addr, aux: aux, expires: now + t.timeout}
}
