// Package engine runs Egret's data plane on real interfaces: it attaches the
// XDP program, programs its maps, opens one port per queue on every served
// interface, and runs one pipeline worker per queue on its own OS thread,
// with routes and neighbours from the kernel's tables. It also claims the
// hosted egress IPs, expires flows, and swaps configurations on reload.
// `egret gateway` is a thin command around it; docs/gateway.md describes the
// behaviour.
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/nat"
)

// Options tune an Engine; the zero value is usable.
type Options struct {
	Logger *slog.Logger
	// PinDir is where XDP links are pinned (xdp.DefaultPinDir).
	PinDir string
	// Wait bounds one blocking receive (default 50ms): how late a worker
	// notices shutdown or an expiry tick when idle.
	Wait time.Duration
	// ExpireEvery and ExpireBudget pace flow expiry: every ExpireEvery each
	// worker removes at most ExpireBudget expired flows (defaults 100ms, 2048),
	// and sweeps every loop turn instead while a sweep keeps removing its
	// whole budget (it is behind; see worker.run).
	ExpireEvery  time.Duration
	ExpireBudget int
	// PoolFrames is the number of frame buffers per queue (default 4096).
	PoolFrames int
	// NAT configures port allocation (nat.DefaultConfig() when nil).
	NAT *nat.Config
	// Timeouts are the flow idle timeouts (conntrack.DefaultTimeouts() when nil).
	Timeouts *conntrack.Timeouts
	// Clock returns monotonic nanoseconds for the pipeline (tests move it
	// forward to see flows expire); read once per batch.
	Clock func() int64
	// Announcements is how many gratuitous ARPs / unsolicited NAs a claim
	// sends, AnnounceInterval their spacing (defaults: the kernel
	// claimer's, 3 and 100ms).
	Announcements    int
	AnnounceInterval time.Duration
}

// Engine is a running gateway data plane. Build it with New inside the
// network namespace it serves, Start it, and Close it on the way out.
type Engine struct {
	opt     Options
	log     *slog.Logger
	nl      *netlink.Handle
	cache   *route.Cache
	claimer *claim.Claimer
	ct      *conntrack.Table
	pipe    *gateway.Pipeline
	pools   []*nic.Pool
	ifcs    []*nic.Interface
	workers []*worker
	packet  bool // some interface runs on AF_PACKET: kernel drops in NFTable

	mu      sync.Mutex // guards the fields below (reload, close)
	set     *Settled
	steered map[netip.Addr]bool // egress IPs in the XDP maps
	vteps   map[netip.Addr]bool // VTEPs in the XDP maps
	claimed map[netip.Addr]string
	sweep   []string // interfaces whose marked addresses are ours to remove (claim mode)
	started bool
	closed  bool

	stop atomic.Bool
	done chan struct{}
	wg   sync.WaitGroup
}

