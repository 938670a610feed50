package gateway

import (
	"hash/maphash"

	"github.com/egret-gw/egret/gateway/header"
)

// Fragments are translated by virtual reassembly, as VPP's shallow
// reassembly does: nothing is reassembled or buffered. The first fragment
// (offset 0) carries the transport header, so it is looked up and NATed like
// a whole packet, and its binding is remembered under (source, destination,
// identification, protocol, direction); later fragments carry no ports and
// follow that binding (address only). This holds for IPv4 and IPv6, in both
// directions (a pod's fragmented request, a server's fragmented answer such
// as a large EDNS response).
//
// Decisions, each a counted drop:
//   - a later fragment that arrives before its first fragment is dropped
//     (fragment_no_first), not buffered: Process answers every input frame
//     with at most one output frame, so it has no way to release a buffered
//     one later. Fragments of one datagram take one path and rarely
//     reorder; the sender's retry (DNS, QUIC) covers the rest.
//   - a first fragment too short to hold the whole transport header (TCP
//     with its flags, UDP, ICMP echo) is dropped (fragment_tiny, RFC 1858):
//     its ports cannot be translated, and a later fragment would supply them.
//   - a later fragment that overlaps the first fragment's bytes is dropped
//     (fragment_overlap, RFC 1858 and RFC 3128): at the receiver it could
//     overwrite the translated ports or the TCP flags.
//   - one source (a pod, or an outside host) may hold at most
//     1/fragSourceShare of the table; a first fragment past that is dropped
//     (fragment_quota), so a flood of first fragments cannot crowd out other
//     pods' datagrams. Entries are never evicted while live: a first
//     fragment finding its set full is dropped (fragment_table_full).
//
// Slots are chosen by a keyed hash (a random seed per table), so which
// datagrams share a set cannot be predicted from outside. An entry ends when
// its datagram is complete (every byte up to the last fragment's end seen),
// or when it expires; expired entries are swept a few at a time.

// Directions of the fragment table: pod → outside and outside → pod.
const (
	fragOut uint8 = 0
	fragIn  uint8 = 1
)

const (
	// fragWays is the number of slots a key may use (one set).
	fragWays = 4
	// fragSourceShare: one source holds at most 1/fragSourceShare of the slots.
	fragSourceShare = 8
	// fragSweep is how many slots each new entry checks for expiry.
	fragSweep = 8
)

type fragKey struct {
	src, dst [16]byte
	id       uint32
	proto    uint8
	dir      uint8
}

// fragEntry remembers what the first fragment of a datagram was translated
// to, so that later fragments (which carry no ports) follow it.
type fragEntry struct {
	key      fragKey
	addr     [16]byte // the address later fragments get (NAT address or pod)
	aux      uint32   // the flow's return path (direction fragIn)
	expires  int64
	firstLen uint32 // payload bytes (from the transport header on) of the first fragment
	seen     uint32 // payload bytes of all fragments seen
	total    uint32 // payload length of the datagram; 0 until the last fragment is seen
	srcGen   uint32 // the generation of its source counter it was counted in
	src      uint16 // index of its source counter
	live     bool
}

// fragSource counts one source's live entries. gen changes whenever the
// count is reset because all of them have expired (until has passed), so an
// entry counted before is not taken off the new count.
type fragSource struct {
	n, gen uint32
	until  int64
}

// fragTable is a bounded, pointer-free, per-processor table of fragmented
// datagrams. A key may live in either of two sets of fragWays slots (two
// choices of a keyed hash), so a set fills only when the table is close to
// full, not when a few keys happen to collide.
type fragTable struct {
	slots   []fragEntry
	sets    uint32 // number of sets, a power of two
	srcs    []fragSource
	quota   uint32
	timeout int64
	seed    maphash.Seed
	cursor  uint32 // next slot the sweep checks
}

func (t *fragTable) init(n int, timeout int64) {
	size := fragWays
	for size < n {
		size <<= 1
	}
	t.slots = make([]fragEntry, size)
	t.sets = uint32(size / fragWays)
	t.srcs = make([]fragSource, max(size/fragWays, 1))
	t.quota = uint32(max(size/fragSourceShare, 1))
	t.timeout = timeout
	t.seed = maphash.MakeSeed()
}

// hash is a keyed hash of the key's bytes.
func (t *fragTable) hash(k *fragKey) uint64 {
	var b [38]byte
	copy(b[:16], k.src[:])
	copy(b[16:32], k.dst[:])
	b[32], b[33], b[34], b[35] = byte(k.id), byte(k.id>>8), byte(k.id>>16), byte(k.id>>24)
	b[36], b[37] = k.proto, k.dir
	return maphash.Bytes(t.seed, b[:])
}

// srcIndex is the source counter of address src: a keyed hash too, so that
// no one can choose addresses that share another's counter.
func (t *fragTable) srcIndex(src *[16]byte) uint16 {
	return uint16(maphash.Bytes(t.seed, src[:]) % uint64(len(t.srcs)))
}

