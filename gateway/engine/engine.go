// Package engine runs Egret's data plane on real interfaces: it attaches the
// XDP program, programs its maps, opens one socket per queue on every served
// interface, and runs one queue loop (a pipeline worker) per queue on its
// own OS thread, with routes and neighbours from the kernel's tables. It also claims the
// hosted egress IPs, expires flows, and swaps configurations on reload.
// `egret gateway` is a thin command around it; docs/gateway.md describes the
// behaviour.
//
// Errors follow one rule here and in gateway/{xdp,nic,claim}: an error
// names its package once, where it is made or where a foreign error
// (netlink, ebpf, a syscall) is wrapped; an error of another Egret package
// already names its own and is returned as is, or wrapped only to add what
// it lacks (an interface, a queue), never just to add a prefix.
package engine

import (
	"errors"
	"fmt"
	"github.com/egret-gw/egret/gateway/config"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
)

// Options tune an Engine; the zero value is usable.
type Options struct {
	Logger *slog.Logger
	// PinDir is where XDP links are pinned (xdp.DefaultPinDir unless set):
	// a bpffs, or a directory of one bind-mounted there.
	PinDir string
	// Wait bounds one blocking receive (default 50ms): how late a worker
	// notices shutdown or an expiry tick when idle.
	Wait time.Duration
	// ExpireEvery and ExpireBudget pace flow expiry: every ExpireEvery each
	// worker removes at most ExpireBudget expired flows (defaults 100ms, 2048),
	// and sweeps every loop turn instead while a sweep keeps removing its
	// whole budget (it is behind; see queueLoop.run).
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
	// NATLog, if set, records every binding (gateway/natlog); its Clock
	// must be Clock. The engine names the pods in it from each
	// configuration; the caller runs its writer.
	NATLog *natlog.Log
	// BusyPoll, when on, runs every AF_XDP socket in busy-poll mode and
	// its worker never sleeps: for dedicated cores (it keeps one busy per
	// worker). It needs AF_XDP: an interface that would fall back to
	// AF_PACKET is an error instead. docs/gateway.md#busy-polling.
	BusyPoll nic.BusyPoll
	// BusyPollCPUs, with BusyPoll, pins worker q to BusyPollCPUs[q] (one
	// per queue) and keeps the process' other threads off those cores.
	// Empty: no pinning (the node's CPU manager may do it).
	BusyPollCPUs []int
	// BusyPollNap, with BusyPoll, is how long a worker sleeps in a turn
	// that found nothing, instead of yielding and spinning on (0: spin).
	// A core that is not the worker's alone (a SCHED_FIFO worker meets
	// the kernel's real-time throttling after 95 % of each second) needs
	// the worker to leave it now and then; a nap well below the
	// interface's gro_flush_timeout keeps the device to the worker.
	BusyPollNap time.Duration
	// TxSkbBudget, if not 0, sets XDP_MAX_TX_SKB_BUDGET on every AF_XDP
	// socket where the kernel has it (nic.XDPOptions.TxSkbBudget).
	TxSkbBudget int
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
	loops   []*queueLoop
	packet  bool // some interface runs on AF_PACKET: kernel drops in NFTable
	local   bool // the local port is served (config.LocalPortLink)
	adm     admitState

	mu      sync.Mutex // guards the fields below (reload, close)
	set     *config.Settled
	steered map[netip.Addr]bool // egress IPs in the XDP maps
	vteps   map[netip.Addr]bool // VTEPs in the XDP maps
	claimed map[netip.Addr]string
	// unplaced are the hosted egress IPs no served interface holds the
	// subnet of, with why (served.go): not claimed, not in Hosted.
	unplaced map[netip.Addr]string
	// pending are the configured interfaces not open, with what was
	// last logged about them (openMissing).
	pending map[string]string
	// autoFailed are interfaces the configuration does not name that hold
	// a placed egress IP's subnet and failed to open, with the error.
	autoFailed map[string]string
	ns         netns.NsHandle      // the namespace served (inOwnNS)
	frameSize  int                 // of the pools' frames: an added interface's MTU must fit
	loopWG     sync.WaitGroup      // the queue loops' goroutines (runLoop)
	retired    map[netip.Addr]bool // egress IPs that left, until the NAT allocator forgets them (drain.go)
	sweep      []string            // interfaces whose marked addresses are ours to remove (claim mode)
	started    bool
	closed     bool

	stop atomic.Bool
	done chan struct{}
	wg   sync.WaitGroup
}