// New builds the data plane for set in the network namespace of the calling
// thread: flow table, kernel route cache, XDP program and sockets on every
// interface, egress IPs claimed. Nothing is forwarded until Start. On error
// everything done so far is undone.
func New(set *Settled, opt Options) (_ *Engine, err error) {
	if set == nil {
		return nil, errors.New("engine: no configuration")
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Wait <= 0 {
		opt.Wait = 50 * time.Millisecond
	}
	if opt.ExpireEvery <= 0 {
		opt.ExpireEvery = 100 * time.Millisecond
	}
	if opt.ExpireBudget <= 0 {
		opt.ExpireBudget = 2048
	}
	if opt.Clock == nil {
		opt.Clock = nanotime
	}
	if opt.PoolFrames <= 0 {
		opt.PoolFrames = 4096
	}
	e := &Engine{opt: opt, log: opt.Logger, steered: map[netip.Addr]bool{}, vteps: map[netip.Addr]bool{},
		claimed: map[netip.Addr]string{}, done: make(chan struct{})}
	defer func() {
		if err != nil {
			e.teardown()
		}
	}()
	// Everything is opened in the calling thread's namespace, never by
	// setns(): entering a namespace needs CAP_SYS_ADMIN, which the gateway
	// DaemonSet does not grant (deploy/caps_linux_test.go).
	if e.nl, err = netlink.NewHandle(); err != nil {
		return nil, fmt.Errorf("engine: netlink: %w", err)
	}
	ctCfg := conntrack.Config{MaxFlows: set.ConntrackMax}
	if opt.Timeouts != nil {
		ctCfg.Timeouts = *opt.Timeouts
	}
	if e.ct, err = conntrack.New(ctCfg); err != nil {
		return nil, fmt.Errorf("engine: flow table: %w", err)
	}
	natCfg := nat.DefaultConfig()
	if opt.NAT != nil {
		natCfg = *opt.NAT
	}
	if e.pipe, err = gateway.NewPipeline(e.ct, natCfg); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.cache, err = route.NewCache(route.Options{NetNS: netns.None(), Logger: e.log}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if err := e.swap(set); err != nil {
		return nil, err
	}
	if e.claimer, err = claim.NewClaimer(netns.None()); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if err := e.claimer.PinSocket(); err != nil { // Reload may run on any thread
		return nil, fmt.Errorf("engine: %w", err)
	}
	if opt.Announcements > 0 {
		e.claimer.Announcements = opt.Announcements
	}
	if opt.AnnounceInterval > 0 {
		e.claimer.Interval = opt.AnnounceInterval
	}
	if set.Claim {
		// A predecessor killed with -9 could not release its claims: its
		// marked addresses that this configuration does not host go now,
		// or one egress IP would sit on two gateways.
		e.sweep = slices.Clone(set.Interfaces)
		hosted := map[netip.Addr]bool{}
		for _, a := range set.Hosted {
			hosted[a] = true
		}
		gone, err := e.claimer.ReleaseMarked(e.sweep, func(a netip.Addr) bool { return hosted[a] })
		if len(gone) > 0 {
			e.log.Info("engine: removed egress IPs a previous run left claimed", "ips", gone)
		}
		if err != nil {
			return nil, fmt.Errorf("engine: remove stale egress IPs: %w", err)
		}
	}

	queues, frameSize, err := e.sizeQueues(set)
	if err != nil {
		return nil, err
	}
	for q := 0; q < queues; q++ {
		p, err := nic.NewUmem(opt.PoolFrames, frameSize, 0)
		if err != nil {
			return nil, fmt.Errorf("engine: queue %d: %w", q, err)
		}
		e.pools = append(e.pools, p)
	}
	for _, name := range set.Interfaces {
		ifc, err := e.openInterface(name, set)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.ifcs = append(e.ifcs, ifc)
		if ifc.Mode() == "afpacket" {
			e.packet = true
			e.log.Warn("engine: AF_PACKET mode: the kernel also receives the steered traffic; nftables table inet "+NFTable+" drops it there", "interface", name)
		}
	}
	if !e.packet {
		// A table a killed AF_PACKET run left would drop traffic for nothing.
		if err := e.installDrops(false, nil, nil); err != nil {
			e.log.Debug("engine: could not check for a stale nftables table", "err", err)
		}
	}
	if err := e.program(set); err != nil {
		return nil, err
	}
	e.buildWorkers(set)
	e.checkVTEPs(set)
	e.mu.Lock()
	e.set = set
	e.mu.Unlock()
	e.log.Info("engine: ready", "node", set.Node, "interfaces", set.Interfaces, "queues", queues, "batch", set.Batch,
		"vteps", set.VTEPs, "egress_ips", set.Hosted, "claim", set.Claim)
	return e, nil
}

// sizeQueues settles the queue count (the first interface's RX queues when
// not given) and a frame size that holds the largest MTU plus encapsulation.
func (e *Engine) sizeQueues(set *Settled) (queues, frameSize int, err error) {
	queues, frameSize = set.Queues, 2048
	for i, name := range set.Interfaces {
		l, err := e.nl.LinkByName(name)
		if err != nil {
			return 0, 0, fmt.Errorf("engine: interface %q: %w", name, err)
		}
		if i == 0 && queues == 0 {
			queues = rxQueues(name)
		}
		// Ethernet + VLAN tags + IPv6 VXLAN encapsulation + inner Ethernet.
		if need := l.Attrs().MTU + 14 + 8 + 70 + 14; need > frameSize {
			frameSize = 4096
			if need > 4096 {
				return 0, 0, fmt.Errorf("engine: interface %s has MTU %d; frames above 4096 bytes are not supported", name, l.Attrs().MTU)
			}
		}
	}
	return queues, frameSize, nil
}

// program puts the VTEPs and hosted egress IPs into every XDP program's maps
// and claims the egress IPs, diffing against what is there.
func (e *Engine) program(set *Settled) error {
	wantV := map[netip.Addr]bool{}
	for _, v := range set.VTEPs {
		wantV[v] = true
	}
	wantE := map[netip.Addr]bool{}
	for _, a := range set.Hosted {
		wantE[a] = true
	}
	var errs []error
	for _, ifc := range e.ifcs {
		if ifc.Program == nil {
			continue
		}
		for v := range wantV {
			if !e.vteps[v] {
				errs = append(errs, ifc.Program.AddVTEP(v))
			}
		}
		for a := range wantE {
			if !e.steered[a] {
				errs = append(errs, ifc.Program.AddEgressIP(a))
			}
		}
		for v := range e.vteps {
			if !wantV[v] {
				errs = append(errs, ifc.Program.RemoveVTEP(v))
			}
		}
		for a := range e.steered {
			if !wantE[a] {
				errs = append(errs, ifc.Program.RemoveEgressIP(a))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: program XDP maps: %w", err)
	}
	e.vteps, e.steered = wantV, wantE
	if e.packet {
		if err := e.installDrops(true, set.VTEPs, set.Hosted); err != nil {
			return fmt.Errorf("engine: AF_PACKET mode needs kernel drops for the steered traffic: %w", err)
		}
	}
	if !set.Claim {
		return nil
	}
	for a, ifname := range e.claimed {
		if !wantE[a] {
			if err := e.claimer.Release(ifname, a); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(e.claimed, a)
			e.log.Info("engine: released egress IP", "ip", a, "interface", ifname)
		}
	}
	for _, a := range set.Hosted {
		if _, ok := e.claimed[a]; ok {
			continue
		}
		ifname := e.claimInterface(set, a)
		if err := e.claimer.Claim(ifname, a); err != nil {
			errs = append(errs, err)
			continue
		}
		e.claimed[a] = ifname
		e.log.Info("engine: claimed egress IP", "ip", a, "interface", ifname)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: claim egress IPs: %w", err)
	}
	return nil
}

// claimInterface picks the served interface whose subnet holds a (longest
// prefix wins), or the first interface.
func (e *Engine) claimInterface(set *Settled, a netip.Addr) string {
	best, bits := set.Interfaces[0], -1
	for _, name := range set.Interfaces {
		l, err := e.nl.LinkByName(name)
		if err != nil {
			continue
		}
		addrs, err := e.nl.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			p, ok := prefixOf(ad.IPNet)
			if ok && p.Bits() < p.Addr().BitLen() && p.Contains(a) && p.Bits() > bits {
				best, bits = name, p.Bits()
			}
		}
	}
	return best
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// checkVTEPs warns about VTEPs that no interface of the namespace carries:
// nodes could not resolve them.
func (e *Engine) checkVTEPs(set *Settled) {
	addrs, err := e.nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return
	}
	for _, v := range set.VTEPs {
		found := false
		for _, ad := range addrs {
			if a, ok := netip.AddrFromSlice(ad.IP); ok && a.Unmap() == v {
				found = true
			}
		}
		if !found {
			e.log.Warn("engine: no interface has the VTEP address; nodes cannot reach it until it is added", "vtep", v)
		}
	}
}

func (e *Engine) buildWorkers(set *Settled) {
	for q, pool := range e.pools {
		w := &worker{q: q, gw: e.pipe.NewProcessor(uint64(q+1) * 0x9e3779b97f4a7c15), pool: pool, batch: set.Batch,
			wait: e.opt.Wait, now: e.opt.Clock, expireEvery: int64(e.opt.ExpireEvery), expireBudget: e.opt.ExpireBudget}
		for _, ifc := range e.ifcs {
			p := ifc.Queues[q]
			w.ports = append(w.ports, p)
			w.ifindex = append(w.ifindex, ifc.Index)
			w.kernelRx = append(w.kernelRx, ifc.Program == nil)
			if x, ok := p.(*nic.XSK); ok {
				w.xsks = append(w.xsks, x)
			}
			if f, ok := p.(fder); ok {
				w.pfd = append(w.pfd, unix.PollFd{Fd: int32(f.FD()), Events: unix.POLLIN})
			}
		}
		w.tx = make([]nic.Batch, len(w.ports))
		e.workers = append(e.workers, w)
	}
}

// swap builds a snapshot of set on the kernel's next-hop table and installs it.
func (e *Engine) swap(set *Settled) error {
	g := set.Gateway
	g.Routes = e.cache
	snap, err := gateway.NewSnapshot(g)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return e.pipe.Swap(snap)
}

// Start runs one worker goroutine per queue, each locked to its OS thread.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed {
		return
	}
	e.started = true
	for _, w := range e.workers {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			w.run(&e.stop)
		}()
	}
}

