package cni

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/packetsock"
)

// ARPAnnouncement builds a gratuitous ARP request (RFC 5227 announcement): sender and
// target protocol address are both ip, so neighbours update their caches.
func ARPAnnouncement(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)      // hardware type: Ethernet
	binary.BigEndian.PutUint16(b[2:], 0x0800) // protocol type: IPv4
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], 1) // request
	copy(b[8:14], mac)
	a := ip.As4()
	copy(b[14:18], a[:])
	copy(b[24:28], a[:]) // target hardware address stays zero
	return b
}

// UnsolicitedNA builds an ICMPv6 neighbour advertisement for ip with the override flag
// and the target link-layer address option (RFC 4861 7.2.6); the kernel fills the checksum.
func UnsolicitedNA(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 32)
	b[0] = 136                                    // neighbour advertisement
	binary.BigEndian.PutUint32(b[4:], 0x20000000) // override
	a := ip.As16()
	copy(b[8:24], a[:])
	b[24], b[25] = 2, 1 // option: target link-layer address, 8 bytes
	copy(b[26:32], mac)
	return b
}

// Announce sends one gratuitous ARP or unsolicited NA per address. It must run in the
// pod's network namespace.
func Announce(ifIndex int, mac net.HardwareAddr, addrs []netip.Prefix) error {
	for _, p := range addrs {
		var err error
		if p.Addr().Is4() {
			err = sendARP(ifIndex, mac, p.Addr())
		} else {
			err = sendNA(ifIndex, mac, p.Addr())
		}
		if err != nil {
			return fmt.Errorf("announcing %s: %w", p.Addr(), err)
		}
	}
	return nil
}

func sendARP(ifIndex int, mac net.HardwareAddr, ip netip.Addr) error {
	if len(mac) != 6 {
		return fmt.Errorf("interface has no Ethernet address (%v)", mac)
	}
	fd, err := packetsock.Open(unix.SOCK_DGRAM, unix.ETH_P_ARP)
	if err != nil {
		return fmt.Errorf("opening a packet socket: %w", err)
	}
	defer unix.Close(fd)
	to := packetsock.Addr(unix.ETH_P_ARP, ifIndex)
	to.Halen = 6
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	return unix.Sendto(fd, ARPAnnouncement(mac, ip), 0, to)
}

func sendNA(ifIndex int, mac net.HardwareAddr, ip netip.Addr) error {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("opening an ICMPv6 socket: %w", err)
	}
	defer unix.Close(fd)
	// Neighbour discovery messages are only accepted with hop limit 255.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifIndex); err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: ip.As16()}); err != nil {
		return fmt.Errorf("binding to %s: %w", ip, err)
	}
	allNodes := netip.MustParseAddr("ff02::1").As16()
	return unix.Sendto(fd, UnsolicitedNA(mac, ip), 0, &unix.SockaddrInet6{Addr: allNodes, ZoneId: uint32(ifIndex)})
}

// ARPProbe builds an RFC 5227 ARP probe for ip: a request with a zero sender protocol
// address, so it asks "who has ip" without claiming it.
func ARPProbe(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := ARPAnnouncement(mac, ip)
	clear(b[14:18])
	return b
}

// Timing of the duplicate-address probe: RFC 5227 waits seconds, which a pod start
// cannot afford; a neighbour on the same link answers within milliseconds.
const (
	probeCount    = 3
	probeInterval = 100 * time.Millisecond
	probeWait     = 200 * time.Millisecond // after the last probe
)

// probed returns the addresses of one family (IPv4 when v4) that a probe
// must check, and an error when the interface has no Ethernet address to
// probe from.
func probed(addrs []netip.Prefix, v4 bool, mac net.HardwareAddr) ([]netip.Addr, error) {
	var ips []netip.Addr
	for _, p := range addrs {
		if p.Addr().Is4() == v4 {
			ips = append(ips, p.Addr())
		}
	}
	if len(ips) > 0 && len(mac) != 6 {
		return nil, fmt.Errorf("interface has no Ethernet address (%v)", mac)
	}
	return ips, nil
}

// ErrAddressInUse means another host answered the duplicate-address probe.
var ErrAddressInUse = errors.New("address already in use on the link")

