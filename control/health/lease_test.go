package health

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// TestLeaseOverTheWire: a probe's lease reaches the server's handler as
// sent (both families, the duration to the millisecond, unauthenticated
// over plain gRPC); a check without one calls nothing; a malformed one is
// reported as such and grants nothing; and the answer is the same in each case.
func TestLeaseOverTheWire(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	grants := make(chan Grant, 10)
	s.SetLeaseHandler(func(g Grant) { grants <- g })
	p := NewProber()
	defer p.Close()
	ctx := context.Background()
	target := s.Addr().String()

	want := Lease{For: 975 * time.Millisecond, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}}
	before := time.Now()
	if err := p.Probe(ctx, target, time.Second, func() (Lease, bool) { return want, true }); err != nil {
		t.Fatal(err)
	}
	g := <-grants
	if g.For != want.For || !slices.Equal(g.IPs, want.IPs) || g.Authenticated || g.Err != nil || g.At.Before(before) {
		t.Fatalf("grant %+v, sent %+v", g, want)
	}

	if err := p.Probe(ctx, target, time.Second, func() (Lease, bool) { return Lease{}, false }); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(ctx, target, nil); err != nil {
		t.Fatal(err)
	}

	cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, md := range []metadata.MD{
		metadata.Pairs(leaseForKey, "975", leaseIPsKey, "short"),
		metadata.Pairs(leaseForKey, "-1", leaseIPsKey, ""),
		metadata.Pairs(leaseForKey, "forever", leaseIPsKey, ""),
		metadata.Pairs(leaseIPsKey, string(make([]byte, 16))),
		metadata.Pairs(leaseForKey, "975", leaseIPsKey, string(make([]byte, 16*(MaxLeaseIPs+1)))),
	} {
		resp, err := healthpb.NewHealthClient(cc).Check(metadata.NewOutgoingContext(ctx, md), &healthpb.HealthCheckRequest{Service: Service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("check with %v: %v %v", md, resp, err)
		}
		if g := <-grants; !errors.Is(g.Err, ErrMalformedLease) {
			t.Errorf("lease %v: grant %+v, want %v", md, g, ErrMalformedLease)
		}
	}
	select {
	case g := <-grants:
		t.Fatalf("a grant from a check without a lease: %+v", g)
	default:
	}
}
