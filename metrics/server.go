package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/egret-gw/egret/control/health"
)

// Default listen addresses of each role's metrics endpoint. The gateway and
// the steer agent run with the host network, so they default to loopback;
// the DaemonSets pass the pod (node) IP. 9107 is the gRPC health port.
const (
	DefaultGatewayAddr    = "127.0.0.1:9110"
	DefaultControllerAddr = ":9111"
	DefaultSteerAddr      = "127.0.0.1:9112"
)

// MaxConns caps the connections a metrics endpoint holds at once: a
// Prometheus server or two, a kubelet probe and room to reconnect. Those
// beyond are closed at once and counted.
const MaxConns = 16

// MaxPerSource caps the connections one source address holds on a metrics
// endpoint: a scraper keeps one or two, so a host (or every pod behind one
// node address) holding more is refused rather than filling MaxConns.
const MaxPerSource = 4

// Timeouts of every HTTP server here. A connection that sends no complete
// request header within readHeaderTimeout, or sits idle between requests
// longer than idleTimeout (above the usual scrape intervals), is closed, so
// a client holding connections open keeps its slots only while it works.
// probeTimeout bounds a /healthz or /readyz answer: a readiness check that
// blocks answers 503 after it instead of holding the connection (and its
// slot) until the check returns.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 90 * time.Second
	probeTimeout      = 2 * time.Second
)

// RegisterRefused registers egret_listener_refused_connections_total for
// one listener ("metrics", "health"): refused reports its count.
func RegisterRefused(reg prometheus.Registerer, listener string, refused func() uint64) error {
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "egret_listener_refused_connections_total",
		Help:        "Connections closed on accept because the listener held its maximum already.",
		ConstLabels: prometheus.Labels{"listener": listener},
	}, func() float64 { return float64(refused()) }))
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors and egret_build_info{version,revision,goversion}. version is
// the binary's version string (main.version); the revision comes from the
// VCS stamp Go puts in the binary.
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	bi := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "egret_build_info",
		Help:        "Always 1; the labels say which build of Egret runs.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision(), "goversion": runtime.Version()},
	})
	bi.Set(1)
	reg.MustRegister(bi)
	return reg
}

func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && rev != "unknown" {
		rev += "-dirty"
	}
	return rev
}

// Server serves /metrics, /healthz and /readyz, and with ServeProbes
// /healthz and /readyz alone on a second address.
type Server struct {
	srv   *http.Server
	ln    net.Listener
	ready atomic.Pointer[func() error]
	done  chan error

	mu     sync.Mutex
	probes *http.Server // nil until ServeProbes
	pln    net.Listener
	pdone  chan error

	closeOnce sync.Once
	closeErr  error
}

// Serve listens on addr and serves reg's metrics in the background until
// Close. ready (nil: always ready) decides /readyz: a non-nil error makes it
// answer 503 with the error's text. /healthz answers 200 while the process
// serves.
func Serve(addr string, reg *prometheus.Registry, ready func() error) (*Server, error) {
	if reg == nil {
		return nil, errors.New("metrics: Serve needs a registry")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %q: %w", addr, err)
	}
	ln := health.LimitPerSource(l, MaxConns, MaxPerSource)
	if err := RegisterRefused(reg, "metrics", ln.Refused); err != nil {
		l.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	s := &Server{ln: ln, done: make(chan error, 1)}
	s.SetReady(ready)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // counts its own scrape errors
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	s.probeRoutes(mux)
	s.srv = newHTTPServer(mux)
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
}

// probeRoutes adds /healthz and /readyz to mux, each answering within
// probeTimeout.
func (s *Server) probeRoutes(mux *http.ServeMux) {
	mux.Handle("/healthz", http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}), probeTimeout, "health check timed out\n"))
	mux.Handle("/readyz", http.TimeoutHandler(http.HandlerFunc(s.serveReady), probeTimeout, "readiness check timed out\n"))
}

// ServeProbes serves /healthz and /readyz (the same answers as on the
// metrics address) on addr too, in the background until Close: a
// loopback address, where the kubelet of a host-network pod reaches them
// and pods do not, so no connection to the metrics port can fail the
// probes. It holds at most MaxConns connections; call it once.
func (s *Server) ServeProbes(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("probe listener on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	s.probeRoutes(mux)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probes != nil {
		l.Close()
		return errors.New("the probe listener is already served")
	}
	s.probes, s.pln, s.pdone = newHTTPServer(mux), health.Limit(l, MaxConns), make(chan error, 1)
	go func() { s.pdone <- s.probes.Serve(s.pln) }()
	return nil
}

// ProbeAddr is the address ServeProbes listens on ("" before it).
func (s *Server) ProbeAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pln == nil {
		return ""
	}
	return s.pln.Addr().String()
}

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if fn := *s.ready.Load(); fn != nil {
		if err := fn(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// SetReady replaces the readiness check (nil: always ready).
func (s *Server) SetReady(fn func() error) { s.ready.Store(&fn) }

// Addr is the address the server listens on (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, waiting up to ctx for scrapes in progress. Later
// calls return the first call's result.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		err := s.srv.Shutdown(ctx)
		if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		s.mu.Lock()
		probes, pdone := s.probes, s.pdone
		s.mu.Unlock()
		if probes != nil {
			if perr := probes.Shutdown(ctx); perr != nil && err == nil {
				err = perr
			}
			if serr := <-pdone; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
				err = serr
			}
		}
		s.closeErr = err
	})
	return s.closeErr
}
