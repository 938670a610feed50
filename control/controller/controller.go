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
	// ReasonTrafficSelectorNotApplied: spec.trafficSelector is set; Egret
	// stores it but the egress IPs serve every destination.
	ReasonTrafficSelectorNotApplied = "TrafficSelectorNotApplied"
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
	if e.Spec.TrafficSelector != nil {
		out = append(out, assign.Event{Object: e.Name, Reason: ReasonTrafficSelectorNotApplied,
			Message: "spec.trafficSelector is not applied by Egret (EgressTrafficClass is not implemented): the egress IPs of this object serve every destination of the selected pods"})
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

	// statusMu guards desired and written, which the status workers read
	// and write: the assignment holds it only to read and apply them, not
	// for its whole cycle, so writes go on while it computes.
	statusMu sync.Mutex
	desired  map[string]desired
	written  map[string]written

	mu      sync.Mutex // the assignment's own state below; held for a cycle
	emitted map[assign.Event]struct{}
	nodes   map[string]*nodeHealth
	placed  map[string]string // "object/ip" → node, from the last assignment
	// inc is the assignment with its memory: a cycle whose inputs did not
	// change costs a comparison, one changed object costs that object.
	inc assign.Incremental
	// Conversions of each object, made once per version: assign's view of
	// a Node, an EgressIP's spec Events and its stored status.
	nodeModels   perVersion[corev1.Node, assign.Node]
	specEvents   perVersion[egressv1.EgressIP, []assign.Event]
	storedStatus perVersion[egressv1.EgressIP, storedStatus]
	foreign      map[string]assign.Event // by object: its status is another controller's
	// badStandby is the malformed egret.io/standby value last reported per
	// object, so it is logged once, not on every assignment.
	badStandby map[string]string

	cloud *cloudAttach // nil: no cloud attachment (SetCloud)
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
		desired: map[string]desired{},
		written: map[string]written{},
		emitted: map[assign.Event]struct{}{},
		nodes:   map[string]*nodeHealth{},
		placed:  map[string]string{},

		foreign: map[string]assign.Event{},

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
}

func (c *Controller) processNext(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	if k.assign {
		c.assign()
		c.queue.Forget(k)
		return true
	}
	c.writeStatus(ctx, k)
	return true
}

// candidate reports whether n may host egress IPs as far as labels go:
// the assignable label and the configured nodeSelector.
func (c *Controller) candidate(n *corev1.Node) bool {
	_, ok := n.Labels[cluster.LabelEgressAssignable]
	return ok && c.nodeSel.Matches(labels.Set(n.Labels))
}

// probeTargets lists the health address of every assignable node.
func (c *Controller) probeTargets(nodes []*corev1.Node) map[string]string {
	out := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if !c.candidate(n) {
			continue
		}
		if ip, ok := cluster.NodeAddress(n); ok {
			out[n.Name] = health.Target(ip.String(), c.cfg.HealthPort)
		}
	}
	return out
}

