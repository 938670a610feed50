// Package route keeps the gateway's view of the host's routes, neighbours
// and link MTUs: the next-hop table, kept current from netlink events (or
// fixed, for tests and configuration checks), that the pipeline queries per
// packet without allocating and without an interface call.
package route

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Verdict is the outcome of a route lookup.
type Verdict uint8

// Lookup outcomes.
const (
	Found       Verdict = iota // NextHop is complete
	NoRoute                    // no unicast route to the destination
	NoNeighbour                // route found, next hop's MAC unknown; resolution was asked for
)

func (v Verdict) String() string {
	switch v {
	case Found:
		return "found"
	case NoRoute:
		return "no route"
	case NoNeighbour:
		return "no neighbour"
	}
	return "invalid"
}

// Hop is where to send a frame: out of Ifindex, from SrcMAC to DstMAC, and
// the link MTU (the largest IP packet the link carries).
type Hop struct {
	Ifindex int
	SrcMAC  [6]byte
	DstMAC  [6]byte
	MTU     int
}

// MTUs of links the table does not know (index past maxIfindex, or not
// listed): the Ethernet default.
const (
	maxIfindex = 1 << 16
	defaultMTU = 1500
)

type prefixKey struct {
	addr [16]byte // masked
	bits uint8
	v6   bool
}

type route struct {
	ifindex int
	gw      [16]byte // the router, IPv4-mapped; valid iff !onLink
	onLink  bool     // the destination is the neighbour
	// nb is 1 + the index of the router's neighbour entry when the
	// snapshot was built with it (sealNeigh), 0 otherwise: a lookup via a
	// router then needs no neighbour map access.
	nb int32
}

type neighKey struct {
	ifindex int32
	addr    [16]byte
}

// neighEntry is a usable neighbour: its MAC and its index in the
// snapshot's nkeys and used.
type neighEntry struct {
	mac [6]byte
	i   int32
}

// snapshot is an immutable view of the kernel tables; lookups read it
// without locks, updates build a new one.
type snapshot struct {
	routes4 map[uint64]route    // key4(masked address, bits)
	routes  map[prefixKey]route // IPv6
	lens4   []uint8             // prefix lengths present, longest first
	lens6   []uint8
	neigh   map[neighKey]neighEntry
	links   []link // by ifindex, up to maxIfindex: a slice, not a map, on the packet path
	// nkeys lists the neighbours by index, nmacs their MACs; used[i] is
	// set (once, by the first lookup that finds neighbour i since the last
	// refresh): the neighbours the pipeline sends to, which the refresher
	// keeps fresh.
	nkeys []neighKey
	nmacs [][6]byte
	// static are the permanent (or NOARP) neighbours: nothing to refresh,
	// and a resolution request would replace a permanent entry by an
	// incomplete one.
	static map[neighKey]bool
	used   []atomic.Uint32
	// The default routes (prefix length 0) once sealed, so that most
	// traffic to the outside costs no map access for its route.
	def4, def6       route
	hasDef4, hasDef6 bool
}

// addNeigh records a usable neighbour; sealNeigh sizes the used marks once
// all are added.
func (s *snapshot) addNeigh(k neighKey, mac [6]byte) {
	if e, ok := s.neigh[k]; ok {
		e.mac = mac
		s.neigh[k] = e
		s.nmacs[e.i] = mac
		return
	}
	s.neigh[k] = neighEntry{mac: mac, i: int32(len(s.nkeys))}
	s.nkeys = append(s.nkeys, k)
	s.nmacs = append(s.nmacs, mac)
}

// sealNeigh finishes a snapshot once its routes and neighbours are in:
// it points every route via a known router at the router's neighbour
// entry, keeps the default routes aside, and allocates the used marks,
// carrying over those of prev (a rebuild must not forget which neighbours
// are in use).
func (s *snapshot) sealNeigh(prev *snapshot) {
	for k, r := range s.routes4 {
		if s.linkRouter(&r) {
			s.routes4[k] = r
		}
	}
	for k, r := range s.routes {
		if s.linkRouter(&r) {
			s.routes[k] = r
		}
	}
	s.def4, s.hasDef4 = s.routes4[key4(0, 0)]
	s.def6, s.hasDef6 = s.routes[prefixKey{bits: 0, v6: true}]
	s.used = make([]atomic.Uint32, len(s.nkeys))
	if prev == nil {
		return
	}
	for i, k := range s.nkeys {
		if e, ok := prev.neigh[k]; ok && int(e.i) < len(prev.used) && prev.used[e.i].Load() != 0 {
			s.used[i].Store(1)
		}
	}
}