// New builds the data plane for set in the network namespace of the calling
// thread: flow table, kernel route cache, XDP program and sockets on every
// interface, egress IPs claimed. Nothing is forwarded until Start. On error
// everything done so far is undone.
func New(set *config.Settled, opt Options) (_ *Engine, err error) {
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
	if err := checkBusyPoll(set, opt); err != nil {
		return nil, err
	}
	e := &Engine{opt: opt, log: opt.Logger, ns: netns.None(), steered: map[netip.Addr]bool{}, vteps: map[netip.Addr]bool{},
		claimed: map[netip.Addr]string{}, retired: map[netip.Addr]bool{}, done: make(chan struct{}),
		unplaced: map[netip.Addr]string{}, pending: map[string]string{}, autoFailed: map[string]string{}}
	defer func() {
		if err != nil {
			e.teardown(0)
		}
	}()
	// Everything is opened in the calling thread's namespace, never by
	// setns(): entering a namespace needs CAP_SYS_ADMIN, which the gateway
	// DaemonSet does not grant (deploy/caps_linux_test.go).
	if e.nl, err = netlink.NewHandle(); err != nil {
		return nil, fmt.Errorf("engine: netlink: %w", err)
	}
	if e.ns, err = netns.Get(); err != nil {
		return nil, fmt.Errorf("engine: read the network namespace: %w", err)
	}
	ctCfg := conntrack.Config{MaxFlows: set.ConntrackMax, SourceLimit: set.PodFlowLimit, NATLimit: set.EgressIPFlowLimit}
	if opt.Timeouts != nil {
		ctCfg.Timeouts = *opt.Timeouts
	}
	if e.ct, err = conntrack.New(ctCfg); err != nil {
		return nil, err
	}
	natCfg := nat.DefaultConfig()
	if opt.NAT != nil {
		natCfg = *opt.NAT
	}
	if e.pipe, err = gateway.NewPipeline(e.ct, natCfg); err != nil {
		return nil, err
	}
	if opt.NATLog != nil {
		e.pipe.SetNATLog(opt.NATLog)
	}
	if e.cache, err = route.NewCache(route.Options{NetNS: netns.None(), Logger: e.log}); err != nil {
		return nil, err
	}
	if err := e.swap(set); err != nil {
		return nil, err
	}
	// Its sockets are opened here, in the namespace served; its nftables
	// fence is written in the calling thread's, so Reload, Close and the
	// link watch claim and release in inOwnNS.
	if e.claimer, err = claim.NewClaimer(netns.None(), e.log); err != nil {
		return nil, err
	}
	if opt.Announcements > 0 {
		e.claimer.Announcements = opt.Announcements
	}
	if opt.AnnounceInterval > 0 {
		e.claimer.Interval = opt.AnnounceInterval
	}
	if !set.EgressIPsClaimed {
		// A predecessor killed with -9 could not release its claims: its
		// marked addresses that this configuration does not host go now,
		// or one egress IP would sit on two gateways.
		// Only those that exist: one that appears later is new.
		for _, name := range set.Interfaces {
			if _, err := e.nl.LinkByName(name); err == nil {
				e.sweep = append(e.sweep, name)
			}
		}
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
	e.frameSize = frameSize
	if n := len(opt.BusyPollCPUs); n > 0 && n != queues {
		return nil, fmt.Errorf("engine: %d busy-poll CPUs for %d queues: give one per queue", n, queues)
	}
	for q := 0; q < queues; q++ {
		p, err := nic.NewUmem(opt.PoolFrames, frameSize, 0)
		if err != nil {
			return nil, fmt.Errorf("queue %d: %w", q, err)
		}
		e.pools = append(e.pools, p)
	}
	for _, name := range set.Interfaces {
		if _, err := e.nl.LinkByName(name); err != nil {
			msg := "engine: interface does not exist (yet); serving it when it appears"
			e.log.Warn(msg, "interface", name)
			e.pending[name] = msg
			continue
		}
		ifc, err := e.openInterface(name, set)
		if err != nil {
			return nil, err
		}
		e.ifcs = append(e.ifcs, ifc)
		if ifc.Mode() == "afpacket" {
			e.packet = true
			e.log.Warn("engine: AF_PACKET mode: the kernel also receives the steered traffic; nftables table inet "+NFTable+" drops it there", "interface", name)
		}
	}
	if set.LocalPort {
		ifc, err := e.openLocal(set)
		if err != nil {
			return nil, err
		}
		e.ifcs = append(e.ifcs, ifc)
		e.local = true
	}
	if !e.packet {
		// A table a killed AF_PACKET run left would drop traffic for nothing.
		if err := e.installDrops(false, nil, nil); err != nil {
			e.log.Debug("engine: could not check for a stale nftables table", "err", err)
		}
	}
	if set.Admission == nil {
		// A table a killed run left would keep filtering with its sources.
		if err := e.admit(set); err != nil {
			e.log.Debug("engine: could not check for a stale nftables table", "table", AdmitTable, "err", err)
		}
	}
	if err := e.program(set); err != nil {
		return nil, err
	}
	e.warnSharedTunnelPort(set)
	e.buildQueueLoops(set)
	e.checkVTEPs(set)
	if err := e.watchLinks(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.set = set
	e.mu.Unlock()
	e.log.Info("engine: ready", "node", set.Node, "interfaces", set.Interfaces, "queues", queues, "batch", set.Batch,
		"vteps", set.VTEPs, "egress_ips", set.Hosted, "claim", !set.EgressIPsClaimed)
	return e, nil
}

// swap builds a snapshot of set on the kernel's next-hop table and installs it.
func (e *Engine) swap(set *config.Settled) error {
	g := gatewayConfig(set)
	g.Routes = e.cache
	snap, err := gateway.NewSnapshot(g)
	if err != nil {
		return err
	}
	if err := e.pipe.Swap(snap); err != nil {
		return err
	}
	if e.opt.NATLog != nil {
		e.opt.NATLog.SetPods(snap.PodNames())
	}
	return nil
}

// Start runs one queue loop goroutine per queue, each locked to its OS thread,
// and the loop that forgets the NAT state of drained egress IPs.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed {
		return
	}
	e.started = true
	if len(e.opt.BusyPollCPUs) > 0 {
		if err := keepOffCPUs(e.opt.BusyPollCPUs); err != nil {
			e.log.Warn("engine: could not keep the process' other threads off the busy-poll cores", "cpus", e.opt.BusyPollCPUs, "err", err)
		}
	}
	for _, l := range e.loops {
		e.runLoop(l)
	}
	if e.opt.BusyPoll.On() {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.checkNAPI()
		}()
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.drainLoop()
	}()
}

