// Package nic moves Ethernet frames between the gateway's workers and the
// network, in batches: AF_XDP sockets (the fast path), AF_PACKET sockets (the
// fallback where XDP cannot attach) and in-memory pairs (tests).
//
// Frames live in fixed-size buffers of a Pool. A worker receives a Batch of
// views into those buffers, rewrites frames in place (it may grow a frame
// into the buffer's headroom, e.g. to encapsulate), hands some to Transmit
// and gives the rest back with Release. AF_XDP ports that share one Pool (the
// UMEM) forward a received frame out of another interface without copying.
//
// A Pool, its ports and the Batches built on them belong to one worker
// goroutine: nothing here locks. Stats may be read from any goroutine.
package nic

import (
	"errors"
	"sync/atomic"
	"time"
)

// MaxBatch is the most frames one ring operation moves.
const MaxBatch = 64

// ErrClosed is returned by a port used after Close.
var ErrClosed = errors.New("nic: closed")

// Queue is one receive/transmit queue of an interface.
type Queue interface {
	// Name says what the port is, e.g. "afxdp:eth0/0".
	Name() string
	// Pool is where the port's frame buffers come from.
	Pool() *Pool
	// Receive fills b (which must be empty) with up to MaxBatch frames,
	// waiting at most timeout for the first; b.N == 0 on timeout.
	Receive(b *Batch, timeout time.Duration) error
	// Transmit sends b's frames and empties b. Frames of this port's Pool
	// are sent from their buffers; others are copied, then released. A
	// frame the queue has no room for is dropped and counted.
	Transmit(b *Batch)
	// Stats returns the port's counters.
	Stats() Stats
	// Close releases the port's kernel resources.
	Close() error
}

// Stats are a port's counters since it was opened.
type Stats struct {
	RxFrames uint64 // frames received
	TxFrames uint64 // frames queued for transmission
	RxBytes  uint64 // bytes of the frames received (Ethernet header on, FCS off)
	TxBytes  uint64 // bytes of the frames queued for transmission
	TxDrops  uint64 // frames dropped: transmit queue full, no buffer or frame too big
	RxErrors uint64 // receive system calls that failed
	TxErrors uint64 // transmit system calls that failed
}

// counters are updated once per batch by the owning goroutine and read by
// scrapers.
type counters struct {
	rx, tx, txDrops, rxErr, txErr atomic.Uint64
	rxBytes, txBytes              atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{RxFrames: c.rx.Load(), TxFrames: c.tx.Load(), RxBytes: c.rxBytes.Load(), TxBytes: c.txBytes.Load(),
		TxDrops: c.txDrops.Load(), RxErrors: c.rxErr.Load(), TxErrors: c.txErr.Load()}
}

// Pool is a region of memory cut into equal frame buffers, with a stack of
// the free ones. For AF_XDP it is the UMEM.
type Pool struct {
	mem       []byte
	frameSize int
	headroom  int
	free      []uint64 // base offsets of free buffers
	unmap     func([]byte) error
	umemFD    int // AF_XDP socket that registered this pool as its UMEM, or -1
}

// NewPool allocates n buffers of frameSize bytes on the Go heap; received
// frames start headroom bytes into their buffer.
func NewPool(n, frameSize, headroom int) (*Pool, error) {
	if err := checkPool(n, frameSize, headroom); err != nil {
		return nil, err
	}
	return newPool(make([]byte, n*frameSize), frameSize, headroom, nil), nil
}

func checkPool(n, frameSize, headroom int) error {
	switch {
	case n < 2*MaxBatch:
		return errors.New("nic: a pool needs at least 128 buffers")
	case frameSize < 2048 || frameSize > 65536 || frameSize&(frameSize-1) != 0:
		return errors.New("nic: frame size must be a power of two from 2048 to 65536")
	case headroom < 0 || headroom > frameSize/2:
		return errors.New("nic: headroom must be between 0 and half the frame size")
	}
	return nil
}

