package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ConfigMapGetter returns the data of a ConfigMap.
type ConfigMapGetter interface {
	ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error)
}

// KubeConfigMaps reads ConfigMaps from the API server named in a kubeconfig file.
type KubeConfigMaps struct {
	Client kubernetes.Interface
}

// NewKubeConfigMaps builds a client from the kubeconfig file the node's settings name.
// Its errors are the node's to fix, not the network configuration's author's.
func NewKubeConfigMaps(kubeconfig string) (*KubeConfigMaps, error) {
	rc, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cannot build an API client from the node's kubeconfig %s: %w", kubeconfig, err)
	}
	return &KubeConfigMaps{Client: cs}, nil
}

// loadKubeconfig reads the node's kubeconfig for ipConfig; ADD and STATUS share it so
// STATUS refuses exactly what ADD would.
func loadKubeconfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return nil, fmt.Errorf("ipConfig needs a kubeconfig to read the ConfigMap, and the node's %s names none (egress-router install --kubeconfig-dir writes one)", HostConfigName)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cannot load the node's kubeconfig for ipConfig (%s names it): %w", HostConfigName, err)
	}
	return rc, nil
}

// ConfigMapData implements ConfigMapGetter.
func (k *KubeConfigMaps) ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error) {
	// One retry at most: a runtime retries a "try again later" ADD itself, and a kubelet
	// waiting on a silent plugin is worse than a quick, clear error.
	var cm corev1.ConfigMap
	err := k.Client.CoreV1().RESTClient().Get().Namespace(namespace).Resource("configmaps").Name(name).
		VersionedParams(&metav1.GetOptions{}, scheme.ParameterCodec).MaxRetries(1).Do(ctx).Into(&cm)
	if err != nil {
		return nil, err
	}
	return cm.Data, nil
}

// ResolveIP picks the IP settings for one pod from whichever form the config uses.
func ResolveIP(ctx context.Context, c *Config, pod PodArgs, cms ConfigMapGetter) (IPSettings, error) {
	switch {
	case c.Static != nil:
		return *c.Static, nil
	case c.PodIP != nil:
		if pod.Name == "" {
			return IPSettings{}, fieldErr("podIP", "needs the pod name, but CNI_ARGS has no K8S_POD_NAME")
		}
		e, err := MatchPod(c.PodIP, pod.Name)
		if err != nil {
			return IPSettings{}, &FieldError{Field: "podIP", Err: err}
		}
		return e.IP, nil
	case c.IPConfig != nil:
		return resolveConfigMap(ctx, c.IPConfig, pod, cms)
	}
	return IPSettings{}, errors.New("no IP configuration")
}

func resolveConfigMap(ctx context.Context, src *IPConfigSource, pod PodArgs, cms ConfigMapGetter) (IPSettings, error) {
	ns := src.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	if ns == "" {
		return IPSettings{}, fieldErr("ipConfig.namespace", "is not set and CNI_ARGS has no K8S_POD_NAMESPACE to default to")
	}
	where := fmt.Sprintf("ConfigMap %s/%s", ns, src.Name)
	data, err := cms.ConfigMapData(ctx, ns, src.Name)
	if err != nil {
		return IPSettings{}, fieldErr("ipConfig", "cannot read %s: %w", where, err)
	}
	cm, err := parseConfigMapData(where, data, pod.Name)
	if err != nil {
		return IPSettings{}, err
	}
	return ApplyOverrides(where, cm, src.Overrides)
}

// parseConfigMapData reads the "ip" or "podIP" entry, in the same format as the CNI config.
func parseConfigMapData(where string, data map[string]string, podName string) (IPSettings, error) {
	ipJSON, hasIP := data["ip"]
	podJSON, hasPod := data["podIP"]
	switch {
	case hasIP && hasPod:
		return IPSettings{}, fieldErr("ipConfig", "%s has both an ip and a podIP entry; it must have exactly one", where)
	case hasIP:
		var spec IPSpec
		if err := json.Unmarshal([]byte(ipJSON), &spec); err != nil {
			return IPSettings{}, fieldErr("ipConfig", "%s: entry ip is not valid JSON: %v", where, err)
		}
		return parseIPSpec(where+" ip", &spec, true)
	case hasPod:
		var m map[string]IPSpec
		if err := json.Unmarshal([]byte(podJSON), &m); err != nil {
			return IPSettings{}, fieldErr("ipConfig", "%s: entry podIP is not valid JSON: %v", where, err)
		}
		entries, err := parsePodIP(where+" podIP", m)
		if err != nil {
			return IPSettings{}, err
		}
		if podName == "" {
			return IPSettings{}, fieldErr("ipConfig", "%s uses podIP, which needs the pod name, but CNI_ARGS has no K8S_POD_NAME", where)
		}
		e, err := MatchPod(entries, podName)
		if err != nil {
			return IPSettings{}, fieldErr("ipConfig", "%s: %v", where, err)
		}
		return e.IP, nil
	}
	return IPSettings{}, fieldErr("ipConfig", "%s has neither an ip nor a podIP entry in its data", where)
}

