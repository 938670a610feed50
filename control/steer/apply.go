package steer

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	gwconfig "github.com/egret-gw/egret/gateway/config"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// actual reads the agent's state back from the kernel: rules at its
// priority pointing into its tables, routes of its protocol in its tables,
// permanent neighbour and FDB entries on its device, and the filter's sets.
// Next hops carry only Addr (the kernel does not know MAC and VTEP per route).
// It also returns the routes as the kernel holds them (next hops in order,
// with weights), which Apply needs to keep each gateway's slot.
func (k *Kernel) actual() (State, []kernelRoute, classRead, error) {
	st, routes, sets, err := k.read()
	return st, routes, sets.classes, err
}

func (k *Kernel) read() (State, []kernelRoute, nftRead, error) {
	var st State
	var sets nftRead
	rules, err := k.rules()
	if err != nil {
		return st, nil, sets, err
	}
	for _, r := range rules {
		st.Rules = append(st.Rules, r.want)
	}
	routes, err := k.routes()
	if err != nil {
		return st, nil, sets, err
	}
	for _, r := range routes {
		st.Routes = append(st.Routes, r.want)
	}
	if idx, err := k.devIndex(); err == nil {
		if st.Neighs, err = k.neighs(idx); err != nil {
			return st, nil, sets, err
		}
		if st.FDB, err = k.fdb(idx); err != nil {
			return st, nil, sets, err
		}
	}
	sets, err = k.nft.read()
	if err != nil {
		return st, nil, sets, err
	}
	st.Selected, st.Allowed, st.PodCIDRs, st.TunnelPeers = sets.selected, sets.allowed, sets.pods, sets.peers
	st.Classified, st.Classes = sets.classes.pods, sets.classes.classes
	// Marks as the IPv4 rules have them; Apply compares each family.
	marks, _, err := k.markRules()
	if err != nil {
		return st, nil, sets, err
	}
	st.Marks = marks[0]
	st.sort()
	return st, routes, sets, nil
}

// markRules lists the agent's fwmark rules per family (0 IPv4, 1 IPv6),
// and apart those under another mask (the markMask setting changed), which
// Apply removes.
func (k *Kernel) markRules() ([2][]MarkRule, []netlink.Rule, error) {
	var out [2][]MarkRule
	var stale []netlink.Rule
	mask := k.nft.marks().mask
	for f, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := k.h.RuleList(fam)
		if err != nil {
			return out, nil, fmt.Errorf("list ip rules: %w", err)
		}
		for _, r := range list {
			if r.Priority != k.cfg.RulePriority || !k.ownTable(r.Table) || r.Src != nil || r.Mark == 0 || r.Mask == nil {
				continue
			}
			if *r.Mask != mask {
				stale = append(stale, r)
				continue
			}
			out[f] = append(out[f], MarkRule{Mark: r.Mark, Table: uint32(r.Table)})
		}
		slices.SortFunc(out[f], markRuleCmp)
	}
	return out, stale, nil
}

func markRuleCmp(a, b MarkRule) int {
	return cmp.Or(cmp.Compare(a.Mark, b.Mark), cmp.Compare(a.Table, b.Table))
}

func (k *Kernel) nlMarkRule(r MarkRule, f int) *netlink.Rule {
	nl := netlink.NewRule()
	nl.Priority = k.cfg.RulePriority
	nl.Family = [2]int{netlink.FAMILY_V4, netlink.FAMILY_V6}[f]
	nl.Table = int(r.Table)
	nl.Mark = r.Mark
	mask := k.nft.marks().mask
	nl.Mask = &mask
	nl.Protocol = RouteProtocol
	return nl
}

type kernelRule struct {
	want Rule
	nl   netlink.Rule
}

func (k *Kernel) rules() ([]kernelRule, error) {
	var out []kernelRule
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := k.h.RuleList(fam)
		if err != nil {
			return nil, fmt.Errorf("list ip rules: %w", err)
		}
		for _, r := range list {
			if r.Priority != k.cfg.RulePriority || !k.ownTable(r.Table) || r.Src == nil {
				continue
			}
			a, ok := netip.AddrFromSlice(r.Src.IP)
			ones, bits := r.Src.Mask.Size()
			if !ok || ones != bits {
				continue
			}
			out = append(out, kernelRule{want: Rule{Src: a.Unmap(), Table: uint32(r.Table)}, nl: r})
		}
	}
	return out, nil
}

