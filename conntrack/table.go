package conntrack

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// entry is one flow as stored: 64 bytes, one cache line (the entries start
// on a line boundary), no pointers. The reply tuple is not stored; it is
// Orig's server side plus nat/nport.
type entry struct {
	src, dst, nat       Addr
	aux                 uint32 // Flow.Aux; the free-list link while state == StateNone
	deadline            uint32 // idle expiry in ticks of the caller's monotonic clock (tick.go)
	sport, dport, nport uint16
	proto, state        uint8
}

const entrySize = int(unsafe.Sizeof(entry{}))

// An entry is exactly one cache line: a lookup or an insert touches one line
// of it, not two. Both arrays fail to compile if the size moves.
var (
	_ [entrySize - 64]byte
	_ [64 - entrySize]byte
)

// indexBytesPerFlow is the index size per flow capacity: 20 bytes, i.e.
// 4.7 slots for the flow's two keys, a load of at most 0.43 when full.
const indexBytesPerFlow = 20

// shard owns a range of entries (flows whose original tuple hashes to it)
// and an index of keys (original or reply tuples) that hash to it. Its own
// lock guards both; the padding keeps two shards' locks off one cache line.
type shard struct {
	mu       seqLock  // also the version optimistic lookups check
	idx      []uint32 // the index: n buckets of bucketWords (see find)
	n        uint64   // buckets
	base     uint32   // index of this shard's first entry in Table.entries
	bump     uint32   // entries [base, base+bump) have been handed out
	free     uint32   // free-list head: local index + 1; 0 = empty
	used     uint32   // entries in use
	keys     uint32   // index slots in use
	keyLimit uint32
	cursor   uint32 // expiry sweep position (local index)
	dropAt   uint32 // where the next early-drop search starts (local index)
	_        [64]byte
}

// Table is the flow table. See api.go for the contract.
type Table struct {
	h         hasher
	shards    []shard
	entries   []entry  // all shards' entries, shard i at [i*shardCap, (i+1)*shardCap)
	seqs      []tcpSeq // TCP sequence state of entries[i] (tcpseq.go)
	shardMask uint64
	shardBits uint
	shardCap  uint32
	refBits   uint   // low bits of an index slot that hold the ref
	tagMask   uint32 // the other bits: the key's tag
	maxFlows  int64
	srcCounts addrCounts // flows per original source (Config.SourceLimit)
	natCounts addrCounts // flows per NAT address (Config.NATLimit)
	to        [numStates]int64
	bytes     int64
	free      func()
	expShard  atomic.Uint32
	_         [64]byte
	count     atomic.Int64 // flows in the table, bounded by maxFlows
	_         [64]byte
	changed   []atomic.Uint64 // change marks, a bit per slot (changes.go)
}

// ErrInvalidFlow means Insert was given a flow whose reply tuple equals its
// original tuple, which could never be told apart.
var ErrInvalidFlow = errors.New("conntrack: flow's reply tuple equals its original tuple")

// Lower bounds the timeouts may not go under (see DefaultTimeouts).
const (
	minTCPEstablished = 2*time.Hour + 4*time.Minute // RFC 5382 REQ-5
	minTCPTransitory  = 4 * time.Minute             // RFC 5382 REQ-5
	minUDP            = 2 * time.Minute             // RFC 4787 REQ-5
	minICMP           = 60 * time.Second            // RFC 5508 REQ-2
	maxTimeout        = 365 * 24 * time.Hour
)

// DefaultTimeouts returns the RFC-grade idle timeouts: TCP established
// 2 h 4 min and transitory 4 min (RFC 5382 REQ-5), TIME_WAIT and the state
// after RST 4 min (RFC 7857 §2.2), UDP 5 min (RFC 4787 REQ-5d), ICMP query
// 60 s (RFC 5508 REQ-2).
func DefaultTimeouts() Timeouts {
	return Timeouts{
		TCPEstablished: minTCPEstablished,
		TCPTransitory:  minTCPTransitory,
		TCPTimeWait:    4 * time.Minute,
		TCPClose:       4 * time.Minute,
		UDP:            5 * time.Minute,
		ICMP:           minICMP,
	}
}

