package cloud

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/egret-gw/egret/internal/ec2test"
)

// startAWS runs the local EC2 server with two ENIs and AWS's metadata
// emulator, and builds the provider through the SDK's default chain as
// production does (region from the metadata service).
func startAWS(t *testing.T) (*AWS, *ec2test.Server) {
	t.Helper()
	srv := ec2test.Start(
		ec2test.ENI{ID: "eni-a", Primary: "10.0.1.10"},
		ec2test.ENI{ID: "eni-b", Primary: "10.0.1.11"},
	)
	t.Cleanup(srv.Close)
	imds := ec2test.StartIMDS(t, "eu-west-3", map[string]string{})
	srv.Env(t, imds)
	a, err := NewAWS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return a, srv
}

func TestAWSAttachMoveDetach(t *testing.T) {
	a, srv := startAWS(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.1.50")

	if err := a.Attach(ctx, NIC{ID: "eni-a"}, ip, NIC{}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := srv.ENI("eni-a").IPv4; !slices.Equal(got, []string{"10.0.1.50"}) {
		t.Fatalf("eni-a secondary addresses = %v, want [10.0.1.50]", got)
	}
	if r := srv.SignedRegion(); r != "eu-west-3" {
		t.Errorf("requests signed for region %q; want eu-west-3, the metadata service's", r)
	}
	// Attached already: only a read.
	n := len(srv.Calls())
	if err := a.Attach(ctx, NIC{ID: "eni-a"}, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	if calls := srv.Calls()[n:]; !slices.Equal(calls, []string{"DescribeNetworkInterfaces"}) {
		t.Errorf("second Attach called %v; want one DescribeNetworkInterfaces", calls)
	}
	// A move is one reassignment.
	n = len(srv.Calls())
	if err := a.Attach(ctx, NIC{ID: "eni-b"}, ip, NIC{}); err != nil {
		t.Fatalf("Attach to eni-b: %v", err)
	}
	if calls := srv.Calls()[n:]; slices.Index(calls, "AssignPrivateIpAddresses") < 0 || slices.Contains(calls, "UnassignPrivateIpAddresses") {
		t.Errorf("move called %v; want a reassignment, no unassign", calls)
	}
	if a4, b4 := srv.ENI("eni-a").IPv4, srv.ENI("eni-b").IPv4; len(a4) != 0 || !slices.Equal(b4, []string{"10.0.1.50"}) {
		t.Fatalf("after the move eni-a has %v, eni-b %v; want [] and [10.0.1.50]", a4, b4)
	}
	if err := a.Detach(ctx, NIC{ID: "eni-b"}, ip); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if b4 := srv.ENI("eni-b").IPv4; len(b4) != 0 {
		t.Fatalf("after Detach eni-b has %v", b4)
	}
	if err := a.Detach(ctx, NIC{ID: "eni-b"}, ip); err != nil {
		t.Fatalf("Detach of a detached address: %v", err)
	}
}

func TestAWSIPv6Move(t *testing.T) {
	a, srv := startAWS(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("2600:1f18::50")
	if err := a.Attach(ctx, NIC{ID: "eni-a"}, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	// EC2 cannot reassign IPv6: the move unassigns from eni-a first.
	if err := a.Attach(ctx, NIC{ID: "eni-b"}, ip, NIC{}); err != nil {
		t.Fatalf("IPv6 move: %v", err)
	}
	if a6, b6 := srv.ENI("eni-a").IPv6, srv.ENI("eni-b").IPv6; len(a6) != 0 || !slices.Equal(b6, []string{"2600:1f18::50"}) {
		t.Fatalf("after the move eni-a has %v, eni-b %v", a6, b6)
	}
	if err := a.Detach(ctx, NIC{ID: "eni-b"}, ip); err != nil || len(srv.ENI("eni-b").IPv6) != 0 {
		t.Fatalf("Detach: %v, left %v", err, srv.ENI("eni-b").IPv6)
	}
}

func TestAWSThrottling(t *testing.T) {
	a, srv := startAWS(t)
	ctx := context.Background()
	// Two throttled answers: the SDK's retryer backs off and succeeds.
	srv.Throttle(2)
	if err := a.Attach(ctx, NIC{ID: "eni-a"}, netip.MustParseAddr("10.0.1.51"), NIC{}); err != nil {
		t.Fatalf("Attach after 2 throttled answers: %v", err)
	}
	// Throttled past the SDK's attempts: the error says so, nothing changes.
	srv.Throttle(100)
	err := a.Attach(ctx, NIC{ID: "eni-b"}, netip.MustParseAddr("10.0.1.52"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "RequestLimitExceeded" {
		t.Fatalf("Attach while throttled = %v; want an APIError RequestLimitExceeded", err)
	}
	srv.Throttle(0)
	if got := srv.ENI("eni-b").IPv4; len(got) != 0 {
		t.Fatalf("eni-b has %v after a throttled attach", got)
	}
}

func TestAWSEventualConsistency(t *testing.T) {
	a, srv := startAWS(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.1.53")
	// The read after the assignment is stale.
	srv.Stale(1)
	err := a.Attach(ctx, NIC{ID: "eni-a"}, ip, NIC{})
	if !errors.Is(err, ErrPending) {
		t.Fatalf("Attach with a stale read = %v; want ErrPending", err)
	}
	n := len(srv.Calls())
	if err := a.Attach(ctx, NIC{ID: "eni-a"}, ip, NIC{}); err != nil {
		t.Fatalf("Attach once consistent: %v", err)
	}
	if calls := srv.Calls()[n:]; slices.Contains(calls, "AssignPrivateIpAddresses") {
		t.Errorf("the retry assigned again (%v); it should find the address attached", calls)
	}
}

func TestAWSRefusals(t *testing.T) {
	a, srv := startAWS(t)
	ctx := context.Background()
	// Never touch an interface's primary address.
	if err := a.Attach(ctx, NIC{ID: "eni-b"}, netip.MustParseAddr("10.0.1.10"), NIC{}); err == nil {
		t.Fatal("Attach of eni-a's primary address to eni-b succeeded")
	}
	if err := a.Detach(ctx, NIC{ID: "eni-a"}, netip.MustParseAddr("10.0.1.10")); err == nil || srv.ENI("eni-a").Primary != "10.0.1.10" {
		t.Fatalf("Detach of a primary address = %v", err)
	}
	err := a.Attach(ctx, NIC{ID: "eni-gone"}, netip.MustParseAddr("10.0.1.54"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "InvalidNetworkInterfaceID.NotFound" {
		t.Fatalf("Attach to a missing ENI = %v; want InvalidNetworkInterfaceID.NotFound", err)
	}
	// The server checks signatures: a wrong secret is refused.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	bad, err := NewAWS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Attach(ctx, NIC{ID: "eni-a"}, netip.MustParseAddr("10.0.1.55"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "SignatureDoesNotMatch" {
		t.Fatalf("Attach with a wrong secret = %v; want SignatureDoesNotMatch", err)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{}, {Provider: "aws"}, {Provider: "gcp"}, {Provider: "azure"}, {Provider: "openstack"}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := (Config{Provider: "vsphere"}).Validate(); err == nil {
		t.Error("provider vsphere accepted")
	}
	p, err := New(context.Background(), Config{})
	if p != nil || err != nil {
		t.Errorf("New(off) = %v, %v; want nil, nil", p, err)
	}
}

// TestAWSLocal reads the instance's primary interface as the gateway agent
// does: ENI and subnets from AWS's metadata emulator, limits and addresses
// in use from EC2.
func TestAWSLocal(t *testing.T) {
	srv := ec2test.Start(ec2test.ENI{ID: "eni-local", Primary: "10.0.1.10", IPv4: []string{"10.0.1.20"}, IPv6: []string{"2600:1f18::20"}})
	t.Cleanup(srv.Close)
	srv.InstanceType("m5.large", 10, 10)
	srv.Env(t, ec2test.StartIMDS(t, "us-east-2", map[string]string{
		"mac-network-interface-id":    "eni-local",
		"mac-subnet-ipv4-cidr-block":  "10.0.1.0/24",
		"mac-subnet-ipv6-cidr-blocks": "2600:1f18::/64",
		"instance-type":               "m5.large",
	}))
	a, err := NewAWS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Local(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Interface != "eni-local" || l.Subnets.IPv4 != netip.MustParsePrefix("10.0.1.0/24") || l.Subnets.IPv6 != netip.MustParsePrefix("2600:1f18::/64") {
		t.Errorf("interface %s subnets %+v", l.Interface, l.Subnets)
	}
	if l.Limit.IPv4 != 10 || l.Limit.IPv6 != 10 || l.Limit.Total {
		t.Errorf("limits %+v; want 10 per family", l.Limit)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.1.10"), netip.MustParseAddr("10.0.1.20"), netip.MustParseAddr("2600:1f18::20")}
	if !slices.Equal(l.InUse, want) {
		t.Errorf("in use %v; want %v", l.InUse, want)
	}
}