// candidates returns the slots of k's two sets.
func (t *fragTable) candidates(k *fragKey) (a, b []fragEntry) {
	h := t.hash(k)
	i := (uint32(h) & (t.sets - 1)) * fragWays
	j := (uint32(h>>32) & (t.sets - 1)) * fragWays
	return t.slots[i : i+fragWays : i+fragWays], t.slots[j : j+fragWays : j+fragWays]
}

// release ends entry e, taking it off its source's count.
func (t *fragTable) release(e *fragEntry) {
	if !e.live {
		return
	}
	if s := &t.srcs[e.src]; s.gen == e.srcGen && s.n > 0 {
		s.n--
	}
	e.live = false
}

// sweep releases the expired entries among the next fragSweep slots, so
// that the source counts follow expiry without a scan of the table.
func (t *fragTable) sweep(now int64) {
	n := uint32(len(t.slots))
	for range fragSweep {
		e := &t.slots[t.cursor]
		if e.live && e.expires <= now {
			t.release(e)
		}
		t.cursor++
		if t.cursor == n {
			t.cursor = 0
		}
	}
}

// first takes an entry for a datagram's first fragment, payload firstLen
// bytes; the caller sets its binding (addr, and aux for replies) once it
// has one, or releases it if the fragment is dropped after all. A repeated
// first fragment gets its entry back, refreshed. It returns the entry, or
// nil and why there is none.
func (t *fragTable) first(dir uint8, src, dst *[16]byte, id uint32, proto uint8, now int64, firstLen int) (*fragEntry, DropReason) {
	t.sweep(now)
	k := fragKey{src: *src, dst: *dst, id: id, proto: proto, dir: dir}
	a, b := t.candidates(&k)
	var free *fragEntry // the first free slot: in a, else in b
	for i := range fragWays * 2 {
		e := &a[i%fragWays]
		if i >= fragWays {
			e = &b[i-fragWays]
		}
		if e.live && e.expires > now {
			if e.key == k {
				e.firstLen, e.expires = uint32(firstLen), now+t.timeout
				return e, DropNone
			}
			continue
		}
		if free == nil {
			free = e
		}
	}
	if free == nil {
		return nil, DropFragTableFull
	}
	si := t.srcIndex(src)
	s := &t.srcs[si]
	if s.until <= now && s.n > 0 {
		s.n, s.gen = 0, s.gen+1 // all of its entries have expired
	}
	if s.n >= t.quota {
		return nil, DropFragQuota
	}
	t.release(free) // an expired entry the sweep has not reached yet
	s.n++
	s.until = now + t.timeout
	*free = fragEntry{key: k, expires: now + t.timeout, firstLen: uint32(firstLen), seen: uint32(firstLen),
		srcGen: s.gen, src: si, live: true}
	return free, DropNone
}

// later finds the binding for a later fragment of offset off (bytes),
// payload length n and more-fragments flag more, and accounts for its bytes:
// the entry ends once the datagram is complete. It returns the binding, or
// why the fragment is dropped.
func (t *fragTable) later(dir uint8, src, dst *[16]byte, id uint32, proto uint8, now int64, off, n int, more bool) (addr [16]byte, aux uint32, r DropReason) {
	k := fragKey{src: *src, dst: *dst, id: id, proto: proto, dir: dir}
	a, b := t.candidates(&k)
	for i := range fragWays * 2 {
		e := &a[i%fragWays]
		if i >= fragWays {
			e = &b[i-fragWays]
		}
		if !e.live || e.expires <= now || e.key != k {
			continue
		}
		if uint32(off) < e.firstLen {
			return addr, 0, DropFragOverlap
		}
		addr, aux = e.addr, e.aux
		e.seen += uint32(n)
		if !more {
			e.total = uint32(off + n)
		}
		if e.total != 0 && e.seen >= e.total {
			t.release(e)
		}
		return addr, aux, DropNone
	}
	return addr, 0, DropFragNoFirst
}

// fragOrMalformed is the reason for a packet whose transport header is
// missing or short: a first fragment too small to hold it is the tiny
// fragment attack's shape (RFC 1858); anything else is malformed.
func fragOrMalformed(pk *Parsed) DropReason {
	if pk.Frag {
		return DropFragTiny
	}
	return DropMalformed
}

// setFragAddr writes address a on one side of the later fragment ip (IPv4
// with its header checksum; IPv6 has none, and the transport checksum sits
// in the first fragment).
func setFragAddr(ip []byte, ver uint8, side int, a *[16]byte) {
	if ver == 4 {
		h := header.IPv4(ip).Fixed()
		if side == srcSide {
			h.SetSrcAddrWithChecksumUpdate([4]byte(a[12:]))
		} else {
			h.SetDstAddrWithChecksumUpdate([4]byte(a[12:]))
		}
		return
	}
	h := header.IPv6(ip).Fixed()
	if side == srcSide {
		h.SetSrcAddr(*a)
	} else {
		h.SetDstAddr(*a)
	}
}
