package claim

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/packetsock"
)

// responder answers ARP requests and neighbour solicitations for the
// claimed IPs from user space: the fence tables keep the kernel from doing
// it, so that only a live gateway answers. It reads from two AF_PACKET
// sockets (ARP, and IPv6 filtered in the kernel down to solicitations),
// which see each frame before nftables' arp and inet hooks drop it.
type responder struct {
	mu     sync.RWMutex
	hosted map[netip.Addr]hostedIP

	arp, nd int // AF_PACKET sockets, unbound (every interface of the namespace)
	send    int // the socket answers and announcements go out of
	stop    atomic.Bool
	wg      sync.WaitGroup

	answered, errors atomic.Uint64
}

// hostedIP is where a claimed IP lives.
type hostedIP struct {
	ifindex int
	mac     net.HardwareAddr
}

// ndFilter accepts only ICMPv6 neighbour solicitations without extension
// headers (next header 58 at byte 20, ICMPv6 type 135 at byte 54).
var ndFilter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 14 + 6},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.IPPROTO_ICMPV6, Jt: 0, Jf: 3},
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 14 + 40},
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: 135, Jt: 0, Jf: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0xffff},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
}

// openResponder opens the sockets in the calling thread's namespace.
func openResponder() (_ *responder, err error) {
	r := &responder{hosted: map[netip.Addr]hostedIP{}, arp: -1, nd: -1, send: -1}
	defer func() {
		if err != nil {
			r.closeSockets()
		}
	}()
	if r.arp, err = packetsock.Open(unix.SOCK_RAW, unix.ETH_P_ARP); err != nil {
		return nil, err
	}
	// The filter goes on before the protocol is bound, so no unfiltered
	// IPv6 frame is ever queued on the socket.
	if r.nd, err = packetsock.Open(unix.SOCK_RAW, 0); err != nil {
		return nil, err
	}
	prog := unix.SockFprog{Len: uint16(len(ndFilter)), Filter: (*unix.SockFilter)(unsafe.Pointer(&ndFilter[0]))}
	if err = unix.SetsockoptSockFprog(r.nd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return nil, err
	}
	if err = unix.Bind(r.nd, packetsock.Addr(unix.ETH_P_IPV6, 0)); err != nil {
		return nil, err
	}
	if r.send, err = packetsock.Open(unix.SOCK_RAW, 0); err != nil {
		return nil, err
	}
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds()) // how late Close is noticed
	for _, fd := range []int{r.arp, r.nd} {
		if err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
	}
	for _, fd := range []int{r.arp, r.nd} {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(fd)
		}()
	}
	return r, nil
}

func (r *responder) closeSockets() {
	for _, fd := range []*int{&r.arp, &r.nd, &r.send} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// close stops answering and closes the sockets.
func (r *responder) close() {
	r.stop.Store(true)
	r.wg.Wait()
	r.closeSockets()
}

func (r *responder) host(ip netip.Addr, h hostedIP) {
	r.mu.Lock()
	r.hosted[ip] = h
	r.mu.Unlock()
}

func (r *responder) unhost(ip netip.Addr) {
	r.mu.Lock()
	delete(r.hosted, ip)
	r.mu.Unlock()
}

// lookup returns where ip is hosted if it is hosted on ifindex.
func (r *responder) lookup(ip netip.Addr, ifindex int) (hostedIP, bool) {
	r.mu.RLock()
	h, ok := r.hosted[ip]
	r.mu.RUnlock()
	return h, ok && h.ifindex == ifindex
}

// serve answers what arrives on fd until close.
func (r *responder) serve(fd int) {
	buf := make([]byte, 1514)
	for !r.stop.Load() {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue // the receive timeout, or a signal
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		var reply []byte
		if fd == r.arp {
			reply = r.arpReply(buf[:n], ll.Ifindex)
		} else {
			reply = r.naReply(buf[:n], ll.Ifindex)
		}
		if reply == nil {
			continue
		}
		if err := unix.Sendto(r.send, reply, 0, &unix.SockaddrLinklayer{Ifindex: ll.Ifindex}); err != nil {
			r.errors.Add(1)
			continue
		}
		r.answered.Add(1)
	}
}

// arpReply answers an Ethernet/IPv4 ARP request for a hosted IP, or
// returns nil. A gratuitous ARP (sender = target) is another host's
// announcement, not a question.
func (r *responder) arpReply(f []byte, ifindex int) []byte {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_ARP {
		return nil
	}
	a := f[14:]
	if binary.BigEndian.Uint16(a[0:]) != 1 || binary.BigEndian.Uint16(a[2:]) != 0x0800 || a[4] != 6 || a[5] != 4 ||
		binary.BigEndian.Uint16(a[6:]) != 1 {
		return nil
	}
	spa, tpa := netip.AddrFrom4([4]byte(a[14:18])), netip.AddrFrom4([4]byte(a[24:28]))
	if spa == tpa {
		return nil
	}
	h, ok := r.lookup(tpa, ifindex)
	if !ok {
		return nil
	}
	out := make([]byte, 42)
	copy(out[0:6], a[8:14]) // to the asker's hardware address
	copy(out[6:12], h.mac)
	binary.BigEndian.PutUint16(out[12:], unix.ETH_P_ARP)
	o := out[14:]
	copy(o[0:6], a[0:6])
	binary.BigEndian.PutUint16(o[6:], 2) // reply
	copy(o[8:14], h.mac)
	copy(o[14:18], a[24:28])
	copy(o[18:24], a[8:14])
	copy(o[24:28], a[14:18])
	return out
}

// naReply answers a neighbour solicitation for a hosted IP (RFC 4861
// 7.2.4) with a solicited advertisement, or returns nil. A solicitation
// from the unspecified address (duplicate address detection) is answered
// to all nodes without the Solicited flag, as the kernel would.
func (r *responder) naReply(f []byte, ifindex int) []byte {
	if len(f) < 14+40+24 || binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_IPV6 {
		return nil
	}
	h6 := f[14:]
	if h6[0]>>4 != 6 || h6[6] != unix.IPPROTO_ICMPV6 || h6[7] != 255 || h6[40] != 135 || h6[41] != 0 {
		return nil
	}
	target := netip.AddrFrom16([16]byte(h6[48:64]))
	h, ok := r.lookup(target, ifindex)
	if !ok {
		return nil
	}
	src := netip.AddrFrom16([16]byte(h6[8:24]))
	out := UnsolicitedNA(h.mac, target)
	if src.IsUnspecified() {
		return out
	}
	copy(out[0:6], f[6:12]) // to the asker
	o6 := out[14:]
	dst := src.As16()
	copy(o6[24:40], dst[:])
	m := o6[40:]
	m[4] = 0x60 // Solicited, Override
	m[2], m[3] = 0, 0
	binary.BigEndian.PutUint16(m[2:], icmp6Checksum(target.As16(), dst, m))
	return out
}
