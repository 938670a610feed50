// Package controller is Egret's EgressIP controller: it reads EgressIP, Node,
// Namespace and Pod objects from a Source, computes where every egress IP
// lives with package assign (a pure function of the cached objects), writes
// each EgressIP's status with a normal update, records Warning Events for
// what cannot be assigned, and probes the gRPC health service of every
// assignable node so that an unreachable or NotReady node loses its egress
// IPs to the others.
//
// The same core runs on the Kubernetes API (cluster.Kube, with leader
// election: RunKube) and on a directory of YAML files (cluster.Dir).
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/health"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
)

// qkey is a work item: the assignment (all objects) or one object's status.
type qkey struct {
	assign bool
	name   string // EgressIP name, iff !assign
}

var assignKey = qkey{assign: true}

// ReasonEgressIPMoved is the reason of the Normal Event on an EgressIP whose
// address changed node; its message names both nodes and, after a failure, why.
const ReasonEgressIPMoved = "EgressIPMoved"

// Reasons of the Warning Events about what an EgressIP asks that Egret
// cannot do; the assignment's own reasons are in package assign.
const (
	// ReasonInvalidSpec: the object fails the same validation the file
	// source applies (egressv1.EgressIP.Validate): an empty egressIPs list,
	// a selector that selects nothing usable (In/NotIn without values), ...
	ReasonInvalidSpec = "InvalidEgressIPSpec"
	// ReasonStatusOwnedElsewhere: another controller (OVN-Kubernetes) owns
	// the object's status, so Egret does not write it.
	ReasonStatusOwnedElsewhere = "StatusOwnedByAnotherController"
)

// specEvents reports what makes part of e unusable.
func specEvents(e *egressv1.EgressIP) []assign.Event {
	var out []assign.Event
	// Bad egressIPs entries are InvalidEgressIP Events of the assignment.
	var msgs []string
	for _, err := range e.Problems() {
		if _, entry := errors.AsType[*egressv1.EntryError](err); !entry {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		out = append(out, assign.Event{Object: e.Name, Reason: ReasonInvalidSpec,
			Message: fmt.Sprintf("EgressIP %q is invalid: %s; the valid parts are still used, an invalid selector selects no pod", e.Name, strings.Join(msgs, "; "))})
	}
	return out
}

// storedStatus is an EgressIP's stored status and recorded standbys as
// the assignment reads them.
type storedStatus struct {
	items    []assign.StatusItem
	standbys map[netip.Addr]string
}

// desired is the status an object should have, computed from the object at
// resourceVersion rv, with its egret.io/standby annotation ("": none).
type desired struct {
	rv      string
	items   []egressv1.EgressIPStatusItem
	standby string
	// in and standbys are items and standby as the assignment reads them.
	in       []assign.StatusItem
	standbys map[netip.Addr]string
	// queued: a write of this status for the object at rv is queued.
	queued bool
}

// matches reports whether e already holds d's status and standby annotation.
func (d desired) matches(e *egressv1.EgressIP) bool {
	return itemsEqual(e.Status.Items, d.items) && e.Annotations[egressv1.AnnotationStandby] == d.standby
}

// written remembers a status this controller stored, until the cache shows it.
type written struct {
	fromRV   string // resourceVersion the write replaced
	items    []assign.StatusItem
	standbys map[netip.Addr]string
}

// nodeHealth is the controller's memory of one node, for the hold-down.
type nodeHealth struct {
	usable    bool
	holdUntil time.Time
	// doubtUntil is when a failed check that every node failed together
	// is believed (the judge's second look); zero: no doubt running.
	doubtUntil time.Time
	// outage: the node was down in a cycle in which no node was usable,
	// and has not come back since; it is not held down when it does.
	outage bool
}

// Controller is the EgressIP controller core; create it with New, run it
// with Run.
type Controller struct {
	cfg     Config
	nodeSel labels.Selector // cfg.NodeSelector
	src     cluster.Source
	log     *slog.Logger
	queue   workqueue.TypedRateLimitingInterface[qkey]
	metrics *Metrics // nil ignores
	reach   *reachability
	now     func() time.Time
	// networkConfig, when set (the Kubernetes source), follows the
	// reachability timeout OpenShift's Network object sets, which takes
	// precedence over cfg's (cluster.Kube.WatchReachabilityTimeout).
	networkConfig func(ctx context.Context, log *slog.Logger, set func(*int)) error
	reachMu       sync.Mutex // serialises setReachability
	runCtx        context.Context

	// statusMu guards mem.desired and written, which the status workers
	// read and write: the assignment holds it only to read and apply them,
	// not for its whole cycle, so writes go on while it computes.
	statusMu sync.Mutex
	written  map[string]written

	mu sync.Mutex // the assignment's own state below; held for a cycle
	// mem is the last assignment's decisions (mem.desired also under statusMu).
	mem     memory
	emitted map[assign.Event]struct{}
	nodes   map[string]nodeHealth
	// inc is the assignment with its memory: a cycle whose inputs did not
	// change costs a comparison, one changed object costs that object.
	inc assign.Incremental
	// Conversions of each object, made once per version: assign's view of
	// a Node, an EgressIP's spec Events and its stored status.
	nodeModels   perVersion[corev1.Node, assign.Node]
	specEvents   perVersion[egressv1.EgressIP, []assign.Event]
	storedStatus perVersion[egressv1.EgressIP, storedStatus]
	// badStandby is the malformed egret.io/standby value last reported per
	// object, so it is logged once, not on every assignment.
	badStandby map[string]string

	cloud *cloudAttach // nil: no cloud attachment (SetCloud)
	// dns resolves the EgressIPTraffic objects' spec.dnsNames; nil when
	// the source cannot store their status.
	dns *dnsStatus
}

// New checks cfg and builds a controller reading from src.
func New(src cluster.Source, cfg Config, log *slog.Logger) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	sel, err := labels.Parse(cfg.NodeSelector)
	if err != nil {
		return nil, err // Validate caught it
	}
	c := &Controller{
		cfg:     cfg,
		nodeSel: sel,
		src:     src,
		log:     log,
		now:     time.Now,
		written: map[string]written{},
		mem:     memory{desired: map[string]desired{}, placed: map[string]string{}, foreign: map[string]assign.Event{}},
		emitted: map[assign.Event]struct{}{},
		nodes:   map[string]nodeHealth{},

		badStandby: map[string]string{},
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[qkey](),
		workqueue.TypedRateLimitingQueueConfig[qkey]{Name: "egressip"})
	reach, err := newReachability(time.Duration(*cfg.ReachabilityTotalTimeoutSeconds)*time.Second, cfg.ProbeInterval.Duration, cfg.HealthTLS, log,
		func() { c.queue.Add(assignKey) })
	if err != nil {
		return nil, err
	}
	c.reach = reach
	lookup, err := dnsLookup(cfg)
	if err != nil {
		return nil, err
	}
	if c.dns, err = newDNSStatus(src, src, lookup, cfg.dnsTTLs(), log, time.Now); err != nil {
		return nil, err
	}
	return c, nil
}