func (k *Kernel) ownTable(t int) bool {
	return t >= 0 && uint64(t) >= uint64(k.cfg.TableBase) && uint64(t) < uint64(k.cfg.TableBase)+uint64(k.cfg.TableCount)
}

type kernelRoute struct {
	want Route
	nl   netlink.Route
}

func (k *Kernel) routes() ([]kernelRoute, error) {
	var out []kernelRoute
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := k.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range list {
			if !k.ownTable(r.Table) {
				continue
			}
			w := Route{Table: uint32(r.Table)}
			if r.Dst != nil {
				a, _ := netip.AddrFromSlice(r.Dst.IP)
				ones, _ := r.Dst.Mask.Size()
				w.Dst = netip.PrefixFrom(a.Unmap(), ones)
			} else if fam == netlink.FAMILY_V4 {
				w.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			} else {
				w.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			switch r.Type {
			case unix.RTN_BLACKHOLE:
				w.Type = RouteBlackhole
			case unix.RTN_THROW:
				w.Type = RouteThrow
			case unix.RTN_UNICAST:
				w.Type = RouteUnicast
				if len(r.MultiPath) > 0 {
					for _, nh := range r.MultiPath {
						w.NextHops = append(w.NextHops, NextHop{Addr: hopAddr(nh.Gw, nh.Via)})
					}
				} else {
					w.NextHops = append(w.NextHops, NextHop{Addr: hopAddr(r.Gw, r.Via)})
				}
			default:
				w.Type = RouteType(255)
			}
			out = append(out, kernelRoute{want: w, nl: r})
		}
	}
	return out, nil
}

func hopAddr(gw net.IP, via netlink.Destination) netip.Addr {
	if gw != nil {
		a, _ := netip.AddrFromSlice(gw)
		return a.Unmap()
	}
	if v, ok := via.(*netlink.Via); ok && v != nil {
		a, _ := netip.AddrFromSlice(v.Addr)
		return a.Unmap()
	}
	return netip.Addr{}
}

func (k *Kernel) neighs(idx int) ([]Neigh, error) {
	var out []Neigh
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := k.h.NeighList(idx, fam)
		if err != nil {
			return nil, fmt.Errorf("list neighbours of %s: %w", k.cfg.Device, err)
		}
		for _, n := range list {
			a, ok := netip.AddrFromSlice(n.IP)
			if !ok || n.State&netlink.NUD_PERMANENT == 0 || len(n.HardwareAddr) != 6 {
				continue
			}
			out = append(out, Neigh{Addr: a.Unmap(), MAC: [6]byte(n.HardwareAddr)})
		}
	}
	return out, nil
}

func (k *Kernel) fdb(idx int) ([]FDB, error) {
	list, err := k.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("list FDB of %s: %w", k.cfg.Device, err)
	}
	var out []FDB
	for _, n := range list {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || len(n.HardwareAddr) != 6 {
			continue
		}
		out = append(out, FDB{MAC: [6]byte(n.HardwareAddr), VTEP: a.Unmap()})
	}
	return out, nil
}

