package health

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Lease is what a controller's probe grants the gateway it checks: for For
// from the moment the probe arrives, the controller will not give any of IPs
// to another node because this one stopped answering (For is below the
// controller's own move budget), so the gateway may keep answering for them
// without the API server. IPs are every egress IP the controller places on
// the node when it sends the probe; an IP it no longer places there is not
// in the next probe's lease, so it stops being covered then.
type Lease struct {
	For time.Duration
	IPs []netip.Addr
}

// MaxLeaseIPs bounds the egress IPs one lease names (16 bytes each in the
// probe's metadata). A controller that places more on one node sends no
// lease, and that gateway falls back to its --fence-after.
const MaxLeaseIPs = 4096

// The probe's metadata keys: the lease in milliseconds, and the IPs as
// 16-byte addresses back to back (a "-bin" key: gRPC base64-encodes it).
const (
	leaseForKey = "egret-lease-ms"
	leaseIPsKey = "egret-lease-ips-bin"
)

// ErrMalformedLease is reported (Grant.Err) for a probe whose lease
// metadata does not parse; such a probe grants nothing.
var ErrMalformedLease = errors.New("malformed lease in the probe's metadata")

// outgoing adds l to a probe's context.
func (l Lease) outgoing(ctx context.Context) context.Context {
	b := make([]byte, 0, 16*len(l.IPs))
	for _, ip := range l.IPs {
		a := ip.As16()
		b = append(b, a[:]...)
	}
	return metadata.AppendToOutgoingContext(ctx, leaseForKey, strconv.FormatInt(l.For.Milliseconds(), 10), leaseIPsKey, string(b))
}

// leaseFrom reads the lease of an incoming probe: ok false when it carries
// none (an older controller, a manual check).
func leaseFrom(ctx context.Context) (l Lease, ok bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	fs, ips := md.Get(leaseForKey), md.Get(leaseIPsKey)
	if len(fs) == 0 && len(ips) == 0 {
		return Lease{}, false, nil
	}
	if len(fs) != 1 || len(ips) != 1 {
		return Lease{}, true, fmt.Errorf("%w: %d durations, %d address lists", ErrMalformedLease, len(fs), len(ips))
	}
	ms, err := strconv.ParseInt(fs[0], 10, 64)
	if err != nil || ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
		return Lease{}, true, fmt.Errorf("%w: duration %q ms (want 1 to 3600000)", ErrMalformedLease, fs[0])
	}
	raw := ips[0]
	if len(raw)%16 != 0 || len(raw)/16 > MaxLeaseIPs {
		return Lease{}, true, fmt.Errorf("%w: %d bytes of addresses", ErrMalformedLease, len(raw))
	}
	l.For = time.Duration(ms) * time.Millisecond
	for i := 0; i < len(raw); i += 16 {
		l.IPs = append(l.IPs, netip.AddrFrom16([16]byte([]byte(raw[i:i+16]))).Unmap())
	}
	return l, true, nil
}

// Grant is one probe's lease as the gateway received it.
type Grant struct {
	// At is when the probe arrived: the lease runs from here.
	At time.Time
	Lease
	// Authenticated: the probe came over mutual TLS, so from a holder of
	// a client certificate the gateway's client CA signed (the controller).
	// Over plain gRPC anyone who reaches the port could have sent it.
	Authenticated bool
	// Err is set (ErrMalformedLease) when the lease did not parse.
	Err error
}

// leaseHandler holds the function SetLeaseHandler installed.
type leaseHandler struct{ fn func(Grant) }

// SetLeaseHandler makes the server hand every lease a health check carries
// to fn (from the check's goroutine, before it is answered); nil stops it.
// What to trust is fn's decision: Grant says whether mutual TLS
// authenticated the sender.
func (s *Server) SetLeaseHandler(fn func(Grant)) {
	if fn == nil {
		s.onLease.Store(nil)
		return
	}
	s.onLease.Store(&leaseHandler{fn: fn})
}

// interceptLeases is the server's unary interceptor: it takes the lease off
// a Check before the health service answers it.
func interceptLeases(h *atomic.Pointer[leaseHandler]) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if lh := h.Load(); lh != nil && info.FullMethod == healthpb.Health_Check_FullMethodName {
			at := time.Now()
			if l, ok, err := leaseFrom(ctx); ok {
				lh.fn(Grant{At: at, Lease: l, Authenticated: mutualTLS(ctx), Err: err})
			}
		}
		return handler(ctx, req)
	}
}

// mutualTLS reports whether ctx's peer proved a client certificate that
// verified against the server's client CA.
func mutualTLS(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(ti.State.VerifiedChains) > 0
}