// ApplyOverrides enforces ipConfig.overrides on what a ConfigMap asks for:
// addresses must be allowed, the gateway is fixed, and destinations are intersected.
func ApplyOverrides(where string, cm IPSettings, ov *IPSettings) (IPSettings, error) {
	if ov == nil {
		return cm, nil
	}
	out := cm
	if len(ov.Addresses) > 0 {
		for _, a := range cm.Addresses {
			if !slices.ContainsFunc(ov.Addresses, func(o netip.Prefix) bool { return sameAddress(a, cm.Bare, o, ov.Bare) }) {
				return IPSettings{}, fieldErr("ipConfig.overrides.addresses", "%s assigns %s, which is not among the allowed addresses %v", where, a, ov.Addresses)
			}
		}
	}
	if ov.Gateway.IsValid() {
		if cm.Gateway.IsValid() && cm.Gateway != ov.Gateway {
			return IPSettings{}, fieldErr("ipConfig.overrides.gateway", "%s sets gateway %s, but the gateway is fixed to %s", where, cm.Gateway, ov.Gateway)
		}
		if !slices.ContainsFunc(out.Addresses, func(p netip.Prefix) bool { return p.Addr().Is4() == ov.Gateway.Is4() }) {
			return IPSettings{}, fieldErr("ipConfig.overrides.gateway", "%s has no address of the family of gateway %s", where, ov.Gateway)
		}
		out.Gateway = ov.Gateway
	}
	if allowed := ov.Allowed(); len(allowed) > 0 {
		if len(cm.Destinations) == 0 && len(cm.Redirects) == 0 {
			out.Destinations, out.Redirects = slices.Clone(ov.Destinations), slices.Clone(ov.Redirects)
			return out, nil
		}
		// The ConfigMap's redirects must lead where the overrides allow.
		for _, r := range cm.Redirects {
			if !slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Bits() <= r.To.Bits() && p.Contains(r.To.Addr()) }) {
				return IPSettings{}, fieldErr("ipConfig.overrides.destinations", "%s redirects port %d/%s to %s, which is outside the allowed destinations %v", where, r.Port, r.Proto, r.To, allowed)
			}
		}
		if len(cm.Destinations) > 0 {
			out.Destinations = IntersectPrefixes(cm.Destinations, allowed)
			if len(out.Destinations) == 0 {
				// An empty list would mean "anywhere": refuse instead of widening.
				return IPSettings{}, fieldErr("ipConfig.overrides.destinations", "%s destinations %v do not intersect the allowed destinations %v", where, cm.Destinations, allowed)
			}
		}
	}
	return out, nil
}

// sameAddress says whether a ConfigMap address matches an allowed one: the same address
// and prefix length, or the same address where either was written without a length.
func sameAddress(a netip.Prefix, aBare []netip.Addr, o netip.Prefix, oBare []netip.Addr) bool {
	if a.Addr() != o.Addr() {
		return false
	}
	return a.Bits() == o.Bits() || slices.Contains(aBare, a.Addr()) || slices.Contains(oBare, o.Addr())
}

// IntersectPrefixes returns the CIDR blocks contained in both lists: for every
// overlapping pair, the narrower block. The result is sorted and has no duplicates.
func IntersectPrefixes(a, b []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range a {
		for _, y := range b {
			if !x.Overlaps(y) {
				continue
			}
			n := x
			if y.Bits() > x.Bits() {
				n = y
			}
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.SortFunc(out, func(p, q netip.Prefix) int {
		if c := p.Addr().Compare(q.Addr()); c != 0 {
			return c
		}
		return p.Bits() - q.Bits()
	})
	// Drop blocks already covered by a wider block in the result.
	res := make([]netip.Prefix, 0, len(out))
	for _, p := range out {
		if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return q != p && q.Bits() < p.Bits() && q.Contains(p.Addr()) }) {
			res = append(res, p)
		}
	}
	return res
}
