package conntrack

// MaxBatch is the number of lookups TrackBatch overlaps at once; longer
// slices are taken MaxBatch at a time.
const MaxBatch = 64

// Lookup is one packet's lookup in a TrackBatch call. The caller fills Key,
// Dir, Flags and Related; TrackBatch sets Hit, and Flow is valid iff Hit.
type Lookup struct {
	Key   Tuple
	Dir   Dir   // Original or Reply; anything else is a miss
	Flags uint8 // the packet's TCP flags (0 for UDP and ICMP)
	// Related marks a packet that is about the flow but not of it: an
	// ICMP error quoting one of its packets (RFC 5508). A hit copies the
	// flow and changes neither its state nor its timer, as Linux
	// conntrack's RELATED packets confirm nothing: otherwise errors from
	// any host on the path would make an unanswered flow answered and
	// keep it alive. Flags and sequence numbers are ignored.
	Related bool
	// Seq, Ack and Len (payload bytes) are the TCP segment's; valid iff
	// HasSeq. They validate outside RSTs (tcpseq.go).
	Seq, Ack uint32
	Len      uint16
	HasSeq   bool
	Hit      bool
	Flow     Flow
}

// TrackBatch does Track(l.Dir, &l.Key, l.Flags, now, &l.Flow) for every l in
// b, in order (with l's sequence numbers where it has them; for a Related
// l, only the lookup), and returns the number of hits. Results are exactly those of
// the Track calls one after the other; the difference is speed: it hashes
// each key once and walks the batch in three passes (start loading every
// key's index line; probe each index, then start loading each entry;
// finish each lookup), so the cache misses of up to MaxBatch lookups overlap
// instead of following one another. A data plane that receives packets in
// batches should parse a batch, call TrackBatch once, then rewrite.
func (t *Table) TrackBatch(b []Lookup, now int64) int {
	hits := 0
	for len(b) > 0 {
		n := min(len(b), MaxBatch)
		hits += t.trackBatch(b[:n], now)
		b = b[n:]
	}
	return hits
}

func (t *Table) trackBatch(b []Lookup, now int64) int {
	var hs [MaxBatch]uint64
	var refs [MaxBatch]uint32
	// The lines a pass will read, gathered first and prefetched in one
	// tight loop (prefetchN): a prefetch that must wait (for a page walk,
	// or for a free miss buffer) holds up retirement, and with a probe's
	// or a hash's work between two prefetches the out-of-order window
	// held only a few of them; one after the other it holds the batch's,
	// so their misses overlap (at 1M flows, a quarter less CPU per lookup).
	var lines [2 * MaxBatch]uintptr
	_ = hs[len(b)-1]
	n := 0
	for i := range b {
		h := t.h.hash(&b[i].Key)
		hs[i] = h
		if s := &t.shards[h&t.shardMask]; s.n != 0 {
			lines[n] = s.bucketAddr(h)
			n++
		}
	}
	prefetchN(&lines[0], n)
	if optimisticReads {
		n = 0
		for i := range b {
			refs[i] = refMiss
			if b[i].Dir > Reply {
				continue
			}
			r := t.probeIndex(hs[i], b[i].Dir)
			refs[i] = r
			if r == refMiss || r == refUnknown {
				continue
			}
			if e, q, ok := t.entryLines(r); ok {
				lines[n] = e
				n++
				if seqLikely(b[i].Dir, b[i].HasSeq, b[i].Flags) {
					lines[n] = q
					n++
				}
			}
		}
		prefetchN(&lines[0], n)
	}
	hits := 0
	var g seg
	for i := range b {
		l := &b[i]
		hit, decided := false, false
		// Field by field: a composite literal would be built aside and
		// copied with a wide load that cannot be forwarded from the narrow
		// stores (a store-forwarding stall of ~5 ns per lookup).
		g.flags, g.has, g.related = l.Flags, l.HasSeq, l.Related
		g.len, g.seq, g.ack = l.Len, l.Seq, l.Ack
		if optimisticReads {
			hit, decided = t.trackEntry(refs[i], l.Dir, &l.Key, &g, now, &l.Flow)
		}
		if !decided {
			hit = l.Dir <= Reply && t.trackLocked(hs[i], l.Dir, &l.Key, &g, now, &l.Flow)
		}
		l.Hit = hit
		if hit {
			hits++
		}
	}
	return hits
}
