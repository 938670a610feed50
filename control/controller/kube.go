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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