// SetMetrics makes the controller report to m (Prometheus); call it
// before Run. This replica counts as the leader while Run runs.
func (c *Controller) SetMetrics(m *Metrics) {
	c.metrics = m
	c.reach.metrics = m
}

// Run starts the source, waits for its caches and a first verdict on every
// node, then assigns and writes statuses until ctx ends. A Controller runs once.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if err := c.src.Start(ctx, c.changed); err != nil {
		return err // the source names what failed
	}
	if err := c.startCloud(ctx); err != nil {
		return err
	}
	c.metrics.SetLeader(true)
	defer c.metrics.SetLeader(false)
	c.reach.start(ctx)
	defer c.reach.stop()
	c.reachMu.Lock()
	c.runCtx = ctx
	c.reachMu.Unlock()
	if c.networkConfig != nil {
		if err := c.networkConfig(ctx, c.log, c.setReachability); err != nil {
			return err
		}
	}
	if c.dns != nil {
		var wg sync.WaitGroup
		wg.Go(func() { c.dns.run(ctx) })
		// A replica that lost the lead must not write after Run returns.
		defer func() { cancel(); wg.Wait() }()
	}
	// Judge every node before the first assignment, so a restart does not
	// move IPs off nodes merely not probed yet.
	c.judgeAll(ctx)

	c.queue.Add(assignKey)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	c.log.Info("EgressIP controller running", "reachabilityTotalTimeout", c.reach.timeout(),
		"healthPort", c.cfg.HealthPort, "holdDown", c.cfg.HoldDown.Duration, "drainCordoned", c.cfg.DrainCordoned)
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// judgeAll probes every assignable node and waits, at most the total
// timeout and a second, until each has a verdict.
func (c *Controller) judgeAll(ctx context.Context) {
	c.reach.track(c.probeTargets(c.src.View().Nodes))
	wctx, cancel := context.WithTimeout(ctx, c.reach.timeout()+time.Second)
	defer cancel()
	c.reach.waitKnown(wctx)
}

