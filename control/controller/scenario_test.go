package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// backend is where a scenario's objects live: the real API server or a
// directory for the file source.
type backend interface {
	// applyNode creates or replaces a node, status included.
	applyNode(t *testing.T, n *corev1.Node)
	// applyEgressIP creates an EgressIP or replaces its spec.
	applyEgressIP(t *testing.T, e *egressv1.EgressIP)
	// status returns the stored status items of an EgressIP.
	status(t *testing.T, name string) []egressv1.EgressIPStatusItem
	// events lists the recorded Events as "Kind/name reason".
	events(t *testing.T) []recorded
	// run starts a controller with cfg and stops it at cleanup.
	run(t *testing.T, cfg controller.Config) *controller.Controller
}

type recorded struct {
	kind, name, reason, message string
}

// nodeHealth is a node's gRPC health server on a loopback address of its own.
type nodeHealth struct {
	addr string
	port int
	srv  *health.Server
}

func (h *nodeHealth) start(t *testing.T) {
	t.Helper()
	// A real socket: the port the stopped server held can take a moment
	// to be free again, and nothing signals when it is.
	var err error
	nstest.Until(t, "restarting the health server of "+h.addr, 5*time.Second, func() (bool, string) {
		h.srv, err = health.Listen(health.Target(h.addr, h.port))
		return err == nil, fmt.Sprint(err)
	})
	t.Cleanup(func() { h.srv.Stop() })
}

func (h *nodeHealth) stop(t *testing.T) {
	if err := h.srv.Stop(); err != nil {
		t.Errorf("stopping health server %s: %v", h.addr, err)
	}
}

// healthServers starts n health servers on distinct 127/8 addresses sharing
// one port, as real nodes share 9107.
func healthServers(t *testing.T, n int) (int, []*nodeHealth) {
	t.Helper()
	for range 20 {
		base := fmt.Sprintf("127.%d.%d.", 10+rand.IntN(200), rand.IntN(250))
		l, err := net.Listen("tcp", base+"1:0")
		if err != nil {
			t.Fatalf("listen on loopback: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		var hs []*nodeHealth
		ok := true
		for i := range n {
			h := &nodeHealth{addr: fmt.Sprintf("%s%d", base, i+1), port: port}
			srv, err := health.Listen(health.Target(h.addr, port))
			if err != nil {
				ok = false
				break
			}
			h.srv = srv
			hs = append(hs, h)
		}
		if ok {
			for _, h := range hs {
				t.Cleanup(func() { h.srv.Stop() })
			}
			return port, hs
		}
		for _, h := range hs {
			h.srv.Stop()
		}
	}
	t.Fatal("no free loopback port for the health servers")
	return 0, nil
}

func egressNode(name, internalIP, ifaddr string, ready bool) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{cluster.LabelEgressAssignable: ""},
			Annotations: map[string]string{cluster.AnnotationPrimaryIfAddr: `{"ipv4":"` + ifaddr + `"}`}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		},
	}
}

