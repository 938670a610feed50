package cloud

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/gcetest"
	"google.golang.org/api/option"
)

const (
	gceA = "gce://egret-test/europe-west1-b/node-a"
	gceB = "gce://egret-test/europe-west1-b/node-b"
)

// startGCP runs the local Compute Engine server with two instances and
// the metadata server, and builds the provider with Application Default
// Credentials as production does (the token comes from the metadata
// server); only the endpoint differs.
func startGCP(t *testing.T) (*GCP, *gcetest.Server) {
	t.Helper()
	srv := gcetest.Start(
		gcetest.Instance{Project: "egret-test", Zone: "europe-west1-b", Name: "node-a", NIC: "nic0", IP: "10.0.1.10", IPv6: "fd20:0:0:1::10", IPv6PrefixLength: 64},
		gcetest.Instance{Project: "egret-test", Zone: "europe-west1-b", Name: "node-b", NIC: "nic0", IP: "10.0.1.11"},
	)
	t.Cleanup(srv.Close)
	gcetest.StartMetadata(t, gcetest.Identity{Project: "egret-test", Zone: "europe-west1-b", Name: "node-a", IP: "10.0.1.10", SubnetMask: "255.255.255.0"})
	g, err := NewGCP(context.Background(), option.WithEndpoint(srv.Endpoint))
	if err != nil {
		t.Fatal(err)
	}
	g.backoff = time.Millisecond
	return g, srv
}

func gceNIC(instance string) NIC { return NIC{ID: "nic0", Instance: instance} }

func TestGCPAttachMoveDetach(t *testing.T) {
	for _, tc := range []struct{ ip, cidr string }{{"10.0.1.50", "10.0.1.50/32"}, {"fd20:0:0:1::50", "fd20:0:0:1::50/128"}} {
		t.Run(tc.ip, func(t *testing.T) {
			g, srv := startGCP(t)
			ctx := context.Background()
			ip := netip.MustParseAddr(tc.ip)
			aliases := func(name string) []string {
				i := srv.Instance("egret-test", "europe-west1-b", name)
				return append(i.Aliases, i.Aliases6...)
			}
			if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if got := aliases("node-a"); !slices.Equal(got, []string{tc.cidr}) {
				t.Fatalf("node-a alias ranges = %v, want [%s]", got, tc.cidr)
			}
			// Attached already: only a read.
			n := len(srv.Calls())
			if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); err != nil {
				t.Fatal(err)
			}
			if calls := srv.Calls()[n:]; slices.Contains(calls, "instances.updateNetworkInterface") {
				t.Errorf("second Attach called %v; want reads only", calls)
			}
			// A move: removed from node-a first, then added to node-b.
			n = len(srv.Calls())
			if err := g.Attach(ctx, gceNIC(gceB), ip, gceNIC(gceA)); err != nil {
				t.Fatalf("move: %v", err)
			}
			if a, b := aliases("node-a"), aliases("node-b"); len(a) != 0 || !slices.Equal(b, []string{tc.cidr}) {
				t.Fatalf("after the move node-a has %v, node-b %v", a, b)
			}
			calls := srv.Calls()[n:]
			if c := count(calls, "instances.updateNetworkInterface"); c != 2 {
				t.Errorf("move called %v; want two updates (remove, then add)", calls)
			}
			if err := g.Detach(ctx, gceNIC(gceB), ip); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if b := aliases("node-b"); len(b) != 0 {
				t.Fatalf("after Detach node-b has %v", b)
			}
			if err := g.Detach(ctx, gceNIC(gceB), ip); err != nil {
				t.Fatalf("Detach of a detached address: %v", err)
			}
		})
	}
}

func count(l []string, s string) int {
	n := 0
	for _, x := range l {
		if x == s {
			n++
		}
	}
	return n
}