// Apply makes the kernel match want and changes only what differs. The
// order keeps selected pods from leaking at every step: filter elements
// before anything that steers, FDB and neighbours before the routes that
// use them, routes before the rules that lead into them; removal in reverse,
// the filter elements last.
//
// In the filter, one transaction first adds the newly selected addresses,
// takes the addresses that lose their classification out of the allowed
// set, replaces the pod networks and allows the newly unselected addresses
// that were never steered; a last transaction, after the steering is gone,
// takes the addresses that were selected out of the selected set and
// allows those now unselected. A pod that becomes selected is never
// allowed after its steering starts, and one that stops being selected is
// allowed only once its steering is removed.
func (k *Kernel) Apply(want State) (Changes, error) {
	var ch Changes
	have, haveKernel, haveClasses, err := k.actual()
	if err != nil {
		return ch, err
	}
	idx := 0
	needDev := len(want.Neighs)+len(want.FDB) > 0 || slices.ContainsFunc(want.Routes, func(r Route) bool { return r.Type == RouteUnicast })
	if needDev {
		if idx, err = k.devIndex(); err != nil {
			return ch, err
		}
	}
	// The gateway's local port, on a gateway node: set up whether or not
	// this node's gateway hosts an IP now, since other gateways' replies to
	// the node's pods come back through it too.
	localIdx := k.localIndex()
	if localIdx == 0 && slices.ContainsFunc(want.Routes, func(r Route) bool { return slices.ContainsFunc(r.NextHops, func(h NextHop) bool { return h.Local }) }) {
		return ch, fmt.Errorf("the gateway's local port %s is gone", gwconfig.LocalKernelLink)
	}
	var errs []error
	fail := func(err error) { errs = append(errs, err) }

	// 1. Filter: new selected addresses, allowed ones, pod networks.
	pods := want.PodCIDRs
	if want.KeepPodCIDRs {
		pods = have.PodCIDRs
	}
	var allowed []netip.Addr
	for _, a := range want.Allowed {
		if slices.ContainsFunc(pods, func(p netip.Prefix) bool { return p.Contains(a) }) {
			allowed = append(allowed, a)
		}
	}
	steered := func(a netip.Addr) bool {
		_, sel := slices.BinarySearchFunc(have.Selected, a, netip.Addr.Compare)
		return sel || slices.ContainsFunc(have.Rules, func(r Rule) bool { return r.Src == a })
	}
	first := nftChange{
		addSel:   missing(want.Selected, have.Selected, netip.Addr.Compare),
		delAllow: missing(have.Allowed, allowed, netip.Addr.Compare),
		setPods:  !want.KeepPodCIDRs && !slices.Equal(normalizePrefixes(want.PodCIDRs), have.PodCIDRs),
		pods:     want.PodCIDRs,
		// A new gateway is accepted before its FDB entry sends to it.
		addPeers: missing(want.TunnelPeers, have.TunnelPeers, netip.Addr.Compare),
	}
	var lateAllow []netip.Addr
	for _, a := range missing(allowed, have.Allowed, netip.Addr.Compare) {
		if steered(a) {
			lateAllow = append(lateAllow, a)
		} else {
			first.addAllow = append(first.addAllow, a)
		}
	}
	if err := k.nft.apply(first); err != nil {
		// Without the filter nothing may be steered: stop here.
		return ch, err
	}
	ch.Added += len(first.addSel) + len(first.addAllow) + len(first.addPeers)
	ch.Removed += len(first.delAllow)
	if first.setPods {
		ch.Updated++
	}
	// Newly selected addresses lose their connection-tracking entries
	// while the filter drops them and before any rule steers them: an
	// entry made while the pod left by the node carries the node's
	// masquerade, which would follow the flow into the tunnel.
	k.forgetFlows(first.addSel)
	k.step("filter")

	if len(want.Classified) > 0 {
		if err := k.markTunnel(); err != nil {
			return ch, err
		}
	}

	// 1b. Classification by destination, in one transaction: a pod's
	// address is in sel before it is classified, so until the rules and
	// routes below exist its marked traffic is held in, not leaked.
	a, u, r, err := k.nft.applyClasses(want, haveClasses)
	if err != nil {
		return ch, err
	}
	ch.Added, ch.Updated, ch.Removed = ch.Added+a, ch.Updated+u, ch.Removed+r

	// 2. FDB and neighbours.
	haveFDB := map[[6]byte]FDB{}
	for _, f := range have.FDB {
		haveFDB[f.MAC] = f
	}
	for _, f := range want.FDB {
		if h, ok := haveFDB[f.MAC]; ok && h == f {
			continue
		}
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: f.VTEP.AsSlice(), HardwareAddr: f.MAC[:]}
		if err := k.h.NeighAppend(n); err != nil && !errors.Is(err, unix.EEXIST) {
			fail(fmt.Errorf("add FDB entry %s → %v on %s: %w", net.HardwareAddr(f.MAC[:]), f.VTEP, k.cfg.Device, err))
			continue
		}
		ch.Added++
	}
	haveNeigh := map[netip.Addr][6]byte{}
	for _, n := range have.Neighs {
		haveNeigh[n.Addr] = n.MAC
	}
	for _, n := range want.Neighs {
		if m, ok := haveNeigh[n.Addr]; ok && m == n.MAC {
			continue
		}
		nl := &netlink.Neigh{LinkIndex: idx, Family: family(n.Addr), State: netlink.NUD_PERMANENT,
			IP: n.Addr.AsSlice(), HardwareAddr: n.MAC[:]}
		if err := k.h.NeighSet(nl); err != nil {
			fail(fmt.Errorf("set neighbour %v → %s on %s: %w", n.Addr, net.HardwareAddr(n.MAC[:]), k.cfg.Device, err))
			continue
		}
		ch.Added++
	}

	// The local port's neighbours: the gateway answers no ARP or ND there.
	// Loose reverse-path filtering on it: other gateways' replies to the
	// node's pods come back through it, tunnelled from their VTEPs, which
	// the node routes by its uplink.
	if localIdx > 0 {
		if err := k.localSysctls(); err != nil {
			fail(err)
		}
		for _, a := range []netip.Addr{gwconfig.LocalNextHop4, gwconfig.LocalNextHop6} {
			nl := &netlink.Neigh{LinkIndex: localIdx, Family: family(a), State: netlink.NUD_PERMANENT,
				IP: a.AsSlice(), HardwareAddr: gwconfig.LocalPortMAC[:]}
			if err := k.h.NeighSet(nl); err != nil {
				fail(fmt.Errorf("set neighbour %v on %s: %w", a, gwconfig.LocalKernelLink, err))
			}
		}
	}

	// 3. Routes.
	haveRoute := map[routeKey]Route{}
	for _, r := range have.Routes {
		haveRoute[routeKey{r.Table, r.Dst}] = r
	}
	kernelUnits := map[routeKey][]netip.Addr{}
	for _, r := range haveKernel {
		if r.want.Type == RouteUnicast {
			kernelUnits[routeKey{r.want.Table, r.want.Dst}] = unitsOf(r.nl)
		}
	}
	for _, r := range want.Routes {
		key := routeKey{r.Table, r.Dst}
		h, ok := haveRoute[key]
		if ok && kernelRouteEqual(h, r) {
			continue
		}
		var units []netip.Addr
		if r.Type == RouteUnicast {
			units = placeHops(k.prevUnits(key, kernelUnits[key]), hopAddrs(r.NextHops))
		}
		if err := k.h.RouteReplace(k.nlRoute(r, idx, localIdx, runs(units))); err != nil {
			fail(fmt.Errorf("program route %v %v in table %d: %w", r.Type, r.Dst, r.Table, err))
			continue
		}
		if units != nil {
			k.slots[key] = units
		} else {
			delete(k.slots, key)
		}
		if ok {
			ch.Updated++
		} else {
			ch.Added++
		}
	}

	// 4. Rules.
	ruleCmp := func(a, b Rule) int { return cmp.Or(a.Src.Compare(b.Src), cmp.Compare(a.Table, b.Table)) }
	for _, r := range missing(want.Rules, have.Rules, ruleCmp) {
		if err := k.h.RuleAdd(k.nlRule(r)); err != nil && !errors.Is(err, unix.EEXIST) {
			fail(fmt.Errorf("add rule from %v lookup %d: %w", r.Src, r.Table, err))
			continue
		}
		ch.Added++
	}
	haveMarkRules, staleMarkRules, err := k.markRules()
	if err != nil {
		fail(err)
	}
	for f := range 2 {
		for _, r := range missing(want.Marks, haveMarkRules[f], markRuleCmp) {
			if err := k.h.RuleAdd(k.nlMarkRule(r, f)); err != nil && !errors.Is(err, unix.EEXIST) {
				fail(fmt.Errorf("add rule fwmark %#x lookup %d: %w", r.Mark, r.Table, err))
				continue
			}
			ch.Added++
		}
	}
	if len(errs) > 0 {
		// Keep the old state where the new one failed: remove nothing.
		return ch, errors.Join(errs...)
	}
	k.step("steering")

	// 5. Removal, reverse order.
	for _, r := range missing(have.Rules, want.Rules, ruleCmp) {
		if err := k.h.RuleDel(k.nlRule(r)); err != nil && !errors.Is(err, unix.ENOENT) {
			fail(fmt.Errorf("remove rule from %v lookup %d: %w", r.Src, r.Table, err))
			continue
		}
		ch.Removed++
	}
	for _, r := range staleMarkRules {
		if err := k.h.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			fail(fmt.Errorf("remove rule fwmark %#x/%#x lookup %d: %w", r.Mark, *r.Mask, r.Table, err))
			continue
		}
		ch.Removed++
	}
	for f := range 2 {
		for _, r := range missing(haveMarkRules[f], want.Marks, markRuleCmp) {
			if err := k.h.RuleDel(k.nlMarkRule(r, f)); err != nil && !errors.Is(err, unix.ENOENT) {
				fail(fmt.Errorf("remove rule fwmark %#x lookup %d: %w", r.Mark, r.Table, err))
				continue
			}
			ch.Removed++
		}
	}
	k.step("rules removed")
	wantRoute := map[routeKey]bool{}
	for _, r := range want.Routes {
		wantRoute[routeKey{r.Table, r.Dst}] = true
	}
	for _, r := range have.Routes {
		if wantRoute[routeKey{r.Table, r.Dst}] {
			continue
		}
		nl := &netlink.Route{Table: int(r.Table), Dst: ipNet(r.Dst), Family: family(r.Dst.Addr()), Protocol: RouteProtocol}
		switch r.Type {
		case RouteBlackhole:
			nl.Type = unix.RTN_BLACKHOLE
		case RouteThrow:
			nl.Type = unix.RTN_THROW
		}
		if err := k.h.RouteDel(nl); err != nil && !errors.Is(err, unix.ESRCH) {
			fail(fmt.Errorf("remove route %v from table %d: %w", r.Dst, r.Table, err))
			continue
		}
		delete(k.slots, routeKey{r.Table, r.Dst})
		ch.Removed++
	}
	if devIdx, err := k.devIndex(); err == nil {
		wantNeigh := map[netip.Addr]bool{}
		for _, n := range want.Neighs {
			wantNeigh[n.Addr] = true
		}
		for _, n := range have.Neighs {
			if wantNeigh[n.Addr] {
				continue
			}
			nl := &netlink.Neigh{LinkIndex: devIdx, Family: family(n.Addr), IP: n.Addr.AsSlice()}
			if err := k.h.NeighDel(nl); err != nil && !errors.Is(err, unix.ENOENT) {
				fail(fmt.Errorf("remove neighbour %v from %s: %w", n.Addr, k.cfg.Device, err))
				continue
			}
			ch.Removed++
		}
		for _, f := range missing(have.FDB, want.FDB, fdbCmp) {
			nl := &netlink.Neigh{LinkIndex: devIdx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
				IP: f.VTEP.AsSlice(), HardwareAddr: f.MAC[:]}
			if err := k.h.NeighDel(nl); err != nil && !errors.Is(err, unix.ENOENT) {
				fail(fmt.Errorf("remove FDB entry %s from %s: %w", net.HardwareAddr(f.MAC[:]), k.cfg.Device, err))
				continue
			}
			ch.Removed++
		}
	}
	if len(errs) > 0 {
		// Leave the filter elements: an address whose rule could not be
		// removed must stay covered.
		return ch, errors.Join(errs...)
	}
	k.step("unsteered")
	last := nftChange{delSel: missing(have.Selected, want.Selected, netip.Addr.Compare), addAllow: lateAllow,
		delPeers: missing(have.TunnelPeers, want.TunnelPeers, netip.Addr.Compare)}
	// While the filter still drops them, the addresses about to leave by
	// the node lose their connection-tracking entries: an entry made while
	// the pod was steered carries no NAT, so its flow would go on leaving
	// with the pod's own address instead of meeting the node's masquerade.
	k.forgetFlows(last.delSel)
	if err := k.nft.apply(last); err != nil {
		return ch, err
	}
	ch.Removed += len(last.delSel) + len(last.delPeers)
	ch.Added += len(last.addAllow)
	return ch, nil
}