// resolve fills zero fields from the defaults and refuses values below the
// RFC minimums.
func (to Timeouts) resolve() (Timeouts, error) {
	d := DefaultTimeouts()
	fields := []struct {
		name string
		v    *time.Duration
		def  time.Duration
		min  time.Duration
	}{
		{"TCPEstablished", &to.TCPEstablished, d.TCPEstablished, minTCPEstablished},
		{"TCPTransitory", &to.TCPTransitory, d.TCPTransitory, minTCPTransitory},
		{"TCPTimeWait", &to.TCPTimeWait, d.TCPTimeWait, minTCPTransitory},
		{"TCPClose", &to.TCPClose, d.TCPClose, minTCPTransitory},
		{"UDP", &to.UDP, d.UDP, minUDP},
		{"ICMP", &to.ICMP, d.ICMP, minICMP},
	}
	for _, f := range fields {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < f.min {
			return to, fmt.Errorf("conntrack: timeout %s=%v is below the RFC minimum %v", f.name, *f.v, f.min)
		}
		if *f.v > maxTimeout {
			return to, fmt.Errorf("conntrack: timeout %s=%v is above the limit %v", f.name, *f.v, maxTimeout)
		}
	}
	return to, nil
}

// New allocates a table for cfg.MaxFlows flows. All memory is allocated here.
func New(cfg Config) (*Table, error) {
	if cfg.MaxFlows <= 0 {
		return nil, fmt.Errorf("conntrack: MaxFlows must be positive, got %d", cfg.MaxFlows)
	}
	if cfg.SourceLimit < 0 || cfg.SourceLimit > cfg.MaxFlows {
		return nil, fmt.Errorf("conntrack: SourceLimit %d is outside 0–MaxFlows (%d)", cfg.SourceLimit, cfg.MaxFlows)
	}
	if cfg.NATLimit < 0 || cfg.NATLimit > cfg.MaxFlows {
		return nil, fmt.Errorf("conntrack: NATLimit %d is outside 0–MaxFlows (%d)", cfg.NATLimit, cfg.MaxFlows)
	}
	if cfg.MaxFlows > 1<<28 {
		return nil, fmt.Errorf("conntrack: MaxFlows %d is above the limit %d", cfg.MaxFlows, 1<<28)
	}
	to, err := cfg.Timeouts.resolve()
	if err != nil {
		return nil, err
	}
	ns := cfg.Shards
	if ns == 0 {
		ns = defaultShards(cfg.MaxFlows)
	}
	if ns < 1 || ns > 4096 || ns&(ns-1) != 0 {
		return nil, fmt.Errorf("conntrack: Shards must be a power of two between 1 and 4096, got %d", ns)
	}
	mean := (cfg.MaxFlows + ns - 1) / ns
	shardCap := mean
	if ns > 1 {
		// Flows land on shards by hash, so a shard must hold more than the
		// mean for the table to reach MaxFlows: 6 standard deviations.
		shardCap += int(6*math.Sqrt(float64(mean))) + 8
		if shardCap > cfg.MaxFlows {
			shardCap = cfg.MaxFlows
		}
	}
	shardBits := uint(bits.TrailingZeros(uint(ns)))
	if uint(bits.Len(uint(shardCap)))+shardBits+1 > 31 {
		return nil, fmt.Errorf("conntrack: MaxFlows %d with %d shards does not fit 32-bit references", cfg.MaxFlows, ns)
	}
	if shardCap > maxShardKeys/4 {
		// A shard's index holds about two keys per entry; keep it well
		// under what an overflow count can say.
		return nil, fmt.Errorf("conntrack: %d flows per shard is above the limit %d; use more shards", shardCap, maxShardKeys/4)
	}
	const bucketBytes = bucketWords * 4
	n := (shardCap*indexBytesPerFlow + bucketBytes - 1) / bucketBytes // buckets
	nEntries, nWords := ns*shardCap, ns*n*bucketWords
	// One block (64-byte aligned, so a bucket is one cache line): the
	// index first, then the entries.
	mem, free, err := allocTable(nWords*4 + nEntries*entrySize)
	if err != nil {
		return nil, err
	}
	t := &Table{
		h:         newHasher(),
		shards:    make([]shard, ns),
		shardMask: uint64(ns - 1),
		shardBits: shardBits,
		shardCap:  uint32(shardCap),
		maxFlows:  int64(cfg.MaxFlows),
		srcCounts: newAddrCounts(cfg.SourceLimit, min(sourceCells, cfg.MaxFlows)),
		natCounts: newAddrCounts(cfg.NATLimit, min(natCells, cfg.MaxFlows)),
	}
	words := unsafe.Slice((*uint32)(unsafe.Pointer(&mem[0])), nWords)
	t.entries = unsafe.Slice((*entry)(unsafe.Pointer(&mem[nWords*4])), nEntries)
	// The largest ref, shardCap-1 in the last shard as a reply key, sets
	// how many low bits of a slot the ref takes; the tag has the rest.
	t.refBits = uint(bits.Len32(t.makeRef(uint32(ns-1), uint32(shardCap-1), Reply)))
	t.tagMask = ^uint32(0) << t.refBits
	// A table dropped without Close still gives its memory back.
	t.free = sync.OnceFunc(free)
	runtime.AddCleanup(t, func(f func()) { f() }, t.free)
	for i := range t.shards {
		s := &t.shards[i]
		w := n * bucketWords
		s.idx = words[i*w : (i+1)*w : (i+1)*w]
		s.n = uint64(n)
		s.base = uint32(i * shardCap)
		s.keyLimit = uint32(min(n*bucketSlots-n*bucketSlots/16-1, maxShardKeys))
	}
	t.bytes = int64(len(mem)) + 4*int64(len(t.srcCounts.cells)+len(t.natCounts.cells)) +
		int64(ns)*int64(unsafe.Sizeof(shard{})) + int64(unsafe.Sizeof(Table{}))
	t.seqs = make([]tcpSeq, nEntries)
	t.bytes += int64(nEntries) * int64(unsafe.Sizeof(tcpSeq{}))
	t.changed = make([]atomic.Uint64, (nEntries+63)/64)
	t.bytes += int64(len(t.changed)) * 8
	for s := State(1); s < numStates; s++ {
		t.to[s] = int64(timeoutFor(&to, s))
	}
	return t, nil
}

