package nic

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// XDPOptions size an AF_XDP socket's rings; zero fields take defaults.
type XDPOptions struct {
	RingSize int  // descriptors per ring, power of two; default 2048
	ZeroCopy bool // require zero-copy mode (fails where the driver lacks it)
	Copy     bool // force copy mode
	// BusyPoll, when on, sets the socket's busy-poll options (an error if
	// the kernel refuses them) and drives its rings by busy polling:
	// Receive never sleeps in poll(2), whatever its timeout.
	BusyPoll BusyPoll
	// TxSkbBudget, if not 0, is XDP_MAX_TX_SKB_BUDGET (32 up to RingSize):
	// frames one sendto transmits in copy mode. A kernel without it is no
	// error: XSK.TxSkbBudget says what took.
	TxSkbBudget int
}

// NewUmem allocates n frame buffers of frameSize bytes in page-aligned memory
// that AF_XDP sockets can register. Sockets opened on the same Umem forward
// frames between each other without copying.
func NewUmem(n, frameSize, headroom int) (*Pool, error) {
	if err := checkPool(n, frameSize, headroom); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(-1, 0, n*frameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("nic: map UMEM of %d bytes: %w", n*frameSize, err)
	}
	return newPool(mem, frameSize, headroom, unix.Munmap), nil
}

// ring is the producer/consumer header of one AF_XDP ring, shared with the
// kernel; the indexes are read and written with atomics (acquire/release).
type ring struct {
	prod, cons, flags *atomic.Uint32
	mask              uint32
	size              uint32
	mem               []byte
}

func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// XSK is an AF_XDP socket bound to one queue of one interface.
type XSK struct {
	fd      int
	name    string
	pool    *Pool
	fill    ring
	comp    ring
	rx      ring
	tx      ring
	fillA   []uint64
	compA   []uint64
	rxD     []unix.XDPDesc
	txD     []unix.XDPDesc
	pending int // frames on the TX ring not yet completed
	closed  bool
	busy    bool // busy-poll mode (XDPOptions.BusyPoll)
	// txBudget is the XDP_MAX_TX_SKB_BUDGET set (0: the kernel's), and
	// txBudgetErr why it is not the one asked for.
	txBudget    int
	txBudgetErr error
	cnt         counters
}

// OpenXSK opens an AF_XDP socket on queue of the interface ifindex, with its
// buffers in umem (from NewUmem). The first socket of a Umem registers it;
// later ones share it. Register the socket's FD with the XDP program
// (xdp.Program.Register) for frames to arrive.
func OpenXSK(umem *Pool, ifname string, ifindex, queue int, opt XDPOptions) (*XSK, error) {
	if umem.unmap == nil {
		return nil, errors.New("nic: AF_XDP needs a pool from NewUmem")
	}
	if opt.RingSize == 0 {
		opt.RingSize = 2048
	}
	if opt.RingSize&(opt.RingSize-1) != 0 || opt.RingSize < MaxBatch {
		return nil, fmt.Errorf("nic: ring size %d is not a power of two ≥ %d", opt.RingSize, MaxBatch)
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nic: AF_XDP socket: %w", err)
	}
	x := &XSK{fd: fd, pool: umem, name: fmt.Sprintf("afxdp:%s/%d", ifname, queue)}
	if err := x.setup(ifindex, queue, opt); err != nil {
		x.Close()
		return nil, fmt.Errorf("nic: open %s: %w", x.name, err)
	}
	return x, nil
}