// forgetFlows deletes the kernel's connection-tracking entries whose
// original source is one of addrs. A node without connection tracking has
// nothing to forget; a failure is logged, not fatal: the steering change
// stands either way.
func (k *Kernel) forgetFlows(addrs []netip.Addr) {
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		var filters []netlink.CustomConntrackFilter
		for _, a := range addrs {
			if a.Is4() != (fam == unix.AF_INET) {
				continue
			}
			f := &netlink.ConntrackFilter{}
			if err := f.AddIP(netlink.ConntrackOrigSrcIP, a.AsSlice()); err != nil {
				k.log.Warn("steer: cannot match connection-tracking entries", "addr", a, "err", err)
				continue
			}
			filters = append(filters, f)
		}
		if len(filters) == 0 {
			continue
		}
		n, err := k.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filters...)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			k.log.Warn("steer: cannot delete the connection-tracking entries of unsteered pods", "addrs", addrs, "err", err)
			continue
		}
		if n > 0 {
			k.log.Info("steer: connection-tracking entries of unsteered pods deleted", "entries", n)
		}
	}
}

type routeKey struct {
	table uint32
	dst   netip.Prefix
}

func fdbCmp(a, b FDB) int {
	return cmp.Or(slices.Compare(a.MAC[:], b.MAC[:]), a.VTEP.Compare(b.VTEP))
}

