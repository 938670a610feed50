package controller

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/identity"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// RunKube runs the controller against the API server of restCfg until ctx
// ends: with leader election (unless disabled), only the holder of the
// Lease assigns, probes and writes; the others wait to take over. identity
// names this replica in the Lease (the host name when empty). m (nil: none)
// receives the metrics; egret_controller_leader is 1 only while this
// replica runs the controller.
func RunKube(ctx context.Context, restCfg *rest.Config, cfg Config, identity string, log *slog.Logger, m *Metrics) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	full := cfg.withDefaults()
	restCfg = rest.CopyConfig(restCfg)
	restCfg.QPS, restCfg.Burst = full.KubeAPIQPS, full.KubeAPIBurst
	ident, err := startIdentity(ctx, restCfg, full, log)
	if err != nil {
		return err
	}
	runOnce := func(ctx context.Context) error {
		// The assignment reads EgressIPs and Nodes only; the DNS names of
		// EgressIPTraffic objects are resolved here too.
		src, err := cluster.NewKube(restCfg, cluster.Only(cluster.KindEgressIP, cluster.KindNode, cluster.KindTraffic))
		if err != nil {
			return err
		}
		c, err := New(src, cfg, log)
		if err != nil {
			return err
		}
		c.SetMetrics(m)
		c.networkConfig = src.WatchReachabilityTimeout
		if ident != nil {
			signer, stop, err := ident.sign(ctx, full, m, log)
			if err != nil {
				return err
			}
			defer stop()
			// Which nodes hold a certificate decides how each is probed:
			// read every CSR first, or a gateway with only TLS would be
			// probed in plain text and look down.
			if err := waitSynced(ctx, signer, log); err != nil {
				return err
			}
			c.reach.useIdentity(ident.store, signer.Certified)
		}
		if cfg.Cloud.Provider != cloud.ProviderNone {
			p, err := cloud.New(ctx, cfg.Cloud)
			if err != nil {
				return err
			}
			c.SetCloud(p, src)
		}
		return c.Run(ctx)
	}
	m.SetLeader(false)
	if full.LeaderElection.Disabled {
		return runOnce(ctx)
	}
	if identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no leader election identity given and no host name: %w", err)
		}
		identity = h
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	le := full.LeaderElection
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	var (
		running = make(chan struct{}, 1) // held while a controller runs
		mu      sync.Mutex
		runErr  error
	)
	lec := leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration.Duration,
		RenewDeadline:   le.RenewDeadline.Duration,
		RetryPeriod:     le.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				running <- struct{}{}
				defer func() { <-running }()
				if ctx.Err() != nil {
					return // leadership already lost before this started
				}
				log.Info("leading: this replica now runs the EgressIP controller", "identity", identity)
				if err := runOnce(ctx); err != nil && ctx.Err() == nil {
					mu.Lock()
					runErr = err
					mu.Unlock()
				}
			},
			OnStoppedLeading: func() { log.Info("not leading", "identity", identity) },
			OnNewLeader: func(id string) {
				if id != identity {
					log.Info("another replica leads", "leader", id)
				}
			},
		},
	}
	// Lost leadership ends Run; start over as a candidate until ctx ends.
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(lec)
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		elector.Run(ctx)
		// The controller must be fully stopped before anyone may lead again.
		running <- struct{}{}
		<-running
		mu.Lock()
		err = runErr
		mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(le.RetryPeriod.Duration):
		}
	}
	return nil
}

// nodeIdentity is what every replica holds with --node-identity=csr: the
// identity CA and its own client certificate.
type nodeIdentity struct {
	client kubernetes.Interface
	ca     *identity.CA
	store  *identity.Store
}

// startIdentity loads (or makes) the identity CA and issues this replica
// its certificate, renewed until ctx ends; nil when node identity is off.
// Every replica does it, not only the leader, so a new leader probes with
// a certificate at once.
func startIdentity(ctx context.Context, restCfg *rest.Config, cfg Config, log *slog.Logger) (*nodeIdentity, error) {
	if cfg.NodeIdentity != NodeIdentityCSR {
		return nil, nil
	}
	ns, _, err := identity.SplitServiceAccount(cfg.GatewayServiceAccount)
	if err != nil {
		return nil, err // Validate caught it
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	ca, err := identity.LoadCA(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	st, err := identity.ControllerStore(ctx, ca, cfg.NodeCertDuration.Duration, log)
	if err != nil {
		return nil, err
	}
	return &nodeIdentity{client: cs, ca: ca, store: st}, nil
}

// sign runs the CSR signer (the leader's part) until ctx ends or the
// returned stop is called; stop waits for it to end, so two leaders never
// sign at once.
func (id *nodeIdentity) sign(ctx context.Context, cfg Config, m *Metrics, log *slog.Logger) (signer *identity.Signer, stop func(), err error) {
	sel, _ := labels.Parse(cfg.NodeSelector) // Validate checked it
	s, err := identity.NewSigner(identity.SignerConfig{Client: id.client, CA: id.ca, ServiceAccount: cfg.GatewayServiceAccount,
		NodeSelector: sel, Duration: cfg.NodeCertDuration.Duration, Log: log, Result: m.NodeCertificate})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return s, func() { cancel(); <-done }, nil
}

// waitSynced waits until s has read every CSR of its signer, saying every
// 10 s why nothing is probed yet.
func waitSynced(ctx context.Context, s *identity.Signer, log *slog.Logger) error {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.Synced():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			log.Warn("identity signer: the CertificateSigningRequests are not listed yet, so no gateway is probed (RBAC: list and watch certificatesigningrequests)")
		}
	}
}
