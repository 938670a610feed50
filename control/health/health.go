// Package health is the node reachability check of EgressIP failover: every
// gateway agent serves the standard gRPC health service (grpc.health.v1) on
// port 9107, as OVN-Kubernetes nodes do, and the controller probes it.
//
// Server is the side the gateway agent embeds; Prober is the controller's
// side. They speak plain gRPC unless given mutual TLS (ServerTLS, ClientTLS):
// the check only tells whether the node's agent is alive and reachable over
// the node network, but without TLS anyone who can reach the port learns
// that too, and anyone who can take over the node's address can answer it.
package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// DefaultPort is the health port of OVN-Kubernetes' EgressIP node check.
const DefaultPort = 9107

// Service is the gRPC health service name the check asks about, the one
// OVN-Kubernetes uses, so either side interoperates with it.
const Service = "Service_Egress_IP"

// Server serves the gRPC health service for one gateway agent.
type Server struct {
	grpc   *grpc.Server
	health *grpchealth.Server
	lis    *LimitListener
	done   chan struct{}
	err    error
	once   sync.Once
	// onLease is SetLeaseHandler's function, nil: leases are ignored.
	onLease atomic.Pointer[leaseHandler]
}

// Option adjusts a Server before it starts serving.
type Option func(*options)

type options struct {
	notServing bool
	maxConns   int
	tls        *tls.Config
	alsoPlain  bool // with tls: plain gRPC too (AlsoPlain)
}

// HandshakeTimeout bounds how long a new connection may take to finish its
// TLS and HTTP/2 handshake: one that sends nothing (or only a preface)
// gives its slot back after this, not when its peer likes.
const HandshakeTimeout = 2 * time.Second

// MaxIdle is how long a connection with no call in flight is kept: the
// controller probes every few seconds, so only a connection nobody uses
// reaches it (and is closed with a GOAWAY, which a real client survives by
// reconnecting).
const MaxIdle = time.Minute

// NotServing makes the server report NOT_SERVING from its first answer
// until SetServing(true): an agent whose data plane is not up yet must not
// look healthy, not even for the moment between Listen and SetServing.
func NotServing() Option { return func(o *options) { o.notServing = true } }

// MaxConns caps the connections held at once (default DefaultMaxConns);
// those beyond are closed at once and counted (Refused).
func MaxConns(n int) Option { return func(o *options) { o.maxConns = n } }

// TLS makes the server speak TLS with cfg (ServerTLS: mutual TLS).
func TLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// Listen binds addr (host:port; the gateway agent passes the node's
// InternalIP) and starts serving at once, reporting SERVING (or NOT_SERVING
// with the NotServing option) for Service and for the whole server (the
// empty service name). Stop it with Stop.
func Listen(addr string, opts ...Option) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health service: %w", err)
	}
	return Serve(lis, opts...), nil
}

// Serve serves the health service on lis (which it then owns).
func Serve(lis net.Listener, opts ...Option) *Server {
	o := options{maxConns: DefaultMaxConns}
	for _, f := range opts {
		f(&o)
	}
	s := &Server{health: grpchealth.NewServer(), done: make(chan struct{})}
	gopts := []grpc.ServerOption{
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.UnaryInterceptor(interceptLeases(&s.onLease)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: MaxIdle}),
		grpc.MaxConcurrentStreams(16),
	}
	switch {
	case o.tls != nil && o.alsoPlain:
		gopts = append(gopts, grpc.Creds(tlsOrPlain{credentials.NewTLS(o.tls)}))
	case o.tls != nil:
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(o.tls)))
	}
	s.grpc = grpc.NewServer(gopts...)
	s.lis = LimitPerSource(lis, o.maxConns, DefaultMaxPerSource)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.SetServing(!o.notServing) // before the first connection is accepted
	go func() {
		s.err = s.grpc.Serve(s.lis)
		close(s.done)
	}()
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Refused is the number of connections closed because MaxConns were open.
func (s *Server) Refused() uint64 { return s.lis.Refused() }

// SetServing switches the reported status: an agent that cannot forward
// (data plane down) says NOT_SERVING, and the controller moves its IPs away.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(Service, st)
	s.health.SetServingStatus("", st)
}

// Stop closes the listener and every connection at once; probes then fail.
// It returns the error Serve ended with, if it was not the normal stop.
func (s *Server) Stop() error {
	s.once.Do(func() {
		s.health.Shutdown()
		s.grpc.Stop()
	})
	<-s.done
	if errors.Is(s.err, grpc.ErrServerStopped) {
		return nil
	}
	return s.err
}

// ErrNotServing is returned by Check when the node answers but reports that
// it does not serve.
var ErrNotServing = errors.New("the node's agent reports NOT_SERVING")

// ErrRefused is returned by Probe when the node's kernel refused the
// connection: the node is up but nothing listens on the health port, so its
// gateway agent is not running.
var ErrRefused = errors.New("the node refused the connection (its agent is not running)")

// Prober checks the health service of many nodes, keeping one connection per
// address so a probe is a single round trip. It is safe for concurrent use.
type Prober struct {
	creds      credentials.TransportCredentials
	serverName func(target string) string // nil: the target's host
	mu         sync.Mutex
	conns      map[string]*proberConn
}