// Reload installs a new configuration: a new snapshot (flows survive), XDP
// maps and egress IP claims updated to match, added interfaces opened.
// Settings that need new sockets or tables (removed interfaces, mode,
// queues, batch, flow table size) keep their running values and are
// reported in the log.
func (e *Engine) Reload(set *config.Settled) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("engine: closed")
	}
	old := e.set
	if !addsOnly(old.Interfaces, set.Interfaces) || old.LocalPort != set.LocalPort || old.Mode != set.Mode || old.Queues != set.Queues ||
		old.Batch != set.Batch || old.ConntrackMax != set.ConntrackMax || old.EgressIPsClaimed != set.EgressIPsClaimed ||
		old.PodFlowLimit != set.PodFlowLimit || old.EgressIPFlowLimit != set.EgressIPFlowLimit {
		e.log.Warn("engine: reload cannot remove interfaces or change the local port, mode, queues, batch, conntrackMax, the flow limits or egressIPsClaimed; restart for those")
		n := *set
		n.Interfaces, n.Mode, n.Queues, n.Batch, n.ConntrackMax, n.EgressIPsClaimed = old.Interfaces, old.Mode, old.Queues, old.Batch, old.ConntrackMax, old.EgressIPsClaimed
		n.LocalPort = old.LocalPort
		n.PodFlowLimit, n.EgressIPFlowLimit = old.PodFlowLimit, old.EgressIPFlowLimit
		set = &n
	}
	// Snapshot first, maps second: a newly steered egress IP finds its
	// policy, and a removed one stops being steered before it is released.
	if err := e.swap(set); err != nil {
		return err
	}
	e.retire(old, set)
	e.set = set
	// The nftables tables (claims' fence, admission, AF_PACKET drops) are
	// written through connections of the calling thread's namespace.
	if err := e.inOwnNS(func() error {
		e.openMissing(set) // interfaces the reload added
		return e.program(set)
	}); err != nil {
		return err
	}
	e.log.Info("engine: configuration reloaded", "vteps", set.VTEPs, "egress_ips", set.Hosted, "flows", e.ct.Len())
	return nil
}

