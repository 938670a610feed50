package cni

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes this plugin adds so DEL finds exactly those
// (unassigned in iproute2's rt_protos).
const RouteProtocol netlink.RouteProtocol = 113

// BackupTable keeps the pod's routes through its previous default interface as ADD
// found them ("eg" in ASCII): the default routes, which ADD removes from the main
// table and DEL puts back, and the others (the pod network's cluster and service
// routes), which stay in the main table and are recorded here so CHECK can tell they
// are still there. No rule points at the table; it is state, not routing.
const BackupTable = 0x6567

// Plan is everything ADD does in the pod, decided before anything is touched.
type Plan struct {
	IfName    string
	Type      string // macvlan or ipvlan
	Mode      string
	MTU       int
	Master    HostLink
	IP        IPSettings
	GW4, GW6  netip.Addr
	Keep      []netip.Prefix // cluster and service networks: stay on the previous default interface
	MasterIPs []netip.Prefix // the master's own addresses, reached via the pod network
}

// undo collects rollback steps of a half-done ADD; they run last-in first-out.
type undo []func()

func (u *undo) push(f func()) { *u = append(*u, f) }

func (u undo) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// CreateLink makes the macvlan/ipvlan child of the master straight inside the pod's
// namespace under a temporary name and renames it there, so a name clash in the host
// can never happen.
func CreateLink(host, pod *netlink.Handle, podFd int, p *Plan, u *undo) (netlink.Link, error) {
	if _, err := pod.LinkByName(p.IfName); err == nil {
		return nil, fmt.Errorf("interface %s already exists in the pod", p.IfName)
	}
	master, err := host.LinkByName(p.Master.Name)
	if err != nil {
		return nil, fieldErr("interfaceArgs.master", "host interface %s not found: %v", p.Master.Name, err)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	tmp := "egr" + hex.EncodeToString(rnd[:])
	attrs := netlink.NewLinkAttrs()
	attrs.Name = tmp
	attrs.ParentIndex = master.Attrs().Index
	attrs.MTU = p.MTU
	attrs.Namespace = netlink.NsFd(podFd)
	var link netlink.Link
	switch p.Type {
	case InterfaceMacvlan:
		link = &netlink.Macvlan{LinkAttrs: attrs, Mode: macvlanMode(p.Mode)}
	case InterfaceIPvlan:
		link = &netlink.IPVlan{LinkAttrs: attrs, Mode: ipvlanMode(p.Mode)}
	default:
		return nil, fmt.Errorf("interface type %s cannot be created", p.Type)
	}
	if err := host.LinkAdd(link); err != nil {
		if p.Type == InterfaceIPvlan && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL)) {
			return nil, fmt.Errorf("%w: creating an ipvlan on %s: %v", ErrNoIPvlan, p.Master.Name, err)
		}
		return nil, fmt.Errorf("creating the %s interface on %s: %w", p.Type, p.Master.Name, err)
	}
	created, err := pod.LinkByName(tmp)
	if err != nil {
		return nil, fmt.Errorf("finding the new interface in the pod: %w", err)
	}
	u.push(func() { _ = pod.LinkDel(created) })
	if err := pod.LinkSetName(created, p.IfName); err != nil {
		return nil, fmt.Errorf("renaming the new interface to %s: %w", p.IfName, err)
	}
	return pod.LinkByName(p.IfName)
}

// ErrNoIPvlan means the kernel cannot create ipvlan devices.
var ErrNoIPvlan = errors.New("the kernel has no ipvlan support")

func macvlanMode(m string) netlink.MacvlanMode {
	switch m {
	case "private":
		return netlink.MACVLAN_MODE_PRIVATE
	case "vepa":
		return netlink.MACVLAN_MODE_VEPA
	case "passthru":
		return netlink.MACVLAN_MODE_PASSTHRU
	}
	return netlink.MACVLAN_MODE_BRIDGE
}

func ipvlanMode(m string) netlink.IPVlanMode {
	switch m {
	case "l3":
		return netlink.IPVLAN_MODE_L3
	case "l3s":
		return netlink.IPVLAN_MODE_L3S
	}
	return netlink.IPVLAN_MODE_L2
}

