package nic

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/packetsock"
)

// PacketOptions tune an AF_PACKET port; the zero value is usable.
type PacketOptions struct {
	// FanoutGroup, when non-zero, joins the socket to a PACKET_FANOUT_HASH
	// group so several workers share an interface's traffic by flow.
	FanoutGroup uint16
}

// Packet is an AF_PACKET socket on one interface: the fallback where XDP
// cannot attach. It sees a copy of every frame the kernel also processes,
// and moves batches with recvmmsg/sendmmsg.
type Packet struct {
	fd      int
	name    string
	ifindex int
	pool    *Pool
	rxHdr   [MaxBatch]unix.Mmsghdr
	rxIov   [MaxBatch]unix.Iovec
	rxBase  [MaxBatch]uint64
	txHdr   [MaxBatch]unix.Mmsghdr
	txIov   [MaxBatch]unix.Iovec
	closed  bool
	cnt     counters
}

// OpenPacket opens an AF_PACKET port on the interface, with its receive
// buffers in pool.
func OpenPacket(pool *Pool, ifname string, ifindex int, opt PacketOptions) (*Packet, error) {
	fd, err := packetsock.Open(unix.SOCK_RAW, unix.ETH_P_ALL)
	if err != nil {
		return nil, fmt.Errorf("nic: AF_PACKET socket on %s: %w", ifname, err)
	}
	p := &Packet{fd: fd, name: "afpacket:" + ifname, ifindex: ifindex, pool: pool}
	fail := func(what string, err error) (*Packet, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("nic: AF_PACKET on %s: %s: %w", ifname, what, err)
	}
	// Our own transmissions must not come back as receptions.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("ignore outgoing", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		return fail("qdisc bypass", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	if err := unix.Bind(fd, packetsock.Addr(unix.ETH_P_ALL, ifindex)); err != nil {
		return fail("bind", err)
	}
	if opt.FanoutGroup != 0 {
		v := int(opt.FanoutGroup) | unix.PACKET_FANOUT_HASH<<16
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, v); err != nil {
			return fail("fanout", err)
		}
	}
	for i := range p.rxHdr {
		p.rxHdr[i].Hdr.Iov = &p.rxIov[i]
		p.rxHdr[i].Hdr.SetIovlen(1)
		p.txHdr[i].Hdr.Iov = &p.txIov[i]
		p.txHdr[i].Hdr.SetIovlen(1)
	}
	return p, nil
}

// Name implements Port.
func (p *Packet) Name() string { return p.name }

// Pool implements Port.
func (p *Packet) Pool() *Pool { return p.pool }

// Stats implements Port.
func (p *Packet) Stats() Stats { return p.cnt.stats() }

// FD is the socket, e.g. to attach a classic BPF filter.
func (p *Packet) FD() int { return p.fd }

func (p *Packet) mmsg(nr uintptr, hdr *unix.Mmsghdr, n int, flags int) (int, unix.Errno) {
	r, _, e := unix.Syscall6(nr, uintptr(p.fd), uintptr(unsafe.Pointer(hdr)), uintptr(n), uintptr(flags), 0, 0)
	return int(r), e
}

// Receive implements Port.
func (p *Packet) Receive(b *Batch, timeout time.Duration) error {
	if p.closed {
		return ErrClosed
	}
	b.Release()
	n := 0
	room := p.pool.frameSize - p.pool.headroom
	for n < MaxBatch {
		base, ok := p.pool.get()
		if !ok {
			break
		}
		p.rxBase[n] = base
		p.rxIov[n].Base = &p.pool.mem[base+uint64(p.pool.headroom)]
		p.rxIov[n].SetLen(room)
		n++
	}
	if n == 0 {
		return nil // every buffer is out: the worker must release some
	}
	got, e := p.mmsg(unix.SYS_RECVMMSG, &p.rxHdr[0], n, unix.MSG_DONTWAIT)
	if e == unix.EAGAIN && timeout > 0 {
		pfd := [1]unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		unix.Poll(pfd[:], pollMillis(timeout))
		got, e = p.mmsg(unix.SYS_RECVMMSG, &p.rxHdr[0], n, unix.MSG_DONTWAIT)
	}
	if e != 0 {
		got = 0
	}
	b.pool = p.pool
	bytes := 0
	for i := 0; i < got; i++ {
		l := int(p.rxHdr[i].Len)
		if l > room {
			l = room // truncated: the frame was bigger than a buffer
		}
		b.set(i, p.rxBase[i], p.pool.headroom, l)
		bytes += l
	}
	b.N = got
	for i := got; i < n; i++ {
		p.pool.put(p.rxBase[i])
	}
	if got > 0 {
		p.cnt.rx.Add(uint64(got))
		p.cnt.rxBytes.Add(uint64(bytes))
	}
	if e != 0 && e != unix.EAGAIN && e != unix.EINTR {
		p.cnt.rxErr.Add(1)
		return fmt.Errorf("nic: receive on %s: %w", p.name, e)
	}
	return nil
}

// Transmit implements Port. The kernel copies each frame, so buffers of any
// pool are sent in place and released at once.
func (p *Packet) Transmit(b *Batch) {
	if p.closed || b.N == 0 {
		b.Release()
		return
	}
	n := 0
	for i := 0; i < b.N; i++ {
		if b.base[i] == gone || b.Len[i] == 0 {
			continue
		}
		p.txIov[n].Base = &b.Buf[i][b.Off[i]]
		p.txIov[n].SetLen(b.Len[i])
		n++
	}
	sent, bytes := 0, 0
	for sent < n {
		r, e := p.mmsg(unix.SYS_SENDMMSG, &p.txHdr[sent], n-sent, unix.MSG_DONTWAIT)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			if e != unix.EAGAIN && e != unix.ENOBUFS {
				p.cnt.txErr.Add(1)
			}
			break
		}
		sent += r
	}
	for i := 0; i < n; i++ {
		if i < sent {
			bytes += int(p.txIov[i].Len)
		}
		p.txIov[i].Base = nil
	}
	b.Release()
	p.cnt.tx.Add(uint64(sent))
	p.cnt.txBytes.Add(uint64(bytes))
	if n > sent {
		p.cnt.txDrops.Add(uint64(n - sent))
	}
}

// Close implements Port.
func (p *Packet) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	return unix.Close(p.fd)
}
