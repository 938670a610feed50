package engine

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/nic"
)

// Counters the engine keeps besides the pipeline's.
type Counters struct {
	// PassDropped counts frames the XDP program steered to us that the
	// pipeline says belong to the kernel (e.g. during a reload, before the
	// maps and the snapshot agree). AF_XDP has no way back into the kernel,
	// so they are dropped.
	PassDropped uint64
	// NoPort counts frames routed out of an interface the gateway does not serve.
	NoPort uint64
	// NoBuffer counts received frames dropped because no output buffer was free.
	NoBuffer uint64
	// Expired counts flows removed by the periodic expiry.
	Expired uint64
	// BusyNanos is the time spent handling received frames, from a batch's
	// arrival to its transmission (wall clock, cumulative); its rate is the
	// worker's busy ratio, the rest of the time it polls or waits.
	BusyNanos uint64
}

func (c *Counters) add(o *Counters) {
	c.PassDropped += o.PassDropped
	c.NoPort += o.NoPort
	c.NoBuffer += o.NoBuffer
	c.Expired += o.Expired
	c.BusyNanos += o.BusyNanos
}

// pubCounters are a worker's counters as last published (atomics, read by Stats).
type pubCounters struct {
	_                                         [64]byte
	passDropped, noPort, noBuf, expired, busy atomic.Uint64
	_                                         [64]byte
}

func (p *pubCounters) publish(c *Counters) {
	p.passDropped.Store(c.PassDropped)
	p.noPort.Store(c.NoPort)
	p.noBuf.Store(c.NoBuffer)
	p.expired.Store(c.Expired)
	p.busy.Store(c.BusyNanos)
}

func (p *pubCounters) read() Counters {
	return Counters{PassDropped: p.passDropped.Load(), NoPort: p.noPort.Load(), NoBuffer: p.noBuf.Load(),
		Expired: p.expired.Load(), BusyNanos: p.busy.Load()}
}

// epoch is the base of the monotonic nanosecond clock handed to the pipeline.
var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// fder is a port with a pollable socket (AF_XDP and AF_PACKET both are).
type fder interface{ FD() int }

// worker is one receive queue: its pool, its port on every served
// interface and its pipeline worker. Everything here belongs to the
// worker's goroutine except the published counters.
type worker struct {
	q        int
	gw       *gateway.Processor
	pool     *nic.Pool
	ports    []nic.Queue
	ifindex  []int  // ifindex[k] is the interface of ports[k]
	kernelRx []bool // kernelRx[k]: the kernel also got the frame (AF_PACKET), so "pass" needs nothing
	xsks     []*nic.XSK
	pfd      []unix.PollFd
	batch    int
	wait     time.Duration
	now      func() int64

	expireEvery  int64
	expireBudget int

	rx  nic.Batch
	out nic.Batch
	tx  []nic.Batch
	in  [nic.MaxBatch][]byte
	buf [nic.MaxBatch][]byte
	res [nic.MaxBatch]gateway.Result

	local Counters
	pub   pubCounters
}

// run is the worker loop: receive from every port, process, transmit, expire
// flows on a timer; it returns once stop is set.
//
// Expiry removes at most expireBudget flows every expireEvery. A sweep that
// removed its whole budget means flows run out faster than that pace (a
// burst of short flows ending together): the worker is behind, and until a
// sweep removes less it sweeps once per loop turn and does not block in
// receive, so dead flows cannot pile up and fill the table. Each sweep's
// work stays bounded (Expire), and packets are still served between sweeps.
func (w *worker) run(stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	next := w.now() + w.expireEvery
	behind := false
	for !stop.Load() {
		got := 0
		if len(w.ports) == 1 {
			wait := w.wait
			if behind {
				wait = 0
			}
			got = w.receive(0, wait)
		} else {
			for k := range w.ports {
				got += w.receive(k, 0)
			}
		}
		now := w.now()
		if behind || now >= next {
			n := w.gw.Expire(now, w.expireBudget)
			w.local.Expired += uint64(n)
			w.pub.publish(&w.local)
			behind = n >= w.expireBudget
			next = now + w.expireEvery
		}
		if got == 0 {
			for _, x := range w.xsks {
				x.Flush() // idle: get transmitted buffers back
			}
			if len(w.ports) > 1 && !behind {
				w.idle()
			}
		}
	}
	w.rx.Release()
	w.out.Release()
}

// idle waits for any port to have frames, at most w.wait.
func (w *worker) idle() {
	if len(w.pfd) != len(w.ports) {
		time.Sleep(time.Millisecond) // a port without a socket (tests): poll by sleeping
		return
	}
	for i := range w.pfd {
		w.pfd[i].Revents = 0
	}
	ms := int(w.wait / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	unix.Poll(w.pfd, ms)
}

// receive takes one batch from port k and handles it; it returns the
// number of frames received.
func (w *worker) receive(k int, wait time.Duration) int {
	if err := w.ports[k].Receive(&w.rx, wait); err != nil || w.rx.N == 0 {
		w.rx.Release()
		if err != nil {
			time.Sleep(time.Millisecond) // counted by the port; do not spin on a broken socket
		}
		return 0
	}
	n := w.rx.N
	// Busy time is always wall time: w.now may be a test's clock.
	t0 := nanotime()
	now := w.now()
	for start := 0; start < n; start += w.batch {
		m := min(w.batch, n-start)
		w.process(k, now, start, m)
	}
	w.rx.Release()
	w.local.BusyNanos += uint64(nanotime() - t0)
	w.pub.publish(&w.local)
	return n
}

// process runs frames [start, start+m) of w.rx through the pipeline into
// freshly allocated buffers of the worker's pool and transmits the results.
// The pool is shared by all of the worker's ports, so on AF_XDP the output
// buffer goes onto the out interface's TX ring as it is.
func (w *worker) process(k int, now int64, start, m int) {
	got := w.pool.Alloc(&w.out, m)
	if got < m {
		w.local.NoBuffer += uint64(m - got)
		m = got
		if m == 0 {
			w.out.Release()
			return
		}
	}
	for i := 0; i < m; i++ {
		w.in[i] = w.rx.Frame(start + i)
		w.buf[i] = w.out.Buf[i][w.out.Off[i]:]
	}
	w.gw.Process(now, w.in[:m], w.buf[:m], w.res[:m])
	for i := 0; i < m; i++ {
		r := &w.res[i]
		switch r.Verdict {
		case gateway.VerdictTx:
			o := w.portOf(r.Ifindex)
			if o < 0 {
				w.local.NoPort++
				continue
			}
			w.out.SetFrame(i, w.out.Off[i], r.Len)
			w.tx[o].Take(&w.out, i)
		case gateway.VerdictPass:
			if !w.kernelRx[k] {
				w.local.PassDropped++
			}
		}
		w.in[i], w.buf[i] = nil, nil
	}
	for o := range w.tx {
		if w.tx[o].N > 0 {
			w.ports[o].Transmit(&w.tx[o])
		}
	}
	w.out.Release()
}

func (w *worker) portOf(ifindex int) int {
	for k, i := range w.ifindex {
		if i == ifindex {
			return k
		}
	}
	return -1
}