func defaultShards(maxFlows int) int {
	ns := 1
	want := 4 * runtime.GOMAXPROCS(0)
	if want < 16 {
		want = 16
	}
	// At least 4096 flows per shard keeps the per-shard headroom small.
	for ns < want && ns*2*4096 <= maxFlows {
		ns *= 2
	}
	return ns
}

func timeoutFor(to *Timeouts, s State) time.Duration {
	switch s {
	case StateEstablished:
		return to.TCPEstablished
	case StateTimeWait:
		return to.TCPTimeWait
	case StateClose:
		return to.TCPClose
	case StateUDPUnreplied, StateUDPReplied, StateGeneric:
		return to.UDP
	case StateICMPUnreplied, StateICMPReplied:
		return to.ICMP
	}
	return to.TCPTransitory
}

// Timeout returns the idle timeout the table applies to state s.
func (t *Table) Timeout(s State) time.Duration {
	if s >= numStates {
		return 0
	}
	return time.Duration(t.to[s])
}

// Close releases the table's memory now instead of when the table is
// garbage collected. It must not run concurrently with any other method,
// and the table must not be used afterwards.
func (t *Table) Close() {
	t.entries = nil
	for i := range t.shards {
		t.shards[i].idx = nil
		t.shards[i].n = 0
	}
	t.free()
}

// Len returns the number of flows in the table.
func (t *Table) Len() int { return int(t.count.Load()) }

// Cap returns the configured maximum number of flows (Config.MaxFlows).
func (t *Table) Cap() int { return int(t.maxFlows) }

// Bytes returns the memory the table allocated up front, in bytes.
func (t *Table) Bytes() int64 { return t.bytes }

// --- references and the index ---

// A ref names one key of one entry: ((local<<shardBits | shard)<<1 | dir) + 1.
func (t *Table) makeRef(sh, local uint32, dir Dir) uint32 {
	return ((local<<t.shardBits|sh)<<1 | uint32(dir)) + 1
}

// refEntry decodes a ref into the entry's shard and global index and the key
// direction.
func (t *Table) refEntry(ref uint32) (sh uint32, g uint32, dir Dir) {
	r := ref - 1
	dir = Dir(r & 1)
	r >>= 1
	sh = r & uint32(t.shardMask)
	g = sh*t.shardCap + r>>t.shardBits
	return
}

