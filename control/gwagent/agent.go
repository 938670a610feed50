package gwagent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/gateway/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// Component is the source component of the Events the gateway agent
// records (DeniedEvents), so that they do not read as the controller's.
const Component = "egret-gateway"

// NewKubeSource is the cluster.Kube the gateway agent reads the cluster
// through, recording its Events under Component.
func NewKubeSource(cfg *rest.Config) (*cluster.Kube, error) {
	return cluster.NewKube(cfg, cluster.RecordAs(Component))
}

// DefaultFenceAfter is how long the agent may go without contact with its
// source before it releases every egress IP. Three times the default
// reachability timeout (1 s): a node the controller cannot reach loses its
// IPs after about 1.3 s there (probe interval + timeout), so a gateway cut
// off from both sides stops answering about 2 s later, while a single slow
// or failed list (checked every FenceAfter/6) does not drop traffic.
const DefaultFenceAfter = 3 * time.Second

// DataPlane is the running engine as the agent drives it.
type DataPlane interface {
	Reload(*config.Settled) error
	Close() error
}

// Agent runs the gateway node's control loop: build the configuration from
// the source, start the data plane with it, reload it on every change, and
// fence (release every egress IP) while the source is out of reach.
type Agent struct {
	// Node is this gateway's node name: status items for it are hosted here.
	Node string
	// Base is the static part of the configuration (interfaces, VTEPs,
	// tunnel...); Nodes and Policies come from the source.
	Base config.Spec
	// Source supplies the objects and the contact check: a cluster.Kube,
	// or a cluster.Dir reader that follows the status files a controller
	// in another process writes.
	Source cluster.Source
	// StartDataPlane builds and starts the data plane for the first usable
	// configuration (engine.New + Start in the real command).
	StartDataPlane func(*config.Settled) (DataPlane, error)
	// Health, if set, reports SERVING only while the data plane runs and
	// the agent is not fenced.
	Health *health.Server
	// Options are passed to Build.
	Options Options
	// OnNode, if set, is called (from any goroutine) whenever the source
	// reports a Node change: Facts.NodeChanged.
	OnNode func()
	// OnStandbys, if set, is called from the agent's loop with the
	// standby's address of each egress IP the running data plane hosts
	// (Standbys), whenever that changes: where the flow sync sends.
	OnStandbys func(map[netip.Addr]netip.Addr)
	// FenceAfter is DefaultFenceAfter when zero; CheckEvery (FenceAfter/6
	// by default) paces the contact checks; Resync (30 s) rebuilds without
	// a change.
	FenceAfter, CheckEvery, Resync time.Duration
	// ReleaseStale, if set, is called once as Run starts, before the
	// source, with the base configuration's interfaces: it removes the
	// egress IPs a killed predecessor left claimed and returns them
	// (engine.ReleaseStaleClaims). Until its first configuration this run
	// hosts nothing, so what was claimed goes before the data plane starts.
	ReleaseStale func(interfaces []string) ([]netip.Addr, error)
	// Drain, when positive, is how long a stopping agent waits for its
	// egress IPs to move before it closes the data plane: it reports
	// NOT_SERVING at once, so that the controller moves them to their
	// standbys (which hold their flows), and forwards until the status
	// places none here or Drain has passed. Zero: close at once.
	Drain time.Duration
	// ControllerLease says which leases of the controller's probes the
	// agent takes (lease.go): while one runs, the agent keeps hosting the
	// IPs it names without contact with the source.
	ControllerLease LeaseMode
	Log             *slog.Logger

	mu      sync.Mutex
	state   State
	lease   lease
	base    *config.Spec // set by SetBase, replaces Base
	rebuild func()       // asks the running loop for a pass
}

// SetBase replaces the static part of the configuration while the agent
// runs (the command's SIGHUP); the next pass applies it.
func (a *Agent) SetBase(c config.Spec) {
	a.mu.Lock()
	a.base = &c
	kick := a.rebuild
	a.mu.Unlock()
	if kick != nil {
		kick()
	}
}

