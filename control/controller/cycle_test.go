package controller

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// judge runs nodeJudge over kn with the given verdicts (a node absent
// from verdicts has none yet).
func judge(t *testing.T, now time.Time, kn []*corev1.Node, verdicts map[string]bool, prev map[string]nodeHealth) judgedNodes {
	t.Helper()
	return nodeJudge{now: now, holdDown: 30 * time.Second, sel: labels.Everything(), probing: true,
		model: func(n *corev1.Node) assign.Node { return assign.NodeFromObject(n.Name, n.Labels, n.Annotations) },
		verdict: func(name string) (bool, bool) {
			r, ok := verdicts[name]
			return r, ok
		}}.judge(kn, prev)
}

func nodeNamed(t *testing.T, nodes []assign.Node, name string) assign.Node {
	t.Helper()
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in %+v", name, nodes)
	return assign.Node{}
}

// A node that comes back is held down from that cycle on; one not judged
// yet has no memory and no hold-down; a node that is gone is forgotten; a
// hold-down that ended is not reported.
func TestJudgeHoldsDownARecoveredNode(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kn := []*corev1.Node{readyNode("back", "10.0.0.1/24"), readyNode("new", "10.0.0.2/24"), readyNode("done", "10.0.0.3/24")}
	prev := map[string]nodeHealth{
		"back": {usable: false},
		"done": {usable: true, holdUntil: now.Add(-time.Second)},
		"gone": {usable: true},
	}
	j := judge(t, now, kn, map[string]bool{"back": true, "done": true}, prev)

	if want := now.Add(30 * time.Second); !nodeNamed(t, j.nodes, "back").HoldDownUntil.Equal(want) || !j.holdDownEnd.Equal(want) {
		t.Errorf("back held until %v, next end %v; want both %v", nodeNamed(t, j.nodes, "back").HoldDownUntil, j.holdDownEnd, want)
	}
	if !slices.Equal(j.recovered, []string{"back"}) {
		t.Errorf("recovered %v, want [back]", j.recovered)
	}
	if h := nodeNamed(t, j.nodes, "done").HoldDownUntil; !h.IsZero() {
		t.Errorf("done still held down until %v", h)
	}
	if _, ok := j.health["new"]; ok {
		t.Error("a node without a verdict has a memory")
	}
	if _, ok := j.health["gone"]; ok {
		t.Error("a node that is gone is remembered")
	}
	if n := nodeNamed(t, j.nodes, "new"); n.Reachable || !n.Ready {
		t.Errorf("new: reachable %v ready %v, want unreachable until probed, ready", n.Reachable, n.Ready)
	}
	if !j.eligible["back"] || j.eligible["new"] {
		t.Errorf("eligible %v, want back (hold-down aside) and not new", j.eligible)
	}
	if prev["back"].usable {
		t.Error("judge modified the previous memory")
	}
}

// On a cluster with an AWS node, control-plane nodes are excluded; a node
// the nodeSelector does not match is excluded, named, and not probed.
func TestJudgeExclusions(t *testing.T) {
	cp, aws, other := readyNode("cp", "10.0.0.1/24"), readyNode("aws", "10.0.0.2/24"), readyNode("other", "10.0.0.3/24")
	cp.Labels[cluster.LabelControlPlane] = ""
	aws.Spec.ProviderID = "aws:///us-east-1a/i-0abc"
	aws.Labels["gw"] = "yes"
	cp.Labels["gw"] = "yes"
	sel, err := labels.Parse("gw=yes")
	if err != nil {
		t.Fatal(err)
	}
	j := nodeJudge{sel: sel, selector: "gw=yes", probing: true,
		model:   func(n *corev1.Node) assign.Node { return assign.NodeFromObject(n.Name, n.Labels, n.Annotations) },
		verdict: func(string) (bool, bool) { return true, true }}.judge([]*corev1.Node{cp, aws, other}, nil)
	if ex := nodeNamed(t, j.nodes, "cp").Excluded; !strings.Contains(ex, "control-plane node of a cluster on AWS") {
		t.Errorf("cp excluded %q", ex)
	}
	if ex := nodeNamed(t, j.nodes, "other").Excluded; ex != "does not match the controller's nodeSelector gw=yes" {
		t.Errorf("other excluded %q", ex)
	}
	if ex := nodeNamed(t, j.nodes, "aws").Excluded; ex != "" {
		t.Errorf("aws excluded %q", ex)
	}
}

func statusObject(name, rv string, items ...egressv1.EgressIPStatusItem) *egressv1.EgressIP {
	e := eipObject(name, "")
	e.ResourceVersion = rv
	e.Spec.EgressIPs = nil
	for _, it := range items {
		e.Spec.EgressIPs = append(e.Spec.EgressIPs, it.EgressIP)
	}
	e.Status.Items = items
	return e
}