// ConfigureAddrs puts the addresses on the interface and brings it up. IPv6 addresses
// skip DAD: the operator assigned them, and the route must work at once.
func ConfigureAddrs(pod *netlink.Handle, link netlink.Link, s IPSettings) error {
	for _, a := range s.Addresses {
		addr := &netlink.Addr{IPNet: ipNet(a)}
		if a.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := pod.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("adding %s to %s: %w", a, link.Attrs().Name, err)
		}
	}
	if err := pod.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", link.Attrs().Name, err)
	}
	return nil
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func defaultDst(family int) *net.IPNet {
	if family == netlink.FAMILY_V4 {
		return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

// ConfigureRoutes moves the pod's default route to the egress interface. Cluster and
// service networks and the master's own addresses stay on the previous default path.
func ConfigureRoutes(pod *netlink.Handle, link netlink.Link, p *Plan, u *undo) error {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		gw := p.GW4
		name := "IPv4"
		if fam == netlink.FAMILY_V6 {
			gw, name = p.GW6, "IPv6"
		}
		if !gw.IsValid() {
			continue
		}
		routes, err := retryDump(func() ([]netlink.Route, error) { return pod.RouteList(nil, fam) })
		if err != nil {
			return fmt.Errorf("listing the pod's %s routes: %w", name, err)
		}
		var olds []netlink.Route
		for _, r := range routes {
			if isDefault(r) && r.LinkIndex != link.Attrs().Index && r.Table == unix.RT_TABLE_MAIN {
				olds = append(olds, r)
			}
		}
		var via *netlink.Route
		for i := range olds {
			if via == nil || (olds[i].Gw != nil && via.Gw == nil) {
				via = &olds[i]
			}
		}
		keep := slices.DeleteFunc(slices.Clone(p.Keep), func(q netip.Prefix) bool { return familyOf(q.Addr()) != fam })
		if len(keep) > 0 && via == nil {
			return fieldErr("clusterNetworks/serviceNetworks", "%v must stay on the pod network, but the pod has no %s default route to take them from", keep, name)
		}
		if via != nil {
			// The routes the pod network installed through the previous default
			// interface are the cluster and service networks it knows of; they stay
			// where they are, recorded for CHECK.
			for _, r := range routes {
				if isDefault(r) || r.LinkIndex != via.LinkIndex || r.Table != unix.RT_TABLE_MAIN || r.Protocol == RouteProtocol || isLinkLocal(r.Dst) {
					continue
				}
				b := r
				b.Table, b.Family = BackupTable, fam
				if err := pod.RouteAdd(&b); err != nil && !errors.Is(err, unix.EEXIST) {
					return fmt.Errorf("recording the pod network's route to %s: %w", r.Dst, err)
				}
				u.push(func() { _ = pod.RouteDel(&b) })
			}
			for _, m := range p.MasterIPs {
				if familyOf(m.Addr()) == fam {
					keep = append(keep, m)
				}
			}
			for _, dst := range keep {
				r := &netlink.Route{Dst: ipNet(dst), Gw: via.Gw, LinkIndex: via.LinkIndex, Protocol: RouteProtocol, Family: fam}
				if err := pod.RouteAdd(r); err != nil {
					if errors.Is(err, unix.EEXIST) {
						continue // the pod network already routes it
					}
					return fmt.Errorf("adding the route to %s via the pod network: %w", dst, err)
				}
				u.push(func() { _ = pod.RouteDel(r) })
			}
		}
		for _, old := range olds {
			b := old
			b.Table = BackupTable
			b.Family = fam
			if err := pod.RouteAdd(&b); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("saving the previous %s default route: %w", name, err)
			}
			u.push(func() { _ = pod.RouteDel(&b) })
			o := old
			o.Family = fam
			if err := pod.RouteDel(&o); err != nil {
				return fmt.Errorf("removing the previous %s default route: %w", name, err)
			}
			u.push(func() { _ = pod.RouteAdd(&o) })
		}
		r := &netlink.Route{Dst: defaultDst(fam), Gw: gw.AsSlice(), LinkIndex: link.Attrs().Index, Protocol: RouteProtocol, Family: fam}
		if !gw.IsLinkLocalUnicast() && !slices.ContainsFunc(p.IP.Addresses, func(a netip.Prefix) bool { return a.Masked().Contains(gw) }) {
			r.Flags = int(netlink.FLAG_ONLINK)
		}
		if err := pod.RouteAdd(r); err != nil {
			return fmt.Errorf("adding the %s default route via %s on %s: %w", name, gw, p.IfName, err)
		}
		u.push(func() { _ = pod.RouteDel(r) })
	}
	return nil
}