func (a *Agent) currentBase() config.Spec {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.base != nil {
		return *a.base
	}
	return a.Base
}

// State is what the agent is doing, for tests and logs.
type State struct {
	// Running is true once the data plane runs.
	Running bool
	// Fenced is true while the source is out of reach and no controller
	// lease holds (every egress IP released); FenceReason says why
	// (FenceSourceLost, FenceLeaseExpired).
	Fenced      bool
	FenceReason string
	// Leased is true while the source is out of reach and the controller's
	// lease alone keeps the IPs it names hosted.
	Leased bool
	// LeaseLeft is how long the controller's last lease still runs (0:
	// none, or ran out).
	LeaseLeft time.Duration
	// Fences counts the times the agent fenced, by FenceReason.
	Fences map[string]uint64
	// LeasesRefused counts leases not taken because they came over plain
	// gRPC (LeaseMutualTLS); LeasesMalformed those that did not parse.
	LeasesRefused, LeasesMalformed uint64
	// Serving is what the health service reports.
	Serving bool
	// Hosted are the egress IPs in the running configuration.
	Hosted []netip.Addr
	// Reloads counts successful reloads.
	Reloads int
}

// State returns a copy of the agent's current state.
func (a *Agent) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.state
	s.Hosted = slices.Clone(s.Hosted)
	s.Fences = maps.Clone(s.Fences)
	if left := time.Until(a.lease.until); a.lease.taken && left > 0 {
		s.LeaseLeft = left
	}
	return s
}

func (a *Agent) defaults() {
	if a.FenceAfter <= 0 {
		a.FenceAfter = DefaultFenceAfter
	}
	if a.CheckEvery <= 0 {
		a.CheckEvery = min(max(a.FenceAfter/6, 20*time.Millisecond), time.Second)
	}
	if a.Resync <= 0 {
		a.Resync = 30 * time.Second
	}
	if a.Log == nil {
		a.Log = slog.New(slog.DiscardHandler)
	}
}

// releaseStale runs ReleaseStale, if set; a failure is logged, not fatal:
// the data plane's start removes what its configuration does not host.
func (a *Agent) releaseStale() {
	if a.ReleaseStale == nil {
		return
	}
	if gone, err := a.ReleaseStale(a.currentBase().Interfaces); err != nil {
		a.Log.Warn("gateway agent: removing stale egress IPs", "err", err)
	} else if len(gone) > 0 {
		a.Log.Info("gateway agent: removed egress IPs a previous run left claimed", "ips", gone)
	}
}

// loop holds the state of Run that only its goroutine touches.
type loop struct {
	dp          DataPlane
	applied     config.Spec
	fenced      bool
	verdict     verdict // of the last pass
	leaseGen    uint64  // the lease's gen the last pass hosted under
	retry       bool
	lastErr     string
	lastProblem string
	conflicts   map[string]bool // the plan's conflicts last told (conflictEvents)
	heldBack    int             // egress IPs the cache places here and the fresh list does not
	draining    bool            // stopping: NOT_SERVING until the egress IPs moved (Agent.Drain)

	standbys       map[netip.Addr]netip.Addr // as last given to OnStandbys
	lastStandbyErr string
}