// setReachability applies the reachability timeout the cluster's network
// configuration sets (nil: none; the controller's own setting applies).
func (c *Controller) setReachability(seconds *int) {
	src := "OpenShift Network " + cluster.OpenShiftNetworkName
	if seconds == nil {
		seconds, src = c.cfg.ReachabilityTotalTimeoutSeconds, "Egret's configuration"
	}
	total := time.Duration(*seconds) * time.Second
	c.reachMu.Lock()
	defer c.reachMu.Unlock()
	was := c.reach.timeout()
	if total == was {
		return
	}
	c.log.Info("reachability check total timeout changed", "from", was, "to", total, "source", src)
	if was != 0 || total == 0 {
		c.reach.setTotal(total)
		c.queue.Add(assignKey)
		return
	}
	// Turning the check on: no assignment may see the nodes unjudged, or
	// every IP would move; hold the assignment until they are judged.
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reach.setTotal(total)
	c.judgeAll(c.runCtx)
	c.queue.Add(assignKey)
}

// changed queues an assignment when what it reads changed: EgressIPs and
// Nodes (Namespaces and Pods matter only to the agents).
func (c *Controller) changed(k cluster.Kind) {
	switch k {
	case cluster.KindEgressIP, cluster.KindNode:
		c.queue.Add(assignKey)
	}
	if k == cluster.KindTraffic && c.dns != nil {
		c.dns.changed()
	}
	if k == cluster.KindNode && c.cloud != nil {
		select {
		case c.cloud.nodesChanged <- struct{}{}:
		default:
		}
	}
}

// processNext runs one work item; the queue owns the retries: an item that
// fails is added back rate-limited, one that succeeds is forgotten.
func (c *Controller) processNext(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	var err error
	if k.assign {
		err = c.assign()
	} else {
		err = c.writeStatus(ctx, k.name)
	}
	if err != nil {
		level := slog.LevelWarn
		if apierrors.IsConflict(err) {
			level = slog.LevelDebug // the cache is behind; the newer object is on its way
		}
		c.log.Log(ctx, level, "work item failed; retrying", "err", err)
		c.queue.AddRateLimited(k)
		return true
	}
	c.queue.Forget(k)
	return true
}

// probeTargets lists the health address of every assignable node.
func (c *Controller) probeTargets(nodes []*corev1.Node) map[string]string {
	out := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if !candidate(c.nodeSel, n) {
			continue
		}
		if ip, ok := cluster.NodeAddress(n); ok {
			out[n.Name] = health.Target(ip.String(), c.cfg.HealthPort)
		}
	}
	return out
}