// assign recomputes the whole assignment from the cached objects and queues
// a status write for every object whose stored status differs.
func (c *Controller) assign() {
	start := c.now()
	v := c.src.View()
	kn, eips := v.Nodes, v.EgressIPs
	c.reach.track(c.probeTargets(kn))

	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	nodes := make([]assign.Node, 0, len(kn))
	seen := make(map[string]bool, len(kn))
	var nextHoldDownEnd time.Time
	// The specification: egress IPs on control-plane nodes are not
	// supported on a cluster provisioned on AWS.
	onAWS := slices.ContainsFunc(kn, cluster.OnAWS)
	for _, n := range kn {
		an := c.nodeModel(n)
		switch {
		case !an.Assignable:
		case onAWS && cluster.ControlPlane(n):
			an.Excluded = "is a control-plane node of a cluster on AWS, where egress IPs on control-plane nodes are not supported"
		case !c.nodeSel.Matches(labels.Set(n.Labels)):
			an.Excluded = "does not match the controller's nodeSelector " + c.cfg.NodeSelector
		}
		an.Ready = cluster.NodeReady(n)
		an.Cordoned = n.Spec.Unschedulable
		reachable, known := c.reach.verdict(n.Name)
		an.Reachable = reachable
		if !c.candidate(n) {
			// Not probed: the check only matters for nodes that host IPs.
			an.Reachable, known = true, true
		} else if _, hasAddr := cluster.NodeAddress(n); !hasAddr && !c.reach.disabled() {
			c.log.Warn("assignable node has no InternalIP nor primary address to probe; it hosts no egress IP", "node", n.Name)
		}
		seen[n.Name] = true
		h := c.nodes[n.Name]
		if known {
			usable := an.Ready && an.Reachable
			switch {
			case h == nil:
				h = &nodeHealth{usable: usable}
				c.nodes[n.Name] = h
			case usable && !h.usable && c.cfg.HoldDown.Duration > 0:
				h.holdUntil = now.Add(c.cfg.HoldDown.Duration)
				c.log.Info("node recovered; held down before it gets egress IPs again", "node", n.Name, "until", h.holdUntil)
				h.usable = true
			default:
				h.usable = usable
			}
		}
		if h != nil && now.Before(h.holdUntil) {
			an.HoldDownUntil = h.holdUntil
			if nextHoldDownEnd.IsZero() || h.holdUntil.Before(nextHoldDownEnd) {
				nextHoldDownEnd = h.holdUntil
			}
		}
		nodes = append(nodes, an)
	}
	for name := range c.nodes {
		if !seen[name] {
			delete(c.nodes, name)
		}
	}
	c.nodeModels.keep(func(name string) bool { return seen[name] })
	if !nextHoldDownEnd.IsZero() {
		c.queue.AddAfter(assignKey, nextHoldDownEnd.Sub(now)+time.Millisecond)
	}

	c.statusMu.Lock()
	objects := make([]assign.Object, 0, len(eips))
	index := make(map[string]int, len(eips)) // name → its place in eips and objects
	pending := c.placedByObject()
	for _, e := range eips {
		index[e.Name] = len(objects)
		o := assign.Object{Name: e.Name, Created: e.CreationTimestamp.Time, EgressIPs: e.Spec.EgressIPs}
		if w, ok := c.written[e.Name]; ok && w.fromRV == e.ResourceVersion {
			o.Status, o.Standbys = w.items, w.standbys // our write is not in the cache yet
		} else if d, ok := c.desired[e.Name]; ok && d.rv == e.ResourceVersion && d.queued && c.cloud == nil {
			// Our write is queued: the status is being written as decided
			// from this very object. Deciding it again from the old status
			// could place it differently and churn (and costs a full cycle).
			delete(c.written, e.Name)
			o.Status, o.Standbys = d.in, d.standbys
		} else {
			delete(c.written, e.Name)
			o.Status, o.Standbys = c.stored(e)
		}
		o.Status = withPending(o.Status, pending[e.Name])
		objects = append(objects, o)
	}
	for name := range c.badStandby {
		if _, ok := index[name]; !ok {
			delete(c.badStandby, name)
		}
	}
	live := func(name string) bool { _, ok := index[name]; return ok }
	c.storedStatus.keep(live)
	c.statusMu.Unlock()
	res, delta, err := c.inc.Assign(objects, nodes, assign.Options{AvoidCordoned: c.cfg.DrainCordoned, Now: now})
	if err != nil {
		// Only duplicate names, which no source produces.
		c.metrics.ReconcileError("assign")
		c.log.Error("assignment failed", "err", err)
		return
	}

	eligible := map[string]bool{}
	perNode := map[string]int{}
	for _, n := range nodes {
		if n.Assignable {
			perNode[n.Name] = 0 // a series at 0, not absent, for every egress node
		}
		eligible[n.Name] = n.Assignable && n.AnnotationErr == nil && n.Ready && n.Reachable &&
			!(c.cfg.DrainCordoned && n.Cordoned)
	}
	// Only the objects the assignment recomputed can have a new result; the
	// others keep theirs (and their place in c.placed).
	results := res.Objects
	if !delta.Full {
		results = nil
		for _, name := range delta.Objects {
			if i, ok := slices.BinarySearchFunc(res.Objects, name, func(r assign.ObjectResult, n string) int {
				return strings.Compare(r.Name, n)
			}); ok {
				results = append(results, res.Objects[i])
			}
		}
	}
	c.statusMu.Lock()
	var prevPlaced map[string]string
	refreshed := false
	if delta.Full {
		prevPlaced, c.placed, c.desired = c.placed, map[string]string{}, make(map[string]desired, len(res.Objects))
		clear(c.foreign)
	} else {
		prevPlaced = map[string]string{}
		for _, name := range delta.Objects {
			for _, it := range c.desired[name].items {
				k := name + "/" + it.EgressIP
				prevPlaced[k] = c.placed[k]
				delete(c.placed, k)
			}
			delete(c.desired, name)
			delete(c.foreign, name)
		}
	}
	for _, r := range results {
		i := index[r.Name]
		e, recorded := eips[i], objects[i].Standbys // the standbys before this assignment
		d := desired{rv: e.ResourceVersion}
		standbys := map[netip.Addr]string{}
		for _, a := range r.Status {
			d.items = append(d.items, egressv1.EgressIPStatusItem{Node: a.Node, EgressIP: a.EgressIP})
			d.in = append(d.in, assign.StatusItem{Node: a.Node, EgressIP: a.EgressIP})
			if a.Standby != "" {
				standbys[a.Addr] = a.Standby
			}
			k := r.Name + "/" + a.EgressIP
			c.placed[k] = a.Node
			if prev, ok := prevPlaced[k]; ok && prev != a.Node {
				c.metrics.Moved(prev, !eligible[prev])
				toStandby := recorded[a.Addr] == a.Node
				c.log.Info("egress IP moved", "egressip", r.Name, "ip", a.EgressIP, "from", prev, "to", a.Node, "toStandby", toStandby)
				// An admin asks `kubectl describe eip` why the source address
				// changed; the log is on whichever replica led then.
				why := ""
				if !eligible[prev] {
					why = ": " + prev + " can no longer host egress IPs (not Ready, unreachable, unlabelled or cordoned)"
				}
				if toStandby {
					why += "; " + a.Node + " was its standby, which holds its connections' state"
				}
				c.src.Event(&corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind,
					Name: e.Name, UID: e.UID, ResourceVersion: e.ResourceVersion}, corev1.EventTypeNormal, ReasonEgressIPMoved,
					fmt.Sprintf("egress IP %s moved from %s to %s%s", a.EgressIP, prev, a.Node, why))
			}
		}
		if len(standbys) > 0 {
			d.standby, d.standbys = egressv1.FormatStandbys(standbys), standbys
		}
		c.desired[r.Name] = c.queueStatus(e, d)
	}
	if !delta.Full {
		// An object whose result stands may still have changed (its
		// metadata, or our own write seen back): its status is written
		// from the object as it is now, if it differs.
		for _, e := range eips {
			if d, ok := c.desired[e.Name]; ok && d.rv != e.ResourceVersion {
				c.desired[e.Name] = c.queueStatus(e, d)
				refreshed = true
			}
		}
	}
	for name := range c.written {
		if _, ok := index[name]; !ok {
			delete(c.written, name)
		}
	}
	c.statusMu.Unlock()
	c.cloudPlaced(c.placed)
	for _, node := range c.placed {
		perNode[node]++
	}

	changed := delta.Full || len(delta.Objects) > 0 || refreshed
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
	c.metrics.ObserveAssignment(c.now().Sub(start), perNode, int(unassigned), len(res.NoStandby))
	if !changed {
		return // the same Events as the last cycle, all emitted
	}
	current := make(map[assign.Event]struct{}, len(res.Events)+len(res.NodeProblems))
	all := slices.Concat(res.Events, res.NoStandby)
	for _, s := range c.specEvents.m {
		all = append(all, s.v...)
	}
	for _, ev := range c.foreign {
		all = append(all, ev)
	}
	for _, ev := range all {
		current[ev] = struct{}{}
		if _, done := c.emitted[ev]; done {
			continue
		}
		e := eips[index[ev.Object]]
		c.event(&corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind,
			Name: e.Name, UID: e.UID, ResourceVersion: e.ResourceVersion}, ev)
	}
	for _, ev := range res.NodeProblems {
		current[ev] = struct{}{}
		if _, done := c.emitted[ev]; done {
			continue
		}
		for _, n := range kn {
			if n.Name == ev.Object {
				c.event(&corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}, ev)
			}
		}
	}
	// Forgetting what no longer applies lets it be reported again if it returns.
	c.emitted = current
}