// TestGCPKeepsOtherRanges: an update sends the whole list of ranges, so
// the ranges Egret did not add (a GKE pod range) must survive.
func TestGCPKeepsOtherRanges(t *testing.T) {
	g, srv := startGCP(t)
	ctx := context.Background()
	for _, s := range []string{"10.0.1.51", "10.0.1.52"} {
		if err := g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr(s), NIC{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Detach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.51")); err != nil {
		t.Fatal(err)
	}
	if got := srv.Instance("egret-test", "europe-west1-b", "node-a").Aliases; !slices.Equal(got, []string{"10.0.1.52/32"}) {
		t.Fatalf("alias ranges %v; want [10.0.1.52/32]", got)
	}
}

func TestGCPThrottling(t *testing.T) {
	g, srv := startGCP(t)
	ctx := context.Background()
	for _, perUser := range []bool{false, true} {
		srv.Throttle(2, perUser)
		ip := netip.MustParseAddr("10.0.1.53")
		if perUser {
			ip = netip.MustParseAddr("10.0.1.54")
		}
		if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); err != nil {
			t.Fatalf("Attach after 2 throttled answers (perUser %v): %v", perUser, err)
		}
	}
	srv.Throttle(100, false)
	before := len(srv.Calls())
	err := g.Attach(ctx, gceNIC(gceB), netip.MustParseAddr("10.0.1.55"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "rateLimitExceeded" {
		t.Fatalf("Attach while throttled = %v; want an APIError rateLimitExceeded", err)
	}
	if calls := srv.Calls()[before:]; len(calls) != gcpAttempts {
		t.Fatalf("Attach while throttled made the calls %v; want %d tries", calls, gcpAttempts)
	}
	srv.Throttle(0, false)
	if got := srv.Instance("egret-test", "europe-west1-b", "node-b").Aliases; len(got) != 0 {
		t.Fatalf("node-b has %v after a throttled attach", got)
	}
}

// TestGCPFingerprint: someone else changed the interface between the read
// and the update; the update is refused (412) and redone on a fresh read.
func TestGCPFingerprint(t *testing.T) {
	g, srv := startGCP(t)
	ctx := context.Background()
	srv.Fail("instances.updateNetworkInterface", 412, "conditionNotMet", "Supplied fingerprint does not match current network interface fingerprint.", 2)
	if err := g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.56"), NIC{}); err != nil {
		t.Fatalf("Attach after two stale fingerprints: %v", err)
	}
	if c := count(srv.Calls(), "instances.updateNetworkInterface"); c != 3 {
		t.Errorf("%d updates; want 3 (two refused)", c)
	}
	// The real thing: the fingerprint moves on between read and update.
	srv.BumpFingerprint("egret-test", "europe-west1-b", "node-a")
	if err := g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.57"), NIC{}); err != nil {
		t.Fatal(err)
	}
	// Always stale: the error says so.
	srv.Fail("instances.updateNetworkInterface", 412, "conditionNotMet", "Supplied fingerprint does not match current network interface fingerprint.", 100)
	err := g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.58"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "conditionNotMet" {
		t.Fatalf("Attach with an always stale fingerprint = %v; want conditionNotMet", err)
	}
}

func TestGCPEventualConsistency(t *testing.T) {
	g, srv := startGCP(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.1.59")
	srv.Stale(1)
	if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); !errors.Is(err, ErrPending) {
		t.Fatalf("Attach with a stale read = %v; want ErrPending", err)
	}
	n := len(srv.Calls())
	if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); err != nil {
		t.Fatalf("Attach once consistent: %v", err)
	}
	if calls := srv.Calls()[n:]; slices.Contains(calls, "instances.updateNetworkInterface") {
		t.Errorf("the retry updated again (%v); it should find the range attached", calls)
	}
}