// assign is one cycle: it recomputes the whole assignment from the cached
// objects with the phases of cycle.go, which emit nothing, then emits what
// they decided: status writes queued for every object whose stored status
// differs, moves and Warning Events, logs, metrics, cloud attachment. Its
// error (the assignment refused its input) is the queue's to retry.
func (c *Controller) assign() error {
	start := c.now()
	v := c.src.View()
	kn, eips := v.Nodes, v.EgressIPs
	c.reach.track(c.probeTargets(kn))

	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	// The second look waits for two more probes of each node: one more
	// could land in the same stall.
	secondLook := 2 * (c.reach.timeout() + c.cfg.ProbeInterval.Duration)
	jn := nodeJudge{now: now, holdDown: c.cfg.HoldDown.Duration, secondLook: secondLook, drainCordoned: c.cfg.DrainCordoned,
		sel: c.nodeSel, selector: c.cfg.NodeSelector, probing: !c.reach.disabled(),
		model: c.nodeModel, verdict: c.reach.verdict}.judge(kn, c.nodes)
	c.nodes = jn.health
	c.nodeModels.keep(func(name string) bool { _, ok := jn.eligible[name]; return ok })
	for _, name := range jn.noAddress {
		c.log.Warn("assignable node has no InternalIP nor primary address to probe; it hosts no egress IP", "node", name)
	}
	for _, name := range jn.recovered {
		c.log.Info("node recovered; held down before it gets egress IPs again", "node", name, "until", jn.health[name].holdUntil)
	}
	if !jn.holdDownEnd.IsZero() {
		c.queue.AddAfter(assignKey, jn.holdDownEnd.Sub(now)+time.Millisecond)
	}
	if len(jn.doubted) > 0 {
		c.log.Warn("every gateway failed the reachability check at once; their egress IPs stay until a second look, as the fault may be this controller's",
			"nodes", jn.doubted, "until", jn.lookAgain)
	}
	if !jn.lookAgain.IsZero() {
		c.queue.AddAfter(assignKey, jn.lookAgain.Sub(now)+time.Millisecond)
	}

	c.statusMu.Lock()
	in := inputs(eips, c.written, c.mem.desired, c.cloud != nil, c.placedByObject(), c.stored)
	for _, name := range in.stale {
		delete(c.written, name)
	}
	live := func(name string) bool { _, ok := in.index[name]; return ok }
	for name := range c.badStandby {
		if !live(name) {
			delete(c.badStandby, name)
		}
	}
	c.storedStatus.keep(live)
	c.statusMu.Unlock()
	res, delta, err := c.inc.Assign(in.objects, jn.nodes, assign.Options{AvoidCordoned: c.cfg.DrainCordoned, Now: now})
	if err != nil {
		// Only duplicate names, which no source produces.
		c.metrics.ReconcileError("assign")
		return fmt.Errorf("assigning the egress IPs: %w", err)
	}
	c.statusMu.Lock()
	dec := c.mem.decide(res, delta, eips, in, jn.eligible)
	c.statusMu.Unlock()
	// Before any status write is queued: the next probe of a node an IP
	// left no longer covers the IP there, while the node it moved to
	// still has to read the new status before it answers.
	c.reach.setPlaced(c.mem.placed)

	changed := delta.Full || len(delta.Objects) > 0 || dec.refreshed
	for _, e := range eips {
		if ev, old, computed := c.specEvents.get(e.Name, e, specEvents); computed && !slices.Equal(old, ev) {
			changed = true
		}
	}
	if c.specEvents.keep(live) > 0 {
		changed = true
	}
	var unassigned int64
	for _, ev := range res.Events {
		if ev.Reason == assign.ReasonNoMatchingNodeFound {
			unassigned++
		}
	}
	perNode, heldDown := map[string]int{}, map[string]bool{}
	for _, n := range jn.nodes {
		if n.Assignable {
			perNode[n.Name] = 0 // a series at 0, not absent, for every egress node
		}
		if !n.HoldDownUntil.IsZero() {
			heldDown[n.Name] = true
		}
	}
	for _, node := range c.mem.placed {
		perNode[node]++
	}

	// Emitting.
	for _, mv := range dec.moves {
		c.metrics.Moved(mv.from, mv.failover)
		c.log.Info("egress IP moved", "egressip", mv.object.Name, "ip", mv.ip, "from", mv.from, "to", mv.to, "toStandby", mv.toStandby)
		c.src.Event(eipRef(mv.object, true), corev1.EventTypeNormal, ReasonEgressIPMoved, mv.message())
	}
	for _, name := range dec.writes {
		c.queue.Add(qkey{name: name})
	}
	c.cloudPlaced(c.mem.placed)
	c.metrics.ObserveAssignment(c.now().Sub(start), perNode, heldDown, int(unassigned), len(res.NoStandby))
	if !changed {
		return nil // the same Events as the last cycle, all reported
	}
	objEvents := slices.Concat(res.Events, res.NoStandby)
	for _, s := range c.specEvents.m {
		objEvents = append(objEvents, s.v...)
	}
	for _, ev := range c.mem.foreign {
		objEvents = append(objEvents, ev)
	}
	report, current := toReport(c.emitted, objEvents, res.NodeProblems)
	c.emitted = current
	for _, ev := range report[0] {
		if i, ok := in.index[ev.Object]; ok {
			c.event(eipRef(eips[i], true), ev)
		}
	}
	for _, ev := range report[1] {
		for _, n := range kn {
			if n.Name == ev.Object {
				c.event(&corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}, ev)
			}
		}
	}
	return nil
}

// eipRef is the reference an Event about e names, with the version of e
// it is about if withRV.
func eipRef(e *egressv1.EgressIP, withRV bool) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind, Name: e.Name, UID: e.UID}
	if withRV {
		ref.ResourceVersion = e.ResourceVersion
	}
	return ref
}