func egressIP(name string, ips ...string) *egressv1.EgressIP {
	return &egressv1.EgressIP{
		TypeMeta:   metav1.TypeMeta{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: egressv1.EgressIPSpec{EgressIPs: ips,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
	}
}

func nodeOf(items []egressv1.EgressIPStatusItem, ip string) string {
	for _, it := range items {
		if it.EgressIP == ip {
			return it.Node
		}
	}
	return ""
}

func statusIs(t *testing.T, c backend, name string, want map[string]string) func() (bool, string) {
	return func() (bool, string) {
		items := c.status(t, name)
		got := map[string]string{}
		for _, it := range items {
			got[it.EgressIP] = it.Node
		}
		if len(got) != len(want) || len(items) != len(want) {
			return false, fmt.Sprint(items)
		}
		for ip, n := range want {
			if got[ip] != n {
				return false, fmt.Sprint(items)
			}
		}
		return true, ""
	}
}

func hasEvent(t *testing.T, c backend, kind, name, reason, contains string) func() (bool, string) {
	return func() (bool, string) {
		evs := c.events(t)
		for _, e := range evs {
			if e.kind == kind && e.name == name && e.reason == reason && strings.Contains(e.message, contains) {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() || os.Getenv("EGRET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

const holdDown = 2 * time.Second

// runScenario is the behaviour both sources must show, step by step.
func runScenario(t *testing.T, c backend) {
	top := t // what a step starts for the steps after it lives as long as the scenario
	port, hs := healthServers(t, 3)
	names := []string{"egress-a", "egress-b", "egress-c"}
	for i, n := range names {
		c.applyNode(t, egressNode(n, hs[i].addr, fmt.Sprintf("192.168.126.%d/24", 2+i), true))
	}
	timeout := 1
	ctrl := c.run(t, controller.Config{
		ReachabilityTotalTimeoutSeconds: &timeout,
		HealthPort:                      port,
		HoldDown:                        &metav1.Duration{Duration: holdDown},
		DrainCordoned:                   true,
	})
	limit := time.Duration(timeout)*time.Second + time.Second

	// Two IPs of one object: balanced, one per node, ties by node name.
	c.applyEgressIP(t, egressIP("group1", "192.168.126.11", "192.168.126.102"))
	nstest.Until(t, "group1 assigned", 10*time.Second, statusIs(t, c, "group1",
		map[string]string{"192.168.126.11": "egress-a", "192.168.126.102": "egress-b"}))

	t.Run("unreachable node loses its IP", func(t *testing.T) {
		hs[0].stop(t)
		took := nstest.Until(t, "192.168.126.11 moves off egress-a", limit, statusIs(t, c, "group1",
			map[string]string{"192.168.126.11": "egress-c", "192.168.126.102": "egress-b"}))
		t.Logf("failover after the health server stopped: %v (limit %v)", took.Round(time.Millisecond), limit)
		if n := unreachable(t, registries[ctrl]); n != 1 {
			t.Errorf("%d unreachable nodes, want 1", n)
		}
		// The same, as Prometheus sees it.
		reg := registries[ctrl]
		for _, w := range []struct {
			name, node string
			min, max   float64
		}{
			{"egret_controller_failovers_total", "egress-a", 1, 10},
			{"egret_controller_probe_failures_total", "egress-a", 1, 1e9},
			{"egret_controller_node_reachable", "egress-a", 0, 0},
			{"egret_controller_node_reachable", "egress-c", 1, 1},
			{"egret_controller_egress_ips_assigned", "egress-a", 0, 0},
			{"egret_controller_egress_ips_assigned", "egress-b", 1, 1},
			{"egret_controller_egress_ips_assigned", "egress-c", 1, 1},
			{"egret_controller_egress_ip_moves_total", "", 1, 10},
			{"egret_controller_leader", "", 1, 1},
			{"egret_controller_egress_ips_unassigned", "", 0, 0},
		} {
			v, ok := gathered(t, reg, w.name, w.node)
			if !ok || v < w.min || v > w.max {
				t.Errorf("%s{node=%q} = %v (present %v), want %v..%v", w.name, w.node, v, ok, w.min, w.max)
			}
		}
	})

	t.Run("recovered node gets work only after the hold-down", func(t *testing.T) {
		// Not the step's t: its cleanup would stop egress-a's server
		// again when this step ends, and the next step needs it.
		hs[0].start(top)
		nstest.Until(t, "egress-a reachable again", 5*time.Second, func() (bool, string) {
			n := unreachable(t, registries[ctrl])
			return n == 0, fmt.Sprint(n, " unreachable")
		})
		recovered := time.Now()
		heldDown := func(want float64) func() (bool, string) {
			return func() (bool, string) {
				v, ok := gathered(t, registries[ctrl], "egret_controller_node_held_down", "egress-a")
				return ok && v == want, fmt.Sprint("held down: ", v, " (present ", ok, ")")
			}
		}
		nstest.Until(t, "egress-a held down", 5*time.Second, heldDown(1))
		// Loads: a 0, b 1, c 1. Balance would pick egress-a, but it is held down.
		c.applyEgressIP(t, egressIP("group2", "192.168.126.50"))
		nstest.Until(t, "group2 avoids the held-down node", 5*time.Second, statusIs(t, c, "group2",
			map[string]string{"192.168.126.50": "egress-b"}))
		if time.Since(recovered) >= holdDown {
			t.Skip("the machine is too slow to observe the hold-down window")
		}
		// The hold-down ends with a cycle of its own; from then on the
		// node gets new work. A valid assignment never moves: group1's IP
		// stays on egress-c.
		nstest.Until(t, "egress-a's hold-down over", holdDown+5*time.Second, heldDown(0))
		c.applyEgressIP(t, egressIP("group3", "192.168.126.60"))
		nstest.Until(t, "group3 lands on the recovered node", 5*time.Second, statusIs(t, c, "group3",
			map[string]string{"192.168.126.60": "egress-a"}))
		nstest.Until(t, "group1 unchanged", time.Second, statusIs(t, c, "group1",
			map[string]string{"192.168.126.11": "egress-c", "192.168.126.102": "egress-b"}))
	})

	t.Run("NotReady node loses its IPs", func(t *testing.T) {
		start := time.Now()
		c.applyNode(t, egressNode("egress-c", hs[2].addr, "192.168.126.4/24", false))
		// egress-a holds group3 and egress-b group1's other IP: .11 can only go to a.
		took := nstest.Until(t, "192.168.126.11 moves off the NotReady node", limit, statusIs(t, c, "group1",
			map[string]string{"192.168.126.11": "egress-a", "192.168.126.102": "egress-b"}))
		t.Logf("failover after NotReady: %v (from the node update: %v)", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		c.applyNode(t, egressNode("egress-c", hs[2].addr, "192.168.126.4/24", true))
	})

	t.Run("cordoned node is drained", func(t *testing.T) {
		n := egressNode("egress-b", hs[1].addr, "192.168.126.3/24", true)
		n.Spec.Unschedulable = true
		c.applyNode(t, n)
		nstest.Until(t, "egress-b drained", limit, func() (bool, string) {
			for _, name := range []string{"group1", "group2", "group3"} {
				for _, it := range c.status(t, name) {
					if it.Node == "egress-b" {
						return false, fmt.Sprint(name, c.status(t, name))
					}
				}
			}
			return true, ""
		})
		c.applyNode(t, egressNode("egress-b", hs[1].addr, "192.168.126.3/24", true))
	})

	t.Run("conflict is an Event on both objects", func(t *testing.T) {
		c.applyEgressIP(t, egressIP("group4", "192.168.126.60", "192.168.126.70"))
		nstest.Until(t, "conflict on group3", 5*time.Second, hasEvent(t, c, egressv1.Kind, "group3", string(assign.ReasonEgressIPConflict), "192.168.126.60"))
		nstest.Until(t, "conflict on group4", 5*time.Second, hasEvent(t, c, egressv1.Kind, "group4", string(assign.ReasonEgressIPConflict), "192.168.126.60"))
		// The older object keeps the IP; the newer one still gets its other IP.
		nstest.Until(t, "group4 keeps only its free IP", 5*time.Second, func() (bool, string) {
			items := c.status(t, "group4")
			return len(items) == 1 && items[0].EgressIP == "192.168.126.70", fmt.Sprint(items)
		})
		if n := nodeOf(c.status(t, "group3"), "192.168.126.60"); n == "" {
			t.Errorf("group3 lost 192.168.126.60 to a newer object")
		}
	})

	t.Run("invalid IP is an Event, the valid one is assigned", func(t *testing.T) {
		// Multicast passes the CRD's isIP() but can never be a source.
		c.applyEgressIP(t, egressIP("group5", "224.0.0.5", "192.168.126.80"))
		nstest.Until(t, "InvalidEgressIP on group5", 5*time.Second, hasEvent(t, c, egressv1.Kind, "group5", string(assign.ReasonInvalidEgressIP), "224.0.0.5"))
		nstest.Until(t, "group5's valid IP assigned", 5*time.Second, func() (bool, string) {
			items := c.status(t, "group5")
			return len(items) == 1 && items[0].EgressIP == "192.168.126.80", fmt.Sprint(items)
		})
	})

	t.Run("IP with no node is explained", func(t *testing.T) {
		c.applyEgressIP(t, egressIP("group6", "10.99.0.1"))
		nstest.Until(t, "NoMatchingNodeFound on group6", 5*time.Second, hasEvent(t, c, egressv1.Kind, "group6", string(assign.ReasonNoMatchingNodeFound), "10.99.0.1"))
		if items := c.status(t, "group6"); len(items) != 0 {
			t.Errorf("group6 status %v, want none", items)
		}
	})

	// Every invariant of the final state: one node per IP, one IP of an object per node.
	owner := map[string]string{}
	for _, name := range []string{"group1", "group2", "group3", "group4", "group5"} {
		perNode := map[string]bool{}
		for _, it := range c.status(t, name) {
			if prev, ok := owner[it.EgressIP]; ok {
				t.Errorf("%s is in the status of %s and %s", it.EgressIP, prev, name)
			}
			owner[it.EgressIP] = name
			if perNode[it.Node] {
				t.Errorf("%s hosts two IPs of %s", it.Node, name)
			}
			perNode[it.Node] = true
		}
	}
	if w, _ := gathered(t, registries[ctrl], "egret_controller_status_writes_total", ""); w < 6 {
		t.Errorf("egret_controller_status_writes_total = %v, want at least one per object", w)
	}
	if n, _ := gathered(t, registries[ctrl], "egret_controller_assignment_duration_seconds", ""); n == 0 {
		t.Error("no assignment counted in egret_controller_assignment_duration_seconds")
	}
}

// waitCtx is a helper to stop a controller and wait for it.
func startController(t *testing.T, src cluster.Source, cfg controller.Config) *controller.Controller {
	t.Helper()
	c, err := controller.New(src, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c.SetMetrics(controller.NewMetrics(reg))
	registriesMu.Lock()
	registries[c] = reg
	registriesMu.Unlock()
	t.Cleanup(runController(t, c.Run))
	return c
}

// registries holds each test controller's Prometheus registry.
var (
	registriesMu sync.Mutex
	registries   = map[*controller.Controller]*prometheus.Registry{}
)

// gathered reads metric name (with label node=node when node is not
// empty) from reg: a gauge's or counter's value, a histogram's count.
func gathered(t *testing.T, reg *prometheus.Registry, name, node string) (float64, bool) {
	t.Helper()
	return gatheredBy(t, reg, name, "node", node)
}

// unreachable counts the nodes whose egret_controller_node_reachable is 0.
func unreachable(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "egret_controller_node_reachable" {
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == 0 {
					n++
				}
			}
		}
	}
	return n
}

// gatheredBy reads metric name (with label key=value when value is not
// empty) from reg: a gauge's or counter's value, a histogram's count.
func gatheredBy(t *testing.T, reg *prometheus.Registry, name, key, value string) (float64, bool) {
	t.Helper()
	if reg == nil {
		t.Fatal("no registry for this controller")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := value == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// runController runs run until the returned function cancels it, which
// then waits up to 20 s for it to end and fails the test on an error. The
// function may be called more than once (also from a cleanup).
func runController(t *testing.T, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controller: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("controller did not stop within 20s")
			}
		})
	}
}