func newPool(mem []byte, frameSize, headroom int, unmap func([]byte) error) *Pool {
	n := len(mem) / frameSize
	p := &Pool{mem: mem, frameSize: frameSize, headroom: headroom, free: make([]uint64, n), unmap: unmap, umemFD: -1}
	for i := range p.free {
		p.free[i] = uint64((n - 1 - i) * frameSize)
	}
	return p
}

// FrameSize is the size of each buffer.
func (p *Pool) FrameSize() int { return p.frameSize }

// Free is the number of buffers not in use.
func (p *Pool) Free() int { return len(p.free) }

func (p *Pool) get() (uint64, bool) {
	n := len(p.free)
	if n == 0 {
		return 0, false
	}
	a := p.free[n-1]
	p.free = p.free[:n-1]
	return a, true
}

func (p *Pool) put(base uint64) { p.free = append(p.free, base) }

func (p *Pool) buf(base uint64) []byte {
	return p.mem[base : base+uint64(p.frameSize) : base+uint64(p.frameSize)]
}

// Alloc appends up to n empty buffers to b (for frames the worker builds
// itself, e.g. ICMP errors) and returns how many it added. Each new frame
// starts at the pool's headroom with length 0.
func (p *Pool) Alloc(b *Batch, n int) int {
	if b.pool != nil && b.pool != p {
		return 0
	}
	b.pool = p
	added := 0
	for added < n && b.N < MaxBatch {
		base, ok := p.get()
		if !ok {
			break
		}
		b.set(b.N, base, p.headroom, 0)
		b.N++
		added++
	}
	return added
}

// Batch is up to MaxBatch frames of one Pool. Frame i is
// Buf[i][Off[i]:Off[i]+Len[i]]; Buf[i] is its whole buffer.
type Batch struct {
	N    int
	Buf  [MaxBatch][]byte
	Off  [MaxBatch]int
	Len  [MaxBatch]int
	base [MaxBatch]uint64 // buffer offset in the pool; gone marks a frame moved away
	pool *Pool
}

const gone = ^uint64(0)

func (b *Batch) set(i int, base uint64, off, n int) {
	b.Buf[i] = b.pool.buf(base)
	b.Off[i], b.Len[i], b.base[i] = off, n, base
}

// Frame returns frame i's bytes.
func (b *Batch) Frame(i int) []byte { return b.Buf[i][b.Off[i] : b.Off[i]+b.Len[i]] }

// SetFrame places frame i at [off, off+n) of its buffer; it reports false
// (and changes nothing) if that does not fit.
func (b *Batch) SetFrame(i, off, n int) bool {
	if i < 0 || i >= b.N || off < 0 || n < 0 || off+n > len(b.Buf[i]) {
		return false
	}
	b.Off[i], b.Len[i] = off, n
	return true
}

// Take moves frame i of src to the end of b without copying; both must use
// the same Pool (or b be empty and unbound) and b must have room. The slot in
// src is left empty: Release skips it.
func (b *Batch) Take(src *Batch, i int) bool {
	if b.N == MaxBatch || i < 0 || i >= src.N || src.base[i] == gone || (b.pool != nil && b.pool != src.pool) {
		return false
	}
	b.pool = src.pool
	j := b.N
	b.Buf[j], b.Off[j], b.Len[j], b.base[j] = src.Buf[i], src.Off[i], src.Len[i], src.base[i]
	b.N++
	src.base[i] = gone
	src.Buf[i] = nil
	return true
}

// Release gives every frame still in b back to its pool and empties b.
func (b *Batch) Release() {
	if b.pool != nil {
		for i := 0; i < b.N; i++ {
			if b.base[i] != gone {
				b.pool.put(b.base[i])
			}
			b.Buf[i] = nil
		}
	}
	b.N = 0
	b.pool = nil
}

// reset empties b without touching buffers (their ownership moved).
func (b *Batch) reset() {
	for i := 0; i < b.N; i++ {
		b.Buf[i] = nil
	}
	b.N = 0
	b.pool = nil
}

// pollMillis converts a wait to poll(2) milliseconds, rounding up so a short
// wait does not turn into a busy loop.
func pollMillis(d time.Duration) int {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<30 {
		ms = 1 << 30
	}
	return int(ms)
}