// Run starts the source and keeps the data plane in line with it until ctx
// ends; then it closes the data plane (releasing the egress IPs). It
// returns an error only when the source cannot start or the data plane
// cannot be built.
func (a *Agent) Run(ctx context.Context) error {
	a.defaults()
	if a.StartDataPlane == nil || a.Source == nil {
		return errors.New("the gateway agent needs a Source and a StartDataPlane")
	}
	a.releaseStale()
	a.setServing(false)
	if a.Health != nil && a.ControllerLease != LeaseOff {
		a.Health.SetLeaseHandler(a.takeLease)
		defer a.Health.SetLeaseHandler(nil)
	}
	// The source outlives ctx by the drain, which needs its updates.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	a.mu.Lock()
	a.rebuild = poke
	a.mu.Unlock()
	if err := a.Source.Start(sctx, func(k cluster.Kind) {
		poke()
		if k == cluster.KindNode && a.OnNode != nil {
			a.OnNode()
		}
	}); err != nil {
		return err // the source names what failed
	}
	var (
		lastOK  atomic.Int64
		freshMu sync.Mutex
		fresh   cluster.Statuses
	)
	lastOK.Store(time.Now().UnixNano()) // Start returned: the source was just listed
	go a.checkLoop(sctx, func(st cluster.Statuses) {
		freshMu.Lock()
		differ := !reflect.DeepEqual(fresh, st)
		fresh = st
		freshMu.Unlock()
		lastOK.Store(time.Now().UnixNano())
		if differ {
			poke() // what is hosted depends on the fresh read
		}
	})

	l := &loop{}
	defer func() {
		if l.dp != nil {
			a.setServing(false)
			if err := l.dp.Close(); err != nil {
				a.Log.Error("gateway agent: closing the data plane", "err", err)
			}
		}
	}()
	tick := time.NewTicker(a.CheckEvery)
	defer tick.Stop()
	// wake fires when the fence verdict may change with no new input (the
	// contact or the lease running out): on time, not at the next tick.
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	resync := time.NewTicker(a.Resync)
	defer resync.Stop()
	var retry, drained <-chan time.Time
	stopping := ctx.Done()
	backoff := time.Duration(0)
	dirty := true
	for {
		if dirty {
			freshMu.Lock()
			f := fresh
			freshMu.Unlock()
			if err := a.reconcile(l, time.Unix(0, lastOK.Load()), f); err != nil {
				return err
			}
			if !l.verdict.next.IsZero() {
				wake.Reset(time.Until(l.verdict.next) + time.Millisecond)
			}
			if l.draining && len(hostedOf(l.applied)) == 0 {
				a.Log.Info("gateway agent: stopping: every egress IP moved elsewhere")
				return nil
			}
			retry = nil
			if l.retry {
				backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
				retry = time.After(backoff)
			} else {
				backoff = 0
			}
		}
		dirty = true
		select {
		case <-stopping:
			hosted := hostedOf(l.applied)
			if a.Drain <= 0 || l.dp == nil || len(hosted) == 0 {
				return nil
			}
			a.Log.Info("gateway agent: stopping: NOT_SERVING until the egress IPs moved", "hosted", hosted, "drain", a.Drain)
			l.draining, stopping = true, nil
			a.setServing(false)
			drained = time.After(a.Drain)
			dirty = false
		case <-drained:
			a.Log.Warn("gateway agent: stopping with egress IPs still placed here", "hosted", hostedOf(l.applied), "drain", a.Drain)
			return nil
		case <-kick:
			time.Sleep(20 * time.Millisecond) // let a burst of changes settle into one pass
		case <-tick.C:
			// Only the fence verdict can change here (a new fresh list
			// and a new lease poke).
			dirty, _ = a.verdictChanged(l, time.Unix(0, lastOK.Load()))
		case <-wake.C:
			var next time.Time
			if dirty, next = a.verdictChanged(l, time.Unix(0, lastOK.Load())); !dirty && !next.IsZero() {
				wake.Reset(time.Until(next) + time.Millisecond) // renewed meanwhile
			}
		case <-resync.C:
		case <-retry:
		}
	}
}

// countHosted counts the status items that place an egress IP on node.
func countHosted(eips []*egressv1.EgressIP, node string) int {
	n := 0
	for _, e := range eips {
		if e == nil {
			continue
		}
		for _, it := range e.Status.Items {
			if it.Node == node {
				n++
			}
		}
	}
	return n
}

