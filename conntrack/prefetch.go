//go:build !race

package conntrack

import "unsafe"

// Prefetch starts loading the index slots Track(dir, k) will read, without
// waiting for them and without a lock; PrefetchEntry then does the same for
// the entry. A worker that calls Prefetch for every packet of a batch, then
// PrefetchEntry for each, then Track for each, overlaps the batch's cache
// misses; a lone Track cannot, because taking the shard lock (an atomic
// read-modify-write) waits for every earlier load to finish. Both are hints:
// they change nothing, and a wrong guess only costs a wasted cache line.
// (They do nothing in race-detector builds, where their unlocked reads would
// be reported.)
func (t *Table) Prefetch(k *Tuple) {
	h := t.h.hash(k)
	s := &t.shards[h&t.shardMask]
	if s.n == 0 {
		return
	}
	prefetchLine(s.bucketAddr(h))
}

// PrefetchEntry starts loading the entry k's index slot points to; call it
// after Prefetch(k) has had time to bring the slot in. See Prefetch.
func (t *Table) PrefetchEntry(k *Tuple) {
	h := t.h.hash(k)
	s := &t.shards[h&t.shardMask]
	if s.n == 0 {
		return
	}
	// The home bucket only: a key is elsewhere about once in a thousand.
	tag, mask := t.slotTag(h), t.tagMask
	w := s.bucket(homeBucket(h, s.n))
	for j := 1; j < bucketWords; j++ {
		if sl := w[j]; sl&mask == tag && sl != 0 { // tag first: see find
			_, g, _ := t.refEntry(sl &^ mask)
			if int(g) < len(t.entries) {
				// 72-byte entries straddle cache lines more often than not.
				a := uintptr(unsafe.Pointer(&t.entries[g]))
				prefetchLine(a)
				prefetchLine(a + uintptr(entrySize) - 1)
			}
			return
		}
	}
}

// raceEnabled reports a race-detector build.
const raceEnabled = false