// ProbeIPv4 sends RFC 5227 ARP probes for the IPv4 addresses and fails with
// ErrAddressInUse when another station answers for one of them or probes for it too.
// It must run in the pod's network namespace, with the interface up.
func ProbeIPv4(ifIndex int, mac net.HardwareAddr, addrs []netip.Prefix) error {
	ips, err := probed(addrs, true, mac)
	if len(ips) == 0 || err != nil {
		return err
	}
	fd, err := packetsock.Open(unix.SOCK_DGRAM, unix.ETH_P_ARP)
	if err != nil {
		return fmt.Errorf("opening a packet socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, packetsock.Addr(unix.ETH_P_ARP, ifIndex)); err != nil {
		return fmt.Errorf("binding the packet socket: %w", err)
	}
	to := packetsock.Addr(unix.ETH_P_ARP, ifIndex)
	to.Halen = 6
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	tv := unix.NsecToTimeval(int64(10 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	buf := make([]byte, 128)
	for i := range probeCount {
		for _, ip := range ips {
			if err := unix.Sendto(fd, ARPProbe(mac, ip), 0, to); err != nil {
				return fmt.Errorf("probing %s: %w", ip, err)
			}
		}
		wait := probeInterval
		if i == probeCount-1 {
			wait = probeWait
		}
		for end := time.Now().Add(wait); time.Now().Before(end); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || n < 28 {
				continue
			}
			if ip, who, ok := arpConflict(buf[:n], mac, ips); ok {
				return fmt.Errorf("%w: %s answers for %s", ErrAddressInUse, who, ip)
			}
		}
	}
	return nil
}

// arpConflict reports an ARP packet from another station that claims one of ips
// (as sender) or probes for it (sender 0.0.0.0, target ip), as RFC 5227 2.1.1 says.
func arpConflict(b []byte, mac net.HardwareAddr, ips []netip.Addr) (netip.Addr, net.HardwareAddr, bool) {
	if binary.BigEndian.Uint16(b[2:]) != 0x0800 || b[4] != 6 || b[5] != 4 {
		return netip.Addr{}, nil, false
	}
	sha := net.HardwareAddr(b[8:14])
	if bytes.Equal(sha, mac) {
		return netip.Addr{}, nil, false // our own probe, looped back
	}
	spa := netip.AddrFrom4([4]byte(b[14:18]))
	tpa := netip.AddrFrom4([4]byte(b[24:28]))
	op := binary.BigEndian.Uint16(b[6:])
	for _, ip := range ips {
		if spa == ip || (op == 1 && spa == netip.IPv4Unspecified() && tpa == ip) {
			return ip, slices.Clone(sha), true
		}
	}
	return netip.Addr{}, nil, false
}

// DADSolicitation builds the Ethernet frame of a duplicate address detection
// neighbour solicitation for ip (RFC 4862 5.4.2): from the unspecified address, to
// the solicited-node group, hop limit 255. It is built whole because the kernel would
// send from the pod's own (possibly duplicate) address, and a duplicate holder answers
// that to itself.
func DADSolicitation(mac net.HardwareAddr, ip netip.Addr) []byte {
	group := solicitedNode(ip).As16()
	target := ip.As16()
	f := make([]byte, 14+40+24)
	copy(f[0:], []byte{0x33, 0x33})
	copy(f[2:6], group[12:])
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], 0x86dd)
	h := f[14:54]
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], 24) // payload length
	h[6], h[7] = 58, 255                  // ICMPv6, hop limit
	copy(h[24:40], group[:])              // the source stays ::
	m := f[54:]
	m[0] = 135
	copy(m[8:24], target[:])
	// Checksum over the pseudo-header (zero source, group, length, next header) and m.
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	add(group[:])
	sum += 24 + 58
	add(m)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(m[2:], ^uint16(sum))
	return f
}

// solicitedNode is the multicast group a host with address ip listens on (RFC 4291 2.7.1).
func solicitedNode(ip netip.Addr) netip.Addr {
	a := ip.As16()
	g := netip.MustParseAddr("ff02::1:ff00:0").As16()
	copy(g[13:], a[13:])
	return netip.AddrFrom16(g)
}

// ProbeIPv6 runs duplicate address detection (RFC 4862 5.4) for each IPv6 address,
// in milliseconds rather than seconds, and fails with ErrAddressInUse when another
// station advertises one of them. It must run in the pod's network namespace.
func ProbeIPv6(ifIndex int, mac net.HardwareAddr, addrs []netip.Prefix) error {
	ips, err := probed(addrs, false, mac)
	if len(ips) == 0 || err != nil {
		return err
	}
	out, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // send only
	if err != nil {
		return fmt.Errorf("opening a packet socket: %w", err)
	}
	defer unix.Close(out)
	// Advertisements answering a DAD probe go to all nodes, which the pod receives.
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("opening an ICMPv6 socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(10 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	buf := make([]byte, 256)
	for i := range probeCount {
		for _, ip := range ips {
			to := packetsock.Addr(unix.ETH_P_IPV6, ifIndex)
			if err := unix.Sendto(out, DADSolicitation(mac, ip), 0, to); err != nil {
				return fmt.Errorf("probing %s: %w", ip, err)
			}
		}
		wait := probeInterval
		if i == probeCount-1 {
			wait = probeWait
		}
		for end := time.Now().Add(wait); time.Now().Before(end); {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || n < 24 || buf[0] != 136 {
				continue
			}
			src, ok := from.(*unix.SockaddrInet6)
			if !ok {
				continue
			}
			target := netip.AddrFrom16([16]byte(buf[8:24]))
			// The raw socket hears every interface of the pod; only the egress link counts.
			if slices.Contains(ips, target) && (src.ZoneId == 0 || int(src.ZoneId) == ifIndex) {
				return fmt.Errorf("%w: %s advertises %s", ErrAddressInUse, netip.AddrFrom16(src.Addr), target)
			}
		}
	}
	return nil
}
