package conntrack

import (
	"math/bits"
	"runtime"
	"unsafe"
)

// optimisticReads enables the lock-free lookup path. It relies on x86-TSO
// (loads are not reordered with other loads, stores not with other stores),
// so it is on for amd64 only; and the race detector would rightly report its
// unlocked reads, so race builds take the locked path, which the race tests
// then check.
const optimisticReads = !raceEnabled && runtime.GOARCH == "amd64"

// Sentinels for a batch slot's index result; real refs are below 1<<31.
const (
	refMiss    uint32 = 0         // the index has no key with k's tag: a miss
	refUnknown uint32 = 1<<32 - 1 // the unlocked probe saw a writer: ask under the lock
)

// findTag returns the ref of the first key in s's index with the tag of
// hash h and direction dir, or refMiss, without the lock and without
// touching any entry: a miss costs the index line only. The caller validates
// s's version; a racing writer can make the answer wrong but never make this
// loop run away (it stops after n buckets) or index out of range. probe
// answers the common cases from the home bucket without it.
func (t *Table) findTag(s *shard, h uint64, dir Dir) uint32 {
	nb := s.n
	if nb == 0 {
		return refMiss
	}
	tag, mask := t.slotTag(h), t.tagMask
	b := homeBucket(h, nb)
	for i := uint64(0); i < nb; i++ {
		w := s.bucket(b)
		for j := 1; j < bucketWords; j++ {
			if sl := w[j]; sl&mask == tag && sl != 0 { // tag first: see find
				if ref := sl &^ mask; Dir((ref-1)&1) == dir {
					return ref
				}
			}
		}
		if w[0] < overflowOne {
			return refMiss
		}
		if b++; b == nb {
			b = 0
		}
	}
	return refMiss
}

// trackFast is Track without a lock. It returns decided=false whenever the
// answer needs the lock: a writer ran meanwhile, the packet changes the
// state or moves the timer, or the key is not the entry's (a stale ref or a
// tag collision).
func (t *Table) trackFast(h uint64, dir Dir, k *Tuple, sg *seg, now int64, out *Flow) (hit, decided bool) {
	return t.trackEntry(t.probe(h, dir), dir, k, sg, now, out)
}

// probe is the first half of an unlocked lookup of a key with hash h and
// direction dir (Track's): it returns probeIndex's answer and, for a ref,
// starts loading that entry's line.
func (t *Table) probe(h uint64, dir Dir) uint32 {
	ref := t.probeIndex(h, dir)
	if ref == refMiss || ref == refUnknown {
		return ref
	}
	if e, _, ok := t.entryLines(ref); ok {
		prefetchLine(e)
	}
	return ref
}

// probeIndex looks a key with hash h and direction dir up in the index
// without the lock and without touching any entry: it returns the ref
// findTag gives, refMiss if the index has no such key, or refUnknown if a
// writer held or took the shard meanwhile. It starts no load of the entry:
// probe does for one lookup, TrackBatch for its whole batch at once.
//
// The home bucket is tested whole first (tagSlots): no key with the tag
// and no overflow is a miss; one key with it, of direction dir, is the
// answer. Anything else (several, one of the other direction, the tag 0
// matching empty slots, an overflowed bucket) takes findTag's scan.
func (t *Table) probeIndex(h uint64, dir Dir) uint32 {
	s := &t.shards[h&t.shardMask]
	v := s.mu.version()
	if v&1 != 0 {
		return refUnknown
	}
	ref := refUnknown // not answered from the home bucket yet
	if nb := s.n; nb != 0 {
		mask := t.tagMask
		w := s.bucket(homeBucket(h, nb))
		switch m := tagSlots(w, t.slotTag(h), mask); {
		case m == 0 && w[0] < overflowOne:
			ref = refMiss
		case m != 0 && m&(m-1) == 0:
			if sl := w[bits.TrailingZeros32(m)&(bucketWords-1)]; sl != 0 && Dir((sl&^mask-1)&1) == dir {
				ref = sl &^ mask
			}
		}
	}
	if ref == refUnknown {
		ref = t.findTag(s, h, dir)
	}
	if ref == refMiss {
		if !s.mu.unchanged(v) {
			return refUnknown
		}
		return refMiss
	}
	return ref
}

