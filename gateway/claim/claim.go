// Package claim adds and removes the egress IPs a gateway hosts on its
// interfaces, marked as Egret's, and announces them with gratuitous ARP or
// unsolicited neighbour advertisements.
package claim

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// them, and removes them on release.
type Claimer struct {
	// Announcements is how many gratuitous ARPs / unsolicited NAs a claim
	// sends (default 3), Interval the spacing between them (default 100ms).
	Announcements int
	Interval      time.Duration

	// raw, if rawOK, is the AF_PACKET socket announcements go out of,
	// opened once by PinSocket in the namespace the claimer serves.
	raw   int
	rawOK bool

	nl   *netlink.Handle
	sock map[int]*nl.SocketHandle // raw requests: IFA_PROTO, which netlink.Addr lacks
	ns   netns.NsHandle
}

// NewClaimer works on the namespace ns, or the current one if ns is not open.
func NewClaimer(ns netns.NsHandle) (*Claimer, error) {
	var (
		nl  *netlink.Handle
		err error
	)
	if ns.IsOpen() {
		nl, err = netlink.NewHandleAt(ns)
	} else {
		nl, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("claim: netlink: %w", err)
	}
	sock, err := routeSocket(ns)
	if err != nil {
		nl.Close()
		return nil, err
	}
	return &Claimer{Announcements: 3, Interval: 100 * time.Millisecond, nl: nl, sock: sock, ns: ns}, nil
}

// Close releases the netlink sockets.
func (c *Claimer) Close() {
	c.nl.Close()
	if c.rawOK {
		unix.Close(c.raw)
		c.rawOK = false
	}
	for _, s := range c.sock {
		s.Socket.Close()
	}
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

// Claim adds ip as a /32 (or /128, without duplicate address detection) to
// interface ifname, marked as Egret's (AddrProto), then announces it: the
// first announcement at once, the others Interval apart. Claiming an
// address already present marks it and re-announces.
func (c *Claimer) Claim(ifname string, ip netip.Addr) error {
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("claim: %v: %w", ip, errBadAddr)
	}
	ip = ip.Unmap()
	l, err := c.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("claim: %s: interface %q: %w", ip, ifname, err)
	}
	if err := c.addMarked(l.Attrs().Index, ip); err != nil {
		return fmt.Errorf("claim: add %s to %s: %w", ip, ifname, err)
	}
	if err := c.announce(l.Attrs().Index, l.Attrs().HardwareAddr, ip); err != nil {
		return fmt.Errorf("claim: claimed %s on %s but could not announce it: %w", ip, ifname, err)
	}
	return nil
}

// Release removes ip from ifname; releasing an absent address is not an
// error.
func (c *Claimer) Release(ifname string, ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("claim: release %v: %w", ip, errBadAddr)
	}
	ip = ip.Unmap()
	l, err := c.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("claim: release %s: interface %q: %w", ip, ifname, err)
	}
	if err := c.nl.AddrDel(l, hostAddr(ip)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("claim: remove %s from %s: %w", ip, ifname, err)
	}
	return nil
}

// Announce sends the gratuitous ARP (IPv4) or unsolicited neighbour
// advertisement (IPv6) for ip from mac out of ifindex.
func (c *Claimer) Announce(ifindex int, mac net.HardwareAddr, ip netip.Addr) error {
	if err := c.announce(ifindex, mac, ip); err != nil {
		return fmt.Errorf("claim: announce %v: %w", ip, err)
	}
	return nil
}

// announce is Announce with errors that the caller prefixes.
func (c *Claimer) announce(ifindex int, mac net.HardwareAddr, ip netip.Addr) error {
	if len(mac) != 6 {
		return fmt.Errorf("interface has no Ethernet address (%v)", mac)
	}
	var frame []byte
	if ip.Is4() {
		frame = GratuitousARP(mac, ip)
	} else {
		frame = UnsolicitedNA(mac, ip)
	}
	fd, err := c.rawSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Ifindex: ifindex}
	n := c.Announcements
	if n <= 0 {
		n = 1
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(c.Interval)
		}
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			return fmt.Errorf("send announcement: %w", err)
		}
	}
	return nil
}

// rawSocket opens an AF_PACKET socket inside the claimer's namespace.
func (c *Claimer) rawSocket() (int, error) {
	if c.rawOK {
		fd, err := unix.Dup(c.raw)
		if err != nil {
			return -1, fmt.Errorf("packet socket: %w", err)
		}
		return fd, nil
	}
	fd := -1
	err := nsenter.Do(c.ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	return fd, nil
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

// PinSocket opens the AF_PACKET socket announcements are sent from now, in
// the calling thread's network namespace, and keeps it until Close. Claims
// then announce from whatever thread calls them, without entering a
// namespace (setns needs CAP_SYS_ADMIN), which is how the engine uses it.
func (c *Claimer) PinSocket() error {
	if c.rawOK {
		return nil
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("claim: packet socket for announcements: %w", err)
	}
	c.raw, c.rawOK = fd, true
	return nil
}
