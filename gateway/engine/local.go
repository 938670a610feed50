package engine

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
	"unsafe"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// localPortDevMAC is the gateway side's own MAC. Frames from the node come
// addressed to config.LocalPortMAC, another address, so that the kernel
// takes them as meant for another host and drops them silently (no
// forwarding, no ICMP errors to the pod) while the port's AF_PACKET sockets
// still see them.
var localPortDevMAC = net.HardwareAddr{0x02, 0x65, 0x67, 0x72, 0x74, 0x03}

// ensureLocalLink creates (or keeps) the local port's veth pair, up, with
// the fixed MACs, mtu, no IPv6 link-local addresses (no neighbour discovery
// noise on the port), the node side's IPv4 address (config.LocalKernelAddr4)
// and a permanent route and neighbour for each local VTEP through the
// gateway's side, so that the pipeline's replies to it resolve to the port.
func (e *Engine) ensureLocalLink(mtu int) error {
	h := e.nl
	kernelMAC := net.HardwareAddr(config.LocalKernelMAC[:])
	ok := false
	if l, err := h.LinkByName(config.LocalKernelLink); err == nil {
		v, isVeth := l.(*netlink.Veth)
		peer, perr := h.LinkByName(config.LocalPortLink)
		ok = isVeth && perr == nil && peer.Type() == "veth" && v.Attrs().HardwareAddr.String() == kernelMAC.String() &&
			peer.Attrs().HardwareAddr.String() == localPortDevMAC.String()
		if !ok {
			if err := h.LinkDel(l); err != nil {
				return fmt.Errorf("replace %s: %w", config.LocalKernelLink, err)
			}
		}
	}
	if !ok {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: config.LocalKernelLink, HardwareAddr: kernelMAC, MTU: mtu},
			PeerName: config.LocalPortLink, PeerHardwareAddr: localPortDevMAC}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("create %s/%s: %w", config.LocalKernelLink, config.LocalPortLink, err)
		}
	}
	// The node's kernel must hand the port whole packets with final
	// checksums: a pod's packet carries only a partial checksum for the
	// device to finish (CHECKSUM_PARTIAL), and may be a 64 KB TSO/GSO
	// segment. Without transmit checksumming (and so without TSO) on the
	// node's side, the kernel completes the checksum and cuts segments to
	// the MTU before the frame crosses the pair.
	if err := txChecksumOff(config.LocalKernelLink); err != nil {
		return fmt.Errorf("%s: transmit checksum offload off: %w", config.LocalKernelLink, err)
	}
	var port netlink.Link
	for _, name := range []string{config.LocalKernelLink, config.LocalPortLink} {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			// Only while down: IPv6 takes the mode when it brings the link up.
			if err := h.LinkSetIP6AddrGenMode(l, 1); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
				return fmt.Errorf("%s: addrgenmode none: %w", name, err)
			}
		}
		if l.Attrs().MTU != mtu {
			if err := h.LinkSetMTU(l, mtu); err != nil {
				return fmt.Errorf("%s: mtu %d: %w", name, mtu, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("%s: up: %w", name, err)
		}
		port = l
	}
	kernel, err := h.LinkByName(config.LocalKernelLink)
	if err != nil {
		return err
	}
	a := config.LocalKernelAddr4
	if err := h.AddrReplace(kernel, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: int(netlink.SCOPE_LINK)}); err != nil {
		return fmt.Errorf("%s: address %v: %w", config.LocalKernelLink, a, err)
	}
	for _, v := range []netip.Addr{config.LocalVTEP4, config.LocalVTEP6} {
		fam := netlink.FAMILY_V4
		if v.Is6() {
			fam = netlink.FAMILY_V6
		}
		r := &netlink.Route{LinkIndex: port.Attrs().Index, Dst: &net.IPNet{IP: v.AsSlice(), Mask: net.CIDRMask(v.BitLen(), v.BitLen())},
			Scope: netlink.SCOPE_LINK}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("%s: route to %v: %w", config.LocalPortLink, v, err)
		}
		n := &netlink.Neigh{LinkIndex: port.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT, IP: v.AsSlice(), HardwareAddr: kernelMAC}
		if err := h.NeighSet(n); err != nil {
			return fmt.Errorf("%s: neighbour %v: %w", config.LocalPortLink, v, err)
		}
	}
	return nil
}

