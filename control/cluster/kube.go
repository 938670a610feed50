package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Component is the name status updates are written under, and Events
// unless RecordAs names another role.
const Component = "egret-controller"

// Kube is a Source that reads objects through client-go informers and writes status
// and Events to the API server.
type Kube struct {
	cs                     kubernetes.Interface
	dyn                    dynamic.Interface
	eip                    *egressv1.Client
	factories              []informers.SharedInformerFactory
	eipInf                 cache.SharedIndexInformer
	nodeInf, nsInf, podInf cache.SharedIndexInformer // nil when not watched
	// trafficInf is built by Start, and only when the API server serves
	// EgressIPTraffic (watchTraffic: the kind is watched at all).
	trafficInf   cache.SharedIndexInformer
	watchTraffic bool
	log          *slog.Logger
	bcast        record.EventBroadcaster
	recorder     record.EventRecorder
}

// KubeOption narrows what a Kube source watches. Each role watches only what
// it reads: with 100,000 pods, caching them all cost the controller, which
// reads none, 7 s at start and most of its memory (bench/controlplane).
type KubeOption func(*kubeOptions)

type kubeOptions struct {
	kinds     []Kind
	podNode   string
	component string
}

// Only watches these kinds; View leaves the others empty and Start reports
// no change of them. Without it every kind is watched.
func Only(kinds ...Kind) KubeOption { return func(o *kubeOptions) { o.kinds = kinds } }

// PodsOn watches only the pods bound to node (a field selector on
// spec.nodeName), for an agent that acts on its own node's pods.
func PodsOn(node string) KubeOption { return func(o *kubeOptions) { o.podNode = node } }

// RecordAs records Events with source component, the role that sends
// them, instead of Component: `kubectl get events` and the Event's
// source say which role saw what it reports.
func RecordAs(component string) KubeOption { return func(o *kubeOptions) { o.component = component } }

// NewKube builds the informers and the Event recorder for cfg.
func NewKube(cfg *rest.Config, opts ...KubeOption) (*Kube, error) {
	o := kubeOptions{component: Component}
	for _, f := range opts {
		f(&o)
	}
	watched := func(k Kind) bool { return len(o.kinds) == 0 || slices.Contains(o.kinds, k) }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	eip, err := egressv1.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the dynamic Kubernetes client: %w", err)
	}
	s := &Kube{cs: cs, dyn: dyn, eip: eip, watchTraffic: watched(KindTraffic), log: slog.Default()}
	// Managed fields are large and never read here: keep them out of the cache.
	strip := informers.WithTransform(func(o any) (any, error) {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return o, nil
	})
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, strip)
	s.factories = append(s.factories, factory)
	if watched(KindNode) {
		s.nodeInf = factory.Core().V1().Nodes().Informer()
	}
	if watched(KindNamespace) {
		s.nsInf = factory.Core().V1().Namespaces().Informer()
	}
	if watched(KindPod) {
		pods := factory
		if o.podNode != "" {
			sel := fields.OneTermEqualSelector("spec.nodeName", o.podNode).String()
			pods = informers.NewSharedInformerFactoryWithOptions(cs, 0, strip,
				informers.WithTweakListOptions(func(l *metav1.ListOptions) { l.FieldSelector = sel }))
			s.factories = append(s.factories, pods)
		}
		s.podInf = pods.Core().V1().Pods().Informer()
	}
	if watched(KindEgressIP) {
		s.eipInf = cache.NewSharedIndexInformer(eip.ListWatch(), &egressv1.EgressIP{}, 0, cache.Indexers{})
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := egressv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	s.bcast = record.NewBroadcaster()
	s.recorder = s.bcast.NewRecorder(scheme, corev1.EventSource{Component: o.component})
	return s, nil
}

