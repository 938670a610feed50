// Package claim adds and removes the egress IPs a gateway hosts on its
// interfaces, marked as Egret's, and announces them with gratuitous ARP or
// unsolicited neighbour advertisements.
package claim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/nsenter"
)

// Claimer adds hosted egress IPs to the external interface and announces
// them, and removes them on release. Every claimed IP is fenced (see
// FenceTable): the kernel never answers for it, the claimer's responder
// does, so a gateway that dies without cleaning up leaves its IPs mute.
type Claimer struct {
	// Announcements is how many gratuitous ARPs / unsolicited NAs a claim
	// sends (default 3), Interval the spacing between them (default 100ms).
	// They go out in the background: Claim does not wait for them.
	Announcements int
	Interval      time.Duration

	nl    *netlink.Handle
	sock  map[int]*nl.SocketHandle // raw requests: IFA_PROTO, which netlink.Addr lacks
	fence *fence
	resp  *responder
	ann   *announcer
}

// Stats are a claimer's counters since it was made.
type Stats struct {
	// Announced counts gratuitous ARPs / unsolicited NAs sent, and
	// AnnounceFailures those that could not be (the claim's remaining
	// announcements are then dropped, and the failure logged).
	Announced, AnnounceFailures uint64
	// Answered counts ARP replies and neighbour advertisements sent for
	// claimed IPs, AnswerFailures those that could not be sent.
	Answered, AnswerFailures uint64
}

// NewClaimer works on the namespace ns, or the current one if ns is not
// open; log (nil: discarded) gets the announcements that fail. It
// creates the fence tables unless they exist and starts answering ARP and
// neighbour solicitations for what it claims.
func NewClaimer(ns netns.NsHandle, log *slog.Logger) (_ *Claimer, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Claimer{Announcements: 3, Interval: 100 * time.Millisecond}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if ns.IsOpen() {
		c.nl, err = netlink.NewHandleAt(ns)
	} else {
		c.nl, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("claim: netlink: %w", err)
	}
	if c.sock, err = routeSocket(ns); err != nil {
		return nil, err
	}
	if c.fence, err = openFence(ns); err != nil {
		return nil, err
	}
	// The packet sockets belong to the namespace of the thread that opens
	// them; afterwards any thread may use them (setns needs CAP_SYS_ADMIN,
	// which the gateway does not have, so the engine passes no ns).
	err = nsenter.Do(ns, func() error {
		var err error
		c.resp, err = openResponder()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: packet sockets for ARP and neighbour discovery: %w", err)
	}
	c.ann = newAnnouncer(c.resp.sendFrame, log)
	return c, nil
}

// Close stops announcing and answering and releases the sockets. Claimed
// IPs stay on their interface, fenced, until a claimer releases them; the
// fence tables go when they fence nothing.
func (c *Claimer) Close() {
	if c.ann != nil {
		c.ann.close()
		c.ann = nil
	}
	if c.resp != nil {
		c.resp.close()
		c.resp = nil
	}
	if c.fence != nil {
		c.fence.dropIfEmpty() // best effort: a left empty table drops nothing
		c.fence = nil
	}
	if c.nl != nil {
		c.nl.Close()
		c.nl = nil
	}
	for _, s := range c.sock {
		s.Socket.Close()
	}
	c.sock = nil
}

// Stats returns the claimer's counters.
func (c *Claimer) Stats() Stats {
	return Stats{Announced: c.ann.sent.Load(), AnnounceFailures: c.ann.failures.Load(),
		Answered: c.resp.answered.Load(), AnswerFailures: c.resp.errors.Load()}
}

// errBadAddr is returned for an invalid address argument.
var errBadAddr = errors.New("invalid IP address")

func hostAddr(ip netip.Addr) *netlink.Addr {
	bits := ip.BitLen()
	a := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
	if ip.Is6() {
		a.Flags = unix.IFA_F_NODAD // usable at once: the owner is decided by the controller
	}
	return a
}

// Claim fences ip, adds it as a /32 (or /128, without duplicate address
// detection) to interface ifname, marked as Egret's (AddrProto), answers
// ARP / neighbour solicitations for it, and queues its announcements: the
// first at once, the others Interval apart, sent in the background.
// Claiming an address already present marks it and re-announces.
func (c *Claimer) Claim(ifname string, ip netip.Addr) error {
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("claim: %v: %w", ip, errBadAddr)
	}
	ip = ip.Unmap()
	l, err := c.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("claim: %s: interface %q: %w", ip, ifname, err)
	}
	mac := l.Attrs().HardwareAddr
	if len(mac) != 6 {
		return fmt.Errorf("claim: %s: interface %q has no Ethernet address (%v)", ip, ifname, mac)
	}
	// Fenced before it is added: the kernel never answers for it, not
	// even for a moment.
	if err := c.fence.add(ip); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	if err := c.addMarked(l.Attrs().Index, ip); err != nil {
		return fmt.Errorf("claim: add %s to %s: %w", ip, ifname, err)
	}
	c.resp.host(ip, hostedIP{ifindex: l.Attrs().Index, mac: mac})
	frame := UnsolicitedNA(mac, ip)
	if ip.Is4() {
		frame = GratuitousARP(mac, ip)
	}
	c.ann.queue(ip, l.Attrs().Index, frame, c.Announcements, c.Interval)
	return nil
}