// The index is bucketed by cache line: bucket b is words [16b, 16b+16) of
// s.idx, one 64-byte line. Word 0 is the bucket's header: the number of
// slots in use (low 4 bits; they are always slots 1..used) and, above, its
// overflow: how many keys found it full and went on to a later bucket.
// Words 1..15 are slots: tag|ref, ref in the low t.refBits bits, the rest
// hash bits (the tag); 0 is empty. A key lives in the first bucket from its
// home that had room when it was inserted, so a search stops at the first
// bucket without overflow; at the load the table is sized for (at most
// 0.43) a bucket overflows about once in a thousand, so an insert or a
// lookup reads one line. Delete moves the bucket's last key into the freed
// slot and takes back the overflows the key added: no tombstones, so churn
// cannot lengthen any search, and an insert's slot is known without a scan.
const (
	bucketWords = 16 // 64 bytes
	bucketSlots = bucketWords - 1
	usedMask    = 15 // header bits counting the slots in use
	overflowOne = 16 // one overflow in the header
	// maxShardKeys bounds a shard's keys so that an overflow count (28
	// bits) cannot wrap.
	maxShardKeys = 1<<28 - 1
)

// bucketAddr is the address of the home bucket of a key with hash h (s.n
// must not be 0), for prefetching.
func (s *shard) bucketAddr(h uint64) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(s.idx))) + uintptr(homeBucket(h, s.n))*bucketWords*4
}

// homeBucket is the bucket where a key with hash h starts.
func homeBucket(h uint64, nb uint64) uint64 { return (uint64(uint32(h>>32)) * nb) >> 32 }

// slotTag is the tag part of the slot of a key with hash h: hash bits not
// used to pick the shard or (mostly) the bucket.
func (t *Table) slotTag(h uint64) uint32 { return uint32(h>>12) << t.refBits }

// bucket returns bucket b of s's index.
func (s *shard) bucket(b uint64) *[bucketWords]uint32 {
	return (*[bucketWords]uint32)(s.idx[b*bucketWords : b*bucketWords+bucketWords])
}

// keyEq reports whether k is entry e's tuple of direction dir.
func keyEq(e *entry, k *Tuple, dir Dir) bool {
	if dir == Original {
		return e.src == k.Src && e.dst == k.Dst && e.sport == k.SrcPort &&
			e.dport == k.DstPort && e.proto == k.Proto
	}
	return e.dst == k.Src && e.nat == k.Dst && e.dport == k.SrcPort &&
		e.nport == k.DstPort && e.proto == k.Proto
}

// anyDir is a lookup direction matching keys of both directions.
const anyDir Dir = 2

// find looks k (hash h) up in s's index (s locked) and returns the matching
// ref, or 0. With dir == anyDir keys of either direction match.
func (t *Table) find(s *shard, h uint64, k *Tuple, dir Dir) uint32 {
	nb := s.n
	tag, mask := t.slotTag(h), t.tagMask
	b := homeBucket(h, nb)
	for i := uint64(0); i < nb; i++ {
		w := s.bucket(b)
		for j := 1; j < bucketWords; j++ {
			// Tag first: rarely true, so a predictable branch (testing
			// for empty first mispredicts: slots are empty at random).
			if sl := w[j]; sl&mask == tag && sl != 0 {
				ref := sl &^ mask
				_, g, rd := t.refEntry(ref)
				if (dir == anyDir || dir == rd) && keyEq(&t.entries[g], k, rd) {
					return ref
				}
			}
		}
		if w[0] < overflowOne {
			return 0
		}
		if b++; b == nb {
			b = 0
		}
	}
	return 0
}

// put adds the key with hash h and ref to s's index (s locked, room checked
// by the caller): in the first bucket from its home with a free slot,
// counting an overflow in every full bucket it passes.
func (t *Table) put(s *shard, h uint64, ref uint32) {
	nb := s.n
	v := t.slotTag(h) | ref
	b := homeBucket(h, nb)
	for {
		w := s.bucket(b)
		if u := w[0] & usedMask; u < bucketSlots {
			w[1+u] = v
			w[0]++
			s.keys++
			return
		}
		w[0] += overflowOne
		if b++; b == nb {
			b = 0
		}
	}
}

// remove deletes the key with hash h and ref from s's index (s locked) and
// takes back the overflows its insertion counted.
func (t *Table) remove(s *shard, h uint64, ref uint32) bool {
	nb := s.n
	idx := s.idx
	v := t.slotTag(h) | ref
	hb := homeBucket(h, nb)
	b := hb
	for i := uint64(0); i < nb; i++ {
		w := s.bucket(b)
		for j := 1; j < bucketWords; j++ {
			if w[j] == v {
				u := w[0] & usedMask // j <= u: slots 1..u are in use
				w[j], w[u] = w[u], 0
				w[0]--
				s.keys--
				for c := hb; c != b; {
					idx[c*bucketWords] -= overflowOne
					if c++; c == nb {
						c = 0
					}
				}
				return true
			}
		}
		if w[0] < overflowOne {
			return false
		}
		if b++; b == nb {
			b = 0
		}
	}
	return false
}