// decide turns a result into moves and status writes: a move off a node
// that can no longer host IPs onto the recorded standby says both; an
// object that already holds its status is not written; one whose status
// another controller writes is explained instead.
func TestDecide(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.10")
	moved := statusObject("moved", "5", egressv1.EgressIPStatusItem{Node: "n1", EgressIP: "10.0.0.10"})
	same := statusObject("same", "6", egressv1.EgressIPStatusItem{Node: "n2", EgressIP: "10.0.0.20"})
	foreign := statusObject("foreign", "7")
	foreign.Spec.EgressIPs = []string{"10.0.0.30"}
	foreign.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "ovnkube-cluster-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}}}
	eips := []*egressv1.EgressIP{moved, same, foreign}
	in := assignInputs{index: map[string]int{"moved": 0, "same": 1, "foreign": 2}, objects: []assign.Object{
		{Name: "moved", Standbys: map[netip.Addr]string{ip: "n2"}}, {Name: "same"}, {Name: "foreign"}}}
	m := memory{desired: map[string]desired{}, placed: map[string]string{"moved/10.0.0.10": "n1"}, foreign: map[string]assign.Event{}}
	res := assign.Result{Objects: []assign.ObjectResult{
		{Name: "foreign", Status: []assign.Assignment{{Node: "n1", EgressIP: "10.0.0.30", Addr: netip.MustParseAddr("10.0.0.30")}}},
		{Name: "moved", Status: []assign.Assignment{{Node: "n2", EgressIP: "10.0.0.10", Addr: ip, Standby: "n3"}}},
		{Name: "same", Status: []assign.Assignment{{Node: "n2", EgressIP: "10.0.0.20", Addr: netip.MustParseAddr("10.0.0.20")}}},
	}}
	d := m.decide(res, assign.Delta{Full: true}, eips, in, map[string]bool{"n1": false, "n2": true})

	if len(d.moves) != 1 {
		t.Fatalf("moves %+v, want one", d.moves)
	}
	want := "egress IP 10.0.0.10 moved from n1 to n2: n1 can no longer host egress IPs (not Ready, unreachable, unlabelled or cordoned); n2 was its standby, which holds its connections' state"
	if got := d.moves[0].message(); got != want {
		t.Errorf("move message\n%s\nwant\n%s", got, want)
	}
	if !slices.Equal(d.writes, []string{"moved"}) {
		t.Errorf("writes %v, want [moved]", d.writes)
	}
	if got := m.desired["moved"]; !got.queued || got.standby != `{"10.0.0.10":"n3"}` || got.rv != "5" {
		t.Errorf("desired of moved %+v", got)
	}
	if m.desired["same"].queued {
		t.Error("same already holds its status, yet its write is queued")
	}
	if ev, ok := m.foreign["foreign"]; !ok || ev.Reason != ReasonStatusOwnedElsewhere || !strings.Contains(ev.Message, "ovnkube-cluster-manager") {
		t.Errorf("foreign %+v, want StatusOwnedByAnotherController naming the manager", m.foreign)
	}
	if m.placed["moved/10.0.0.10"] != "n2" || m.placed["foreign/10.0.0.30"] != "n1" {
		t.Errorf("placed %v", m.placed)
	}

	// The next cycle recomputes nothing; only same changed (its metadata):
	// its status, still right, is not written again.
	same2 := same.DeepCopy()
	same2.ResourceVersion = "8"
	eips[1] = same2
	d = m.decide(res, assign.Delta{}, eips, in, nil)
	if len(d.moves) != 0 || len(d.writes) != 0 || !d.refreshed {
		t.Errorf("after a metadata change: %+v, want nothing but refreshed", d)
	}
	if m.desired["same"].rv != "8" {
		t.Errorf("same's desired status is for version %s, want 8", m.desired["same"].rv)
	}
}

// An Event is reported once while it holds, and again if it clears and
// comes back; each list gets its own part of the report.
func TestToReport(t *testing.T) {
	a := assign.Event{Object: "x", Reason: assign.ReasonNoMatchingNodeFound, Message: "a"}
	b := assign.Event{Object: "n1", Reason: assign.ReasonInvalidNodeAnnotation, Message: "b"}
	out, reported := toReport(nil, []assign.Event{a}, []assign.Event{b})
	if len(out[0]) != 1 || len(out[1]) != 1 {
		t.Fatalf("first report %v", out)
	}
	out, reported = toReport(reported, []assign.Event{a}, []assign.Event{b})
	if len(out[0])+len(out[1]) != 0 {
		t.Errorf("reported again: %v", out)
	}
	_, reported = toReport(reported, nil, []assign.Event{b})
	out, _ = toReport(reported, []assign.Event{a}, []assign.Event{b})
	if !slices.Equal(out[0], []assign.Event{a}) || len(out[1]) != 0 {
		t.Errorf("after a cleared and came back: %v, want a alone", out)
	}
}

