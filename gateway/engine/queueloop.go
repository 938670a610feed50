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
	// loop's busy ratio, the rest of the time it polls or waits.
	BusyNanos uint64
}

func (c *Counters) add(o *Counters) {
	c.PassDropped += o.PassDropped
	c.NoPort += o.NoPort
	c.NoBuffer += o.NoBuffer
	c.Expired += o.Expired
	c.BusyNanos += o.BusyNanos
}

// pubCounters are a queue loop's counters as last published (atomics, read by Stats).
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

// queueLoop serves one receive queue index: its pool, its socket on every
// served interface and its pipeline worker, run by one goroutine locked to
// its OS thread. Everything here belongs to that goroutine except the
// published counters.
type queueLoop struct {
	q         int
	gw        *gateway.Processor
	pool      *nic.Pool
	ports     []nic.Queue
	ifindex   []int  // ifindex[k] is the interface of ports[k]
	kernelRx  []bool // kernelRx[k]: the kernel also got the frame (AF_PACKET), so "pass" needs nothing
	localPort []bool // localPort[k]: port k is the local port (ProcessLocal)
	xsks      []*nic.XSK
	pfd       []unix.PollFd
	batch     int
	wait      time.Duration
	// busy: the sockets busy-poll (Options.BusyPoll): never wait in
	// receive or poll(2), spin. cpu is the core the loop's thread is
	// pinned to, or -1.
	busy bool
	cpu  int
	nap  unix.Timespec // Options.BusyPollNap; zero: yield instead
	now  func() int64

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
	// hold makes run return, so that an interface can be added
	// (Engine.pauseLoops); set and cleared by the engine.
	hold atomic.Bool
}

// run is the loop: receive from every port, process, transmit, expire
// flows on a timer; it returns once stop (or l.hold) is set.
//
// Expiry removes at most expireBudget flows every expireEvery. A sweep that
// removed its whole budget means flows run out faster than that pace (a
// burst of short flows ending together): the loop is behind, and until a
// sweep removes less it sweeps once per loop turn and does not block in
// receive, so dead flows cannot pile up and fill the table. Each sweep's
// work stays bounded (Expire), and packets are still served between sweeps.
func (l *queueLoop) run(stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if l.cpu >= 0 {
		defer l.pin()()
	}
	next := l.now() + l.expireEvery
	behind := false
	for !stop.Load() && !l.hold.Load() {
		got := 0
		if len(l.ports) == 1 {
			wait := l.wait
			if behind || l.busy {
				wait = 0
			}
			got = l.receive(0, wait)
		} else {
			for k := range l.ports {
				got += l.receive(k, 0)
			}
		}
		now := l.now()
		if behind || now >= next {
			n := l.gw.Expire(now, l.expireBudget)
			l.local.Expired += uint64(n)
			l.pub.publish(&l.local)
			behind = n >= l.expireBudget
			next = now + l.expireEvery
		}
		if got == 0 {
			for _, x := range l.xsks {
				x.Flush() // idle: get transmitted buffers back
			}
			if l.busy {
				// A spinning thread would starve the process' other
				// threads where they share its core at its priority (a
				// one-core cpuset, SCHED_FIFO): a turn with nothing to do
				// yields, or naps, which costs a system call only when idle.
				if l.nap.Nsec == 0 {
					unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
				} else {
					unix.Nanosleep(&l.nap, nil)
				}
			}
			if len(l.ports) > 1 && !behind && !l.busy {
				l.idle()
			}
		}
	}
	l.rx.Release()
	l.out.Release()
}

// idle waits for any port to have frames, at most l.wait.
func (l *queueLoop) idle() {
	if len(l.pfd) != len(l.ports) {
		time.Sleep(time.Millisecond) // a port without a socket (tests): poll by sleeping
		return
	}
	for i := range l.pfd {
		l.pfd[i].Revents = 0
	}
	ms := int(l.wait / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	unix.Poll(l.pfd, ms)
}

// receive takes one batch from port k and handles it; it returns the
// number of frames received.
func (l *queueLoop) receive(k int, wait time.Duration) int {
	if err := l.ports[k].Receive(&l.rx, wait); err != nil || l.rx.N == 0 {
		l.rx.Release()
		if err != nil {
			time.Sleep(time.Millisecond) // counted by the port; do not spin on a broken socket
		}
		return 0
	}
	n := l.rx.N
	// Busy time is always wall time: l.now may be a test's clock.
	t0 := nanotime()
	now := l.now()
	for start := 0; start < n; start += l.batch {
		m := min(l.batch, n-start)
		l.process(k, now, start, m)
	}
	l.rx.Release()
	l.local.BusyNanos += uint64(nanotime() - t0)
	l.pub.publish(&l.local)
	return n
}

// process runs frames [start, start+m) of l.rx through the pipeline into
// freshly allocated buffers of the loop's pool and transmits the results.
// The pool is shared by all of the loop's ports, so on AF_XDP the output
// buffer goes onto the out interface's TX ring as it is.
func (l *queueLoop) process(k int, now int64, start, m int) {
	got := l.pool.Alloc(&l.out, m)
	if got < m {
		l.local.NoBuffer += uint64(m - got)
		m = got
		if m == 0 {
			l.out.Release()
			return
		}
	}
	for i := 0; i < m; i++ {
		l.in[i] = l.rx.Frame(start + i)
		l.buf[i] = l.out.Buf[i][l.out.Off[i]:]
	}
	if k < len(l.localPort) && l.localPort[k] {
		l.gw.ProcessLocal(now, l.in[:m], l.buf[:m], l.res[:m])
	} else {
		l.gw.Process(now, l.in[:m], l.buf[:m], l.res[:m])
	}
	for i := 0; i < m; i++ {
		r := &l.res[i]
		switch r.Verdict {
		case gateway.VerdictTx:
			o := l.portOf(r.Ifindex)
			if o < 0 {
				l.local.NoPort++
				continue
			}
			l.out.SetFrame(i, l.out.Off[i], r.Len)
			l.tx[o].Take(&l.out, i)
		case gateway.VerdictPass:
			if !l.kernelRx[k] {
				l.local.PassDropped++
			}
		}
		l.in[i], l.buf[i] = nil, nil
	}
	for o := range l.tx {
		if l.tx[o].N > 0 {
			l.ports[o].Transmit(&l.tx[o])
		}
	}
	l.out.Release()
}

func (l *queueLoop) portOf(ifindex int) int {
	for k, i := range l.ifindex {
		if i == ifindex {
			return k
		}
	}
	return -1
}