// Reload installs a new configuration: a new snapshot (flows survive), XDP
// maps and egress IP claims updated to match. Settings that need new
// sockets (interfaces, mode, queues, batch, flow table size) keep their
// running values and are reported in the log.
func (e *Engine) Reload(set *Settled) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("engine: closed")
	}
	old := e.set
	if !slices.Equal(old.Interfaces, set.Interfaces) || old.Mode != set.Mode || old.Queues != set.Queues ||
		old.Batch != set.Batch || old.ConntrackMax != set.ConntrackMax || old.Claim != set.Claim {
		e.log.Warn("engine: reload cannot change interfaces, mode, queues, batch, conntrackMax or egressIPsClaimed; restart for those")
		n := *set
		n.Interfaces, n.Mode, n.Queues, n.Batch, n.ConntrackMax, n.Claim = old.Interfaces, old.Mode, old.Queues, old.Batch, old.ConntrackMax, old.Claim
		set = &n
	}
	// Snapshot first, maps second: a newly steered egress IP finds its
	// policy, and a removed one stops being steered before it is released.
	if err := e.swap(set); err != nil {
		return err
	}
	e.set = set
	if err := e.program(set); err != nil {
		return err
	}
	e.log.Info("engine: configuration reloaded", "vteps", set.VTEPs, "egress_ips", set.Hosted, "flows", e.ct.Len())
	return nil
}

