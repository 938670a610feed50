package nic

import (
	"sync"
	"time"
)

// Mem is one end of an in-memory link made by NewMemPair: what one end
// transmits the other receives. It exists for tests of the pipeline and
// needs no kernel.
type Mem struct {
	name   string
	pool   *Pool
	in     *memQueue
	out    *memQueue
	timer  *time.Timer
	closed bool
	cnt    counters
}

// memQueue is a bounded FIFO of frame copies between two goroutines.
type memQueue struct {
	mu     sync.Mutex
	slots  [][]byte
	lens   []int
	head   int
	n      int
	notify chan struct{}
}

func newMemQueue(depth, frameSize int) *memQueue {
	q := &memQueue{slots: make([][]byte, depth), lens: make([]int, depth), notify: make(chan struct{}, 1)}
	for i := range q.slots {
		q.slots[i] = make([]byte, frameSize)
	}
	return q
}

// NewMemPair returns two connected in-memory ports; each has a pool of
// frames buffers and each direction queues up to depth frames.
func NewMemPair(frames, frameSize, headroom, depth int) (*Mem, *Mem, error) {
	pa, err := NewPool(frames, frameSize, headroom)
	if err != nil {
		return nil, nil, err
	}
	pb, _ := NewPool(frames, frameSize, headroom)
	ab, ba := newMemQueue(depth, frameSize), newMemQueue(depth, frameSize)
	a := &Mem{name: "mem:a", pool: pa, in: ba, out: ab, timer: stoppedTimer()}
	b := &Mem{name: "mem:b", pool: pb, in: ab, out: ba, timer: stoppedTimer()}
	return a, b, nil
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// Name implements Port.
func (m *Mem) Name() string { return m.name }

// Pool implements Port.
func (m *Mem) Pool() *Pool { return m.pool }

// Stats implements Port.
func (m *Mem) Stats() Stats { return m.cnt.stats() }

// Receive implements Port.
func (m *Mem) Receive(b *Batch, timeout time.Duration) error {
	if m.closed {
		return ErrClosed
	}
	b.Release()
	if m.pull(b) == 0 && timeout > 0 {
		m.timer.Reset(timeout)
		select {
		case <-m.in.notify:
		case <-m.timer.C:
		}
		m.timer.Stop()
		m.pull(b)
	}
	m.cnt.rx.Add(uint64(b.N))
	bytes := 0
	for i := 0; i < b.N; i++ {
		bytes += b.Len[i]
	}
	m.cnt.rxBytes.Add(uint64(bytes))
	return nil
}

func (m *Mem) pull(b *Batch) int {
	q := m.in
	q.mu.Lock()
	defer q.mu.Unlock()
	b.pool = m.pool
	for q.n > 0 && b.N < MaxBatch {
		base, ok := m.pool.get()
		if !ok {
			break
		}
		l := q.lens[q.head]
		copy(m.pool.buf(base)[m.pool.headroom:], q.slots[q.head][:l])
		b.set(b.N, base, m.pool.headroom, l)
		b.N++
		q.head = (q.head + 1) % len(q.slots)
		q.n--
	}
	if q.n > 0 {
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
	return b.N
}

// Transmit implements Port.
func (m *Mem) Transmit(b *Batch) {
	if m.closed {
		b.Release()
		return
	}
	q := m.out
	sent, drops, bytes := 0, 0, 0
	q.mu.Lock()
	for i := 0; i < b.N; i++ {
		if b.base[i] == gone {
			continue
		}
		f := b.Frame(i)
		if q.n == len(q.slots) || len(f) > len(q.slots[0]) {
			drops++
			continue
		}
		t := (q.head + q.n) % len(q.slots)
		q.lens[t] = copy(q.slots[t], f)
		q.n++
		sent++
		bytes += len(f)
	}
	q.mu.Unlock()
	b.Release()
	if sent > 0 {
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
	m.cnt.tx.Add(uint64(sent))
	m.cnt.txBytes.Add(uint64(bytes))
	m.cnt.txDrops.Add(uint64(drops))
}

// Close implements Port.
func (m *Mem) Close() error {
	m.closed = true
	return nil
}