// A cycle that fails (two objects of one name, which no real source
// serves) is retried by the queue with backoff, and forgotten once it
// succeeds.
func TestFailedCycleIsRetried(t *testing.T) {
	src := &staticSource{nodes: []*corev1.Node{readyNode("n0", "10.0.0.1/24")},
		eips: []*egressv1.EgressIP{eipObject("a", "10.0.0.10"), eipObject("a", "10.0.0.11")}}
	off := 0
	c, err := New(src, Config{ReachabilityTotalTimeoutSeconds: &off}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	if err := c.assign(); err == nil {
		t.Fatal("a cycle over two objects named a succeeded")
	}
	c.queue.Add(assignKey)
	c.processNext(context.Background())
	if n := c.queue.NumRequeues(assignKey); n != 1 {
		t.Fatalf("%d requeues after a failed cycle, want 1", n)
	}
	src.eips = src.eips[:1]
	// The retry comes back from the rate limiter's delay.
	c.processNext(context.Background())
	if n := c.queue.NumRequeues(assignKey); n != 0 {
		t.Errorf("%d requeues after the cycle succeeded, want 0 (forgotten)", n)
	}
	if got := c.mem.desired["a"].items; len(got) != 1 || got[0].Node != "n0" {
		t.Errorf("a's desired status %v, want on n0", got)
	}
}

// When every node that hosted IPs fails its check in the same cycle, the
// judge does not believe it at once: the controller's own probes are the
// likelier fault (it was starved, or cut off). The nodes keep counting as
// reachable until a second look, secondLook later; a failure that lasts
// past it is believed. A node that fails while another still answers moves
// at once, as before.
func TestJudgeSecondLookWhenEveryNodeFails(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kn := []*corev1.Node{readyNode("a", "10.0.0.1/24"), readyNode("b", "10.0.0.2/24")}
	down := map[string]bool{"a": false, "b": false}
	look := func(at time.Time, verdicts map[string]bool, prev map[string]nodeHealth) judgedNodes {
		t.Helper()
		return nodeJudge{now: at, holdDown: 30 * time.Second, secondLook: 3 * time.Second, sel: labels.Everything(), probing: true,
			model: func(n *corev1.Node) assign.Node { return assign.NodeFromObject(n.Name, n.Labels, n.Annotations) },
			verdict: func(name string) (bool, bool) {
				r, ok := verdicts[name]
				return r, ok
			}}.judge(kn, prev)
	}
	prev := map[string]nodeHealth{"a": {usable: true}, "b": {usable: true}}

	first := look(now, down, prev)
	for _, name := range []string{"a", "b"} {
		if n := nodeNamed(t, first.nodes, name); !n.Reachable || !first.eligible[name] {
			t.Errorf("first failure of every node: %s reachable %v eligible %v, want both until the second look", name, n.Reachable, first.eligible[name])
		}
	}
	if want := now.Add(3 * time.Second); !first.lookAgain.Equal(want) || !slices.Equal(first.doubted, []string{"a", "b"}) {
		t.Errorf("look again at %v for %v, want %v for [a b]", first.lookAgain, first.doubted, want)
	}

	// A cycle before the second look (another change) keeps the doubt and
	// does not restart it.
	mid := look(now.Add(time.Second), down, first.health)
	if !nodeNamed(t, mid.nodes, "a").Reachable || len(mid.doubted) != 0 || !mid.lookAgain.Equal(now.Add(3*time.Second)) {
		t.Errorf("before the second look: a reachable %v, doubted %v, look again %v", nodeNamed(t, mid.nodes, "a").Reachable, mid.doubted, mid.lookAgain)
	}

	// The second look: still every node down, so it is believed.
	second := look(now.Add(3*time.Second), down, mid.health)
	for _, name := range []string{"a", "b"} {
		if n := nodeNamed(t, second.nodes, name); n.Reachable || second.eligible[name] || second.health[name].usable {
			t.Errorf("second look: %s reachable %v eligible %v usable %v, want none", name, n.Reachable, second.eligible[name], second.health[name].usable)
		}
	}
	if !second.lookAgain.IsZero() {
		t.Errorf("second look asks for a third at %v", second.lookAgain)
	}

	// One node of three failing while the others answer is believed at once.
	kn = append(kn, readyNode("c", "10.0.0.3/24"))
	prev = map[string]nodeHealth{"a": {usable: true}, "b": {usable: true}, "c": {usable: true}}
	one := look(now, map[string]bool{"a": false, "b": true, "c": true}, prev)
	if nodeNamed(t, one.nodes, "a").Reachable || one.eligible["a"] || len(one.doubted) != 0 {
		t.Errorf("a alone failing: reachable %v eligible %v doubted %v, want it out at once", nodeNamed(t, one.nodes, "a").Reachable, one.eligible["a"], one.doubted)
	}
}

// The hold-down keeps a flapping node from pulling IPs back from the node
// that took them. When no other node can host them (every node was down,
// e.g. the controller's probes all timed out at once), holding the nodes
// that come back down would only leave the IPs on no node for holdDown:
// they are not held down. With another node usable, a returning node is.
func TestJudgeNoHoldDownWhenNoOtherNodeCanHost(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kn := []*corev1.Node{readyNode("a", "10.0.0.1/24"), readyNode("b", "10.0.0.2/24"), readyNode("c", "10.0.0.3/24")}
	allDown := judge(t, now.Add(-time.Second), kn, map[string]bool{"a": false, "b": false, "c": false},
		map[string]nodeHealth{"a": {usable: true}, "b": {usable: true}, "c": {usable: true}}).health

	j := judge(t, now, kn, map[string]bool{"a": true, "b": true, "c": false}, allDown)
	for _, name := range []string{"a", "b"} {
		if h := nodeNamed(t, j.nodes, name).HoldDownUntil; !h.IsZero() {
			t.Errorf("%s held down until %v although no other node could host its IPs", name, h)
		}
		if !j.health[name].usable || !j.health[name].holdUntil.IsZero() {
			t.Errorf("%s memory %+v, want usable and not held", name, j.health[name])
		}
	}
	if !j.holdDownEnd.IsZero() || len(j.recovered) != 0 {
		t.Errorf("hold-down end %v, recovered %v; want none", j.holdDownEnd, j.recovered)
	}

	// c, down since the outage too, comes back while a and b serve: no
	// node took its IPs, it is not held down either.
	k := judge(t, now.Add(time.Second), kn, map[string]bool{"a": true, "b": true, "c": true}, j.health)
	for _, name := range []string{"a", "b", "c"} {
		if h := nodeNamed(t, k.nodes, name).HoldDownUntil; !h.IsZero() {
			t.Errorf("%s held down until %v after returning from the outage", name, h)
		}
	}

	// Later, c fails alone and comes back while a and b serve: held down
	// as usual.
	l := judge(t, now.Add(2*time.Second), kn, map[string]bool{"a": true, "b": true, "c": false}, k.health)
	m := judge(t, now.Add(3*time.Second), kn, map[string]bool{"a": true, "b": true, "c": true}, l.health)
	if want := now.Add(33 * time.Second); !nodeNamed(t, m.nodes, "c").HoldDownUntil.Equal(want) || !slices.Equal(m.recovered, []string{"c"}) {
		t.Errorf("c held until %v (recovered %v), want %v", nodeNamed(t, m.nodes, "c").HoldDownUntil, m.recovered, want)
	}
	if !nodeNamed(t, m.nodes, "a").HoldDownUntil.IsZero() {
		t.Error("a held down in a later cycle")
	}

	// The gateways return one at a time from an outage of all: the later
	// ones are not held down because the first serves again.
	out := judge(t, now, kn, map[string]bool{"a": false, "b": false, "c": false}, map[string]nodeHealth{"a": {usable: true}, "b": {usable: true}, "c": {usable: true}})
	first := judge(t, now.Add(time.Second), kn, map[string]bool{"a": true, "b": false, "c": false}, out.health)
	second := judge(t, now.Add(2*time.Second), kn, map[string]bool{"a": true, "b": true, "c": false}, first.health)
	if h := nodeNamed(t, second.nodes, "b").HoldDownUntil; !h.IsZero() || len(first.recovered)+len(second.recovered) != 0 {
		t.Errorf("b held down until %v when it returned after a from an outage of all (recovered %v %v)", h, first.recovered, second.recovered)
	}

	// A node held down does not count as somewhere else for the IPs.
	held := map[string]nodeHealth{"a": {usable: false}, "b": {usable: true, holdUntil: now.Add(10 * time.Second)}, "c": {usable: false}}
	n := judge(t, now, kn, map[string]bool{"a": true, "b": true, "c": false}, held)
	if h := nodeNamed(t, n.nodes, "a").HoldDownUntil; !h.IsZero() {
		t.Errorf("a held down until %v while the only other usable node is held down itself", h)
	}
}
