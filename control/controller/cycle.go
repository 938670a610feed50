package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The phases of one assignment cycle that compute: each takes what it reads
// as arguments and returns what it decided, and none writes to the API
// server, records an Event, logs or touches the queue. (*Controller).assign
// runs them in order and then emits their results.

// candidate reports whether n may host egress IPs as far as labels go:
// the assignable label and the controller's nodeSelector sel.
func candidate(sel labels.Selector, n *corev1.Node) bool {
	_, ok := n.Labels[cluster.LabelEgressAssignable]
	return ok && sel.Matches(labels.Set(n.Labels))
}

// nodeJudge turns the cached Nodes into the assignment's view of them:
// labels and annotations parsed, readiness, the probe verdicts and the
// hold-down of nodes that came back.
type nodeJudge struct {
	now      time.Time
	holdDown time.Duration
	// secondLook is how long the judge doubts a cycle in which every node
	// that was usable failed its check at once (0: it never doubts).
	secondLook    time.Duration
	drainCordoned bool
	sel           labels.Selector
	selector      string // sel as configured, for the Event naming it
	probing       bool   // the reachability check is on
	// model is assign's view of a Node's labels and annotations.
	model func(*corev1.Node) assign.Node
	// verdict is a node's last probe result and whether it has one.
	verdict func(name string) (reachable, known bool)
}

// judgedNodes is what nodeJudge.judge decided.
type judgedNodes struct {
	nodes []assign.Node
	// health is the hold-down memory for the next cycle, of the nodes
	// that still exist.
	health map[string]nodeHealth
	// eligible: the node may host egress IPs now, hold-down aside.
	eligible map[string]bool
	// holdDownEnd is the earliest hold-down still running (zero: none),
	// when an assignment must run again.
	holdDownEnd time.Time
	// recovered are the nodes held down from this cycle on.
	recovered []string
	// noAddress are the assignable nodes with no address to probe, which
	// host no egress IP while the check is on.
	noAddress []string
	// doubted are the nodes whose failed check this cycle is not believed
	// before a second look; lookAgain is when the earliest doubt ends (zero:
	// none), when an assignment must run again.
	doubted   []string
	lookAgain time.Time
}

// judge builds the assignment's nodes from the cached ones, given the
// hold-down memory of the last cycle.
//
// Two rules guard against the controller's own faults, which look like
// every gateway failing at once (its probes starved of CPU, or the
// controller cut off from the gateways): moving every IP off every node
// and then holding them all down left the IPs on no node for holdDown.
//   - Second look: when no candidate node passes its check and some that
//     failed were usable, those keep counting as reachable for secondLook;
//     if every node still fails then, the failure is believed.
//   - A node that comes back is held down only if another node can host
//     IPs meanwhile (eligible, not coming back itself, not held down), and
//     not if it was down in a cycle in which no node was usable: no node
//     took its IPs then, so there is nothing to pull back, and holding the
//     gateways down one after the other as they return would keep IPs on
//     no node.
func (j nodeJudge) judge(kn []*corev1.Node, prev map[string]nodeHealth) judgedNodes {
	out := judgedNodes{
		nodes:    make([]assign.Node, 0, len(kn)),
		health:   make(map[string]nodeHealth, len(kn)),
		eligible: make(map[string]bool, len(kn)),
	}
	// The specification: egress IPs on control-plane nodes are not
	// supported on a cluster provisioned on AWS.
	onAWS := slices.ContainsFunc(kn, cluster.OnAWS)
	type verdict struct{ reachable, known bool }
	verdicts := make([]verdict, len(kn))
	anyPasses := false
	for i, n := range kn {
		r, known := j.verdict(n.Name)
		verdicts[i] = verdict{r, known}
		anyPasses = anyPasses || (candidate(j.sel, n) && known && r && cluster.NodeReady(n))
	}
	var back []int // nodes coming back this cycle, by index into out.nodes
	var candidates []string
	for i, n := range kn {
		if candidate(j.sel, n) {
			candidates = append(candidates, n.Name)
		}
		an := j.model(n)
		switch {
		case !an.Assignable:
		case onAWS && cluster.ControlPlane(n):
			an.Excluded = "is a control-plane node of a cluster on AWS, where egress IPs on control-plane nodes are not supported"
		case !j.sel.Matches(labels.Set(n.Labels)):
			an.Excluded = "does not match the controller's nodeSelector " + j.selector
		}
		an.Ready = cluster.NodeReady(n)
		an.Cordoned = n.Spec.Unschedulable
		reachable, known := verdicts[i].reachable, verdicts[i].known
		an.Reachable = reachable
		if !candidate(j.sel, n) {
			// Not probed: the check only matters for nodes that host IPs.
			an.Reachable, known = true, true
		} else if _, hasAddr := cluster.NodeAddress(n); !hasAddr && j.probing {
			out.noAddress = append(out.noAddress, n.Name)
		}
		h, had := prev[n.Name]
		if known && !an.Reachable && an.Ready && had && h.usable && !anyPasses && j.secondLook > 0 {
			if h.doubtUntil.IsZero() {
				h.doubtUntil = j.now.Add(j.secondLook)
				out.doubted = append(out.doubted, n.Name)
			}
			if j.now.Before(h.doubtUntil) {
				an.Reachable = true
				if out.lookAgain.IsZero() || h.doubtUntil.Before(out.lookAgain) {
					out.lookAgain = h.doubtUntil
				}
			}
		}
		if (known && reachable) || !j.now.Before(h.doubtUntil) {
			h.doubtUntil = time.Time{}
		}
		if known {
			usable := an.Ready && an.Reachable
			switch {
			case !had:
				h = nodeHealth{usable: usable}
			case usable && !h.usable && j.holdDown > 0:
				h.usable = true
				back = append(back, len(out.nodes))
			default:
				h.usable = usable
			}
			had = true
		}
		if had {
			out.health[n.Name] = h
		}
		out.eligible[n.Name] = an.Assignable && an.AnnotationErr == nil && an.Ready && an.Reachable &&
			!(j.drainCordoned && an.Cordoned)
		out.nodes = append(out.nodes, an)
	}
	elsewhere := false
	for i, an := range out.nodes {
		h := out.health[an.Name]
		if out.eligible[an.Name] && an.Excluded == "" && !slices.Contains(back, i) && !j.now.Before(h.holdUntil) {
			elsewhere = true
		}
	}
	for _, i := range back {
		name := out.nodes[i].Name
		h := out.health[name]
		if elsewhere && !h.outage {
			h.holdUntil = j.now.Add(j.holdDown)
			out.recovered = append(out.recovered, name)
		}
		h.outage = false
		out.health[name] = h
	}
	// A cycle in which candidates were judged and none is usable: an
	// outage of every gateway, which their return ends.
	judged, usable := false, false
	for _, name := range candidates {
		if h, ok := out.health[name]; ok {
			judged, usable = true, usable || h.usable
		}
	}
	if judged && !usable {
		for _, name := range candidates {
			if h, ok := out.health[name]; ok {
				h.outage = true
				out.health[name] = h
			}
		}
	}
	for i := range out.nodes {
		an := &out.nodes[i]
		if h, ok := out.health[an.Name]; ok && j.now.Before(h.holdUntil) {
			an.HoldDownUntil = h.holdUntil
			if out.holdDownEnd.IsZero() || h.holdUntil.Before(out.holdDownEnd) {
				out.holdDownEnd = h.holdUntil
			}
		}
	}
	return out
}

