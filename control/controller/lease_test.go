package controller

import (
	"context"
	"crypto/x509"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestLeaseBelowMoveBudget: for any probe interval and reachability
// timeout the configuration accepts, the lease a probe grants is positive
// and ends at least 100 ms before the earliest moment the controller may
// move the node's IPs for not answering (interval + timeout after the
// probe; the second look only adds to it).
func TestLeaseBelowMoveBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 3))
	check := func(interval, total time.Duration) {
		t.Helper()
		d, budget := leaseFor(interval, total), interval+total
		if d <= 0 || d > budget-100*time.Millisecond {
			t.Fatalf("interval %v, timeout %v: lease %v, move budget %v", interval, total, d, budget)
		}
	}
	for range 100000 {
		interval := time.Duration(rng.Int64N(int64(10 * time.Minute)))
		total := time.Duration(1+rng.IntN(MaxReachabilityTotalTimeoutSeconds)) * time.Second
		check(interval, total)
	}
	for _, interval := range []time.Duration{0, 1, time.Millisecond, DefaultProbeInterval, time.Hour} {
		for _, s := range []int{1, DefaultReachabilityTotalTimeoutSeconds, MaxReachabilityTotalTimeoutSeconds} {
			check(interval, time.Duration(s)*time.Second)
		}
	}
	if d := leaseFor(DefaultProbeInterval, time.Duration(DefaultReachabilityTotalTimeoutSeconds)*time.Second); d != 975*time.Millisecond {
		t.Errorf("default lease %v, documented as 975ms", d)
	}
}

// leaseRecorder is a gateway's health server that records the leases its
// probes carry.
type leaseRecorder struct {
	srv    *health.Server
	grants chan health.Grant
}

func newLeaseRecorder(t *testing.T, opts ...health.Option) *leaseRecorder {
	t.Helper()
	s, err := health.Listen("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	r := &leaseRecorder{srv: s, grants: make(chan health.Grant, 1000)}
	s.SetLeaseHandler(func(g health.Grant) { r.grants <- g })
	return r
}

// next waits for the next grant for which ok holds.
func (r *leaseRecorder) next(t *testing.T, what string, ok func(health.Grant) bool) health.Grant {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case g := <-r.grants:
			if ok(g) {
				return g
			}
		case <-deadline:
			t.Fatalf("no probe with %s", what)
		}
	}
}

// TestProbeLeasesPlacedIPs: the probe loop grants each node a lease on the
// IPs the last cycle placed there, none before the first cycle, and a
// lease without an IP the next cycle moved elsewhere; over plain gRPC the
// gateway is told the lease is not authenticated.
func TestProbeLeasesPlacedIPs(t *testing.T) {
	g1 := newLeaseRecorder(t)
	r, err := newReachability(time.Second, 50*time.Millisecond, ProbeTLS{}, slog.Default(), func() {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.start(ctx)
	defer r.stop()
	r.track(map[string]string{"g1": g1.srv.Addr().String()})
	r.waitKnown(ctx)
	select {
	case g := <-g1.grants:
		t.Fatalf("a lease before the first cycle placed anything: %+v", g)
	default:
	}
	if ok, known := r.verdict("g1"); !ok || !known {
		t.Fatalf("g1 not reachable: %v %v", ok, known)
	}

	a, b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	r.setPlaced(map[string]string{"blue/192.0.2.10": "g1", "dual/2001:db8::10": "g1", "red/192.0.2.20": "g2"})
	g := g1.next(t, "both of g1's IPs", func(g health.Grant) bool { return len(g.IPs) == 2 })
	slices.SortFunc(g.IPs, netip.Addr.Compare)
	if !slices.Equal(g.IPs, []netip.Addr{a, b}) || g.For != leaseFor(50*time.Millisecond, time.Second).Truncate(time.Millisecond) || g.Authenticated || g.Err != nil {
		t.Fatalf("lease %+v", g)
	}
	r.setPlaced(map[string]string{"blue/192.0.2.10": "g2", "dual/2001:db8::10": "g1"})
	g1.next(t, "only the IP still placed on g1", func(g health.Grant) bool { return slices.Equal(g.IPs, []netip.Addr{b}) })
}

// TestProbeLeaseOverMutualTLS: over mutual TLS the gateway learns that the
// lease comes from a holder of a certificate of its client CA.
func TestProbeLeaseOverMutualTLS(t *testing.T) {
	ca := newTestCA(t, "egret-probe-ca")
	gwCrt, gwKey := ca.pair("gateway", []string{health.DefaultServerName}, x509.ExtKeyUsageServerAuth)
	ctlCrt, ctlKey := ca.pair("controller", nil, x509.ExtKeyUsageClientAuth)
	stc, err := health.ServerTLS(health.TLSFiles{Cert: gwCrt, Key: gwKey, CA: ca.file})
	if err != nil {
		t.Fatal(err)
	}
	g1 := newLeaseRecorder(t, health.TLS(stc))
	r, err := newReachability(time.Second, 50*time.Millisecond, ProbeTLS{CertFile: ctlCrt, KeyFile: ctlKey, CAFile: ca.file}, slog.Default(), func() {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.setPlaced(map[string]string{"blue/192.0.2.10": "g1"})
	r.start(ctx)
	defer r.stop()
	r.track(map[string]string{"g1": g1.srv.Addr().String()})
	g := g1.next(t, "a lease", func(health.Grant) bool { return true })
	if !g.Authenticated || len(g.IPs) != 1 {
		t.Fatalf("lease over mutual TLS: %+v", g)
	}
	nstest.Eventually(t, "g1 reachable", 5*time.Second, func() bool { ok, _ := r.verdict("g1"); return ok })
}