// checkLoop runs the contact check every CheckEvery and reports successes.
func (a *Agent) checkLoop(ctx context.Context, ok func(cluster.Statuses)) {
	failing := false
	for {
		cctx, cancel := context.WithTimeout(ctx, max(a.FenceAfter/2, 50*time.Millisecond))
		st, err := a.Source.Check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			ok(st)
			if failing {
				a.Log.Info("gateway agent: source reachable again")
			}
			failing = false
		case !failing:
			a.Log.Warn("gateway agent: source unreachable; egress IPs are released if this lasts", "err", err, "fence_after", a.FenceAfter)
			failing = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.CheckEvery):
		}
	}
}

// verdictChanged reports whether the fence rule now decides otherwise than
// at the last pass, and when it may change next.
func (a *Agent) verdictChanged(l *loop, lastOK time.Time) (bool, time.Time) {
	ls := a.currentLease()
	v := fenceRule(time.Now(), lastOK, a.FenceAfter, ls, l.fenced)
	return v.fenced != l.verdict.fenced || v.leased != l.verdict.leased || (v.leased && ls.gen != l.leaseGen), v.next
}

// reconcile builds the configuration and applies it if it changed.
func (a *Agent) reconcile(l *loop, lastOK time.Time, fresh cluster.Statuses) error {
	now := time.Now()
	ls := a.currentLease()
	vd := fenceRule(now, lastOK, a.FenceAfter, ls, l.fenced)
	fenced := vd.fenced
	if vd.leased && !l.verdict.leased && !fenced {
		a.Log.Warn("gateway agent: no contact with the source; hosting what the controller's lease covers while it is renewed",
			"last_contact", lastOK.Format(time.RFC3339Nano), "lease_left", time.Until(ls.until), "leased_ips", len(ls.ips))
	}
	if fenced != l.fenced {
		if fenced {
			a.Log.Warn("gateway agent: fenced: no contact with the source and no controller lease; releasing every egress IP",
				"reason", vd.reason, "last_contact", lastOK.Format(time.RFC3339Nano), "fence_after", a.FenceAfter,
				"lease_ended", leaseEnd(ls))
		} else {
			a.Log.Info("gateway agent: contact restored; hosting what the fresh status says")
		}
		l.fenced = fenced
		// Fenced and Serving change together, so no reader sees a fenced
		// node that still reports SERVING.
		serving := l.dp != nil && !fenced && !l.draining
		a.mu.Lock()
		a.state.Fenced = fenced
		a.state.FenceReason = vd.reason
		if fenced {
			if a.state.Fences == nil {
				a.state.Fences = map[string]uint64{}
			}
			a.state.Fences[vd.reason]++
		}
		a.state.Serving = serving
		a.mu.Unlock()
		if a.Health != nil {
			a.Health.SetServing(serving)
		}
	} else if !vd.leased && l.verdict.leased && !fenced {
		a.Log.Info("gateway agent: contact with the source restored while the controller's lease ran; hosting what the fresh status says")
	}
	l.verdict, l.leaseGen = vd, ls.gen
	a.mu.Lock()
	a.state.Leased = vd.leased
	a.mu.Unlock()
	v := a.Source.View()
	// Host only what the last fresh list agrees with, at all times: a
	// watch can stall while List still works (or lag after contact
	// returns), and the cache would then keep an IP the controller has
	// moved. Fresh means a successful quorum List (Source.Check) within
	// FenceAfter; older than that, the agent is fenced above. Before the
	// first one nothing is hosted.
	n := countHosted(v.EgressIPs, a.Node)
	v.EgressIPs = agree(v.EgressIPs, fresh)
	if held := n - countHosted(v.EgressIPs, a.Node); held != l.heldBack {
		if held > 0 {
			a.Log.Warn("gateway agent: the watch cache places egress IPs here that the last fresh list does not; not hosting them", "ips", held)
		}
		l.heldBack = held
	}
	if vd.leased {
		// Out of contact: of what the last fresh list placed here, only
		// what the controller still placed here when it sent its probe.
		v.EgressIPs = leased(v.EgressIPs, a.Node, ls.ips)
	}
	r := Build(a.currentBase(), a.Node, v, a.Options)
	if p := joinErrs(r.Problems); p != l.lastProblem {
		for _, e := range r.Problems {
			a.Log.Warn("gateway agent: input skipped", "problem", e.Error())
		}
		l.lastProblem = p
	}
	a.conflictEvents(l, r.Conflicts, v.EgressIPs)
	cfg := r.Spec
	if fenced {
		cfg = Fenced(cfg)
	}
	defer func() {
		a.setServing(l.dp != nil && !l.fenced && !l.draining)
		a.publishStandbys(l, v)
	}()
	if l.dp != nil && !l.retry && reflect.DeepEqual(cfg, l.applied) {
		return nil
	}
	set, err := cfg.Settle()
	if err != nil && fenced && l.dp != nil {
		// Fencing must release even when the new inputs are unusable.
		cfg = Fenced(l.applied)
		set, err = cfg.Settle()
	}
	if err != nil {
		if s := err.Error(); s != l.lastErr {
			a.Log.Error("gateway agent: configuration not usable; keeping the running one", "err", err)
			l.lastErr = s
		}
		l.retry = false
		return nil
	}
	l.lastErr = ""
	if l.dp == nil {
		dp, err := a.StartDataPlane(set)
		if err != nil {
			return err // the engine names what failed
		}
		l.dp = dp
		a.Log.Info("gateway agent: data plane running", "hosted", hostedOf(cfg), "nodes", len(cfg.Nodes), "fenced", fenced)
	} else if err := l.dp.Reload(set); err != nil {
		a.Log.Error("gateway agent: reload incomplete; retrying", "err", err)
		l.retry = true
		return nil
	} else {
		a.Log.Info("gateway agent: configuration applied", "hosted", hostedOf(cfg), "nodes", len(cfg.Nodes), "fenced", fenced)
	}
	l.retry = false
	l.applied = cfg
	a.mu.Lock()
	a.state.Running = true
	a.state.Fenced = fenced
	a.state.Hosted = hostedOf(cfg)
	a.state.Reloads++
	a.mu.Unlock()
	return nil
}

