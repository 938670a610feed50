package gwagent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/config"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/internal/nstest"
	corev1 "k8s.io/api/core/v1"
)

// fakeSource is an in-memory Source whose backend can be cut off, and
// whose cache can lag behind the backend.
type fakeSource struct {
	cluster.Source // the agent only reads: the writing methods stay nil
	mu             sync.Mutex
	cache          cluster.View     // what View returns
	backend        cluster.Statuses // what Check returns
	down           bool
	changed        func(cluster.Kind)
	views          int // View calls: one per pass of the agent's loop
	events         []string
}

// Event records "kind/name reason: message".
func (s *fakeSource) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ref.Kind+"/"+ref.Name+" "+eventType+" "+reason+": "+message)
}

func (s *fakeSource) eventList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func (s *fakeSource) Start(_ context.Context, changed func(cluster.Kind)) error {
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	return nil
}

func (s *fakeSource) View() cluster.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views++
	return s.cache
}

// passes asks the agent's loop for a pass, as a change would, and waits
// for it to begin, n times in a row. The loop reads the source once per
// pass (reconcile's View), one pass at a time: once a pass begins, the one
// before it has ended. So after passes(t, 3), a pass that began after the
// call (and read whatever the test had set before it) has ended: what it
// would do is done, and a check that nothing else happened is a check on
// that signal, not on a wait. Before Run starts the source, Run's own first
// pass is the one waited for.
func (s *fakeSource) passes(t *testing.T, n int) {
	t.Helper()
	for range n {
		s.mu.Lock()
		seen, changed := s.views, s.changed
		s.mu.Unlock()
		if changed != nil { // else Run has not started the source: its first pass comes anyway
			changed(cluster.KindEgressIP)
		}
		nstest.Eventually(t, "a pass of the agent's loop", 2*time.Second, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.views > seen
		})
	}
}

func (s *fakeSource) Check(context.Context) (cluster.Statuses, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errors.New("connection refused")
	}
	return s.backend, nil
}

// place puts ip of object "blue" on node, in the cache and (if backend) in
// the backend too.
func (s *fakeSource) place(node string, cache, backend bool) {
	st := egressv1.EgressIPStatus{Items: []egressv1.EgressIPStatusItem{{Node: node, EgressIP: "192.0.2.10"}}}
	s.mu.Lock()
	if cache {
		e := eip("blue", []string{"192.0.2.10"}, nil, nil)
		e.Status = st
		s.cache.EgressIPs = []*egressv1.EgressIP{e}
	}
	if backend {
		s.backend = cluster.Statuses{"blue": st}
	}
	ch := s.changed
	s.mu.Unlock()
	if ch != nil && cache {
		ch(cluster.KindEgressIP)
	}
}

func (s *fakeSource) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// fakeDP records the hosted IPs of every configuration it gets.
type fakeDP struct {
	mu     sync.Mutex
	hosted [][]netip.Addr
	closed bool
}

func (d *fakeDP) Reload(s *config.Settled) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosted = append(d.hosted, append([]netip.Addr{}, s.Hosted...))
	return nil
}

func (d *fakeDP) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

func (d *fakeDP) last() []netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.hosted) == 0 {
		return nil
	}
	return d.hosted[len(d.hosted)-1]
}

