package controller_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/nstest"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/controller"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// memSource is an in-memory Source for unit tests; failNext makes the next
// updates fail with the given errors.
type memSource struct {
	mu      sync.Mutex
	rv      int
	eips    map[string]*egressv1.EgressIP
	nodes   []*corev1.Node
	nss     []*corev1.Namespace
	pods    []*corev1.Pod
	traffic map[string]*egressv1.EgressIPTraffic
	// trafficWrites counts UpdateTrafficStatus calls; failTraffic makes
	// the next ones fail.
	trafficWrites int
	failTraffic   []error
	// lagged holds the EgressIPTraffic writes the cache has not shown
	// yet, while lagTraffic is set (an informer behind the API server).
	lagTraffic bool
	lagged     map[string]*egressv1.EgressIPTraffic
	failNext   []error
	updates    int
	events     []recorded
	changed    func(cluster.Kind)
}

func (m *memSource) Start(_ context.Context, changed func(cluster.Kind)) error {
	m.mu.Lock()
	m.changed = changed
	m.mu.Unlock()
	return nil
}

func (m *memSource) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*egressv1.EgressIP
	for _, e := range m.eips {
		out = append(out, e)
	}
	var traffic []*egressv1.EgressIPTraffic
	for _, t := range m.traffic {
		traffic = append(traffic, t)
	}
	return cluster.View{EgressIPs: out, Nodes: m.nodes, Namespaces: m.nss, Pods: m.pods, Traffic: traffic}
}

// UpdateTrafficStatus stores t as the API server does: a conflict when
// t is stale, a new resourceVersion and a change notice otherwise.
func (m *memSource) UpdateTrafficStatus(_ context.Context, t *egressv1.EgressIPTraffic) error {
	m.mu.Lock()
	m.trafficWrites++
	if len(m.failTraffic) > 0 {
		err := m.failTraffic[0]
		m.failTraffic = m.failTraffic[1:]
		m.mu.Unlock()
		return err
	}
	cur, ok := m.traffic[t.Name]
	if l, lag := m.lagged[t.Name]; lag {
		cur = l
	}
	if !ok {
		m.mu.Unlock()
		return apierrors.NewNotFound(egressv1.TrafficGroupVersionResource.GroupResource(), t.Name)
	}
	if cur.ResourceVersion != t.ResourceVersion {
		m.mu.Unlock()
		return apierrors.NewConflict(egressv1.TrafficGroupVersionResource.GroupResource(), t.Name, fmt.Errorf("stale"))
	}
	m.rv++
	cp := t.DeepCopy()
	cp.ResourceVersion = strconv.Itoa(m.rv)
	if m.lagTraffic {
		if m.lagged == nil {
			m.lagged = map[string]*egressv1.EgressIPTraffic{}
		}
		m.lagged[t.Name] = cp
		m.mu.Unlock()
		return nil
	}
	m.traffic[t.Name] = cp
	changed := m.changed
	m.mu.Unlock()
	changed(cluster.KindTraffic)
	return nil
}

// setTraffic adds or replaces t, as a user's apply.
func (m *memSource) setTraffic(t *egressv1.EgressIPTraffic) {
	m.mu.Lock()
	m.rv++
	t = t.DeepCopy()
	t.ResourceVersion = strconv.Itoa(m.rv)
	if m.traffic == nil {
		m.traffic = map[string]*egressv1.EgressIPTraffic{}
	}
	m.traffic[t.Name] = t
	changed := m.changed
	m.mu.Unlock()
	if changed != nil {
		changed(cluster.KindTraffic)
	}
}

// catchUp makes the cache show the lagged writes.
func (m *memSource) catchUp() {
	m.mu.Lock()
	m.lagTraffic = false
	for name, t := range m.lagged {
		m.traffic[name] = t
	}
	m.lagged = nil
	changed := m.changed
	m.mu.Unlock()
	changed(cluster.KindTraffic)
}

func (m *memSource) getTraffic(name string) *egressv1.EgressIPTraffic {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.traffic[name]
}

func (m *memSource) Check(context.Context) (cluster.Statuses, error) { return nil, nil }

func (m *memSource) EgressIP(name string) (*egressv1.EgressIP, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.eips[name]
	return e, ok
}