// linkRouter sets r.nb if r goes via a router whose neighbour entry is
// known, and reports whether it did.
func (s *snapshot) linkRouter(r *route) bool {
	if r.onLink {
		return false
	}
	e, ok := s.neigh[neighKey{int32(r.ifindex), r.gw}]
	if !ok {
		return false
	}
	r.nb = e.i + 1
	return true
}

// link is what the table knows of an interface: its MAC (the source of
// frames sent out of it) and MTU (0: unknown, defaultMTU).
type link struct {
	mac [6]byte
	mtu int32
}

// setLink records interface i's MAC and MTU, growing the table as needed.
func (s *snapshot) setLink(i int, mac [6]byte, mtu int) {
	if i < 0 || i >= maxIfindex {
		return
	}
	if i >= len(s.links) {
		s.links = append(s.links, make([]link, i+1-len(s.links))...)
	}
	s.links[i] = link{mac: mac, mtu: int32(mtu)}
}

func mask(a [16]byte, bits int, v6 bool) [16]byte {
	if !v6 {
		bits += 96 // IPv4 sits in the last 4 bytes of the 16
	}
	for i := 0; i < 16; i++ {
		switch {
		case bits >= 8:
			bits -= 8
		case bits <= 0:
			a[i] = 0
		default:
			a[i] &= ^byte(0xff >> bits)
			bits = 0
		}
	}
	return a
}

func key4(a uint32, bits uint8) uint64 { return uint64(a)<<8 | uint64(bits) }

func newSnapshot() *snapshot {
	return &snapshot{routes4: map[uint64]route{}, routes: map[prefixKey]route{}, neigh: map[neighKey]neighEntry{}}
}

// addRoute records r for pfx unless a route for pfx is already there (the
// kernel lists the lowest metric first); it reports whether it added.
func (s *snapshot) addRoute(pfx netip.Prefix, r route) bool {
	pfx = pfx.Masked()
	bits := uint8(pfx.Bits())
	if pfx.Addr().Is4() {
		a4 := pfx.Addr().As4()
		k := key4(binary.BigEndian.Uint32(a4[:]), bits)
		if _, dup := s.routes4[k]; dup {
			return false
		}
		s.routes4[k] = r
		return true
	}
	k := prefixKey{pfx.Addr().As16(), bits, true}
	if _, dup := s.routes[k]; dup {
		return false
	}
	s.routes[k] = r
	return true
}

// isMapped reports whether a is an IPv4-mapped address (::ffff:a.b.c.d).
func isMapped(a *[16]byte) bool {
	return binary.LittleEndian.Uint64(a[0:8]) == 0 && binary.LittleEndian.Uint32(a[8:12]) == 0xffff0000
}

func (s *snapshot) lookupRoute(dst *[16]byte) (route, bool) {
	if isMapped(dst) {
		a := binary.BigEndian.Uint32(dst[12:16])
		for _, l := range s.lens4 {
			if l == 0 {
				return s.def4, s.hasDef4
			}
			m := uint32(0)
			if l > 0 {
				m = ^uint32(0) << (32 - l)
			}
			if r, ok := s.routes4[key4(a&m, l)]; ok {
				return r, true
			}
		}
		return route{}, false
	}
	for _, l := range s.lens6 {
		if l == 0 {
			return s.def6, s.hasDef6
		}
		if r, ok := s.routes[prefixKey{mask(*dst, int(l), true), l, true}]; ok {
			return r, true
		}
	}
	return route{}, false
}

// Options configure a Cache; the zero value watches the current namespace.
type Options struct {
	// NetNS, if open and not 0 (the zero value), is the namespace whose
	// tables are watched; otherwise the current one.
	NetNS  netns.NsHandle
	Logger *slog.Logger
	// ResolveEvery limits how often resolution of one missing neighbour
	// is asked from the kernel; default 1s.
	ResolveEvery time.Duration
	// RefreshEvery is how often the neighbours that lookups found since
	// the last time are handed to the kernel for revalidation (default 1s,
	// negative: never). No kernel traffic uses the gateway's next hops,
	// so without it their entries go STALE and are never confirmed; with
	// it the kernel probes them before they expire (NTF_USE marks them
	// used, so a REACHABLE entry moves to DELAY/PROBE instead of STALE).
	// Keep it below the kernel's delay_first_probe_time (5s).
	RefreshEvery time.Duration
}