// assignInputs is the assignment's input for every cached EgressIP, and
// the names whose entry in written no longer applies (the cache caught up
// with the write, or another change came first).
type assignInputs struct {
	objects []assign.Object
	index   map[string]int // name → its place in objects and in the cached list
	stale   []string
}

// inputs builds the assignment's objects from the cached EgressIPs. The
// status each starts from is, in order: the one this controller wrote and
// the cache does not show yet; the one queued for writing from this very
// version of the object (not with cloud attachment, whose status waits on
// the cloud); else the stored one (stored converts it), with the
// placements pending in the cloud added.
func inputs(eips []*egressv1.EgressIP, written map[string]written, desired map[string]desired, cloud bool,
	pending map[string][]assign.StatusItem, stored func(*egressv1.EgressIP) ([]assign.StatusItem, map[netip.Addr]string)) assignInputs {
	in := assignInputs{objects: make([]assign.Object, 0, len(eips)), index: make(map[string]int, len(eips))}
	for _, e := range eips {
		in.index[e.Name] = len(in.objects)
		o := assign.Object{Name: e.Name, Created: e.CreationTimestamp.Time, EgressIPs: e.Spec.EgressIPs}
		w, wrote := written[e.Name]
		if wrote && w.fromRV == e.ResourceVersion {
			o.Status, o.Standbys = w.items, w.standbys // our write is not in the cache yet
		} else {
			if wrote {
				in.stale = append(in.stale, e.Name)
			}
			if d, ok := desired[e.Name]; ok && d.rv == e.ResourceVersion && d.queued && !cloud {
				// Our write is queued: the status is being written as
				// decided from this very object. Deciding it again from
				// the old status could place it differently and churn
				// (and costs a full cycle).
				o.Status, o.Standbys = d.in, d.standbys
			} else {
				o.Status, o.Standbys = stored(e)
			}
		}
		o.Status = withPending(o.Status, pending[e.Name])
		in.objects = append(in.objects, o)
	}
	for name := range written {
		if _, ok := in.index[name]; !ok {
			in.stale = append(in.stale, name)
		}
	}
	return in
}

// memory is what the controller remembers of its decisions between
// cycles. The status workers read desired (under statusMu).
type memory struct {
	desired map[string]desired
	placed  map[string]string       // "object/ip" → node
	foreign map[string]assign.Event // by object: its status is another controller's
}

// move is an egress IP the assignment placed on another node.
type move struct {
	object    *egressv1.EgressIP
	ip        string
	from, to  string
	failover  bool // from can no longer host egress IPs
	toStandby bool // to was the IP's recorded standby
}