func isLinkLocal(n *net.IPNet) bool {
	p, ok := prefixFromIPNet(n)
	return ok && p.Addr().IsLinkLocalUnicast()
}

// SavedRoutes lists the routes of BackupTable: the pod's previous default routes and
// the pod network's routes recorded next to them.
func SavedRoutes(pod *netlink.Handle) ([]netlink.Route, error) {
	rs, err := retryDump(func() ([]netlink.Route, error) {
		return pod.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: BackupTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing saved routes: %w", err)
	}
	return rs, nil
}

// ClusterSide names the pod's previous default interface, where redirected traffic
// arrives, from the default routes ADD saved.
func ClusterSide(pod *netlink.Handle) (string, error) {
	saved, err := SavedRoutes(pod)
	if err != nil {
		return "", err
	}
	for _, r := range saved {
		if isDefault(r) {
			l, err := pod.LinkByIndex(r.LinkIndex)
			if err != nil {
				return "", fmt.Errorf("finding the pod's previous default interface: %w", err)
			}
			return l.Attrs().Name, nil
		}
	}
	return "", fieldErr("destinations", "redirect rules need the pod's previous default interface to receive on, but the pod had no default route")
}

// EnableForwarding turns on forwarding in the pod's namespace for the families given,
// as redirects need, and returns what undoes it. It must run in the pod's namespace.
func EnableForwarding(v4, v6 bool) (undo func(), err error) {
	var restore []func()
	undo = func() {
		for _, f := range restore {
			f()
		}
	}
	for _, f := range []struct {
		on   bool
		path string
	}{{v4, "/proc/sys/net/ipv4/conf/all/forwarding"}, {v6, "/proc/sys/net/ipv6/conf/all/forwarding"}} {
		if !f.on {
			continue
		}
		old, err := os.ReadFile(f.path)
		if err != nil {
			undo()
			return nil, fmt.Errorf("reading %s in the pod: %w", f.path, err)
		}
		if err := os.WriteFile(f.path, []byte("1"), 0o644); err != nil {
			undo()
			return nil, fmt.Errorf("enabling forwarding (%s) in the pod: %w", f.path, err)
		}
		path := f.path
		restore = append(restore, func() { _ = os.WriteFile(path, old, 0o644) })
	}
	return undo, nil
}

// Teardown undoes ADD in the pod; every step tolerates its object being gone already.
func Teardown(pod *netlink.Handle, ifName string) error {
	var errs []error
	if l, err := pod.LinkByName(ifName); err == nil {
		if t := l.Type(); t == "macvlan" || t == "ipvlan" {
			if err := pod.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("deleting %s: %w", ifName, err))
			}
		}
	}
	backups, err := SavedRoutes(pod)
	if err != nil {
		errs = append(errs, err)
	}
	for _, b := range backups {
		r := b
		r.Table = unix.RT_TABLE_MAIN
		if err := pod.RouteAdd(&r); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENETUNREACH) {
			errs = append(errs, fmt.Errorf("restoring the previous default route: %w", err))
			continue
		}
		if err := pod.RouteDel(&b); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("dropping the saved default route: %w", err))
		}
	}
	ours, err := retryDump(func() ([]netlink.Route, error) {
		return pod.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the plugin's routes: %w", err))
	}
	for _, r := range ours {
		if err := pod.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", r.Dst, err))
		}
	}
	return errors.Join(errs...)
}
