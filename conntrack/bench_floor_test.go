package conntrack

import (
	"testing"
	"unsafe"
)

// The floor: what this machine's memory costs for the access pattern a
// lookup has, with no table logic at all, over a buffer as large as the
// n-flow table and allocated the same way (off-heap, huge pages where the
// kernel gives them). Reading the lookup's ns/op against these says how many
// DRAM misses' worth of time a lookup spends.
//
//	chase         one dependent load per op (a random cyclic pointer chase):
//	              the latency of one miss, nothing overlapped
//	independent   one load per op to a random line, in batches of
//	              lookupBatch, all prefetched first: the throughput of
//	              overlapped misses
//	lookup        the lookup's exact shape per op: a random line (the index
//	              slot), then the line whose address is read from it (the
//	              64-byte entry), batched and prefetched in the same
//	              three passes as the batched lookup
//	insert        an insert's pattern: two random index lines and one
//	              one-line entry, prefetched, two shard locks, the lines
//	              read and the entry written; one op at a time
//	hash          reading the prebuilt keys in order and hashing them, no
//	              table memory: the lookup's own work before its first miss
func benchDRAM(b *testing.B, n int) {
	bt := getBenchTable(b, n)
	size := int(bt.tb.Bytes())
	mem, free, err := allocTable(size)
	if err != nil {
		b.Fatal(err)
	}
	defer free()
	const line = 64
	nLines := uint32(len(mem) / line)
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	// Sattolo's algorithm: one random cycle through every line, so the
	// chase visits each line once per lap and never settles in a cache.
	perm := make([]uint32, nLines)
	for i := range perm {
		perm[i] = uint32(i)
	}
	x := uint64(0x9E3779B97F4A7C15)
	for i := nLines - 1; i > 0; i-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		j := uint32((x >> 32) * uint64(i) >> 32)
		perm[i], perm[j] = perm[j], perm[i]
	}
	for i := uint32(0); i < nLines; i++ {
		words[uint64(perm[i])*line/8] = uint64(perm[(i+1)%nLines])
	}
	perm = nil
	base := uintptr(unsafe.Pointer(&mem[0]))

	b.Run("chase", func(b *testing.B) {
		p := uint64(0)
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i++ {
			p = words[p*line/8]
		}
		c.report(b)
		sinkU64 = p
	})
	b.Run("independent", func(b *testing.B) {
		var idx [lookupBatch]uint32
		sum := uint64(0)
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i += lookupBatch {
			m := min(lookupBatch, b.N-i)
			startLines(idx[:m], i, nLines, base)
			for j := 0; j < m; j++ {
				sum += words[uint64(idx[j])*line/8]
			}
		}
		c.report(b)
		sinkU64 = sum
	})
	b.Run("lookup", func(b *testing.B) {
		var idx [lookupBatch]uint32
		sum := uint64(0)
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i += lookupBatch {
			m := min(lookupBatch, b.N-i)
			startLines(idx[:m], i, nLines, base)
			for j := 0; j < m; j++ {
				// The "entry": the line the slot names, a whole line
				// as the table's entries are.
				e := uint32(words[uint64(idx[j])*line/8]) % nLines
				idx[j] = e
				prefetchLine(base + uintptr(e)*line)
			}
			for j := 0; j < m; j++ {
				e := uint64(idx[j]) * line / 8
				sum += words[e+1] + words[e+7]
			}
		}
		c.report(b)
		sinkU64 = sum
	})
	// An insert's memory pattern alone: two random index lines and a random
	// 64-byte entry, prefetched (the entry for writing), then two locks
	// taken and released as Insert does (four atomic read-modify-writes on
	// two of 64 shard words), the index lines read and the entry written.
	b.Run("insert", func(b *testing.B) {
		var locks [64]struct {
			l seqLock
			_ [60]byte
		}
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i++ {
			x := uint32(i) * 0x9E3779B1
			s1, s2 := pick(int(x), 0, nLines), pick(int(x^0x5bd1e995), 0, nLines)
			en := pick(int(x^0x2545F491), 0, nLines)
			prefetchLine(base + uintptr(s1)*line)
			prefetchLine(base + uintptr(s2)*line)
			prefetchLineW(base + uintptr(en)*line)
			l1, l2 := &locks[x>>26].l, &locks[(x>>20)&63].l
			l1.Lock()
			if l2 != l1 {
				l2.Lock()
			}
			v := words[uint64(s1)*line/8] + words[uint64(s2)*line/8]
			e := uint64(en) * line / 8
			for k := uint64(0); k < 8; k++ {
				words[e+k] = v + k
			}
			l1.Unlock()
			if l2 != l1 {
				l2.Unlock()
			}
		}
		c.report(b)
	})
	// Reading the prebuilt keys in order and hashing them: the part of a
	// lookup that touches no table memory.
	b.Run("hash", func(b *testing.B) {
		tb := bt.tb
		keys := benchKeys(b.N, bt.oldest, bt.next, false)
		sum := uint64(0)
		b.ReportAllocs()
		b.ResetTimer()
		c := startCPU()
		for i := 0; i < b.N; i++ {
			sum += tb.h.hash(&keys[i%len(keys)])
		}
		c.report(b)
		sinkU64 = sum
	})
}

// startLines is the first pass of the batched floors: idx[j] becomes the
// random line of op i+j, and loading it starts.
func startLines(idx []uint32, i int, nLines uint32, base uintptr) {
	for j := range idx {
		idx[j] = pick(i+j, 0, nLines)
		prefetchLine(base + uintptr(idx[j])*64)
	}
}

var sinkU64 uint64