// Cache is the next-hop table: it answers route and neighbour lookups from a
// snapshot of the kernel's main routing table, neighbour table and links
// (addresses and MTUs), rebuilt whenever netlink reports a change, or from
// a fixed set of routes (NewStatic).
type Cache struct {
	snap      atomic.Pointer[snapshot]
	nl        *netlink.Handle
	log       *slog.Logger
	resolve   chan neighKey
	done      chan struct{}
	wg        sync.WaitGroup
	misses    atomic.Uint64
	noRoute   atomic.Uint64
	rebuilds  atomic.Uint64
	refreshes atomic.Uint64
	every     time.Duration
	refresh   time.Duration
}

// NewCache dumps the tables, subscribes to route, neighbour and link
// events, and keeps the snapshot current until Close.
func NewCache(opt Options) (*Cache, error) {
	var (
		nl  *netlink.Handle
		err error
		ns  *netns.NsHandle
	)
	if opt.NetNS > 0 && opt.NetNS.IsOpen() {
		nl, err = netlink.NewHandleAt(opt.NetNS)
		ns = &opt.NetNS
	} else {
		nl, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("route: netlink: %w", err)
	}
	c := &Cache{nl: nl, log: opt.Logger, resolve: make(chan neighKey, 1024), done: make(chan struct{}), every: opt.ResolveEvery, refresh: opt.RefreshEvery}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.every == 0 {
		c.every = time.Second
	}
	if c.refresh == 0 {
		c.refresh = time.Second
	}
	events := make(chan struct{}, 1)
	poke := func() {
		select {
		case events <- struct{}{}:
		default:
		}
	}
	onErr := func(err error) {
		if c.closing() {
			return // Close shuts the subscriptions down: their errors say nothing
		}
		c.log.Warn("route: netlink subscription error; resyncing", "err", err)
		poke()
	}
	rch, nch, lch := make(chan netlink.RouteUpdate, 256), make(chan netlink.NeighUpdate, 256), make(chan netlink.LinkUpdate, 64)
	if err := netlink.RouteSubscribeWithOptions(rch, c.done, netlink.RouteSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		c.Close()
		return nil, fmt.Errorf("route: subscribe to routes: %w", err)
	}
	if err := netlink.NeighSubscribeWithOptions(nch, c.done, netlink.NeighSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		c.Close()
		return nil, fmt.Errorf("route: subscribe to neighbours: %w", err)
	}
	if err := netlink.LinkSubscribeWithOptions(lch, c.done, netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		c.Close()
		return nil, fmt.Errorf("route: subscribe to links: %w", err)
	}
	// Subscribed first, dumped second: no change falls between.
	if err := c.rebuild(); err != nil {
		c.Close()
		return nil, err
	}
	c.wg.Add(5)
	go forward(c, rch, poke)
	go forward(c, nch, poke)
	go forward(c, lch, poke)
	go c.watch(events)
	go c.resolver()
	return c, nil
}

// forward turns any update into a poke; the content is re-read by a dump.
func forward[T any](c *Cache, ch <-chan T, poke func()) {
	defer c.wg.Done()
	for range ch {
		poke()
	}
}

func (c *Cache) watch(events <-chan struct{}) {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-events:
			// Let a burst of events settle into one rebuild.
			time.Sleep(2 * time.Millisecond)
			if err := c.rebuild(); err != nil {
				c.log.Warn("route: rebuilding route/neighbour snapshot failed; keeping the last one", "err", err)
			}
		}
	}
}