// replyTuple rebuilds e's reply tuple.
func (e *entry) replyTuple(r *Tuple) {
	r.Src, r.Dst, r.SrcPort, r.DstPort, r.Proto = e.dst, e.nat, e.dport, e.nport, e.proto
}

// toFlow copies e into f field by field: a composite literal for f.Orig
// would be built on the stack with narrow stores and then copied with wide
// loads that cannot be forwarded from them (a store-forwarding stall that
// was a third of a batched lookup's own work).
func (e *entry) toFlow(f *Flow) {
	f.Orig.Src, f.Orig.Dst = e.src, e.dst
	f.Orig.SrcPort, f.Orig.DstPort, f.Orig.Proto = e.sport, e.dport, e.proto
	f.NATAddr, f.NATPort, f.Aux, f.State = e.nat, e.nport, e.aux, State(e.state)
}

// --- the data-plane operations ---

// refreshSlack is how far a flow's deadline may lag behind now+timeout
// before a packet moves it. A write moves it to now+timeout+refreshSlack,
// so packets of a busy flow within the next refreshSlack change nothing and
// take the lock-free path; a flow therefore expires between timeout and
// timeout+refreshSlack after its last packet, never earlier.
const refreshSlack = int64(250 * time.Millisecond)

// Track looks k up as a tuple of direction dir. On a hit it advances the TCP
// state machine with the packet's flags (0 for UDP and ICMP), refreshes the
// flow's timer, copies the flow into out and returns true.
//
// A flow whose timer has run out but that Expire has not removed yet is
// revived by a packet from the pod (Original) and is a miss for packets
// from outside (Reply): an expired mapping admits nothing inbound.
//
// A hit that changes neither the state nor (beyond refreshSlack) the timer
// takes no lock (trackFast); everything else runs under the shard lock.
//
// Track has no sequence numbers: the flags move the state, but an RST from
// outside, which cannot be validated without them, changes nothing
// (tcpseq.go). TrackBatch takes them.
//
// After a miss, out holds nothing meaningful (it may have been written).
func (t *Table) Track(dir Dir, k *Tuple, tcpFlags uint8, now int64, out *Flow) bool {
	if dir > Reply {
		return false
	}
	g := seg{flags: tcpFlags}
	h := t.h.hash(k)
	if optimisticReads {
		if hit, ok := t.trackFast(h, dir, k, &g, now, out); ok {
			return hit
		}
	}
	return t.trackLocked(h, dir, k, &g, now, out)
}

// trackLocked is Track under the shard lock; h is k's hash.
func (t *Table) trackLocked(h uint64, dir Dir, k *Tuple, sg *seg, now int64, out *Flow) bool {
	si := uint32(h & t.shardMask)
	s := &t.shards[si]
	s.mu.Lock()
	ref := t.find(s, h, k, dir)
	if ref == 0 {
		s.mu.Unlock()
		return false
	}
	osh, g, _ := t.refEntry(ref)
	if osh != si {
		// The entry lives in another shard (reply keys hash elsewhere): take
		// that shard's lock instead, never both, and check the entry is
		// still k's flow.
		s.mu.Unlock()
		s = &t.shards[osh]
		s.mu.Lock()
		e := &t.entries[g]
		if e.state == uint8(StateNone) || !keyEq(e, k, dir) {
			s.mu.Unlock()
			return false
		}
	}
	hit := t.apply(g, dir, sg, now, out)
	s.mu.Unlock()
	return hit
}

// apply is a hit's work on entry g (its shard locked): a reply to an expired
// flow is a miss; otherwise advance the state, move the timer if it is due
// (neither for a related packet) and copy the flow to out.
func (t *Table) apply(g uint32, dir Dir, sg *seg, now int64, out *Flow) bool {
	e := &t.entries[g]
	if dir == Reply && expired(now, e.deadline) {
		return false
	}
	if sg.related {
		e.toFlow(out)
		return true
	}
	var st State
	if e.proto == ProtoTCP && seqUsed(State(e.state), dir, sg) {
		st = step(State(e.state), e.proto, &t.seqs[g], dir, sg)
	} else {
		var q tcpSeq // step leaves it alone (seqUsed): no line to load
		st = step(State(e.state), e.proto, &q, dir, sg)
	}
	if st != State(e.state) {
		t.markChanged(g)
	}
	if d := now + t.to[st]; st != State(e.state) || !covers(e.deadline, d) {
		e.state = uint8(st)
		e.deadline = tickCeil(d + refreshSlack)
	}
	e.toFlow(out)
	return true
}