// Close stops the workers, releases the claimed egress IPs, detaches the
// XDP programs and closes every socket. It is safe to call twice.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.stop.Store(true)
	close(e.done)
	e.wg.Wait()
	err := e.teardown()
	e.log.Info("engine: stopped; XDP detached and egress IPs released")
	return err
}

// teardown undoes New in reverse order; it tolerates a partial New.
func (e *Engine) teardown() error {
	var errs []error
	if e.claimer != nil {
		for a, ifname := range e.claimed {
			if err := e.claimer.Release(ifname, a); err != nil {
				errs = append(errs, err)
			}
			delete(e.claimed, a)
		}
		// Also anything marked that this run did not record (a claim
		// interrupted by an error, a predecessor's leftover).
		if gone, err := e.claimer.ReleaseMarked(e.sweep, nil); err != nil {
			errs = append(errs, err)
		} else if len(gone) > 0 {
			e.log.Info("engine: removed leftover egress IPs", "ips", gone)
		}
		e.claimer.Close()
		e.claimer = nil
	}
	for _, ifc := range e.ifcs {
		if err := ifc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close %s: %w", ifc.Name, err))
		}
	}
	e.ifcs = nil
	if e.packet {
		if err := e.installDrops(false, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("engine: remove nftables table %s: %w", NFTable, err))
		}
	}
	for _, p := range e.pools {
		nic.FreeUmem(p)
	}
	e.pools = nil
	if e.cache != nil {
		e.cache.Close()
		e.cache = nil
	}
	if e.nl != nil {
		e.nl.Close()
		e.nl = nil
	}
	return errors.Join(errs...)
}

// PortStats are one port's counters.
type PortStats struct {
	Name string
	nic.Stats
}

// XDPStats are one interface's XDP program counters.
type XDPStats struct {
	Interface string
	xdp.Stats
}

// Stats is everything the engine counts, for a metrics collector.
type Stats struct {
	Pipeline gateway.Stats
	Engine   Counters
	Ports    []PortStats
	XDP      []XDPStats
	Kernel   route.CacheStats
	Flows    int
}