// kernelRouteEqual compares a route read back from the kernel (next hop
// addresses only) with a wanted one.
func kernelRouteEqual(have, want Route) bool {
	if have.Type != want.Type || len(have.NextHops) != len(want.NextHops) {
		return false
	}
	ha := make([]netip.Addr, len(have.NextHops))
	wa := make([]netip.Addr, len(want.NextHops))
	for i := range have.NextHops {
		ha[i], wa[i] = have.NextHops[i].Addr, want.NextHops[i].Addr
	}
	slices.SortFunc(ha, netip.Addr.Compare)
	slices.SortFunc(wa, netip.Addr.Compare)
	return slices.Equal(ha, wa)
}

// missing returns the elements of a not in b (both sorted by c).
func missing[T any](a, b []T, c func(x, y T) int) []T {
	var out []T
	for _, x := range a {
		if _, found := slices.BinarySearchFunc(b, x, c); !found {
			out = append(out, x)
		}
	}
	return out
}

func (k *Kernel) nlRule(r Rule) *netlink.Rule {
	nl := netlink.NewRule()
	nl.Priority = k.cfg.RulePriority
	nl.Family = family(r.Src)
	nl.Table = int(r.Table)
	nl.Src = hostNet(r.Src)
	nl.Protocol = RouteProtocol
	return nl
}