func (m *memSource) UpdateEgressIP(_ context.Context, e *egressv1.EgressIP) error {
	m.mu.Lock()
	m.updates++
	if len(m.failNext) > 0 {
		err := m.failNext[0]
		m.failNext = m.failNext[1:]
		m.mu.Unlock()
		return err
	}
	if cur := m.eips[e.Name]; cur.ResourceVersion != e.ResourceVersion {
		m.mu.Unlock()
		return apierrors.NewConflict(egressv1.GroupVersionResource.GroupResource(), e.Name, fmt.Errorf("stale"))
	}
	m.rv++
	cp := e.DeepCopy()
	cp.ResourceVersion = strconv.Itoa(m.rv)
	m.eips[e.Name] = cp // replaced, never modified in place
	changed := m.changed
	m.mu.Unlock()
	changed(cluster.KindEgressIP)
	return nil
}

func (m *memSource) Event(ref *corev1.ObjectReference, _, reason, message string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, recorded{kind: ref.Kind, name: ref.Name, reason: reason, message: message})
}

func (m *memSource) snapshot() (int, []recorded) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.updates, append([]recorded(nil), m.events...)
}

func newMem(eips ...*egressv1.EgressIP) *memSource {
	m := &memSource{eips: map[string]*egressv1.EgressIP{}}
	for _, e := range eips {
		m.rv++
		e.ResourceVersion = strconv.Itoa(m.rv)
		m.eips[e.Name] = e
	}
	// Reachability disabled in these tests: nodes need no address.
	m.nodes = []*corev1.Node{egressNode("n1", "", "192.168.126.2/24", true), egressNode("n2", "", "192.168.126.3/24", true)}
	return m
}

func runMem(t *testing.T, m *memSource) *controller.Controller {
	off := 0
	return startController(t, m, controller.Config{ReachabilityTotalTimeoutSeconds: &off})
}

// settle, in a synctest bubble, runs the fake clock a minute on (past any
// retry the rate limiter schedules after a few failures: 5 ms doubling)
// and returns once every goroutine of the bubble is durably blocked: the
// queue is drained and no retry is pending, so what the controller would
// still do is done. A check after it that nothing else happened is a check
// on that signal, not on a wait.
func settle() {
	// sleep: inside a testing/synctest bubble a sleep is how the fake clock
	// moves (synctest.Wait does not advance it): this runs it past every
	// pending retry timer, instantly; nothing real is waited for
	time.Sleep(time.Minute)
	synctest.Wait()
}

func TestStatusRetriesConflictsAndNeverMutatesTheCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := egressIP("g", "192.168.126.11", "192.168.126.12")
		orig := e.DeepCopy()
		m := newMem(e)
		m.failNext = []error{
			apierrors.NewConflict(egressv1.GroupVersionResource.GroupResource(), "g", fmt.Errorf("stale")),
			apierrors.NewServiceUnavailable("apiserver restarting"),
		}
		c := runMem(t, m)
		nstest.Until(t, "status written after a conflict and an error", 10*time.Second, func() (bool, string) {
			cur, _ := m.EgressIP("g")
			return len(cur.Status.Items) == 2, fmt.Sprint(cur.Status.Items)
		})
		orig.ResourceVersion = e.ResourceVersion
		if !reflect.DeepEqual(e, orig) {
			t.Errorf("the cached object was modified:\n%+v\nwas\n%+v", e, orig)
		}
		reg := registries[c]
		conflicts, _ := gathered(t, reg, "egret_controller_status_conflicts_total", "")
		errs, _ := gatheredBy(t, reg, "egret_controller_reconcile_errors_total", "kind", "status")
		writes, _ := gathered(t, reg, "egret_controller_status_writes_total", "")
		if conflicts != 1 || errs != 1 || writes != 1 {
			t.Errorf("conflicts %v errors %v writes %v, want 1 1 1", conflicts, errs, writes)
		}
		// Steady state: nothing more is written.
		settle()
		if n, _ := m.snapshot(); n != 3 {
			t.Errorf("%d update calls, want 3 (conflict, error, success)", n)
		}
	})
}

func TestRefusedStatusIsReportedNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem(egressIP("g", "192.168.126.11"))
		m.failNext = []error{apierrors.NewInvalid(egressv1.GroupVersionKind.GroupKind(), "g",
			field.ErrorList{field.Invalid(field.NewPath("status", "items"), "x", "refused")})}
		runMem(t, m)
		nstest.Until(t, "StatusUpdateFailed Event", 5*time.Second, func() (bool, string) {
			_, evs := m.snapshot()
			for _, e := range evs {
				if e.reason == "StatusUpdateFailed" && e.name == "g" {
					return true, ""
				}
			}
			return false, fmt.Sprint(evs)
		})
		settle()
		if n, _ := m.snapshot(); n != 1 {
			t.Errorf("%d update calls for a refused status, want 1", n)
		}
	})
}

func TestEventsAreNotRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem(egressIP("bad", "not-an-ip", "192.168.126.11"), egressIP("other", "192.168.126.11"))
		c := runMem(t, m)
		nstest.Until(t, "events", 5*time.Second, func() (bool, string) {
			_, evs := m.snapshot()
			return len(evs) == 3, fmt.Sprint(evs) // InvalidEgressIP + a conflict on each object
		})
		// Unrelated changes re-run the assignment but report nothing new.
		for range 5 {
			m.changed(cluster.KindNode)
		}
		settle()
		if _, evs := m.snapshot(); len(evs) != 3 {
			t.Errorf("events repeated: %v", evs)
		}
		if n, _ := gathered(t, registries[c], "egret_controller_assignment_duration_seconds", ""); n < 2 {
			t.Error("node changes did not re-run the assignment")
		}
	})
}

func TestMoveIsAnEvent(t *testing.T) {
	m := newMem(egressIP("g", "192.168.126.11"))
	runMem(t, m)
	var from string
	nstest.Until(t, "assigned", 5*time.Second, func() (bool, string) {
		cur, _ := m.EgressIP("g")
		if len(cur.Status.Items) == 1 {
			from = cur.Status.Items[0].Node
		}
		return from != "", fmt.Sprint(cur.Status.Items)
	})
	to := "n1"
	if from == "n1" {
		to = "n2"
	}
	ifaddr := map[string]string{"n1": "192.168.126.2/24", "n2": "192.168.126.3/24"} // newMem's
	m.mu.Lock()
	for i, n := range m.nodes {
		if n.Name == from {
			m.nodes[i] = egressNode(from, "", ifaddr[from], false) // no longer Ready
		}
	}
	m.mu.Unlock()
	m.changed(cluster.KindNode)
	want := "egress IP 192.168.126.11 moved from " + from + " to " + to + ": " + from + " can no longer host egress IPs"
	nstest.Until(t, "EgressIPMoved Event", 5*time.Second, func() (bool, string) {
		_, evs := m.snapshot()
		for _, e := range evs {
			// With two nodes the other one is the standby the IP moves to.
			if e.reason == controller.ReasonEgressIPMoved && e.name == "g" && strings.HasPrefix(e.message, want) &&
				strings.HasSuffix(e.message, "; "+to+" was its standby, which holds its connections' state") {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs)
	})
}

// TestControlPlaneOffAWS: the AWS rule is AWS's only. On a cluster with no
// AWS node a labelled control-plane node (both labels) hosts egress IPs as
// upstream; once a node of the cluster is an AWS instance, they host none.
func TestControlPlaneOffAWS(t *testing.T) {
	m := newMem(egressIP("e1", "192.168.126.10"), egressIP("e2", "192.168.126.11"))
	cp, master := egressNode("cp", "", "192.168.126.2/24", true), egressNode("master", "", "192.168.126.3/24", true)
	cp.Labels[cluster.LabelControlPlane] = ""
	master.Labels[cluster.LabelMaster] = ""
	m.nodes = []*corev1.Node{cp, master}
	runMem(t, m)
	status := func(name string) []egressv1.EgressIPStatusItem {
		e, _ := m.EgressIP(name)
		return e.Status.Items
	}
	nstest.Until(t, "both control-plane nodes host an IP", 5*time.Second, func() (bool, string) {
		a, b := nodeOf(status("e1"), "192.168.126.10"), nodeOf(status("e2"), "192.168.126.11")
		return a != "" && b != "" && a != b, a + " " + b
	})

	worker := egressNode("worker", "", "10.0.0.2/24", true)
	worker.Spec.ProviderID = "aws:///us-east-1a/i-0abc"
	m.mu.Lock()
	m.nodes = []*corev1.Node{cp, master, worker}
	changed := m.changed
	m.mu.Unlock()
	changed(cluster.KindNode)
	nstest.Until(t, "on AWS they host none", 5*time.Second, func() (bool, string) {
		a, b := status("e1"), status("e2")
		return len(a)+len(b) == 0, fmt.Sprint(a, b)
	})
}