// Stats reads all counters; safe from any goroutine.
func (e *Engine) Stats() Stats {
	s := Stats{Pipeline: e.pipe.Stats(), Flows: e.ct.Len()}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.workers {
		c := w.pub.read()
		s.Engine.add(&c)
	}
	if e.closed {
		return s
	}
	s.Kernel = e.cache.Stats()
	for _, ifc := range e.ifcs {
		for _, p := range ifc.Queues {
			s.Ports = append(s.Ports, PortStats{Name: p.Name(), Stats: p.Stats()})
		}
		if ifc.Program != nil {
			if x, err := ifc.Program.Stats(); err == nil {
				s.XDP = append(s.XDP, XDPStats{Interface: ifc.Name, Stats: x})
			}
		}
	}
	return s
}

// WorkerStats are one worker's counters as last published (once per batch).
type WorkerStats struct {
	Pipeline gateway.Stats
	Engine   Counters
}

// Workers appends each worker's counters to dst, in queue order; safe from
// any goroutine and allocation-free once dst has room.
func (e *Engine) Workers(dst []WorkerStats) []WorkerStats {
	for _, w := range e.workers {
		dst = append(dst, WorkerStats{Pipeline: w.gw.Stats(), Engine: w.pub.read()})
	}
	return dst
}

// EachPort calls fn for every open port with its interface's name, under
// the engine's lock: the port's socket stays open during fn (so fn may
// read its kernel statistics), and nothing is called once Close began.
func (e *Engine) EachPort(fn func(iface string, p nic.Queue)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	for _, ifc := range e.ifcs {
		for _, p := range ifc.Queues {
			fn(ifc.Name, p)
		}
	}
}

// Hosted appends the egress IPs of the running configuration to dst.
func (e *Engine) Hosted(dst []netip.Addr) []netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set == nil {
		return dst
	}
	return append(dst, e.set.Hosted...)
}

// TunnelPeers is the number of worker nodes the running configuration
// accepts tunnel traffic from.
func (e *Engine) TunnelPeers() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set == nil {
		return 0
	}
	return len(e.set.Gateway.Nodes)
}

// Modes reports each served interface's mode (afxdp or afpacket).
func (e *Engine) Modes() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[string]string{}
	for _, ifc := range e.ifcs {
		m[ifc.Name] = ifc.Mode()
	}
	return m
}

// Pipeline returns the engine's pipeline (flow table, NAT allocator).
func (e *Engine) Pipeline() *gateway.Pipeline { return e.pipe }

// xskBusyWait bounds how long opening an AF_XDP socket retries while the
// queue is still held: after kill -9 the kernel frees the dead process'
// sockets and UMEM asynchronously, and bind fails with EBUSY meanwhile.
const xskBusyWait = 5 * time.Second

// openInterface is nic.Open with one difference: an AF_XDP bind that
// fails with EBUSY (a killed predecessor's socket not yet freed) is retried
// for up to xskBusyWait before falling back to AF_PACKET.
func (e *Engine) openInterface(name string, set *Settled) (*nic.Interface, error) {
	cfg := nic.Config{Interface: name, Pools: e.pools, Packet: set.Mode == "afpacket",
		XDP: xdp.Options{PinDir: e.opt.PinDir, Logger: e.log}, Logger: e.log}
	if cfg.Packet {
		return nic.Open(cfg)
	}
	nif, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	ifc := &nic.Interface{Name: nif.Name, Index: nif.Index, MAC: nif.HardwareAddr}
	fail := func(err error) (*nic.Interface, error) {
		ifc.Close()
		if set.Mode == "afxdp" {
			return nil, fmt.Errorf("%s: AF_XDP: %w (and --mode afxdp forbids the AF_PACKET fallback)", name, err)
		}
		e.log.Warn("engine: XDP cannot serve this interface; falling back to AF_PACKET", "interface", name, "reason", err)
		cfg.Packet = true
		return nic.Open(cfg)
	}
	prog, err := xdp.Attach(nif.Index, cfg.XDP)
	if err != nil {
		return fail(err)
	}
	ifc.Program = prog
	for q, pool := range e.pools {
		var s *nic.XSK
		deadline := time.Now().Add(xskBusyWait)
		for {
			s, err = nic.OpenXSK(pool, name, nif.Index, q, cfg.Socket)
			if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err == nil {
			ifc.Queues = append(ifc.Queues, s)
			err = prog.Register(q, s.FD())
		}
		if err != nil {
			return fail(fmt.Errorf("queue %d: %w", q, err))
		}
	}
	e.log.Info("engine: AF_XDP ready", "interface", name, "queues", len(ifc.Queues), "xdp_mode", prog.Mode().String())
	return ifc, nil
}
