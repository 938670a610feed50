package natlog

import "sync/atomic"

// Ring is a bounded single-producer single-consumer queue of records: one
// worker pushes, the writer pops. Push never blocks and never allocates.
type Ring struct {
	buf  []Record
	mask uint64

	_    [64]byte
	tail atomic.Uint64 // next slot to write; the producer's
	// head is the producer's last view of the consumer's head: it reads
	// the shared one only when the ring looks full.
	headSeen uint64
	dropped  atomic.Uint64

	_    [64]byte
	head atomic.Uint64 // next slot to read; the consumer's
}

// newRing returns a ring of at least size records (rounded up to a power of
// two, at least 2).
func newRing(size int) *Ring {
	n := 2
	for n < size {
		n <<= 1
	}
	return &Ring{buf: make([]Record, n), mask: uint64(n - 1)}
}

// Push adds r; when the ring is full it drops r, counts it and returns
// false. Only one goroutine may push.
func (q *Ring) Push(r *Record) bool {
	t := q.tail.Load()
	if t-q.headSeen >= uint64(len(q.buf)) {
		q.headSeen = q.head.Load()
		if t-q.headSeen >= uint64(len(q.buf)) {
			q.dropped.Add(1)
			return false
		}
	}
	q.buf[t&q.mask] = *r
	q.tail.Store(t + 1)
	return true
}

// Dropped is how many records Push dropped because the ring was full.
func (q *Ring) Dropped() uint64 { return q.dropped.Load() }

// drain calls fn with every record pushed so far, oldest first, and frees
// their slots. Only one goroutine may drain.
func (q *Ring) drain(fn func(*Record)) int {
	h, t := q.head.Load(), q.tail.Load()
	for i := h; i != t; i++ {
		fn(&q.buf[i&q.mask])
	}
	q.head.Store(t)
	return int(t - h)
}