// Release stops answering for ip, removes it from ifname and lifts its
// fence; releasing an absent address is not an error.
func (c *Claimer) Release(ifname string, ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("claim: release %v: %w", ip, errBadAddr)
	}
	ip = ip.Unmap()
	c.ann.cancel(ip)
	c.resp.unhost(ip)
	l, err := c.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("claim: release %s: interface %q: %w", ip, ifname, err)
	}
	if err := c.nl.AddrDel(l, hostAddr(ip)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("claim: remove %s from %s: %w", ip, ifname, err)
	}
	// Only once the address is gone: the kernel never answers for it.
	if err := c.fence.remove(ip); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return nil
}

// GratuitousARP builds an ARP announcement (RFC 5227): a broadcast request
// whose sender and target IP are both ip.
func GratuitousARP(mac net.HardwareAddr, ip netip.Addr) []byte {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	a := f[14:]
	binary.BigEndian.PutUint16(a[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 1) // request
	copy(a[8:14], mac)
	ip4 := ip.As4()
	copy(a[14:18], ip4[:])
	// a[18:24] target MAC stays zero
	copy(a[24:28], ip4[:])
	return f
}

// UnsolicitedNA builds an unsolicited neighbour advertisement (RFC 4861
// 4.4, 7.2.6) for ip to all nodes, with the Override flag and the target
// link-layer address option.
func UnsolicitedNA(mac net.HardwareAddr, ip netip.Addr) []byte {
	const icmpLen = 32 // header 4, flags 4, target 16, option 8
	f := make([]byte, 14+40+icmpLen)
	copy(f[0:6], []byte{0x33, 0x33, 0, 0, 0, 1})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IPV6)
	h := f[14:]
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], icmpLen)
	h[6], h[7] = unix.IPPROTO_ICMPV6, 255
	src := ip.As16()
	dst := netip.MustParseAddr("ff02::1").As16()
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
	m := h[40:]
	m[0] = 136            // neighbour advertisement
	m[4] = 0x20           // Override
	copy(m[8:24], src[:]) // target
	m[24], m[25] = 2, 1   // target link-layer address, 8 bytes
	copy(m[26:32], mac)
	binary.BigEndian.PutUint16(m[2:], icmp6Checksum(src, dst, m))
	return f
}

func icmp6Checksum(src, dst [16]byte, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	sum += uint32(len(msg)) + unix.IPPROTO_ICMPV6
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
