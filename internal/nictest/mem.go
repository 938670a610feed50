// Package nictest is an in-memory nic.Queue for tests of the pipeline and the
// engine: a pair of connected ports that need no kernel. It uses only nic's
// exported API, so production code carries none of it.
package nictest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/egret-gw/egret/gateway/nic"
)

// Mem is one end of an in-memory link made by NewMemPair: what one end
// transmits the other receives.
type Mem struct {
	name   string
	pool   *nic.Pool
	in     *memQueue
	out    *memQueue
	timer  *time.Timer
	closed atomic.Bool

	rx, tx, txDrops, rxBytes, txBytes atomic.Uint64
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
	pa, err := nic.NewPool(frames, frameSize, headroom)
	if err != nil {
		return nil, nil, err
	}
	pb, _ := nic.NewPool(frames, frameSize, headroom)
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

// Name implements nic.Queue.
func (m *Mem) Name() string { return m.name }

// Pool implements nic.Queue.
func (m *Mem) Pool() *nic.Pool { return m.pool }

// Stats implements nic.Queue.
func (m *Mem) Stats() nic.Stats {
	return nic.Stats{RxFrames: m.rx.Load(), TxFrames: m.tx.Load(), RxBytes: m.rxBytes.Load(),
		TxBytes: m.txBytes.Load(), TxDrops: m.txDrops.Load()}
}

// Receive implements nic.Queue.
func (m *Mem) Receive(b *nic.Batch, timeout time.Duration) error {
	if m.closed.Load() {
		return nic.ErrClosed
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
	m.rx.Add(uint64(b.N))
	bytes := 0
	for i := 0; i < b.N; i++ {
		bytes += b.Len[i]
	}
	m.rxBytes.Add(uint64(bytes))
	return nil
}

// pull moves queued frames into b's empty tail, copying each into a buffer
// of this end's pool.
func (m *Mem) pull(b *nic.Batch) int {
	q := m.in
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.n > 0 && m.pool.Alloc(b, 1) == 1 {
		i := b.N - 1
		l := copy(b.Buf[i][b.Off[i]:], q.slots[q.head][:q.lens[q.head]])
		b.SetFrame(i, b.Off[i], l)
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

// Transmit implements nic.Queue.
func (m *Mem) Transmit(b *nic.Batch) {
	if m.closed.Load() {
		b.Release()
		return
	}
	q := m.out
	sent, drops, bytes := 0, 0, 0
	q.mu.Lock()
	for i := 0; i < b.N; i++ {
		if b.Buf[i] == nil { // moved to another batch by Take
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
	m.tx.Add(uint64(sent))
	m.txBytes.Add(uint64(bytes))
	m.txDrops.Add(uint64(drops))
}

// Close implements nic.Queue.
func (m *Mem) Close() error {
	m.closed.Store(true)
	return nil
}