// entryLines returns the addresses of the entry ref names and of its
// sequence state, for prefetching; ok is false if ref (read without the
// lock) names no entry.
func (t *Table) entryLines(ref uint32) (e, q uintptr, ok bool) {
	_, g, _ := t.refEntry(ref)
	if int(g) >= len(t.entries) || int(g) >= len(t.seqs) {
		return 0, 0, false
	}
	return uintptr(unsafe.Pointer(&t.entries[g])), uintptr(unsafe.Pointer(&t.seqs[g])), true
}

// trackEntry finishes an unlocked lookup from probe's answer ref: a miss,
// the lock's business (refUnknown), or the entry to read. It reads the
// entry in place, checks it is k's, and on a hit that changes nothing fills
// out; every answer it gives is checked first against its shard's version
// (no writer ran while it read). Reading in place rather than copying the
// entry first spares a 64-byte store and reload per lookup. On a miss, out
// may have been written.
func (t *Table) trackEntry(ref uint32, dir Dir, k *Tuple, sg *seg, now int64, out *Flow) (hit, decided bool) {
	switch ref {
	case refMiss:
		return false, true
	case refUnknown:
		return false, false
	}
	osh, g, _ := t.refEntry(ref)
	if int(osh) >= len(t.shards) || int(g) >= len(t.entries) {
		return false, false
	}
	os := &t.shards[osh]
	v := os.mu.version()
	e := &t.entries[g]
	s, proto, deadline := State(e.state), e.proto, e.deadline
	if v&1 != 0 || s == StateNone || s >= numStates || !keyEq(e, k, dir) {
		return false, false
	}
	if dir == Reply && expired(now, deadline) {
		return false, os.mu.unchanged(v) // expired: nothing inbound (as in trackLocked)
	}
	if sg.related {
		e.toFlow(out) // no state to step, no timer to move: no write
		return true, os.mu.unchanged(v)
	}
	// The sequence state is a second line (Table.seqs): read it only when
	// this segment can use it (seqUsed), so that a lookup that cannot
	// touches one line of the entry, as before sequence tracking; then
	// step's answer is the transition table's.
	tr := transitions[s][dir&1][flagIndex(sg.flags)]
	st := State(tr &^ trSeqUsed)
	useSeq := proto == ProtoTCP && (tr&trSeqUsed != 0 || dir == Original && sg.has)
	var q tcpSeq
	if useSeq {
		q = t.seqs[g]
		if st = s; !stepEstablishedACK(st, &q, dir, sg) {
			st = step(st, proto, &q, dir, sg)
		}
	}
	if st != s || !covers(deadline, now+t.to[st]) {
		// A write is due: lock the entry's shard only (its lines are in
		// the cache now) and re-check the entry is still k's flow.
		os.mu.Lock()
		p := &t.entries[g]
		if p.state == uint8(StateNone) || !keyEq(p, k, dir) {
			os.mu.Unlock()
			return false, false
		}
		hit = t.apply(g, dir, sg, now, out)
		os.mu.Unlock()
		return hit, true
	}
	e.toFlow(out)
	if !os.mu.unchanged(v) {
		return false, false
	}
	if useSeq && q != t.seqs[g] {
		// Sequence numbers moved but nothing else: store them without the
		// lock, as the reads here are without it (x86-TSO; race builds
		// take the locked path). A store racing another packet of the flow
		// or the entry's reuse can leave a stale value: a RST then changes
		// nothing, which only errs towards keeping the flow.
		t.seqs[g] = q
	}
	return true, true
}
