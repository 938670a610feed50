package cluster

import (
	"context"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// OpenShiftNetworkGVR is the OpenShift network operator's configuration,
// operator.openshift.io/v1 Network; the one that counts is named
// OpenShiftNetworkName.
var OpenShiftNetworkGVR = schema.GroupVersionResource{Group: "operator.openshift.io", Version: "v1", Resource: "networks"}

// OpenShiftNetworkName is the name of the cluster's Network object.
const OpenShiftNetworkName = "cluster"

// reachabilityPath is where OpenShift keeps the EgressIP reachability timeout.
var reachabilityPath = []string{"spec", "defaultNetwork", "ovnKubernetesConfig", "egressIPConfig", "reachabilityTotalTimeoutSeconds"}

// WatchReachabilityTimeout follows reachabilityTotalTimeoutSeconds in the
// OpenShift Network object "cluster" (spec.defaultNetwork.ovnKubernetesConfig.
// egressIPConfig), as the specification configures it. It returns once
// the current value is known and then calls set on every change until ctx
// ends: with the value, or nil when the object, or the field in it, is
// absent. On a cluster without that API (no OpenShift) it calls set(nil)
// once and watches nothing. A value outside 0-60 is reported to set as nil
// and logged, so Egret's own setting applies.
func (s *Kube) WatchReachabilityTimeout(ctx context.Context, log *slog.Logger, set func(*int)) error {
	rl, err := s.cs.Discovery().ServerResourcesForGroupVersion(OpenShiftNetworkGVR.GroupVersion().String())
	served := false
	if err == nil {
		for _, r := range rl.APIResources {
			served = served || r.Name == OpenShiftNetworkGVR.Resource
		}
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("asking the API server whether it serves %s: %w", OpenShiftNetworkGVR.GroupVersion(), err)
	}
	if !served {
		log.Info("no OpenShift Network configuration on this cluster; using Egret's reachabilityTotalTimeoutSeconds")
		set(nil)
		return nil
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dyn, 0, "", func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", OpenShiftNetworkName).String()
	})
	inf := f.ForResource(OpenShiftNetworkGVR).Informer()
	last, first := (*int)(nil), true
	update := func() {
		var v *int
		if o, ok, _ := inf.GetStore().GetByKey(OpenShiftNetworkName); ok {
			v = reachabilityOf(o, log)
		}
		if !first && equalPtr(v, last) {
			return
		}
		first, last = false, v
		set(v)
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the %s informer did not sync (may this identity list and watch networks.operator.openshift.io named %s?)", OpenShiftNetworkGVR.GroupResource(), OpenShiftNetworkName)
	}
	update() // the synced state, also when the object does not exist
	// Handlers run on the informer's one goroutine, after the sync above.
	if _, err := inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("watching %s: %w", OpenShiftNetworkGVR.GroupResource(), err)
	}
	return nil
}

func reachabilityOf(o any, log *slog.Logger) *int {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, reachabilityPath...)
	if !found {
		return nil
	}
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case float64:
		n = int64(x)
		ok = float64(n) == x
	default:
		ok = false
	}
	if err != nil || !ok || n < 0 || n > 60 {
		log.Warn("ignoring the OpenShift Network's reachabilityTotalTimeoutSeconds: not an integer from 0 to 60", "value", v)
		return nil
	}
	i := int(n)
	return &i
}

func equalPtr(a, b *int) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