// rebuild dumps routes, neighbours and links into a new snapshot.
func (c *Cache) rebuild() error {
	s := newSnapshot()
	links, err := c.nl.LinkList()
	if err != nil {
		return fmt.Errorf("route: list links: %w", err)
	}
	// Link events (an MTU change among them) rebuild the snapshot, so the
	// MTUs are as current as the routes.
	for _, l := range links {
		var m [6]byte
		copy(m[:], l.Attrs().HardwareAddr)
		s.setLink(l.Attrs().Index, m, l.Attrs().MTU)
	}
	routes, err := c.nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("route: list routes: %w", err)
	}
	seen4, seen6 := map[uint8]bool{}, map[uint8]bool{}
	for _, r := range routes {
		if r.Type != unix.RTN_UNICAST {
			continue
		}
		rt := route{ifindex: r.LinkIndex, onLink: true}
		gw := r.Gw
		if len(r.MultiPath) > 0 { // first path only; ECMP is the kernel's
			rt.ifindex, gw = r.MultiPath[0].LinkIndex, r.MultiPath[0].Gw
		}
		if g, ok := netip.AddrFromSlice(gw); ok {
			rt.gw, rt.onLink = g.Unmap().As16(), false
		}
		var pfx netip.Prefix
		if r.Dst == nil {
			if r.Family == netlink.FAMILY_V6 {
				pfx = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			} else {
				pfx = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			}
		} else {
			a, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			ones, _ := r.Dst.Mask.Size()
			pfx = netip.PrefixFrom(a.Unmap(), ones)
		}
		if !s.addRoute(pfx, rt) {
			continue
		}
		if pfx.Addr().Is6() {
			seen6[uint8(pfx.Bits())] = true
		} else {
			seen4[uint8(pfx.Bits())] = true
		}
	}
	s.lens4, s.lens6 = sortedLens(seen4), sortedLens(seen6)
	neighs, err := c.nl.NeighList(0, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("route: list neighbours: %w", err)
	}
	for _, n := range neighs {
		if n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		var m [6]byte
		copy(m[:], n.HardwareAddr)
		k := neighKey{int32(n.LinkIndex), a.Unmap().As16()}
		s.addNeigh(k, m)
		if n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			if s.static == nil {
				s.static = map[neighKey]bool{}
			}
			s.static[k] = true
		}
	}
	s.sealNeigh(c.snap.Load())
	c.snap.Store(s)
	c.rebuilds.Add(1)
	c.primeRouters(s)
	return nil
}

// primeRouters asks the kernel to resolve every router the routes name
// whose neighbour is not known yet, so that the first packet to an outside
// address after a start or a route change finds its next hop instead of
// being dropped while resolution runs. On-link destinations cannot be known
// ahead; they still resolve on their first miss.
func (c *Cache) primeRouters(s *snapshot) {
	ask := func(r route) {
		if r.onLink || r.nb != 0 {
			return
		}
		select {
		case c.resolve <- neighKey{int32(r.ifindex), r.gw}:
		default: // resolver busy: a miss asks again
		}
	}
	for _, r := range s.routes4 {
		ask(r)
	}
	for _, r := range s.routes {
		ask(r)
	}
}

func sortedLens(m map[uint8]bool) []uint8 {
	out := make([]uint8, 0, len(m))
	for l := range m {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] > out[j] })
	return out
}

// Lookup finds how to reach dst (IPv4-mapped for IPv4) and fills hop when
// the verdict is Found. It never blocks and never allocates; a missing
// neighbour is counted and its resolution asked of the kernel.
func (c *Cache) Lookup(dst *[16]byte, hop *Hop) Verdict {
	s := c.snap.Load()
	r, ok := s.lookupRoute(dst)
	if !ok {
		c.noRoute.Add(1)
		return NoRoute
	}
	var e neighEntry
	if r.nb > 0 && int(r.nb) <= len(s.nmacs) {
		e = neighEntry{mac: s.nmacs[r.nb-1], i: r.nb - 1}
	} else {
		k := neighKey{int32(r.ifindex), r.gw}
		if r.onLink {
			k.addr = *dst
		}
		var ok bool
		if e, ok = s.neigh[k]; !ok {
			c.misses.Add(1)
			select {
			case c.resolve <- k:
			default: // resolver busy: the next miss asks again
			}
			return NoNeighbour
		}
	}
	if int(e.i) < len(s.used) {
		// Read first: the shared line is written once per refresh period,
		// not on every packet.
		if u := &s.used[e.i]; u.Load() == 0 {
			u.Store(1)
		}
	}
	hop.Ifindex, hop.DstMAC, hop.SrcMAC, hop.MTU = r.ifindex, e.mac, [6]byte{}, defaultMTU
	if uint(r.ifindex) < uint(len(s.links)) {
		l := &s.links[r.ifindex]
		hop.SrcMAC = l.mac
		if l.mtu > 0 {
			hop.MTU = int(l.mtu)
		}
	}
	return Found
}

// Static is a route of a fixed table: packets to Prefix leave as Hop says.
// Routes out of one interface share its SrcMAC and MTU.
type Static struct {
	Prefix netip.Prefix
	Hop    Hop
}

