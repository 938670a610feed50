package claim

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// AddrProto marks the egress IPs Egret adds: the address's IFA_PROTO
// ("who added it", Linux 6.1+), the same number steer gives its routes.
// A process that was killed cannot release what it claimed; the next one
// recognises its predecessor's addresses by this mark and removes those it
// does not host, so an egress IP never lingers on a node that gave it up.
// `ip -d addr` (iproute2 ≥ 6.2) shows it as "proto 0xe7".
const AddrProto = 231

// ifaProto is IFA_PROTO (include/uapi/linux/if_addr.h); x/sys/unix lacks it.
const ifaProto = 11

// MarkedAddr is an address on an interface that carries Egret's mark.
type MarkedAddr struct {
	Ifindex int
	Addr    netip.Addr
	Bits    int
}

// routeSocket opens a NETLINK_ROUTE socket in ns (the current namespace if
// ns is not open).
func routeSocket(ns netns.NsHandle) (map[int]*nl.SocketHandle, error) {
	var (
		s   *nl.NetlinkSocket
		err error
	)
	if ns.IsOpen() {
		s, err = nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	} else {
		s, err = nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("claim: netlink: %w", err)
	}
	return map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: s}}, nil
}

func addrMsg(req *nl.NetlinkRequest, ifindex int, ip netip.Addr, bits int) {
	fam := unix.AF_INET
	if ip.Is6() {
		fam = unix.AF_INET6
	}
	m := nl.NewIfAddrmsg(fam)
	m.Index = uint32(ifindex)
	m.Prefixlen = uint8(bits)
	req.AddData(m)
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, ip.AsSlice()))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, ip.AsSlice()))
}

// addMarked adds (or replaces) ip as a host address on ifindex with
// Egret's mark; IPv6 without duplicate address detection.
func (c *Claimer) addMarked(ifindex int, ip netip.Addr) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.Sockets = c.sock
	addrMsg(req, ifindex, ip, ip.BitLen())
	if ip.Is6() {
		req.AddData(nl.NewRtAttr(unix.IFA_FLAGS, nl.Uint32Attr(unix.IFA_F_NODAD)))
	}
	req.AddData(nl.NewRtAttr(ifaProto, nl.Uint8Attr(AddrProto)))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// Marked lists the addresses carrying Egret's mark on the given interfaces
// (every interface when ifindexes is empty).
func (c *Claimer) Marked(ifindexes ...int) ([]MarkedAddr, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
	req.Sockets = c.sock
	req.AddData(nl.NewIfAddrmsg(unix.AF_UNSPEC))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
	if err != nil {
		return nil, fmt.Errorf("claim: list addresses: %w", err)
	}
	want := map[int]bool{}
	for _, i := range ifindexes {
		want[i] = true
	}
	var out []MarkedAddr
	for _, m := range msgs {
		if len(m) < unix.SizeofIfAddrmsg {
			continue
		}
		hdr := nl.DeserializeIfAddrmsg(m)
		if len(want) > 0 && !want[int(hdr.Index)] {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[unix.SizeofIfAddrmsg:])
		if err != nil {
			continue
		}
		var local, addr netip.Addr
		marked := false
		for _, a := range attrs {
			switch a.Attr.Type {
			case ifaProto:
				marked = len(a.Value) == 1 && a.Value[0] == AddrProto
			case unix.IFA_LOCAL:
				local, _ = netip.AddrFromSlice(a.Value)
			case unix.IFA_ADDRESS:
				addr, _ = netip.AddrFromSlice(a.Value)
			}
		}
		if local.IsValid() {
			addr = local
		}
		if marked && addr.IsValid() {
			out = append(out, MarkedAddr{Ifindex: int(hdr.Index), Addr: addr.Unmap(), Bits: int(hdr.Prefixlen)})
		}
	}
	return out, nil
}

// ReleaseMarked removes every marked address on the named interfaces that
// keep does not report as hosted (keep nil: all of them), with its fence,
// and returns what it removed; it also lifts every other fence keep does
// not report. A claimer that restarts after a crash calls it before
// claiming, so addresses its killed predecessor left are not kept.
func (c *Claimer) ReleaseMarked(ifnames []string, keep func(netip.Addr) bool) ([]netip.Addr, error) {
	var idx []int
	for _, name := range ifnames {
		l, err := c.nl.LinkByName(name)
		if err != nil {
			return nil, fmt.Errorf("claim: interface %q: %w", name, err)
		}
		idx = append(idx, l.Attrs().Index)
	}
	if len(idx) == 0 {
		return nil, nil
	}
	marked, err := c.Marked(idx...)
	if err != nil {
		return nil, err
	}
	var (
		gone []netip.Addr
		errs []error
	)
	for _, m := range marked {
		if keep != nil && keep(m.Addr) {
			continue
		}
		req := nl.NewNetlinkRequest(unix.RTM_DELADDR, unix.NLM_F_ACK)
		req.Sockets = c.sock
		addrMsg(req, m.Ifindex, m.Addr, m.Bits)
		if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("claim: remove %s/%d from ifindex %d: %w", m.Addr, m.Bits, m.Ifindex, err))
			continue
		}
		c.ann.cancel(m.Addr)
		c.resp.unhost(m.Addr)
		gone = append(gone, m.Addr)
	}
	// Then the fences not kept: those of the addresses just removed, and
	// any whose address went another way (removed by hand, or a claim
	// killed between fencing and adding). Never before the address.
	fenced, err := c.fence.fenced()
	if err != nil {
		return gone, errors.Join(append(errs, fmt.Errorf("claim: %w", err))...)
	}
	for _, a := range fenced {
		if keep != nil && keep(a) || slices.ContainsFunc(marked, func(m MarkedAddr) bool { return m.Addr == a && !slices.Contains(gone, a) }) {
			continue
		}
		c.ann.cancel(a)
		c.resp.unhost(a)
		if err := c.fence.remove(a); err != nil {
			errs = append(errs, fmt.Errorf("claim: %w", err))
		}
	}
	return gone, errors.Join(errs...)
}