// removeLocalLink deletes the local port's veth pair (both ends go).
func (e *Engine) removeLocalLink() error {
	l, err := e.nl.LinkByName(config.LocalKernelLink)
	if err != nil {
		return nil // already gone
	}
	return e.nl.LinkDel(l)
}

// openLocal creates the local port and opens it on AF_PACKET (XDP would
// have to pass every frame up anyway), its queues wrapped by localQueue.
func (e *Engine) openLocal(set *config.Settled) (*nic.Interface, error) {
	l, err := e.nl.LinkByName(set.Interfaces[0])
	if err != nil {
		return nil, fmt.Errorf("engine: interface %q: %w", set.Interfaces[0], err)
	}
	if err := e.ensureLocalLink(l.Attrs().MTU); err != nil {
		return nil, fmt.Errorf("engine: local port: %w", err)
	}
	ifc, err := nic.Open(nic.Config{Interface: config.LocalPortLink, Pools: e.pools, Packet: true, Logger: e.log})
	if err != nil {
		return nil, fmt.Errorf("engine: local port: %w", err)
	}
	for q, p := range ifc.Queues {
		ifc.Queues[q] = &localQueue{Queue: p, pipe: e.pipe}
	}
	e.log.Info("engine: local port ready: pods on this node reach the gateway through it", "interface", config.LocalPortLink,
		"node_side", config.LocalKernelLink, "queues", len(ifc.Queues))
	return ifc, nil
}

// localQueue is a queue of the local port: what it receives is wrapped as
// the local node's tunnel frames, what it sends unwrapped
// (gateway.Pipeline.WrapLocal, UnwrapLocal). A frame it cannot convert is
// left empty: the pipeline drops it as malformed, the port as unsendable.
type localQueue struct {
	nic.Queue
	pipe *gateway.Pipeline
}

// FD is the socket's, for the queue loop's poll; -1 (which poll(2) skips)
// for a queue without one, which the AF_PACKET port never opens.
func (q *localQueue) FD() int {
	if f, ok := q.Queue.(fder); ok {
		return f.FD()
	}
	return -1
}

// Receive receives a batch and wraps each frame.
func (q *localQueue) Receive(b *nic.Batch, timeout time.Duration) error {
	err := q.Queue.Receive(b, timeout)
	for i := 0; i < b.N; i++ {
		if off, n, ok := q.pipe.WrapLocal(b.Buf[i], b.Off[i], b.Len[i]); ok {
			b.SetFrame(i, off, n)
		} else {
			b.SetFrame(i, b.Off[i], 0)
		}
	}
	return err
}

// Transmit unwraps each frame and sends the batch.
func (q *localQueue) Transmit(b *nic.Batch) {
	for i := 0; i < b.N; i++ {
		if in, ok := q.pipe.UnwrapLocal(b.Frame(i)); ok {
			b.SetFrame(i, b.Off[i]+in, b.Len[i]-in)
		} else {
			b.SetFrame(i, b.Off[i], 0)
		}
	}
	q.Queue.Transmit(b)
}

// txChecksumOff turns transmit checksum offload off on ifname
// (ETHTOOL_STXCSUM, as `ethtool -K ifname tx off`); the features that need
// it, TSO among them, go with it.
func txChecksumOff(ifname string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := struct{ Cmd, Data uint32 }{Cmd: unix.ETHTOOL_STXCSUM}
	var req ifreqData
	copy(req.Name[:len(req.Name)-1], ifname)
	req.Data = unsafe.Pointer(&v)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	return nil
}