// ReasonDestinationOverlap is the reason of the Warning Event both
// EgressIP objects of a plan.Conflict get: they claim the same or nested
// destination networks for a pod they both select.
const ReasonDestinationOverlap = "DestinationOverlap"

// conflictEvents tells both objects of each conflict of the plan, with a
// Warning Event, once per change: a conflict already told on an earlier
// pass is not told again while it lasts (as problems are logged once),
// and is told again if it goes and comes back.
func (a *Agent) conflictEvents(l *loop, cs []plan.Conflict, eips []*egressv1.EgressIP) {
	now := make(map[string]bool, len(cs))
	for _, c := range cs {
		msg := c.String()
		now[msg] = true
		if l.conflicts[msg] {
			continue
		}
		for _, name := range []string{c.A, c.B} {
			ref := &corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind, Name: name}
			if i := slices.IndexFunc(eips, func(e *egressv1.EgressIP) bool { return e.Name == name }); i >= 0 {
				ref.UID = eips[i].UID
			}
			a.Source.Event(ref, corev1.EventTypeWarning, ReasonDestinationOverlap, msg)
		}
		a.Log.Warn("gateway agent: egress objects claim overlapping destinations", "conflict", msg)
	}
	l.conflicts = now
}

func (a *Agent) setServing(ok bool) {
	a.mu.Lock()
	a.state.Serving = ok
	a.mu.Unlock()
	if a.Health != nil {
		a.Health.SetServing(ok)
	}
}

func hostedOf(c config.Spec) []netip.Addr {
	var out []netip.Addr
	for _, p := range c.Policies {
		out = append(out, p.EgressIPs...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func joinErrs(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

// leaseEnd is when the lease ran out, for the fence's log line ("" without one).
func leaseEnd(l lease) string {
	if !l.taken {
		return ""
	}
	return l.until.Format(time.RFC3339Nano)
}