// Close stops the workers, releases the claimed egress IPs, closes every
// socket and detaches the XDP programs: a final stop, which leaves nothing
// behind. It is safe to call twice (so is CloseHeld).
func (e *Engine) Close() error { return e.close(0) }

// CloseHeld is Close before a restart: the XDP programs stay attached
// (pinned) and drop, for at most hold, the tunnel and egress traffic no
// socket takes any more (xdp.Program.Hold), until the next process takes
// them over; the kernel never sees that traffic in between.
func (e *Engine) CloseHeld(hold time.Duration) error { return e.close(hold) }

func (e *Engine) close(hold time.Duration) error {
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
	e.loopWG.Wait()
	var cs claim.Stats
	if e.claimer != nil {
		cs = e.claimer.Stats()
	}
	err := e.inOwnNS(func() error { return e.teardown(hold) })
	xdpState := "detached"
	if hold > 0 {
		xdpState = "left attached, held for the next process"
	}
	e.log.Info("engine: stopped; egress IPs released", "xdp", xdpState, "hold", hold, "announced", cs.Announced,
		"announce_failures", cs.AnnounceFailures, "arp_nd_answered", cs.Answered, "arp_nd_answer_failures", cs.AnswerFailures)
	return err
}

// teardown undoes New in reverse order; it tolerates a partial New. With
// hold > 0 the XDP programs stay attached (nic.Interface.Leave).
func (e *Engine) teardown(hold time.Duration) error {
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
		e.mu.Lock() // ClaimStats reads it from the metrics scrape
		e.claimer = nil
		e.mu.Unlock()
	}
	for _, ifc := range e.ifcs {
		closeIfc := ifc.Close
		if hold > 0 {
			closeIfc = func() error { return ifc.Leave(hold) }
		}
		if err := closeIfc(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close %s: %w", ifc.Name, err))
		}
	}
	e.ifcs = nil
	if e.local && hold == 0 {
		// Kept through a held stop, so that the next process finds the
		// steer agent's routes still pointing at it.
		if err := e.removeLocalLink(); err != nil {
			errs = append(errs, fmt.Errorf("engine: local port: %w", err))
		}
	}
	e.mu.Lock() // AdmissionDrops reads adm from the metrics scrape
	if e.adm.live {
		if err := e.admit(&config.Settled{}); err != nil {
			errs = append(errs, err)
		}
	}
	e.mu.Unlock()
	if e.packet {
		if err := e.installDrops(false, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("engine: %w", err)) // names the table
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
	if e.ns.IsOpen() {
		e.ns.Close()
	}
	return errors.Join(errs...)
}

// Pipeline returns the engine's pipeline (flow table, NAT allocator).
func (e *Engine) Pipeline() *gateway.Pipeline { return e.pipe }

// Now reads the pipeline's clock (Options.Clock), for those that hand it
// flows (gateway/flowsync).
func (e *Engine) Now() int64 { return e.opt.Clock() }

// addsOnly reports whether now keeps every interface of was, in its order,
// and at most adds some after them.
func addsOnly(was, now []string) bool {
	return len(now) >= len(was) && slices.Equal(was, now[:len(was)])
}
