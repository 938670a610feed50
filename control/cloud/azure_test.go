package cloud

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/azuretest"
)

const (
	azSub    = "/subscriptions/00000000-0000-4000-8000-0000000e9e70/resourceGroups/egret"
	azNICA   = azSub + "/providers/Microsoft.Network/networkInterfaces/node-a-nic"
	azNICB   = azSub + "/providers/Microsoft.Network/networkInterfaces/node-b-nic"
	azSubnet = "/subscriptions/00000000-0000-4000-8000-0000000e9e70/resourceGroups/egret/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
)

var azVM = azuretest.VM{Subscription: "00000000-0000-4000-8000-0000000e9e70", ResourceGroup: "egret", Name: "node-a", IP: "10.0.1.10", Subnet: netip.MustParsePrefix("10.0.1.0/24")}

// startAzure runs the local ARM server with two NICs and the identity and
// metadata endpoints, and builds the provider with the SDK's default
// credential chain as production does (the token comes from the managed
// identity endpoint); only the Resource Manager endpoint and its TLS
// certificate differ.
func startAzure(t *testing.T) (*Azure, *azuretest.Server) {
	t.Helper()
	srv := azuretest.Start(
		azuretest.NIC{ID: azNICA, VM: azVM.ID(), Primary: true, Subnet: azSubnet, IPConfigs: []azuretest.IPConfig{{Name: "ipconfig1", IP: "10.0.1.10", Primary: true}}},
		azuretest.NIC{ID: azNICB, VM: azSub + "/providers/Microsoft.Compute/virtualMachines/node-b", Primary: true, Subnet: azSubnet, IPConfigs: []azuretest.IPConfig{{Name: "ipconfig1", IP: "10.0.1.11", Primary: true}}},
	)
	t.Cleanup(srv.Close)
	srv.Subnet(azSubnet, "10.0.1.0/24", "fd20::/64")
	imds := azuretest.StartIdentity(t, azVM)
	a, err := newAzure(srv.ClientOptions(), imds)
	if err != nil {
		t.Fatal(err)
	}
	a.poll = time.Second // azcore's minimum
	return a, srv
}

func TestAzureAttachMoveDetach(t *testing.T) {
	for _, s := range []string{"10.0.1.50", "fd20::50"} {
		t.Run(s, func(t *testing.T) {
			a, srv := startAzure(t)
			ctx := context.Background()
			ip := netip.MustParseAddr(s)
			if err := a.Attach(ctx, NIC{ID: azNICA}, ip, NIC{}); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if got := srv.Secondary(azNICA); !slices.Equal(got, []string{s}) {
				t.Fatalf("node-a-nic secondary addresses = %v, want [%s]", got, s)
			}
			n := len(srv.Calls())
			if err := a.Attach(ctx, NIC{ID: azNICA}, ip, NIC{}); err != nil {
				t.Fatal(err)
			}
			if calls := srv.Calls()[n:]; slices.Contains(calls, "networkInterfaces.createOrUpdate") {
				t.Errorf("second Attach called %v; want reads only", calls)
			}
			// A move: removed from node-a-nic first, then added to node-b-nic.
			n = len(srv.Calls())
			if err := a.Attach(ctx, NIC{ID: azNICB}, ip, NIC{ID: azNICA}); err != nil {
				t.Fatalf("move: %v", err)
			}
			if ga, gb := srv.Secondary(azNICA), srv.Secondary(azNICB); len(ga) != 0 || !slices.Equal(gb, []string{s}) {
				t.Fatalf("after the move node-a-nic has %v, node-b-nic %v", ga, gb)
			}
			if c := count(srv.Calls()[n:], "networkInterfaces.createOrUpdate"); c != 2 {
				t.Errorf("move made %d PUTs; want two (remove, then add)", c)
			}
			if err := a.Detach(ctx, NIC{ID: azNICB}, ip); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if gb := srv.Secondary(azNICB); len(gb) != 0 {
				t.Fatalf("after Detach node-b-nic has %v", gb)
			}
			if err := a.Detach(ctx, NIC{ID: azNICB}, ip); err != nil {
				t.Fatalf("Detach of a detached address: %v", err)
			}
			// Every PUT said which version of the NIC it changed.
			if slices.Contains(srv.IfMatch, "") {
				t.Errorf("a PUT without If-Match: %q", srv.IfMatch)
			}
		})
	}
}