// decision is what a cycle has to tell after decide: the moves, the
// status writes to queue, and whether an object's result stands while
// the object changed.
type decision struct {
	moves     []move
	writes    []string
	refreshed bool
}

// decide records the assignment's result in m, the previous decisions,
// and returns what changed. delta says which results are new: every one
// (Full) or those of the objects it names; the others stand.
func (m *memory) decide(res assign.Result, delta assign.Delta, eips []*egressv1.EgressIP, in assignInputs,
	eligible map[string]bool) decision {
	var out decision
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
	var prevPlaced map[string]string
	if delta.Full {
		prevPlaced, m.placed, m.desired = m.placed, map[string]string{}, make(map[string]desired, len(res.Objects))
		clear(m.foreign)
	} else {
		prevPlaced = map[string]string{}
		for _, name := range delta.Objects {
			for _, it := range m.desired[name].items {
				k := name + "/" + it.EgressIP
				prevPlaced[k] = m.placed[k]
				delete(m.placed, k)
			}
			delete(m.desired, name)
			delete(m.foreign, name)
		}
	}
	for _, r := range results {
		i := in.index[r.Name]
		e, recorded := eips[i], in.objects[i].Standbys // the standbys before this assignment
		d := desired{rv: e.ResourceVersion}
		standbys := map[netip.Addr]string{}
		for _, a := range r.Status {
			d.items = append(d.items, egressv1.EgressIPStatusItem{Node: a.Node, EgressIP: a.EgressIP})
			d.in = append(d.in, assign.StatusItem{Node: a.Node, EgressIP: a.EgressIP})
			if a.Standby != "" {
				standbys[a.Addr] = a.Standby
			}
			k := r.Name + "/" + a.EgressIP
			m.placed[k] = a.Node
			if prev, ok := prevPlaced[k]; ok && prev != a.Node {
				out.moves = append(out.moves, move{object: e, ip: a.EgressIP, from: prev, to: a.Node,
					failover: !eligible[prev], toStandby: recorded[a.Addr] == a.Node})
			}
		}
		if len(standbys) > 0 {
			d.standby, d.standbys = egressv1.FormatStandbys(standbys), standbys
		}
		m.desired[r.Name] = m.status(e, d, &out)
	}
	if !delta.Full {
		// An object whose result stands may still have changed (its
		// metadata, or our own write seen back): its status is written
		// from the object as it is now, if it differs.
		for _, e := range eips {
			if d, ok := m.desired[e.Name]; ok && d.rv != e.ResourceVersion {
				m.desired[e.Name] = m.status(e, d, &out)
				out.refreshed = true
			}
		}
	}
	return out
}

// status is d for the object e as it is now. When e does not already hold
// it, its write is added to out, unless another controller writes e's
// status: then m.foreign explains why it is not.
func (m *memory) status(e *egressv1.EgressIP, d desired, out *decision) desired {
	d.rv, d.queued = e.ResourceVersion, false
	delete(m.foreign, e.Name)
	if d.matches(e) {
		return d
	}
	if mgr := cluster.ForeignStatusWriter(e); mgr != "" {
		// Two writers would move the IP back and forth; yield.
		m.foreign[e.Name] = assign.Event{Object: e.Name, Reason: ReasonStatusOwnedElsewhere,
			Message: fmt.Sprintf("status is written by another controller (field manager %q, e.g. OVN-Kubernetes' cluster manager), so Egret does not write it and the egress IPs stay where that controller put them; to hand this EgressIP over to Egret, stop that controller and clear the status (kubectl patch egressip %s --type=merge -p '{\"status\":null}')", mgr, e.Name)}
		return d
	}
	d.queued = true
	out.writes = append(out.writes, e.Name)
	return d
}

// message is the EgressIPMoved Event's text: an admin asks `kubectl
// describe eip` why the source address changed, and the log is on
// whichever replica led then.
func (mv move) message() string {
	why := ""
	if mv.failover {
		why = ": " + mv.from + " can no longer host egress IPs (not Ready, unreachable, unlabelled or cordoned)"
	}
	if mv.toStandby {
		why += "; " + mv.to + " was its standby, which holds its connections' state"
	}
	return fmt.Sprintf("egress IP %s moved from %s to %s%s", mv.ip, mv.from, mv.to, why)
}

// toReport returns, for each list of this cycle's Events, those not
// reported yet, in order, and the set of all of them, which becomes the
// reported set: an Event that clears is forgotten, and reported again if
// it returns.
func toReport(reported map[assign.Event]struct{}, lists ...[]assign.Event) ([][]assign.Event, map[assign.Event]struct{}) {
	out := make([][]assign.Event, len(lists))
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	now := make(map[assign.Event]struct{}, n)
	for i, l := range lists {
		for _, ev := range l {
			now[ev] = struct{}{}
			if _, done := reported[ev]; !done {
				out[i] = append(out[i], ev)
			}
		}
	}
	return out, now
}
