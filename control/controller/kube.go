package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// Component is the Event source name.
const Component = "egret-controller"

// KubeSource reads objects through client-go informers and writes status
// and Events to the API server.
type KubeSource struct {
	cs                     kubernetes.Interface
	eip                    *egressv1.Client
	factory                informers.SharedInformerFactory
	eipInf                 cache.SharedIndexInformer
	nodeInf, nsInf, podInf cache.SharedIndexInformer
	bcast                  record.EventBroadcaster
	recorder               record.EventRecorder
}

// NewKubeSource builds the informers and the Event recorder for cfg.
func NewKubeSource(cfg *rest.Config) (*KubeSource, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	eip, err := egressv1.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := &KubeSource{cs: cs, eip: eip}
	// Managed fields are large and never read here: keep them out of the cache.
	strip := informers.WithTransform(func(o any) (any, error) {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return o, nil
	})
	s.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, strip)
	s.nodeInf = s.factory.Core().V1().Nodes().Informer()
	s.nsInf = s.factory.Core().V1().Namespaces().Informer()
	s.podInf = s.factory.Core().V1().Pods().Informer()
	s.eipInf = cache.NewSharedIndexInformer(eip.ListWatch(), &egressv1.EgressIP{}, 0, cache.Indexers{})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := egressv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	s.bcast = record.NewBroadcaster()
	s.recorder = s.bcast.NewRecorder(scheme, corev1.EventSource{Component: Component})
	return s, nil
}

// Start implements Source.
func (s *KubeSource) Start(ctx context.Context, changed func(Kind)) error {
	for _, x := range []struct {
		inf  cache.SharedIndexInformer
		kind Kind
	}{{s.eipInf, KindEgressIP}, {s.nodeInf, KindNode}, {s.nsInf, KindNamespace}, {s.podInf, KindPod}} {
		k := x.kind
		h := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed(k) },
			UpdateFunc: func(any, any) { changed(k) },
			DeleteFunc: func(any) { changed(k) },
		}
		if _, err := x.inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("watching %s: %w", k, err)
		}
	}
	s.bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.cs.CoreV1().Events("")})
	context.AfterFunc(ctx, s.bcast.Shutdown)
	s.factory.Start(ctx.Done())
	go s.eipInf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), s.eipInf.HasSynced, s.nodeInf.HasSynced, s.nsInf.HasSynced, s.podInf.HasSynced) {
		return errors.New("informer caches did not sync (is the EgressIP CRD installed, and may this identity list egressips, nodes, namespaces and pods?)")
	}
	return nil
}

func list[T any](inf cache.SharedIndexInformer) []*T {
	items := inf.GetStore().List()
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// EgressIPs implements Source.
func (s *KubeSource) EgressIPs() []*egressv1.EgressIP { return list[egressv1.EgressIP](s.eipInf) }

// EgressIP implements Source.
func (s *KubeSource) EgressIP(name string) (*egressv1.EgressIP, bool) {
	o, ok, err := s.eipInf.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	e, ok := o.(*egressv1.EgressIP)
	return e, ok
}

// Nodes implements Source.
func (s *KubeSource) Nodes() []*corev1.Node { return list[corev1.Node](s.nodeInf) }

// Namespaces implements Source.
func (s *KubeSource) Namespaces() []*corev1.Namespace { return list[corev1.Namespace](s.nsInf) }

// Pods implements Source.
func (s *KubeSource) Pods() []*corev1.Pod { return list[corev1.Pod](s.podInf) }

// UpdateEgressIP implements Source with a normal update (the CRD has no
// status subresource).
func (s *KubeSource) UpdateEgressIP(ctx context.Context, eip *egressv1.EgressIP) error {
	_, err := s.eip.Update(ctx, eip, metav1.UpdateOptions{FieldManager: Component})
	return err
}

// Event implements Source.
func (s *KubeSource) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	s.recorder.Event(ref, eventType, reason, message)
}

// RunKube runs the controller against the API server of restCfg until ctx
// ends: with leader election (unless disabled), only the holder of the
// Lease assigns, probes and writes; the others wait to take over. identity
// names this replica in the Lease (the host name when empty). m (nil: none)
// receives the metrics; egret_controller_leader is 1 only while this
// replica runs the controller.
func RunKube(ctx context.Context, restCfg *rest.Config, cfg Config, identity string, log *slog.Logger, m *metrics.Control) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	full := cfg.withDefaults()
	runOnce := func(ctx context.Context) error {
		src, err := NewKubeSource(restCfg)
		if err != nil {
			return err
		}
		c, err := New(src, cfg, log)
		if err != nil {
			return err
		}
		c.SetMetrics(m)
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