// TestAzureOperations: a long-running PUT polled until it succeeds; one
// that fails reports Azure's error and changes nothing.
func TestAzureOperations(t *testing.T) {
	a, srv := startAzure(t)
	ctx := context.Background()
	srv.Polls(1)
	if err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.51"), NIC{}); err != nil {
		t.Fatalf("Attach with an operation in progress once: %v", err)
	}
	srv.Polls(0)
	srv.FailOperation("InternalServerError", "An error occurred.", 1)
	err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.52"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "InternalServerError" {
		t.Fatalf("Attach whose operation failed = %v; want an APIError InternalServerError", err)
	}
	if got := srv.Secondary(azNICA); !slices.Equal(got, []string{"10.0.1.51"}) {
		t.Fatalf("after a failed operation node-a-nic has %v", got)
	}
	// Still in progress when Egret stops waiting: pending, and the retry
	// finds it done.
	srv.Polls(3)
	a.opTimeout = 1500 * time.Millisecond
	ip := netip.MustParseAddr("10.0.1.52")
	if err := a.Attach(ctx, NIC{ID: azNICA}, ip, NIC{}); !errors.Is(err, ErrPending) {
		t.Fatalf("Attach whose operation outlasts the wait = %v; want ErrPending", err)
	}
	srv.Polls(0)
	if err := a.Attach(ctx, NIC{ID: azNICA}, ip, NIC{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := srv.Secondary(azNICA); !slices.Equal(got, []string{"10.0.1.51", "10.0.1.52"}) {
		t.Fatalf("after the retry node-a-nic has %v", got)
	}
}

func TestAzureThrottling(t *testing.T) {
	a, srv := startAzure(t)
	ctx := context.Background()
	// Two 429 answers: the SDK's retry policy waits Retry-After and succeeds.
	srv.Throttle(2)
	if err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.53"), NIC{}); err != nil {
		t.Fatalf("Attach after 2 throttled answers: %v", err)
	}
	srv.Throttle(100)
	err := a.Attach(ctx, NIC{ID: azNICB}, netip.MustParseAddr("10.0.1.54"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "SubscriptionRequestsThrottled" {
		t.Fatalf("Attach while throttled = %v; want an APIError SubscriptionRequestsThrottled", err)
	}
	srv.Throttle(0)
	if got := srv.Secondary(azNICB); len(got) != 0 {
		t.Fatalf("node-b-nic has %v after a throttled attach", got)
	}
}

// TestAzureEtag: the NIC changed between the read and the PUT; the PUT is
// refused (412) and redone on a fresh read.
func TestAzureEtag(t *testing.T) {
	a, srv := startAzure(t)
	ctx := context.Background()
	srv.Fail("networkInterfaces.createOrUpdate", http.StatusPreconditionFailed, "PreconditionFailed", "The condition specified using HTTP conditional header(s) is not met.", 2)
	if err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.55"), NIC{}); err != nil {
		t.Fatalf("Attach after two stale etags: %v", err)
	}
	if c := count(srv.Calls(), "networkInterfaces.createOrUpdate"); c != 3 {
		t.Errorf("%d PUTs; want 3 (two refused)", c)
	}
	srv.Fail("networkInterfaces.createOrUpdate", http.StatusPreconditionFailed, "PreconditionFailed", "The condition specified using HTTP conditional header(s) is not met.", 100)
	err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.56"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "PreconditionFailed" {
		t.Fatalf("Attach with an always stale etag = %v; want PreconditionFailed", err)
	}
}