// lock2 locks shards a and b (a may equal b) in index order, so that two
// goroutines locking the same pair never deadlock.
func (t *Table) lock2(a, b uint32) {
	if a == b {
		t.shards[a].mu.Lock()
		return
	}
	if a > b {
		a, b = b, a
	}
	t.shards[a].mu.Lock()
	t.shards[b].mu.Lock()
}

func (t *Table) unlock2(a, b uint32) {
	t.shards[a].mu.Unlock()
	if a != b {
		t.shards[b].mu.Unlock()
	}
}

// Insert adds f (both its original and its reply tuple), with the state the
// first packet's TCP flags give, and sets f.State to it. ErrFull or
// ErrExists leave the table unchanged.
func (t *Table) Insert(f *Flow, tcpFlags uint8, now int64) error {
	var ik insertKeys
	t.startInsert(f, &ik)
	return t.insertNew(f, &ik, tcpFlags, now)
}

// insertNew is the rest of Insert once startInsert has run: the first
// packet's state, the store.
func (t *Table) insertNew(f *Flow, ik *insertKeys, tcpFlags uint8, now int64) error {
	st := initialState(f.Orig.Proto, tcpFlags)
	if err := t.finishInsert(f, ik, st, now+t.to[st], true); err != nil {
		return err
	}
	f.State = st
	return nil
}

// insert stores f with state st and the given deadline (Import).
func (t *Table) insert(f *Flow, st State, deadline int64) error {
	var ik insertKeys
	t.startInsert(f, &ik)
	return t.finishInsert(f, &ik, st, deadline, false)
}

// insertKeys is the part of an insert that needs no table memory: both
// tuples' hashes and the reply tuple.
type insertKeys struct {
	h1, h2 uint64
	r      Tuple
}

// startInsert computes f's insertKeys and starts the cache misses the
// insert will have (both keys' index lines and the entry it will most
// likely fill), each as soon as its address is known, so that they overlap
// each other and the work that needs none of them.
func (t *Table) startInsert(f *Flow, ik *insertKeys) {
	ik.h1 = t.h.hash(&f.Orig)
	s1 := &t.shards[ik.h1&t.shardMask]
	if s1.n != 0 {
		prefetchLine(s1.bucketAddr(ik.h1))
		if optimisticReads {
			// An unlocked peek at the entry the insert will most likely
			// take; a wrong guess costs a wasted prefetch.
			local := s1.bump
			if fr := s1.free; fr != 0 {
				local = fr - 1
			}
			if i := int(s1.base) + int(local); i < len(t.entries) {
				prefetchLineW(uintptr(unsafe.Pointer(&t.entries[i])))
			}
		}
	}
	f.replyTo(&ik.r)
	ik.h2 = t.h.hash(&ik.r)
	if s2 := &t.shards[ik.h2&t.shardMask]; s2.n != 0 {
		prefetchLine(s2.bucketAddr(ik.h2))
	}
}