func (x *XSK) setup(ifindex, queue int, opt XDPOptions) error {
	owner, shared := x.pool.umemFD, x.pool.umemFD >= 0
	if !shared {
		reg := unix.XDPUmemReg{
			Addr:     uint64(uintptr(unsafe.Pointer(&x.pool.mem[0]))),
			Len:      uint64(len(x.pool.mem)),
			Size:     uint32(x.pool.frameSize),
			Headroom: uint32(x.pool.headroom),
		}
		if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
			uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
			return fmt.Errorf("register UMEM: %w", e)
		}
	}
	n := opt.RingSize
	for _, o := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(x.fd, unix.SOL_XDP, o, n); err != nil {
			return fmt.Errorf("size ring %d: %w", o, err)
		}
	}
	var off unix.XDPMmapOffsets
	sz := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&sz)), 0); e != 0 {
		return fmt.Errorf("read ring offsets: %w", e)
	}
	var err error
	if x.fill, err = x.mapRing(unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, n, 8); err != nil {
		return err
	}
	if x.comp, err = x.mapRing(unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, n, 8); err != nil {
		return err
	}
	dsz := int(unsafe.Sizeof(unix.XDPDesc{}))
	if x.rx, err = x.mapRing(unix.XDP_PGOFF_RX_RING, off.Rx, n, dsz); err != nil {
		return err
	}
	if x.tx, err = x.mapRing(unix.XDP_PGOFF_TX_RING, off.Tx, n, dsz); err != nil {
		return err
	}
	x.fillA = unsafe.Slice((*uint64)(unsafe.Pointer(&x.fill.mem[off.Fr.Desc])), n)
	x.compA = unsafe.Slice((*uint64)(unsafe.Pointer(&x.comp.mem[off.Cr.Desc])), n)
	x.rxD = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&x.rx.mem[off.Rx.Desc])), n)
	x.txD = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&x.tx.mem[off.Tx.Desc])), n)

	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	switch {
	case opt.ZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	case opt.Copy:
		flags |= unix.XDP_COPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	if shared {
		// The kernel refuses mode flags here: they come from the owner.
		sa.Flags = unix.XDP_SHARED_UMEM
		sa.SharedUmemFD = uint32(owner)
	}
	if err := unix.Bind(x.fd, sa); err != nil {
		return fmt.Errorf("bind to ifindex %d queue %d: %w", ifindex, queue, err)
	}
	if !shared {
		x.pool.umemFD = x.fd
	}
	if opt.BusyPoll.On() {
		if err := opt.BusyPoll.Check(); err != nil {
			return fmt.Errorf("%w: %w", ErrBusyPoll, err)
		}
		if err := x.setBusyPoll(opt.BusyPoll); err != nil {
			return err
		}
	}
	if opt.TxSkbBudget != 0 {
		x.txBudgetErr = x.setTxSkbBudget(opt.TxSkbBudget)
	}
	x.refill()
	return nil
}

func (x *XSK) mapRing(pgoff uint64, o unix.XDPRingOffset, n, descSize int) (ring, error) {
	mem, err := unix.Mmap(x.fd, int64(pgoff), int(o.Desc)+n*descSize,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, fmt.Errorf("map ring at %#x: %w", pgoff, err)
	}
	return ring{
		prod:  (*atomic.Uint32)(unsafe.Pointer(&mem[o.Producer])),
		cons:  (*atomic.Uint32)(unsafe.Pointer(&mem[o.Consumer])),
		flags: (*atomic.Uint32)(unsafe.Pointer(&mem[o.Flags])),
		mask:  uint32(n - 1), size: uint32(n), mem: mem,
	}, nil
}

// FD is the socket to register in the XDP program's socket map.
func (x *XSK) FD() int { return x.fd }

// Name implements Port.
func (x *XSK) Name() string { return x.name }

// Pool implements Port.
func (x *XSK) Pool() *Pool { return x.pool }

// Stats implements Port.
func (x *XSK) Stats() Stats { return x.cnt.stats() }

// complete returns transmitted buffers to the pool.
func (x *XSK) complete() {
	prod := x.comp.prod.Load()
	cons := x.comp.cons.Load()
	if prod == cons {
		return
	}
	for ; cons != prod; cons++ {
		a := x.compA[cons&x.comp.mask]
		x.pool.put(a &^ uint64(x.pool.frameSize-1))
		x.pending--
	}
	x.comp.cons.Store(cons)
}

// refill gives free buffers to the kernel to receive into, keeping a
// reserve for frames the worker builds or copies in.
func (x *XSK) refill() {
	prod := x.fill.prod.Load()
	room := int(x.fill.size - (prod - x.fill.cons.Load()))
	if avail := len(x.pool.free) - MaxBatch; room > avail {
		room = avail
	}
	if room <= 0 {
		return
	}
	for i := 0; i < room; i++ {
		a, _ := x.pool.get()
		x.fillA[prod&x.fill.mask] = a
		prod++
	}
	x.fill.prod.Store(prod)
}