func TestAgentFencing(t *testing.T) {
	src := placedOnG1()
	hs, err := health.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Stop() })
	prober := health.NewProber()
	t.Cleanup(prober.Close)
	target := hs.Addr().String()
	serving := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return prober.Check(ctx, target, nil) == nil
	}

	dp := &fakeDP{}
	const fence = 300 * time.Millisecond
	a := &Agent{Node: "g1", Base: base(), Source: src, Health: hs, FenceAfter: fence, Log: testLog(t),
		StartDataPlane: func(s *config.Settled) (DataPlane, error) {
			dp.Reload(s)
			return dp, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	isHosted := func() bool { return slices.Equal(dp.last(), ip) }
	notHosted := func() bool { d := dp.last(); return d != nil && len(d) == 0 }

	nstest.Eventually(t, "egress IP hosted at start", 2*time.Second, isHosted)
	nstest.Eventually(t, "SERVING", 2*time.Second, serving)

	// The assignment moves away and comes back.
	src.place("g2", true, true)
	nstest.Eventually(t, "released when moved away", time.Second, notHosted)
	src.place("g1", true, true)
	nstest.Eventually(t, "claimed again", time.Second, isHosted)

	// Contact lost: released within the fence time (plus a check period).
	src.setDown(true)
	lost := time.Now()
	nstest.Eventually(t, "fenced", 2*time.Second, notHosted)
	if el := time.Since(lost); el < fence-a.CheckEvery || el > fence+2*a.CheckEvery+100*time.Millisecond {
		t.Errorf("released %v after contact was lost; fence-after is %v", el, fence)
	}
	if st := a.State(); !st.Fenced || st.Serving {
		t.Errorf("state while fenced: %+v", st)
	}
	nstest.Eventually(t, "NOT_SERVING while fenced", time.Second, func() bool { return !serving() })

	// While out of contact the IP moved to g2; the cache has not caught up.
	src.place("g2", false, true)
	src.setDown(false)
	nstest.Eventually(t, "unfenced", 2*time.Second, func() bool { return !a.State().Fenced })
	// Every pass from now on reads the fresh list that ended the fence.
	src.passes(t, 3)
	if isHosted() {
		t.Fatal("claimed an IP only the stale cache places here")
	}
	src.place("g2", true, false)
	// Status says g1 again, in both: claimed again and SERVING.
	src.place("g1", true, true)
	nstest.Eventually(t, "claimed after contact returned", 2*time.Second, isHosted)
	nstest.Eventually(t, "SERVING again", time.Second, serving)

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if !dp.closed {
		t.Error("data plane not closed when the agent stopped")
	}
}

// TestAgentWaitsForUsableConfig: without a VTEP the data plane does not
// start and the health service says NOT_SERVING; the Node object arriving
// starts it.
func TestAgentWaitsForUsableConfig(t *testing.T) {
	src := &fakeSource{backend: cluster.Statuses{}}
	b := base()
	b.VTEPs = nil
	started := make(chan struct{})
	a := &Agent{Node: "g1", Base: b, Source: src, FenceAfter: time.Second, Log: testLog(t),
		StartDataPlane: func(s *config.Settled) (DataPlane, error) {
			close(started)
			return &fakeDP{}, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	src.passes(t, 3)
	select {
	case <-started:
		t.Fatal("data plane started without a VTEP")
	default:
	}
	if a.State().Serving {
		t.Fatal("SERVING without a data plane")
	}
	src.mu.Lock()
	src.cache.Nodes = []*corev1.Node{node("g1", "10.0.0.21", nil)}
	ch := src.changed
	src.mu.Unlock()
	ch(cluster.KindNode)
	select {
	case <-started:
	case <-time.After(2 * time.Second):
		t.Fatal("data plane not started once the Node arrived")
	}
	nstest.Eventually(t, "serving", time.Second, func() bool { return a.State().Serving })
}

func TestAgentStartErrors(t *testing.T) {
	a := &Agent{Node: "g1", Base: base(), Source: &fakeSource{}, Log: testLog(t),
		StartDataPlane: func(*config.Settled) (DataPlane, error) { return nil, errors.New("no such interface") }}
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("a data plane that cannot start must end Run with an error")
	}
	if err := (&Agent{}).Run(context.Background()); err == nil {
		t.Fatal("an agent without source must refuse to run")
	}
}

// testLog logs to stderr with -v, nowhere otherwise.
func testLog(t *testing.T) *slog.Logger {
	t.Helper()
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// TestAgentStalledWatch: the watch stalls (the cache keeps placing the IP
// here) while List keeps working and the controller moves the IP away.
// Contact never breaks, so the agent is never fenced; it must still stop
// hosting the IP, and host it again once the fresh list places it here.
// It runs in a synctest bubble: "never fenced" does not depend on how
// busy the machine is.
func TestAgentStalledWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := placedOnG1()
		dp := &fakeDP{}
		a := &Agent{Node: "g1", Base: base(), Source: src, FenceAfter: 300 * time.Millisecond, Log: testLog(t),
			StartDataPlane: func(s *config.Settled) (DataPlane, error) {
				dp.Reload(s)
				return dp, nil
			}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		defer func() {
			cancel()
			<-done
		}()
		ip := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
		nstest.Eventually(t, "egress IP hosted at start", 2*time.Second, func() bool { return slices.Equal(dp.last(), ip) })
		src.passes(t, 3) // the start has settled

		src.place("g2", false, true) // the watch delivers nothing
		nstest.Eventually(t, "released though only the fresh list moved it", 2*time.Second, func() bool {
			d := dp.last()
			return d != nil && len(d) == 0
		})
		if a.State().Fenced {
			t.Error("fenced although List worked throughout")
		}
		src.place("g1", false, true)
		nstest.Eventually(t, "hosted again when the fresh list places it here", 2*time.Second, func() bool { return slices.Equal(dp.last(), ip) })
	})
}

// placedOnG1 is a source with gateway g1, worker w1 with pod p, and the
// egress IP placed on g1 in both the cache and the fresh list.
func placedOnG1() *fakeSource {
	src := &fakeSource{cache: cluster.View{
		Nodes:      []*corev1.Node{node("g1", "10.0.0.21", nil), node("w1", "10.0.0.11", nil)},
		Namespaces: []*corev1.Namespace{ns("default", nil)},
		Pods:       []*corev1.Pod{pod("default", "p", "w1", nil, "10.244.1.5")},
	}}
	src.place("g1", true, true)
	return src
}

// TestAgentDrain: a stopping agent with Drain reports NOT_SERVING at once,
// keeps the data plane (and its egress IP) until the status moves the IP
// elsewhere, and only then closes it; with nothing moving it, it closes
// once Drain has passed.
func TestAgentDrain(t *testing.T) {
	for _, moved := range []bool{true, false} {
		src := placedOnG1()
		hs, err := health.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		prober := health.NewProber()
		target := hs.Addr().String()
		check := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return prober.Check(ctx, target, nil)
		}
		dp := &fakeDP{}
		drain := time.Hour // the moved case must end by the move, not the clock
		if !moved {
			drain = 200 * time.Millisecond
		}
		a := &Agent{Node: "g1", Base: base(), Source: src, Health: hs, Drain: drain, Log: testLog(t),
			StartDataPlane: func(s *config.Settled) (DataPlane, error) {
				dp.Reload(s)
				return dp, nil
			}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		ip := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
		nstest.Eventually(t, "egress IP hosted at start", 2*time.Second, func() bool { return slices.Equal(dp.last(), ip) })
		nstest.Eventually(t, "SERVING", 2*time.Second, func() bool { return check() == nil })

		cancel()
		nstest.Eventually(t, "NOT_SERVING once stopping", 2*time.Second, func() bool { return errors.Is(check(), health.ErrNotServing) })
		if moved {
			src.passes(t, 3) // passes while draining, each of which could close
			dp.mu.Lock()
			closed := dp.closed
			dp.mu.Unlock()
			if closed || !slices.Equal(dp.last(), ip) {
				t.Fatalf("the data plane stopped hosting %v before the status moved it (closed %v, hosting %v)", ip, closed, dp.last())
			}
			src.place("g2", true, true)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("moved=%v: the agent did not stop", moved)
		}
		if !dp.closed {
			t.Errorf("moved=%v: data plane not closed when the agent stopped", moved)
		}
		if moved && len(dp.last()) != 0 {
			t.Errorf("the last configuration still hosted %v; the IP had moved", dp.last())
		}
		prober.Close()
		hs.Stop()
	}
}

// TestAgentDestinationOverlapEvents: each conflict of the plan is told on
// both objects with a Warning Event, once while it lasts, and again after
// it went away and came back.
func TestAgentDestinationOverlapEvents(t *testing.T) {
	in := destInputs()
	src := &fakeSource{cache: in.view(), backend: cluster.Statuses{}}
	a := &Agent{Node: "g1", Base: base(), Source: src, Log: testLog(t),
		StartDataPlane: func(*config.Settled) (DataPlane, error) { return &fakeDP{}, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	msg := "EgressIP green's 203.0.113.0/24 and orange's 203.0.113.0/28 overlap for pod prod/web-1 and any other both select; the longer prefix decides"
	want := []string{
		"EgressIP/green Warning DestinationOverlap: " + msg,
		"EgressIP/orange Warning DestinationOverlap: " + msg,
	}
	nstest.Eventually(t, "the conflict told", 2*time.Second, func() bool { return len(src.eventList()) >= 2 })
	src.passes(t, 3)
	if got := src.eventList(); !slices.Equal(got, want) {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}

	// Orange stops selecting the nested network: nothing more is told;
	// when it selects it again, both objects hear of it again.
	set := func(l string) {
		src.mu.Lock()
		v := src.cache
		eips := slices.Clone(v.EgressIPs)
		o := eips[3].DeepCopy()
		o.Spec.TrafficSelector.MatchLabels = map[string]string{"dest": l}
		eips[3] = o
		v.EgressIPs = eips
		src.cache = v
		src.mu.Unlock()
		src.passes(t, 3)
	}
	set("none")
	if got := src.eventList(); len(got) != 2 {
		t.Fatalf("events after the conflict went: %q", got)
	}
	set("db-primary")
	if got := src.eventList(); !slices.Equal(got, append(want, want...)) {
		t.Fatalf("events after the conflict came back\n got %q", got)
	}
}