// prevUnits is the slot layout a route had: the agent's own record when the
// kernel still holds the same next hops (the record also knows the vacant
// units), else the kernel's route read back (after a restart).
func (k *Kernel) prevUnits(key routeKey, kernel []netip.Addr) []netip.Addr {
	rec, ok := k.slots[key]
	if !ok {
		return kernel
	}
	var a, b []netip.Addr
	for _, u := range rec {
		if u.IsValid() && !slices.Contains(a, u) {
			a = append(a, u)
		}
	}
	for _, u := range kernel {
		if !slices.Contains(b, u) {
			b = append(b, u)
		}
	}
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	if !slices.Equal(a, b) {
		return kernel
	}
	return rec
}

// unitsOf expands a unicast route read from the kernel into its units: each
// next hop in order, repeated by its weight.
func unitsOf(r netlink.Route) []netip.Addr {
	if len(r.MultiPath) == 0 {
		if a := hopAddr(r.Gw, r.Via); a.IsValid() {
			return []netip.Addr{a}
		}
		return nil
	}
	var out []netip.Addr
	for _, nh := range r.MultiPath {
		a := hopAddr(nh.Gw, nh.Via)
		for range nh.Hops + 1 {
			out = append(out, a)
		}
	}
	return out
}

func hopAddrs(hs []NextHop) []netip.Addr {
	out := make([]netip.Addr, len(hs))
	for i, h := range hs {
		out[i] = h.Addr
	}
	return out
}

// nlRoute is r as a netlink route; a unicast route's next hops go in the
// order and with the weights of slots (placeHops, runs).
func (k *Kernel) nlRoute(r Route, idx, localIdx int, slots []weighted) *netlink.Route {
	fam := family(r.Dst.Addr())
	nl := &netlink.Route{Table: int(r.Table), Dst: ipNet(r.Dst), Family: fam, Protocol: RouteProtocol}
	switch r.Type {
	case RouteBlackhole:
		nl.Type = unix.RTN_BLACKHOLE
	case RouteThrow:
		nl.Type = unix.RTN_THROW
	default:
		nl.Type = unix.RTN_UNICAST
		hop := func(a netip.Addr) (link int, gw net.IP, via netlink.Destination, flags int) {
			if a == gwconfig.LocalNextHop4 || a == gwconfig.LocalNextHop6 {
				// This node's gateway, on its local port (which has no
				// addresses, so no subnet either).
				return localIdx, a.AsSlice(), nil, int(netlink.FLAG_ONLINK)
			}
			if family(a) != fam {
				return idx, nil, &netlink.Via{AddrFamily: family(a), Addr: a.AsSlice()}, 0
			}
			if a.Is4() {
				// The gateway's VTEP is not on the tunnel's subnet (it has none).
				flags = int(netlink.FLAG_ONLINK)
			}
			return idx, a.AsSlice(), nil, flags
		}
		if len(slots) == 1 {
			nl.LinkIndex, nl.Gw, nl.Via, nl.Flags = hop(slots[0].addr)
		} else {
			for _, s := range slots {
				link, gw, via, flags := hop(s.addr)
				nl.MultiPath = append(nl.MultiPath, &netlink.NexthopInfo{LinkIndex: link, Gw: gw, Via: via, Flags: flags, Hops: s.weight - 1})
			}
		}
	}
	return nl
}