// finishInsert stores f, whose insertKeys startInsert computed, with state
// st and the given deadline. enforce applies the per-address limits
// (false: Import, which counts but does not refuse).
func (t *Table) finishInsert(f *Flow, ik *insertKeys, st State, deadline int64, enforce bool) error {
	h1, h2, r := ik.h1, ik.h2, &ik.r
	s1i, s2i := uint32(h1&t.shardMask), uint32(h2&t.shardMask)
	s1, s2 := &t.shards[s1i], &t.shards[s2i]
	if *r == f.Orig {
		return ErrInvalidFlow
	}
	// The lock's atomic comes after the prefetches (startInsert) or it
	// would make them wait for each other.
	t.lock2(s1i, s2i)
	// Count the flow now, while the index lines are still on their way: an
	// atomic after the finds would wait for them, and the finds' result
	// would then wait for it. Every refusal takes the count back.
	over := t.count.Add(1) > t.maxFlows
	var err error
	need1 := uint32(1)
	if s1 == s2 {
		need1 = 2
	}
	switch {
	case t.find(s1, h1, &f.Orig, anyDir) != 0 || t.find(s2, h2, r, anyDir) != 0:
		err = ErrExists
	case over || s1.used >= t.shardCap || s1.keys+need1 > s1.keyLimit || s2.keys+1 > s2.keyLimit:
		// A flow over its pod's or egress IP's limit is refused for that,
		// not for the table: early drop must not make room for it.
		err = ErrFull
		if enforce {
			if lerr := t.Admit(&f.Orig.Src, &f.NATAddr); lerr != nil {
				err = lerr
			}
		}
	default:
		err = t.takeLimits(&f.Orig.Src, &f.NATAddr, enforce)
	}
	if err != nil {
		t.count.Add(-1)
		t.unlock2(s1i, s2i)
		return err
	}
	var local uint32
	if s1.free != 0 {
		local = s1.free - 1
		s1.free = t.entries[s1.base+local].aux
		if s1.free != 0 {
			// The next insert into this shard pops that entry: start
			// loading it now (a batch's next insert may be it).
			prefetchLineW(uintptr(unsafe.Pointer(&t.entries[s1.base+s1.free-1])))
		}
	} else {
		local = s1.bump
		s1.bump++
	}
	s1.used++
	t.seqs[s1.base+local] = tcpSeq{}
	e := &t.entries[s1.base+local]
	*e = entry{
		src: f.Orig.Src, dst: f.Orig.Dst, nat: f.NATAddr,
		aux: f.Aux, deadline: tickCeil(deadline),
		sport: f.Orig.SrcPort, dport: f.Orig.DstPort, nport: f.NATPort,
		proto: f.Orig.Proto, state: uint8(st),
	}
	t.put(s1, h1, t.makeRef(s1i, local, Original))
	t.put(s2, h2, t.makeRef(s1i, local, Reply))
	t.markChanged(s1.base + local)
	t.unlock2(s1i, s2i)
	return nil
}

// ReplyInUse reports whether tuple k is tracked, as a reply tuple or as an
// original one: either way a new flow with reply tuple k would be refused.
func (t *Table) ReplyInUse(k *Tuple) bool { return t.has(k, anyDir) }

// has reports whether tuple k is in the index as a key of direction dir
// (anyDir: either).
func (t *Table) has(k *Tuple, dir Dir) bool {
	h := t.h.hash(k)
	s := &t.shards[h&t.shardMask]
	s.mu.Lock()
	ref := t.find(s, h, k, dir)
	s.mu.Unlock()
	return ref != 0
}

// Prefetch starts loading the index line where key k would be: a hint
// that reads nothing the caller sees and takes no lock. A data plane that
// is about to check a batch's new reply tuples (ReplyInUse) prefetches them
// all first, so their cache misses overlap.
func (t *Table) Prefetch(k *Tuple) {
	h := t.h.hash(k)
	if s := &t.shards[h&t.shardMask]; s.n != 0 {
		prefetchLine(s.bucketAddr(h))
	}
}

// unlink removes entry g (in shard s1i, locked) from both indexes and frees
// it; the reply key's shard s2i must be locked too. It copies the flow to out.
func (t *Table) unlink(s1i, s2i uint32, g uint32, h1, h2 uint64, out *Flow) {
	s1, s2 := &t.shards[s1i], &t.shards[s2i]
	local := g - s1.base
	t.remove(s1, h1, t.makeRef(s1i, local, Original))
	t.remove(s2, h2, t.makeRef(s1i, local, Reply))
	e := &t.entries[g]
	t.giveLimits(e)
	e.toFlow(out)
	*e = entry{aux: s1.free}
	t.markChanged(g)
	s1.free = local + 1
	s1.used--
	t.count.Add(-1)
}

// Delete removes the flow whose original tuple is orig and copies it to out.
func (t *Table) Delete(orig *Tuple, out *Flow) bool {
	return t.del(orig, nil, 0, out)
}

// DeleteBinding removes the flow whose original tuple is orig only if it is
// still bound to natAddr:natPort, and copies it to out. A data plane that
// retires a flow it looked up (its egress IP left) uses it so that a flow
// another worker has meanwhile re-created for the same tuple, with another
// binding, is left alone.
func (t *Table) DeleteBinding(orig *Tuple, natAddr Addr, natPort uint16, out *Flow) bool {
	return t.del(orig, &natAddr, natPort, out)
}

// bound reports whether entry e is bound to *nat:nport, or nat is nil.
func (e *entry) bound(nat *Addr, nport uint16) bool {
	return nat == nil || (e.nat == *nat && e.nport == nport)
}

