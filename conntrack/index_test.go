package conntrack

import (
	"math/rand/v2"
	"testing"
)

// TestIndexOverflowChains drives one shard's index through long overflow
// chains that wrap around its end: 300 keys all homed in the last bucket
// (so about 20 buckets overflow into the next, and the chain wraps to
// bucket 0), half of them removed and put back, then all removed in random
// order. Every key must stay findable until
// removed, removed keys must be gone, and once all are removed every
// bucket header (slot count and overflow) must be back to zero.
func TestIndexOverflowChains(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 4096, Shards: 1})
	s := &tb.shards[0]
	const n = 300
	hashes := make([]uint64, n)
	refs := make([]uint32, n)
	for i := range hashes {
		// High 32 bits all ones: home is the last bucket. Distinct tags.
		hashes[i] = 0xFFFFFFFF<<32 | uint64(i+1)<<12
		refs[i] = tb.makeRef(0, uint32(i), Original)
		if homeBucket(hashes[i], s.n) != s.n-1 {
			t.Fatal("test hash is not homed in the last bucket")
		}
		tb.put(s, hashes[i], refs[i])
	}
	if s.keys != n {
		t.Fatalf("keys = %d, want %d", s.keys, n)
	}
	if w := s.bucket(0); w[0]&usedMask != bucketSlots {
		t.Fatalf("chain did not wrap to bucket 0: it holds %d keys", w[0]&usedMask)
	}
	present := make([]bool, n)
	for i := range present {
		present[i] = true
	}
	r := rand.New(rand.NewPCG(7, 11))
	// Churn first: take out half, put them back, so that slots freed in
	// the middle of buckets are reused.
	for _, i := range r.Perm(n)[:n/2] {
		if !tb.remove(s, hashes[i], refs[i]) {
			t.Fatalf("churn: key %d not removed", i)
		}
	}
	for _, i := range r.Perm(n) {
		if tb.findTag(s, hashes[i], Original) == refMiss {
			tb.put(s, hashes[i], refs[i])
		}
	}
	if s.keys != n {
		t.Fatalf("keys = %d after churn, want %d", s.keys, n)
	}
	order := r.Perm(n)
	for step, i := range order {
		if !tb.remove(s, hashes[i], refs[i]) {
			t.Fatalf("step %d: key %d not removed", step, i)
		}
		if tb.remove(s, hashes[i], refs[i]) {
			t.Fatalf("step %d: key %d removed twice", step, i)
		}
		present[i] = false
		if step%25 != 0 {
			continue
		}
		for j := range present {
			got := tb.findTag(s, hashes[j], Original)
			if present[j] && got != refs[j] {
				t.Fatalf("step %d: key %d: findTag = %d, want %d", step, j, got, refs[j])
			}
			if !present[j] && got != refMiss {
				t.Fatalf("step %d: removed key %d still found (%d)", step, j, got)
			}
		}
	}
	if s.keys != 0 {
		t.Fatalf("keys = %d after removing all", s.keys)
	}
	for i, w := range s.idx {
		if w != 0 {
			t.Fatalf("index word %d (bucket %d) = %#x after removing every key", i, i/bucketWords, w)
		}
	}
}