// Start implements Source. EgressIPTraffic is watched only if the API
// server serves it: a cluster upgraded by applying deploy/ before
// deploy/crd/ runs with no EgressIPTraffic objects (every trafficSelector
// selects nothing) and a warning, instead of never starting.
func (s *Kube) Start(ctx context.Context, changed func(Kind)) error {
	if s.watchTraffic {
		served, err := s.servesTraffic(ctx)
		if err != nil {
			return err
		}
		if served {
			s.trafficInf = cache.NewSharedIndexInformer(s.eip.Traffic().ListWatch(), &egressv1.EgressIPTraffic{}, 0, cache.Indexers{})
		} else {
			s.log.Warn("the API server does not serve EgressIPTraffic (k8s.ovn.org/v1 egressiptraffics): running with no EgressIPTraffic objects, so every EgressIP with a trafficSelector selects no destination; apply deploy/crd/ (kubectl apply --server-side -k deploy/crd/) and restart Egret's pods")
		}
	}
	var synced []cache.InformerSynced
	for _, x := range []struct {
		inf  cache.SharedIndexInformer
		kind Kind
	}{{s.eipInf, KindEgressIP}, {s.nodeInf, KindNode}, {s.nsInf, KindNamespace}, {s.podInf, KindPod}, {s.trafficInf, KindTraffic}} {
		if x.inf == nil {
			continue
		}
		synced = append(synced, x.inf.HasSynced)
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
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	for _, inf := range []cache.SharedIndexInformer{s.eipInf, s.trafficInf} {
		if inf != nil {
			go inf.RunWithContext(ctx)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("informer caches did not sync (is the EgressIP CRD installed, and may this identity list egressips, egressiptraffics, nodes, namespaces and pods?)")
	}
	return nil
}

// servesTraffic asks discovery whether k8s.ovn.org/v1 has
// egressiptraffics. Only a definite answer counts: an unreachable API
// server is asked again until ctx ends, as the informers would retry.
func (s *Kube) servesTraffic(ctx context.Context) (bool, error) {
	var served bool
	gv := egressv1.SchemeGroupVersion.String()
	logged := false
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		rl, err := s.cs.Discovery().ServerResourcesForGroupVersion(gv)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil // not even EgressIP (the EgressIP informer says so)
		case err != nil:
			if !logged {
				s.log.Warn("asking the API server which k8s.ovn.org/v1 resources it serves; retrying", "err", err)
				logged = true
			}
			return false, nil
		}
		served = slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == egressv1.TrafficResource })
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("asking the API server whether it serves %s: %w", egressv1.TrafficResource, err)
	}
	if served {
		// An identity without the grant (RBAC of an older release, a
		// person's role) would wait forever for the informer to list:
		// say so instead. Other errors the informer retries.
		_, err := s.eip.Traffic().List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsForbidden(err) {
			return false, fmt.Errorf("listing EgressIPTraffic objects: %w", err)
		}
	}
	return served, nil
}

func list[T any](inf cache.SharedIndexInformer) []*T {
	if inf == nil {
		return nil
	}
	items := inf.GetStore().List()
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// View implements Source.
func (s *Kube) View() View {
	return View{EgressIPs: list[egressv1.EgressIP](s.eipInf), Nodes: list[corev1.Node](s.nodeInf),
		Namespaces: list[corev1.Namespace](s.nsInf), Pods: list[corev1.Pod](s.podInf),
		Traffic: list[egressv1.EgressIPTraffic](s.trafficInf)}
}

// EgressIP implements Source.
func (s *Kube) EgressIP(name string) (*egressv1.EgressIP, bool) {
	if s.eipInf == nil {
		return nil, false
	}
	o, ok, err := s.eipInf.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	e, ok := o.(*egressv1.EgressIP)
	return e, ok
}

// Check implements Source: it lists the EgressIP objects from the API
// server (a quorum read, not the cache).
func (s *Kube) Check(ctx context.Context) (Statuses, error) {
	l, err := s.eip.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing EgressIPs from the API server: %w", err)
	}
	out := make(Statuses, len(l.Items))
	for _, e := range l.Items {
		out[e.Name] = e.Status
	}
	return out, nil
}

// UpdateEgressIP implements Source with a normal update (the CRD has no
// status subresource).
func (s *Kube) UpdateEgressIP(ctx context.Context, eip *egressv1.EgressIP) error {
	_, err := s.eip.Update(ctx, eip, metav1.UpdateOptions{FieldManager: Component})
	return err
}

// UpdateTrafficStatus implements Source through the status subresource.
func (s *Kube) UpdateTrafficStatus(ctx context.Context, t *egressv1.EgressIPTraffic) error {
	_, err := s.eip.Traffic().UpdateStatus(ctx, t, metav1.UpdateOptions{FieldManager: Component})
	return err
}

// Event implements Source.
func (s *Kube) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	s.recorder.Event(ref, eventType, reason, message)
}

// AnnotateNode merge-patches the annotations of Node name: each key is
// set to its value, or removed when the value is nil. The gateway agent
// publishes its node's interface subnets this way; it needs the right to
// patch nodes (deploy/gateway/rbac.yaml).
func (s *Kube) AnnotateNode(ctx context.Context, name string, set map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return err
	}
	if _, err := s.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "egret-gateway"}); err != nil {
		return fmt.Errorf("annotating node %s: %w", name, err)
	}
	return nil
}

// ForeignStatusWriter returns the field manager of another controller that
// owns e's status (metadata.managedFields), or "" when none does. Egret's
// own writes are under Component; kubectl (any kubectl-* manager) and
// server-side apply are people or GitOps writing a manifest that happens to
// carry status, as the specification's first example does, not a
// controller. OVN-Kubernetes writes status with a JSON patch, recorded as
// an Update by a manager named after its user agent (the node name).
func ForeignStatusWriter(e *egressv1.EgressIP) string {
	for _, mf := range e.ManagedFields {
		if mf.Manager == Component || mf.Operation != metav1.ManagedFieldsOperationUpdate ||
			strings.HasPrefix(mf.Manager, "kubectl") || mf.FieldsV1 == nil {
			continue
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(mf.FieldsV1.Raw, &top) != nil {
			continue
		}
		if _, ok := top["f:status"]; ok {
			return mf.Manager
		}
	}
	return ""
}
