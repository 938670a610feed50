package cni

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostLink is a host interface with the subnets configured on it.
type HostLink struct {
	Name     string
	Index    int
	Prefixes []netip.Prefix // global-scope addresses with their subnet length
}

// HostLinks lists the host's non-loopback interfaces and their global addresses.
func HostLinks(h *netlink.Handle) ([]HostLink, error) {
	links, err := retryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing host interfaces: %w", err)
	}
	var out []HostLink
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", a.Name, err)
		}
		hl := HostLink{Name: a.Name, Index: a.Index}
		for _, ad := range addrs {
			if ad.Scope != unix.RT_SCOPE_UNIVERSE {
				continue
			}
			if p, ok := prefixFromIPNet(ad.IPNet); ok {
				hl.Prefixes = append(hl.Prefixes, p)
			}
		}
		out = append(out, hl)
	}
	return out, nil
}

// InferMaster returns the single host interface whose configured subnet contains one of
// the pod's addresses. Zero or several candidates is an error that lists what was seen.
func InferMaster(links []HostLink, pod []netip.Prefix) (HostLink, error) {
	var cands []HostLink
	for _, l := range links {
		if slices.ContainsFunc(l.Prefixes, func(hp netip.Prefix) bool {
			return slices.ContainsFunc(pod, func(pp netip.Prefix) bool {
				return hp.Masked().Contains(pp.Addr()) && hp.Addr() != pp.Addr()
			})
		}) {
			cands = append(cands, l)
		}
	}
	addrs := make([]string, len(pod))
	for i, p := range pod {
		addrs[i] = p.String()
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		var seen []string
		for _, l := range links {
			for _, p := range l.Prefixes {
				seen = append(seen, l.Name+" "+p.String())
			}
		}
		return HostLink{}, fieldErr("interfaceArgs.master", "is not set and no host interface has a subnet containing %s (host subnets: %s); set it explicitly",
			strings.Join(addrs, ", "), orNone(seen))
	}
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	return HostLink{}, fieldErr("interfaceArgs.master", "is not set and several host interfaces have a subnet containing %s (%s); set it explicitly",
		strings.Join(addrs, ", "), strings.Join(names, ", "))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Gateways decides the next hop per IP family the pod has addresses of: the given
// gateway for its family (known, then the configured one), otherwise the master's
// default route on the host.
func Gateways(h *netlink.Handle, master HostLink, s IPSettings, known ...netip.Addr) (v4, v6 netip.Addr, err error) {
	need4 := slices.ContainsFunc(s.Addresses, func(p netip.Prefix) bool { return p.Addr().Is4() })
	need6 := slices.ContainsFunc(s.Addresses, func(p netip.Prefix) bool { return p.Addr().Is6() })
	for _, gw := range append(known, s.Gateway) {
		switch {
		case gw.Is4() && !v4.IsValid():
			v4 = gw
		case gw.Is6() && !v6.IsValid():
			v6 = gw
		}
	}
	find := func(family int, name string) (netip.Addr, error) {
		routes, err := retryDump(func() ([]netlink.Route, error) {
			return h.RouteListFiltered(family, &netlink.Route{LinkIndex: master.Index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return netip.Addr{}, fmt.Errorf("listing host routes of %s: %w", master.Name, err)
		}
		for _, r := range routes {
			if isDefault(r) && r.Gw != nil {
				if gw, ok := netip.AddrFromSlice(r.Gw); ok {
					return gw.Unmap(), nil
				}
			}
		}
		return netip.Addr{}, fieldErr("ip.gateway", "is not set and the host has no %s default route via %s to take it from; set it", name, master.Name)
	}
	if need4 && !v4.IsValid() {
		if v4, err = find(netlink.FAMILY_V4, "IPv4"); err != nil {
			return
		}
	}
	if need6 && !v6.IsValid() {
		if v6, err = find(netlink.FAMILY_V6, "IPv6"); err != nil {
			return
		}
	}
	return v4, v6, nil
}

func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

func prefixFromIPNet(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 || (a.Is4() && bits != 32) {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// retryDump repeats a netlink dump the kernel interrupted because the table changed.
func retryDump[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range 5 {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}
