package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/control/identity"
)

// reachability runs one probe loop per assignable node and remembers each
// node's last verdict.
type reachability struct {
	interval time.Duration
	prober   *health.Prober
	// With node identity (useIdentity): plain probes the nodes that hold
	// no certificate yet, which certified tells apart; both nil otherwise.
	plain     *health.Prober
	certified func(node string) bool
	metrics   *Metrics // set before start; nil ignores
	log       *slog.Logger
	// onChange is called when a node's verdict changes (or is first known).
	onChange func()

	mu    sync.Mutex
	total time.Duration // 0: the check is disabled
	ctx   context.Context
	nodes map[string]*probeState
	wg    sync.WaitGroup
	// placed is every egress IP the last cycle placed, by node, for the
	// probes' leases; nil until the first cycle decided (no lease before:
	// an empty one would tell every gateway it hosts nothing).
	placed map[string][]netip.Addr
}

type probeState struct {
	target    string
	cancel    context.CancelFunc
	known     bool // at least one probe finished
	reachable bool
	lastErr   string
	by        *health.Prober // the prober of the last probe (loop only)
}

// ProbeTLS names the files of the controller's side of a mutually
// authenticated reachability probe, mounted from a Secret: the controller
// presents CertFile/KeyFile and accepts a gateway only if its certificate
// chains to CAFile and carries ServerName (health.DefaultServerName when
// empty). Naming no file keeps the probe plain gRPC.
type ProbeTLS struct {
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
	CAFile     string `json:"caFile,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

func (p ProbeTLS) files() health.TLSFiles {
	return health.TLSFiles{Cert: p.CertFile, Key: p.KeyFile, CA: p.CAFile}
}

// newReachability loads the probe's TLS files, if any, now: a controller
// whose certificates do not load must not start and declare every gateway
// unreachable.
func newReachability(total, interval time.Duration, pt ProbeTLS, log *slog.Logger, onChange func()) (*reachability, error) {
	var tc *tls.Config
	if pt.files().Enabled() {
		var err error
		if tc, err = health.ClientTLS(pt.files(), pt.ServerName); err != nil {
			return nil, err
		}
	}
	return &reachability{total: total, interval: interval, prober: health.NewProber(health.ProbeTLS(tc)), log: log,
		onChange: onChange, nodes: map[string]*probeState{}}, nil
}

// useIdentity makes the probe mutual TLS with the controller's node-identity
// certificate (--node-identity=csr); call it before start. Each
// connection is dialed with the name of the node probed there as its TLS
// server name, and only that node's gateway certificate is accepted.
//
// A node that holds no certificate of the CA (certified false) is probed
// in plain gRPC: during an upgrade it is a gateway of the previous
// release, which speaks nothing else, and refusing it would move every
// egress IP off the gateways not yet upgraded. Once the signer issued the
// node a certificate, only its TLS answer counts, so a plain answer from
// whoever took the node's address no longer does.
func (r *reachability) useIdentity(st *identity.Store, certified func(node string) bool) {
	r.prober.Close()
	r.prober = health.NewProber(health.ProbeTLS(st.ClientTLS(gatewayNamed)), health.ProbeServerName(r.nodeAt))
	r.plain, r.certified = health.NewProber(), certified
}

// proberFor is the prober of node's next probe.
func (r *reachability) proberFor(node string) *health.Prober {
	if r.certified == nil || r.certified(node) {
		return r.prober
	}
	return r.plain
}

// forget closes the connections of both probers to target.
func (r *reachability) forget(target string) {
	r.prober.Forget(target)
	if r.plain != nil {
		r.plain.Forget(target)
	}
}

// gatewayNamed accepts the gateway certificate of node serverName only: a
// certificate proves its node, so another gateway, or a pod that took the
// node's address, cannot answer for it.
func gatewayNamed(leaf *x509.Certificate, serverName string) error {
	node, err := identity.GatewayNode(leaf)
	if err != nil {
		return err
	}
	if serverName == "" || node != serverName {
		return fmt.Errorf("the certificate of node %s answered at the address of node %q", node, serverName)
	}
	return nil
}

// nodeAt names the node probed at target ("" if none).
func (r *reachability) nodeAt(target string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range r.nodes {
		if s.target == target {
			return name
		}
	}
	return ""
}

func (r *reachability) disabled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total == 0
}

// timeout is the current total timeout, 0 when the check is disabled.
func (r *reachability) timeout() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// setTotal changes the total timeout; running loops use it from their
// next probe. Disabling ends every loop: all nodes count as reachable.
func (r *reachability) setTotal(total time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total = total
	if total != 0 {
		return
	}
	for name, s := range r.nodes {
		s.cancel()
		r.forget(s.target)
		r.metrics.ForgetNode(name)
	}
	r.nodes = map[string]*probeState{}
}

// start sets the context probe loops run under.
func (r *reachability) start(ctx context.Context) {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
}

// stop ends every loop and closes the connections.
func (r *reachability) stop() {
	r.mu.Lock()
	for _, s := range r.nodes {
		s.cancel()
	}
	r.nodes = map[string]*probeState{}
	r.mu.Unlock()
	r.wg.Wait()
	r.prober.Close()
	if r.plain != nil {
		r.plain.Close()
	}
}

// track makes the probed set equal targets (node name → host:port); a node
// whose address changed starts over as unknown.
func (r *reachability) track(targets map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.total == 0 {
		return
	}
	for name, s := range r.nodes {
		if t, ok := targets[name]; !ok || t != s.target {
			s.cancel()
			delete(r.nodes, name)
			r.forget(s.target)
			if _, still := targets[name]; !still {
				r.metrics.ForgetNode(name)
			}
		}
	}
	for name, t := range targets {
		if _, ok := r.nodes[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(r.ctx)
		s := &probeState{target: t, cancel: cancel}
		r.nodes[name] = s
		r.wg.Add(1)
		go r.loop(ctx, name, s)
	}
}

func (r *reachability) loop(ctx context.Context, name string, s *probeState) {
	defer r.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p := r.proberFor(name)
		if s.by != nil && p != s.by {
			s.by.Forget(s.target)
			r.log.Info("node probed over another transport", "node", name, "tls", p == r.prober)
		}
		s.by = p
		start := time.Now()
		err := p.Probe(ctx, s.target, r.timeout(), func() (health.Lease, bool) { return r.lease(name) })
		if ctx.Err() != nil {
			return
		}
		took := time.Since(start)
		r.metrics.ObserveProbe(name, took, err != nil)
		r.metrics.SetReachable(name, err == nil)
		r.mu.Lock()
		changed := !s.known || s.reachable != (err == nil)
		s.known, s.reachable = true, err == nil
		if err != nil {
			s.lastErr = err.Error()
		}
		r.mu.Unlock()
		if changed {
			if err != nil {
				r.log.Warn("node failed the reachability check", "node", name, "target", s.target, "err", err)
			} else {
				r.log.Info("node is reachable", "node", name, "target", s.target)
			}
			r.onChange()
		}
		t.Reset(r.interval)
	}
}

// verdict returns whether name is reachable and whether that is known yet.
func (r *reachability) verdict(name string) (reachable, known bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == 0 {
		return true, true
	}
	s, ok := r.nodes[name]
	if !ok || !s.known {
		return false, false
	}
	return s.reachable, true
}

// waitKnown waits until every tracked node has a verdict or ctx ends.
func (r *reachability) waitKnown(ctx context.Context) {
	for {
		r.mu.Lock()
		all := true
		for _, s := range r.nodes {
			all = all && s.known
		}
		r.mu.Unlock()
		if all {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// leaseFor is the lease a successful probe grants, for the reachability
// check's probe interval and total timeout: shorter, by construction, than
// the earliest time after a successful probe at which the controller may
// move the node's IPs because it stopped answering. That is interval +
// total (the next probe starts interval after the last one ended and
// declares the node down after total; the second look only adds to it);
// the gateway counts the lease from the probe's arrival, which is before
// the probe ended here. The margin, a quarter of that and at least 100 ms,
// covers the gateway's own delay in releasing (its loop, the reload) and
// the two clocks' rates.
func leaseFor(interval, total time.Duration) time.Duration {
	budget := interval + total
	return budget - max(budget/4, 100*time.Millisecond)
}

// lease is what a probe of node grants, at the moment it is sent: false
// while the check is disabled (no probes move anything), before the first
// cycle decided, or when the node holds more IPs than a lease names.
func (r *reachability) lease(node string) (health.Lease, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == 0 || r.placed == nil {
		return health.Lease{}, false
	}
	d := leaseFor(r.interval, r.total)
	ips := r.placed[node]
	if d <= 0 || len(ips) > health.MaxLeaseIPs {
		return health.Lease{}, false
	}
	return health.Lease{For: d, IPs: ips}, true
}

// setPlaced records what a cycle placed ("object/ip" → node, as
// memory.placed): from the next probe on, each node's lease names its IPs,
// so an IP moved off a node that still answers stops being covered there
// within a probe interval.
func (r *reachability) setPlaced(placed map[string]string) {
	byNode := map[string][]netip.Addr{}
	for k, node := range placed {
		i := strings.LastIndexByte(k, '/')
		ip, err := netip.ParseAddr(k[i+1:])
		if err != nil {
			continue // not an address: placed only holds parsed ones
		}
		byNode[node] = append(byNode[node], ip)
	}
	r.mu.Lock()
	r.placed = byNode
	r.mu.Unlock()
}