func TestGCPRefusals(t *testing.T) {
	g, srv := startGCP(t)
	ctx := context.Background()
	if err := g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.10"), NIC{}); err == nil {
		t.Fatal("Attach of node-a's primary address succeeded")
	}
	if err := g.Detach(ctx, gceNIC(gceA), netip.MustParseAddr("fd20:0:0:1::10")); err == nil {
		t.Fatal("Detach of node-a's primary IPv6 address succeeded")
	}
	err := g.Attach(ctx, gceNIC("gce://egret-test/europe-west1-b/gone"), netip.MustParseAddr("10.0.1.60"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "notFound" {
		t.Fatalf("Attach to a missing instance = %v; want notFound", err)
	}
	if err := g.Attach(ctx, NIC{ID: "nic0"}, netip.MustParseAddr("10.0.1.60"), NIC{}); err == nil {
		t.Fatal("Attach without a providerID succeeded")
	}
	// The operation fails (the address is taken elsewhere): the error is
	// the operation's, and nothing changed.
	if err := g.Attach(ctx, gceNIC(gceB), netip.MustParseAddr("10.0.1.61"), NIC{}); err != nil {
		t.Fatal(err)
	}
	err = g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.61"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "IP_IN_USE_BY_ANOTHER_RESOURCE" {
		t.Fatalf("Attach of an address another instance holds = %v; want IP_IN_USE_BY_ANOTHER_RESOURCE", err)
	}
	// Without the metadata server's token the API refuses.
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	bad, err := NewGCP(ctx, option.WithEndpoint(srv.Endpoint))
	if err == nil {
		err = bad.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.62"), NIC{})
	}
	if err == nil {
		t.Fatal("Attach without credentials succeeded")
	}
}

// TestGCPLocal reads the instance's interface as the gateway agent does.
func TestGCPLocal(t *testing.T) {
	g, _ := startGCP(t)
	ctx := context.Background()
	if err := g.Attach(ctx, gceNIC(gceA), netip.MustParseAddr("10.0.1.63"), NIC{}); err != nil {
		t.Fatal(err)
	}
	l, err := g.Local(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Interface != "nic0" || l.Subnets.IPv4 != netip.MustParsePrefix("10.0.1.0/24") || l.Subnets.IPv6 != netip.MustParsePrefix("fd20:0:0:1::/64") {
		t.Errorf("interface %s subnets %+v", l.Interface, l.Subnets)
	}
	if !l.Limit.Total || l.Limit.IP != 100 {
		t.Errorf("limit %+v; want 100 for both families", l.Limit)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.1.63")}; !slices.Equal(l.InUse, want) {
		t.Errorf("in use %v; want %v", l.InUse, want)
	}
}

// TestGCPMoveFromGoneInstance: the instance the address was on is gone
// (and its alias ranges with it): the move adds it to the new one.
func TestGCPMoveFromGoneInstance(t *testing.T) {
	g, srv := startGCP(t)
	ip := netip.MustParseAddr("10.0.1.64")
	if err := g.Attach(context.Background(), gceNIC(gceB), ip, gceNIC("gce://egret-test/europe-west1-b/gone")); err != nil {
		t.Fatalf("move from a deleted instance: %v", err)
	}
	if got := srv.Instance("egret-test", "europe-west1-b", "node-b").Aliases; !slices.Equal(got, []string{"10.0.1.64/32"}) {
		t.Fatalf("node-b alias ranges %v", got)
	}
}

// TestGCPSlowOperation: an operation still RUNNING after the bounded waits
// is reported pending; the retry reads the interface and updates again.
func TestGCPSlowOperation(t *testing.T) {
	g, srv := startGCP(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.1.65")
	srv.Running(100)
	if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); !errors.Is(err, ErrPending) {
		t.Fatalf("Attach with an operation that stays RUNNING = %v; want ErrPending", err)
	}
	if c := count(srv.Calls(), "zoneOperations.wait"); c != gcpWaits {
		t.Errorf("%d waits; want %d", c, gcpWaits)
	}
	srv.Running(1)
	if err := g.Attach(ctx, gceNIC(gceA), ip, NIC{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := srv.Instance("egret-test", "europe-west1-b", "node-a").Aliases; !slices.Equal(got, []string{"10.0.1.65/32"}) {
		t.Fatalf("alias ranges %v", got)
	}
}