func TestAzureEventualConsistency(t *testing.T) {
	a, srv := startAzure(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.1.57")
	// Stale for the poller's final read and Egret's own.
	srv.Stale(2)
	if err := a.Attach(ctx, NIC{ID: azNICA}, ip, NIC{}); !errors.Is(err, ErrPending) {
		t.Fatalf("Attach with stale reads = %v; want ErrPending", err)
	}
	n := len(srv.Calls())
	if err := a.Attach(ctx, NIC{ID: azNICA}, ip, NIC{}); err != nil {
		t.Fatalf("Attach once consistent: %v", err)
	}
	if calls := srv.Calls()[n:]; slices.Contains(calls, "networkInterfaces.createOrUpdate") {
		t.Errorf("the retry changed the NIC again (%v); it should find the address attached", calls)
	}
}

func TestAzureRefusals(t *testing.T) {
	a, srv := startAzure(t)
	ctx := context.Background()
	if err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.10"), NIC{}); err == nil {
		t.Fatal("Attach of node-a-nic's primary address succeeded")
	}
	if err := a.Detach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.10")); err == nil || len(srv.Secondary(azNICA)) != 0 {
		t.Fatalf("Detach of a primary address = %v", err)
	}
	// Another NIC has it: Azure refuses, nothing changes.
	err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.11"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "PrivateIPAddressInUse" {
		t.Fatalf("Attach of node-b-nic's address = %v; want PrivateIPAddressInUse", err)
	}
	err = a.Attach(ctx, NIC{ID: azSub + "/providers/Microsoft.Network/networkInterfaces/gone"}, netip.MustParseAddr("10.0.1.58"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "NotFound" {
		t.Fatalf("Attach to a missing NIC = %v; want NotFound", err)
	}
	if err := a.Attach(ctx, NIC{ID: "nic0"}, netip.MustParseAddr("10.0.1.58"), NIC{}); err == nil {
		t.Fatal("Attach to an interface that is no resource ID succeeded")
	}
}

// TestAzureLocal reads the VM's primary NIC as the gateway agent does.
func TestAzureLocal(t *testing.T) {
	a, srv := startAzure(t)
	ctx := context.Background()
	if err := a.Attach(ctx, NIC{ID: azNICA}, netip.MustParseAddr("10.0.1.60"), NIC{}); err != nil {
		t.Fatal(err)
	}
	l, err := a.Local(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Interface != azNICA || l.Subnets.IPv4 != netip.MustParsePrefix("10.0.1.0/24") || l.Subnets.IPv6 != netip.MustParsePrefix("fd20::/64") {
		t.Errorf("interface %s subnets %+v", l.Interface, l.Subnets)
	}
	if !l.Limit.Total || l.Limit.IP != 256 {
		t.Errorf("limit %+v; want 256 for both families", l.Limit)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.1.10"), netip.MustParseAddr("10.0.1.60")}; !slices.Equal(l.InUse, want) {
		t.Errorf("in use %v; want %v", l.InUse, want)
	}
	// Without the right to read the subnet: an error, not an annotation
	// without the IPv6 subnet.
	srv.Fail("subnets.get", http.StatusForbidden, "AuthorizationFailed", "The client does not have authorization to perform action 'Microsoft.Network/virtualNetworks/subnets/read'.", 1)
	if _, err := a.Local(ctx); err == nil || !strings.Contains(err.Error(), "AuthorizationFailed") {
		t.Errorf("Local without subnets/read = %v; want AuthorizationFailed", err)
	}
}

// TestAzureMoveFromGoneNIC: the NIC the address was on is gone: the move
// adds it to the new one.
func TestAzureMoveFromGoneNIC(t *testing.T) {
	a, srv := startAzure(t)
	gone := NIC{ID: azSub + "/providers/Microsoft.Network/networkInterfaces/gone"}
	if err := a.Attach(context.Background(), NIC{ID: azNICB}, netip.MustParseAddr("10.0.1.61"), gone); err != nil {
		t.Fatalf("move from a deleted NIC: %v", err)
	}
	if got := srv.Secondary(azNICB); !slices.Equal(got, []string{"10.0.1.61"}) {
		t.Fatalf("node-b-nic secondary addresses %v", got)
	}
}