// proberConn is the connection to one node and when a dial to it was last
// refused (Unix nanoseconds, 0: never).
type proberConn struct {
	*grpc.ClientConn
	refused atomic.Int64
}

// ProberOption adjusts a Prober.
type ProberOption func(*Prober)

// ProbeTLS makes the prober speak TLS with cfg (ClientTLS: mutual TLS);
// a nil cfg keeps plain gRPC.
func ProbeTLS(cfg *tls.Config) ProberOption {
	return func(p *Prober) {
		if cfg != nil {
			p.creds = credentials.NewTLS(cfg)
		}
	}
}

// ProbeServerName makes the prober dial target with name(target) as its
// TLS server name (the gRPC authority), when not empty. crypto/tls keeps no
// server name for an IP target, so a check of who answered (per-node
// certificates, ClientTLS's verify in control/identity) gets the node
// expected there through it.
func ProbeServerName(name func(target string) string) ProberOption {
	return func(p *Prober) { p.serverName = name }
}

// NewProber returns a Prober with no connections yet, speaking plain gRPC
// unless an option says otherwise.
func NewProber(opts ...ProberOption) *Prober {
	p := &Prober{creds: insecure.NewCredentials(), conns: map[string]*proberConn{}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Target formats the health address of a node IP and port.
func Target(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

func (p *Prober) conn(target string) (*proberConn, error) {
	var authority string
	if p.serverName != nil {
		// Before p.mu: the caller's lookup may take its own lock, which it
		// may hold while it calls Forget.
		authority = p.serverName(target)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[target]; ok {
		return c, nil
	}
	pc := &proberConn{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if errors.Is(err, syscall.ECONNREFUSED) {
			pc.refused.Store(time.Now().UnixNano())
		}
		return c, err
	}
	// Reconnect quickly: the default backoff grows to two minutes, which
	// would keep a recovered node out long after it is back.
	bc := backoff.DefaultConfig
	bc.BaseDelay = 50 * time.Millisecond
	bc.MaxDelay = 500 * time.Millisecond
	opts := []grpc.DialOption{grpc.WithTransportCredentials(p.creds),
		grpc.WithContextDialer(dial),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 200 * time.Millisecond})}
	if authority != "" {
		opts = append(opts, grpc.WithAuthority(authority))
	}
	c, err := grpc.NewClient("passthrough:///"+target, opts...)
	if err != nil {
		return nil, fmt.Errorf("health client for %s: %w", target, err)
	}
	pc.ClientConn = c
	p.conns[target] = pc
	return pc, nil
}

// Check asks the node at target (host:port) once whether it serves, and
// grants it the lease lease returns, if lease is set and returns one; ctx
// bounds the wait. A nil error means SERVING.
func (p *Prober) Check(ctx context.Context, target string, lease func() (Lease, bool)) error {
	c, err := p.conn(target)
	if err != nil {
		return err
	}
	if lease != nil {
		if l, ok := lease(); ok {
			ctx = l.outgoing(ctx)
		}
	}
	resp, err := healthpb.NewHealthClient(c.ClientConn).Check(ctx, &healthpb.HealthCheckRequest{Service: Service})
	if err != nil {
		return fmt.Errorf("health check of %s: %w", target, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check of %s: %w (%s)", target, ErrNotServing, resp.GetStatus())
	}
	return nil
}

// Probe is the reachability check with a total timeout, as
// reachabilityTotalTimeoutSeconds defines it: it retries failed checks
// until one succeeds or total has passed, so a single lost packet or a
// reconnect in progress does not declare the node down. An answer is not a
// lost packet, though: a node whose agent says NOT_SERVING (it is stopping,
// or cannot forward) or whose kernel refuses the connection during this
// probe (the agent is not running) is down at once (ErrNotServing,
// ErrRefused), so that its egress IPs move without waiting out total. A
// connection the agent's listener accepts and then closes because it holds
// its maximum (LimitListener) is neither: the kernel accepted it, so it is
// not ErrRefused, and it is retried like a lost packet until total.
//
// lease, if not nil, is asked before each attempt for the Lease that
// attempt grants the node (none when it returns false): asked at sending
// time, so that a lease names what the controller places there then.
func (p *Prober) Probe(ctx context.Context, target string, total time.Duration, lease func() (Lease, bool)) error {
	ctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()
	const retry = 100 * time.Millisecond
	start := time.Now().UnixNano()
	for {
		// Wait for the connection while the budget lasts, rather than
		// failing fast on a transport still reconnecting.
		err := p.Check(ctx, target, lease)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrNotServing) {
			return err
		}
		if c, cerr := p.conn(target); cerr == nil && c.refused.Load() >= start {
			return fmt.Errorf("health check of %s: %w", target, ErrRefused)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node unreachable within %v: %w", total, err)
		case <-time.After(retry):
		}
	}
}

// Forget closes the connection to target, for a node that went away.
func (p *Prober) Forget(target string) {
	p.mu.Lock()
	c, ok := p.conns[target]
	delete(p.conns, target)
	p.mu.Unlock()
	if ok {
		c.Close()
	}
}

// Close closes every connection.
func (p *Prober) Close() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*proberConn{}
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