// queueStatus queues the status write of e when it does not already hold
// d, which it returns with the object's resourceVersion; an object whose
// status another controller writes gets an Event instead.
func (c *Controller) queueStatus(e *egressv1.EgressIP, d desired) desired {
	d.rv, d.queued = e.ResourceVersion, false
	delete(c.foreign, e.Name)
	if d.matches(e) {
		return d
	}
	if m := cluster.ForeignStatusWriter(e); m != "" {
		// Two writers would move the IP back and forth; yield.
		c.foreign[e.Name] = assign.Event{Object: e.Name, Reason: ReasonStatusOwnedElsewhere,
			Message: fmt.Sprintf("status is written by another controller (field manager %q, e.g. OVN-Kubernetes' cluster manager), so Egret does not write it and the egress IPs stay where that controller put them; to hand this EgressIP over to Egret, stop that controller and clear the status (kubectl patch egressip %s --type=merge -p '{\"status\":null}')", m, e.Name)}
		return d
	}
	d.queued = true
	c.queue.Add(qkey{name: e.Name})
	return d
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

// writeStatus stores the desired status of one object, if it differs.
func (c *Controller) writeStatus(ctx context.Context, k qkey) {
	obj, ok := c.src.EgressIP(k.name)
	c.statusMu.Lock()
	d, known := c.desired[k.name]
	c.statusMu.Unlock()
	d.items = c.cloudReady(d.items) // attach before claim
	if !ok || !known || obj.ResourceVersion != d.rv || d.matches(obj) ||
		cluster.ForeignStatusWriter(obj) != "" {
		// Gone, or changed since the assignment (which is queued again
		// by that change), or already right, or another controller's
		// since this item was queued (the assignment reports it).
		c.queue.Forget(k)
		return
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
		c.queue.Forget(k)
		items := make([]assign.StatusItem, len(d.items))
		for i, it := range d.items {
			items[i] = assign.StatusItem{Node: it.Node, EgressIP: it.EgressIP}
		}
		standbys, _ := egressv1.Standbys(cp) // written by FormatStandbys: valid
		c.statusMu.Lock()
		c.written[k.name] = written{fromRV: obj.ResourceVersion, items: items, standbys: standbys}
		c.statusMu.Unlock()
		c.log.Info("status written", "egressip", k.name, "items", d.items, "standbys", d.standby)
	case apierrors.IsConflict(err):
		// The cache is behind: the newer object triggers a new assignment;
		// retry this one too in case it does not.
		c.metrics.StatusWritten(true)
		c.queue.AddRateLimited(k)
	case apierrors.IsNotFound(err):
		c.queue.Forget(k)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		// Retrying the same content cannot succeed: report and stop.
		c.metrics.ReconcileError("status")
		c.queue.Forget(k)
		c.log.Error("status refused by the API server", "egressip", k.name, "err", err)
		c.src.Event(&corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind,
			Name: obj.Name, UID: obj.UID}, corev1.EventTypeWarning, "StatusUpdateFailed", err.Error())
	default:
		c.metrics.ReconcileError("status")
		c.log.Warn("status write failed; retrying", "egressip", k.name, "err", err)
		c.queue.AddRateLimited(k)
	}
}
