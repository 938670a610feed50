package conntrack

import (
	"math/rand/v2"
	"testing"
)

// TestTagSlots: the bucket test (SSE2 on amd64) marks exactly the slots 1 to
// 15 whose masked value is the tag, on random buckets where the tag is
// common, where it is 0 (so empty slots match), where the header holds it
// too, for masks of every width.
func TestTagSlots(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	for i := 0; i < 200_000; i++ {
		refBits := 1 + r.IntN(30)
		mask := ^uint32(0) << refBits
		tags := []uint32{0, uint32(r.IntN(4)) << refBits, r.Uint32() & mask}
		tag := tags[r.IntN(len(tags))]
		var w [bucketWords]uint32
		for j := range w {
			switch r.IntN(4) {
			case 0: // empty
			case 1:
				w[j] = tag | r.Uint32()&^mask
			default:
				w[j] = r.Uint32()
			}
		}
		var want uint32
		for j := 1; j < bucketWords; j++ {
			if w[j]&mask == tag {
				want |= 1 << j
			}
		}
		if got := tagSlots(&w, tag, mask); got != want {
			t.Fatalf("bucket %#x, tag %#x, mask %#x: tagSlots %016b, want %016b", w, tag, mask, got, want)
		}
	}
}

// TestProbeAgreesWithFindTag: probe answers from the home bucket alone
// where it can (tagSlots) and leaves the rest to findTag's scan; with no
// writer running, its ref is findTag's for every key. The keys share a few
// tags (several keys of one tag in a bucket, of both directions), the tag 0
// (matching the empty slots), and a few home buckets (full buckets,
// overflow chains that wrap around the index), and are looked up present,
// removed, and as their other direction.
func TestProbeAgreesWithFindTag(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 4096, Shards: 1})
	s := &tb.shards[0]
	r := rand.New(rand.NewPCG(13, 17))
	// A few crowded home buckets (full, overflowing, the last one
	// wrapping to bucket 0) and many quiet ones.
	homes := []uint64{0, 1, s.n - 1, s.n - 1, s.n - 1}
	for len(homes) < 60 {
		homes = append(homes, uint64(r.IntN(int(s.n))))
	}
	type key struct {
		h   uint64
		ref uint32
	}
	var keys []key
	for i := 0; i < 700; i++ {
		home := homes[r.IntN(len(homes))]
		// The high 32 bits pick the home bucket (homeBucket), bits 12 up
		// the tag: half of them one of a few values, 0 among them.
		hi := ((home<<32 + s.n - 1) / s.n) & 0xffffffff
		tag := uint64(r.IntN(4))
		if r.IntN(2) == 0 {
			tag = 4 + uint64(r.IntN(1<<18))
		}
		h := hi<<32 | tag<<12
		if homeBucket(h, s.n) != home {
			t.Fatalf("test hash %#x homes in %d, not %d", h, homeBucket(h, s.n), home)
		}
		k := key{h, tb.makeRef(0, uint32(i), Dir(r.IntN(2)))}
		tb.put(s, h, k.ref)
		keys = append(keys, k)
	}
	// What the home bucket alone can say, so that the test is seen to
	// cover each way of answering.
	var seen [4]int // miss, one key, several or overflowed, the tag 0
	check := func(when string) {
		t.Helper()
		for _, k := range keys {
			for _, dir := range []Dir{Original, Reply} {
				if got, want := tb.probe(k.h, dir), tb.findTag(s, k.h, dir); got != want {
					t.Fatalf("%s: hash %#x dir %d: probe %d, findTag %d", when, k.h, dir, got, want)
				}
				w := s.bucket(homeBucket(k.h, s.n))
				switch m := tagSlots(w, tb.slotTag(k.h), tb.tagMask); {
				case tb.slotTag(k.h) == 0:
					seen[3]++
				case m == 0:
					seen[0]++
				case m&(m-1) == 0 && w[0] < overflowOne:
					seen[1]++
				default:
					seen[2]++
				}
			}
		}
	}
	check("all present")
	for _, i := range r.Perm(len(keys))[:len(keys)/2] {
		if !tb.remove(s, keys[i].h, keys[i].ref) {
			t.Fatalf("key %d not removed", i)
		}
	}
	check("half removed")
	for _, n := range seen {
		if n < 20 {
			t.Fatalf("test too weak: answers by kind (miss, one key, several or overflowed, tag 0) %v", seen)
		}
	}
	t.Logf("answers by kind (miss, one key, several or overflowed, tag 0): %v", seen)

	// The one empty slot of an overflowed bucket matches the tag 0: a key
	// with that tag that overflowed past is still found.
	tb = mustNew(t, Config{MaxFlows: 4096, Shards: 1})
	s = &tb.shards[0]
	hi := uint64(7) << 32 / s.n
	var full []uint64
	for i := 0; i < bucketSlots; i++ {
		h := (hi+1)<<32 | uint64(i+1)<<12
		full = append(full, h)
		tb.put(s, h, tb.makeRef(0, uint32(i), Original))
	}
	zero := (hi+1)<<32 | 0<<12
	refs := []uint32{tb.makeRef(0, 100, Original), tb.makeRef(0, 101, Reply)}
	for _, ref := range refs {
		tb.put(s, zero, ref) // overflows: the home bucket is full
	}
	if !tb.remove(s, full[0], tb.makeRef(0, 0, Original)) {
		t.Fatal("not removed")
	}
	for dir, ref := range refs {
		if got := tb.probe(zero, Dir(dir)); got != ref {
			t.Fatalf("dir %d: the tag-0 key that overflowed past a bucket with one empty slot: probe %d, want %d", dir, got, ref)
		}
	}
}