// stored is e's status and recorded standbys as the assignment reads them,
// converted once per version of the object.
func (c *Controller) stored(e *egressv1.EgressIP) ([]assign.StatusItem, map[netip.Addr]string) {
	s, _, _ := c.storedStatus.get(e.Name, e, func(e *egressv1.EgressIP) storedStatus {
		s := storedStatus{standbys: c.recordedStandbys(e)}
		for _, it := range e.Status.Items {
			s.items = append(s.items, assign.StatusItem{Node: it.Node, EgressIP: it.EgressIP})
		}
		return s
	})
	return s.items, s.standbys
}

// nodeModel is assign's view of n's labels and annotations, parsed once
// per version of the object.
func (c *Controller) nodeModel(n *corev1.Node) assign.Node {
	an, _, _ := c.nodeModels.get(n.Name, n, func(n *corev1.Node) assign.Node {
		return assign.NodeFromObject(n.Name, n.Labels, n.Annotations)
	})
	return an
}

// recordedStandbys reads e's egret.io/standby annotation. A malformed one
// is treated as absent, said once per value, and replaced by the next write.
func (c *Controller) recordedStandbys(e *egressv1.EgressIP) map[netip.Addr]string {
	m, err := egressv1.Standbys(e)
	if err == nil {
		delete(c.badStandby, e.Name)
		return m
	}
	bad := e.Annotations[egressv1.AnnotationStandby]
	if c.badStandby[e.Name] != bad {
		c.badStandby[e.Name] = bad
		c.log.Warn("ignoring a malformed standby annotation; the controller rewrites it", "egressip", e.Name, "err", err)
	}
	return nil
}

func (c *Controller) event(ref *corev1.ObjectReference, ev assign.Event) {
	c.log.Warn("event", "kind", ref.Kind, "name", ref.Name, "reason", string(ev.Reason), "message", ev.Message)
	c.src.Event(ref, corev1.EventTypeWarning, string(ev.Reason), ev.Message)
}

func itemsEqual(a, b []egressv1.EgressIPStatusItem) bool {
	return slices.Equal(a, b)
}

// writeStatus stores the desired status of the EgressIP name, if it
// differs. Its error is worth a retry; a status the API server refuses is
// reported with an Event instead, since the same content cannot succeed.
func (c *Controller) writeStatus(ctx context.Context, name string) error {
	obj, ok := c.src.EgressIP(name)
	c.statusMu.Lock()
	d, known := c.mem.desired[name]
	c.statusMu.Unlock()
	d.items = c.cloudReady(d.items) // attach before claim
	if !ok || !known || obj.ResourceVersion != d.rv || d.matches(obj) ||
		cluster.ForeignStatusWriter(obj) != "" {
		// Gone, or changed since the assignment (which is queued again
		// by that change), or already right, or another controller's
		// since this item was queued (the assignment reports it).
		return nil
	}
	cp := obj.DeepCopy() // never modify the cache's copy
	cp.Status.Items = slices.Clone(d.items)
	// The standby annotation goes in the same update, so a reader never
	// sees a status with the standbys of another assignment.
	egressv1.SetStandbyAnnotation(cp, d.standby)
	err := c.src.UpdateEgressIP(ctx, cp)
	switch {
	case err == nil:
		c.metrics.StatusWritten(false)
		items := make([]assign.StatusItem, len(d.items))
		for i, it := range d.items {
			items[i] = assign.StatusItem{Node: it.Node, EgressIP: it.EgressIP}
		}
		standbys, _ := egressv1.Standbys(cp) // written by FormatStandbys: valid
		c.statusMu.Lock()
		c.written[name] = written{fromRV: obj.ResourceVersion, items: items, standbys: standbys}
		c.statusMu.Unlock()
		c.log.Info("status written", "egressip", name, "items", d.items, "standbys", d.standby)
		return nil
	case apierrors.IsConflict(err):
		// The cache is behind: the newer object triggers a new assignment;
		// retry this one too in case it does not.
		c.metrics.StatusWritten(true)
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		c.metrics.ReconcileError("status")
		c.log.Error("status refused by the API server", "egressip", name, "err", err)
		c.src.Event(eipRef(obj, false), corev1.EventTypeWarning, "StatusUpdateFailed", err.Error())
		return nil
	default:
		c.metrics.ReconcileError("status")
	}
	return fmt.Errorf("writing the status of EgressIP %s: %w", name, err)
}