// Receive implements Port.
func (x *XSK) Receive(b *Batch, timeout time.Duration) error {
	if x.closed {
		return ErrClosed
	}
	b.Release()
	x.kick()
	x.complete()
	x.refill()
	cons := x.rx.cons.Load()
	n := x.rx.prod.Load() - cons
	if n == 0 {
		if x.busy {
			// Busy poll: recvfrom runs the device's NAPI in this thread
			// (SO_PREFER_BUSY_POLL), whether or not the fill ring asks.
			unix.Syscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
			n = x.rx.prod.Load() - cons
			if n == 0 {
				return nil
			}
		} else if timeout <= 0 {
			if x.fill.needWakeup() {
				unix.Syscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
			}
			return nil
		} else {
			// poll also wakes the driver when the fill ring asks for it.
			pfd := [1]unix.PollFd{{Fd: int32(x.fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd[:], pollMillis(timeout)); err != nil && err != unix.EINTR {
				x.cnt.rxErr.Add(1)
				return fmt.Errorf("nic: poll %s: %w", x.name, err)
			}
			n = x.rx.prod.Load() - cons
		}
	}
	if n > MaxBatch {
		n = MaxBatch
	}
	b.pool = x.pool
	mask := uint64(x.pool.frameSize - 1)
	var bytes uint64
	for i := 0; i < int(n); i++ {
		d := x.rxD[cons&x.rx.mask]
		cons++
		base := d.Addr &^ mask
		b.set(i, base, int(d.Addr&mask), int(d.Len))
		bytes += uint64(d.Len)
	}
	b.N = int(n)
	x.rx.cons.Store(cons)
	x.cnt.rx.Add(uint64(n))
	x.cnt.rxBytes.Add(bytes)
	return nil
}

// Transmit implements Port.
func (x *XSK) Transmit(b *Batch) {
	if x.closed {
		b.Release()
		return
	}
	x.complete()
	prod := x.tx.prod.Load()
	room := x.tx.size - (prod - x.tx.cons.Load())
	sent, drops, bytes := 0, 0, 0
	same := b.pool == x.pool
	for i := 0; i < b.N; i++ {
		base := b.base[i]
		if base == gone {
			continue
		}
		if room == 0 {
			drops++
			if same {
				x.pool.put(base)
			}
			continue
		}
		addr := base + uint64(b.Off[i])
		if !same {
			nb, ok := x.pool.get()
			if !ok || b.Len[i] > x.pool.frameSize-x.pool.headroom {
				if ok {
					x.pool.put(nb)
				}
				drops++
				continue
			}
			copy(x.pool.buf(nb)[x.pool.headroom:], b.Frame(i))
			addr = nb + uint64(x.pool.headroom)
		}
		x.txD[prod&x.tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(b.Len[i])}
		prod++
		room--
		sent++
		bytes += b.Len[i]
	}
	if same {
		b.reset()
	} else {
		b.Release()
	}
	if sent > 0 {
		x.tx.prod.Store(prod)
		x.pending += sent
		x.cnt.tx.Add(uint64(sent))
		x.cnt.txBytes.Add(uint64(bytes))
	}
	if drops > 0 {
		x.cnt.txDrops.Add(uint64(drops))
	}
	x.kick()
}

// kick tells the kernel there is work on the TX ring. Copy mode (and
// drivers asking through need_wakeup) transmit only inside sendto, at most
// 32 frames a call (then EAGAIN; XDPOptions.TxSkbBudget raises that), so
// it repeats while the ring drains. In busy-poll mode sendto also polls
// the device (completions, zero-copy transmit), so it is called whenever
// frames are on the ring, asked for or not.
func (x *XSK) kick() {
	for try := 0; try < 2*MaxBatch/32; try++ {
		cons := x.tx.cons.Load()
		if cons == x.tx.prod.Load() || !(x.busy || x.tx.needWakeup()) {
			return
		}
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0, unix.EINTR, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
		default:
			x.cnt.txErr.Add(1)
			return
		}
		if x.tx.cons.Load() == cons {
			return // no progress: the device is busy; retry on the next call
		}
	}
}

// InFlight is the number of frames handed to the kernel for transmission
// whose buffers have not come back yet.
func (x *XSK) InFlight() int { return x.pending }

// Flush reaps completions and kicks the TX ring; call it when idle so
// buffers of sent frames come back.
func (x *XSK) Flush() {
	if x.closed {
		return
	}
	x.kick()
	x.complete()
}

// Close implements Port. Buffers the kernel still holds are not returned;
// close every socket of a Umem before FreeUmem.
func (x *XSK) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	for _, r := range []*ring{&x.fill, &x.comp, &x.rx, &x.tx} {
		if r.mem != nil {
			unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	if x.pool.umemFD == x.fd {
		x.pool.umemFD = -1
	}
	return unix.Close(x.fd)
}

// FreeUmem unmaps a Umem once all its sockets are closed.
func FreeUmem(p *Pool) error {
	if p.unmap == nil || p.mem == nil {
		return nil
	}
	err := p.unmap(p.mem)
	p.mem = nil
	return err
}