// del is Delete, and DeleteBinding when nat is not nil.
func (t *Table) del(orig *Tuple, nat *Addr, nport uint16, out *Flow) bool {
	h1 := t.h.hash(orig)
	s1i := uint32(h1 & t.shardMask)
	s1 := &t.shards[s1i]
	s1.mu.Lock()
	ref := t.find(s1, h1, orig, Original)
	_, g, _ := t.refEntry(ref)
	if ref == 0 || !t.entries[g].bound(nat, nport) {
		s1.mu.Unlock()
		return false
	}
	var r Tuple
	t.entries[g].replyTuple(&r)
	h2 := t.h.hash(&r)
	s2i := uint32(h2 & t.shardMask)
	if s2i < s1i {
		// Lock order is by shard index: let go and take both.
		s1.mu.Unlock()
		t.lock2(s1i, s2i)
		ref = t.find(s1, h1, orig, Original)
		_, g, _ = t.refEntry(ref)
		if ref == 0 || !t.entries[g].bound(nat, nport) {
			t.unlock2(s1i, s2i)
			return false
		}
		// The tuple may have been deleted and re-inserted with another
		// NAT binding meanwhile.
		t.entries[g].replyTuple(&r)
		if h2b := t.h.hash(&r); h2b != h2 {
			t.unlock2(s1i, s2i)
			return t.del(orig, nat, nport, out)
		}
	} else if s2i > s1i {
		t.shards[s2i].mu.Lock()
	}
	t.unlink(s1i, s2i, g, h1, h2, out)
	t.unlock2(s1i, s2i)
	return true
}

var flowPool = sync.Pool{New: func() any { return new(Flow) }}

// Expire removes at most budget expired flows, resuming where the last call
// stopped, and calls fn (if not nil) with each removed flow outside any
// lock. It examines at most 8*budget+64 entries, so its work per call is
// bounded however large the table is. It returns how many it removed.
func (t *Table) Expire(now int64, budget int, fn func(*Flow)) int {
	if budget <= 0 {
		return 0
	}
	scan := 8*budget + 64
	removed := 0
	// fn may keep the pointer it is given, so the Flow comes from a pool
	// rather than the stack (which would allocate on every call).
	fl := flowPool.Get().(*Flow)
	defer flowPool.Put(fl)
	for tries := 0; tries < len(t.shards) && removed < budget && scan > 0; tries++ {
		si := (t.expShard.Add(1) - 1) & uint32(t.shardMask)
		s := &t.shards[si]
		s.mu.Lock()
		for removed < budget && scan > 0 {
			if s.cursor >= s.bump {
				s.cursor = 0
				break // this shard is swept; move on
			}
			local := s.cursor
			s.cursor++
			scan--
			g := s.base + local
			e := &t.entries[g]
			if e.state == uint8(StateNone) || !expired(now, e.deadline) {
				continue
			}
			if !t.removeOne(si, g, now, false, fl) {
				continue
			}
			removed++
			s.mu.Unlock()
			if fn != nil {
				fn(fl)
			}
			s.mu.Lock()
		}
		s.mu.Unlock()
	}
	return removed
}

// removeOne removes entry g of shard si (locked, and still locked on
// return) if it is still expired, or with early also if it is still one
// early drop may take (earlyDroppable).
func (t *Table) removeOne(si, g uint32, now int64, early bool, out *Flow) bool {
	e := &t.entries[g]
	var o, r Tuple
	o.Src, o.Dst, o.SrcPort, o.DstPort, o.Proto = e.src, e.dst, e.sport, e.dport, e.proto
	e.replyTuple(&r)
	h1, h2 := t.h.hash(&o), t.h.hash(&r)
	s2i := uint32(h2 & t.shardMask)
	switch {
	case s2i > si:
		t.shards[s2i].mu.Lock()
	case s2i < si:
		if !t.shards[s2i].mu.TryLock() {
			t.shards[si].mu.Unlock()
			t.lock2(si, s2i)
			// Re-check: the entry may have been refreshed, deleted or
			// reused while no lock was held.
			if !removable(e, now, early) || !keyEq(e, &o, Original) ||
				e.nat != r.Dst || e.nport != r.DstPort {
				t.shards[s2i].mu.Unlock()
				return false
			}
		}
	}
	t.unlink(si, s2i, g, h1, h2, out)
	if s2i != si {
		t.shards[s2i].mu.Unlock()
	}
	return true
}