// NewStatic returns a next-hop table of routes alone, with no kernel
// behind it (nothing to watch, nothing to resolve, Close is a no-op): the
// table of a configuration that is only checked, and of tests.
func NewStatic(routes ...Static) *Cache {
	c := &Cache{resolve: make(chan neighKey, 1), done: make(chan struct{})}
	close(c.done)
	s := newSnapshot()
	seen4, seen6 := map[uint8]bool{}, map[uint8]bool{}
	for _, r := range routes {
		pfx := r.Prefix.Masked()
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits())
		// The masked prefix stands for the route's router, whose
		// neighbour entry holds the fixed destination MAC.
		gw := pfx.Addr().As16()
		if !s.addRoute(pfx, route{ifindex: r.Hop.Ifindex, gw: gw}) {
			continue
		}
		if pfx.Addr().Is4() {
			seen4[uint8(pfx.Bits())] = true
		} else {
			seen6[uint8(pfx.Bits())] = true
		}
		s.addNeigh(neighKey{int32(r.Hop.Ifindex), gw}, r.Hop.DstMAC)
		s.setLink(r.Hop.Ifindex, r.Hop.SrcMAC, r.Hop.MTU)
	}
	s.lens4, s.lens6 = sortedLens(seen4), sortedLens(seen6)
	s.sealNeigh(nil)
	c.snap.Store(s)
	return c
}

// CacheStats are the cache's counters.
type CacheStats struct {
	NoNeighbour uint64 // lookups that found a route but no neighbour
	NoRoute     uint64 // lookups that found no route
	Rebuilds    uint64 // snapshots built
	Refreshes   uint64 // in-use neighbours handed to the kernel for revalidation
}

// Stats returns the counters.
func (c *Cache) Stats() CacheStats {
	return CacheStats{NoNeighbour: c.misses.Load(), NoRoute: c.noRoute.Load(), Rebuilds: c.rebuilds.Load(), Refreshes: c.refreshes.Load()}
}

// resolver asks the kernel to resolve missing neighbours, at most once per
// c.every for each, and every c.refresh to revalidate those in use.
func (c *Cache) resolver() {
	defer c.wg.Done()
	last := map[neighKey]time.Time{}
	var tick <-chan time.Time
	if c.refresh > 0 {
		t := time.NewTicker(c.refresh)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.done:
			return
		case <-tick:
			c.refreshUsed()
		case k := <-c.resolve:
			now := time.Now()
			if t, ok := last[k]; ok && now.Sub(t) < c.every {
				continue
			}
			last[k] = now
			if len(last) > 4096 {
				for kk, t := range last {
					if now.Sub(t) > c.every {
						delete(last, kk)
					}
				}
			}
			if err := c.solicit(k); err != nil {
				c.log.Debug("route: neighbour resolution request failed", "ifindex", k.ifindex, "err", err)
			}
		}
	}
}

// refreshUsed hands every neighbour looked up since the last call to the
// kernel (NTF_USE) and clears its mark.
func (c *Cache) refreshUsed() {
	s := c.snap.Load()
	for i := range s.used {
		if s.used[i].Load() == 0 || s.used[i].Swap(0) == 0 || s.static[s.nkeys[i]] {
			continue
		}
		c.refreshes.Add(1)

		if err := c.solicit(s.nkeys[i]); err != nil && !c.closing() {
			c.log.Debug("route: neighbour refresh failed", "ifindex", s.nkeys[i].ifindex, "err", err)
		}
	}
}

// solicit makes the kernel start ARP/ND for the neighbour (NTF_USE runs
// the same path as a packet waiting for it).
func (c *Cache) solicit(k neighKey) error {
	a := netip.AddrFrom16(k.addr).Unmap()
	n := &netlink.Neigh{LinkIndex: int(k.ifindex), IP: net.IP(a.AsSlice()), State: netlink.NUD_INCOMPLETE, Flags: netlink.NTF_USE}
	n.Family = netlink.FAMILY_V4
	if a.Is6() {
		n.Family = netlink.FAMILY_V6
	}
	return c.nl.NeighSet(n)
}

func (c *Cache) closing() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Close stops watching and releases the netlink sockets.
func (c *Cache) Close() error {
	select {
	case <-c.done:
		return nil
	default:
	}
	close(c.done)
	c.nl.Close()
	c.wg.Wait()
	return nil
}
