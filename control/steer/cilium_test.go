package steer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// hostRoutingCases are cilium-config data and whether Cilium runs eBPF
// host routing with them (its finishKubeProxyReplacementInit).
var hostRoutingCases = []struct {
	name string
	data map[string]string
	bpf  bool
}{
	{"empty: Cilium's defaults (no kube-proxy replacement)", map[string]string{}, false},
	{"Helm defaults: kube-proxy kept, iptables masquerade",
		map[string]string{"kube-proxy-replacement": "false", "enable-ipv4-masquerade": "true", "enable-ipv6-masquerade": "true", "enable-bpf-masquerade": "false", "enable-ipv4": "true", "enable-ipv6": "false"}, false},
	{"kube-proxy replacement and BPF masquerade: host routing in BPF",
		map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true"}, true},
	{"the same with legacy routing set",
		map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true", "enable-host-legacy-routing": "true"}, false},
	{"legacy routing written as Go's other true", map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true", "enable-host-legacy-routing": "1"}, false},
	{"legacy routing false", map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true", "enable-host-legacy-routing": "false"}, true},
	{"legacy routing unreadable counts as false, as in Cilium",
		map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true", "enable-host-legacy-routing": "yes"}, true},
	{"kube-proxy replacement with iptables masquerade (the default): legacy",
		map[string]string{"kube-proxy-replacement": "true"}, false},
	{"kube-proxy replacement, no masquerading at all: BPF",
		map[string]string{"kube-proxy-replacement": "true", "enable-ipv4-masquerade": "false", "enable-ipv6-masquerade": "false"}, true},
	{"IPv4 masquerade off, IPv6 off: BPF",
		map[string]string{"kube-proxy-replacement": "true", "enable-ipv4-masquerade": "false", "enable-ipv6": "false"}, true},
	{"IPv4 masquerade off, IPv6 on with iptables masquerade: legacy",
		map[string]string{"kube-proxy-replacement": "true", "enable-ipv4-masquerade": "false", "enable-ipv6": "true"}, false},
	{"IPv4 off, IPv6 masquerade by BPF: BPF",
		map[string]string{"kube-proxy-replacement": "true", "enable-ipv4": "false", "enable-ipv6": "true", "enable-bpf-masquerade": "true"}, true},
	{"Cilium 1.14's strict is true", map[string]string{"kube-proxy-replacement": "strict", "enable-bpf-masquerade": "true"}, true},
	{"Cilium 1.14's partial is not", map[string]string{"kube-proxy-replacement": "partial", "enable-bpf-masquerade": "true"}, false},
	{"Cilium 1.14's probe is not", map[string]string{"kube-proxy-replacement": "probe", "enable-bpf-masquerade": "true"}, false},
	{"kube-proxy replacement false", map[string]string{"kube-proxy-replacement": "false", "enable-bpf-masquerade": "true"}, false},
}

// TestCiliumHostRouting is the rule, key by key; a refusal names the keys.
func TestCiliumHostRouting(t *testing.T) {
	for _, c := range hostRoutingCases {
		why, bpf := CiliumHostRouting(c.data)
		if bpf != c.bpf {
			t.Errorf("%s: eBPF host routing %v, want %v (%s)", c.name, bpf, c.bpf, why)
			continue
		}
		if bpf && (!strings.Contains(why, "kube-proxy-replacement") || !strings.Contains(why, "enable-host-legacy-routing")) {
			t.Errorf("%s: reason %q does not name the keys", c.name, why)
		}
		if !bpf && why != "" {
			t.Errorf("%s: a reason %q without host routing", c.name, why)
		}
	}
}

var ciliumGR = schema.GroupResource{Resource: "configmaps"}

func ciliumConfig(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: CiliumConfigNamespace, Name: CiliumConfigName}, Data: data}
}

// TestCheckCilium: what the start does with each answer of the API.
func TestCheckCilium(t *testing.T) {
	bpf := map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true"}
	for _, c := range []struct {
		name    string
		objs    []runtime.Object
		err     error // the API's answer instead of the objects'
		allow   bool
		refuse  bool
		logHas  string
		logLack string
	}{
		{name: "no Cilium"},
		{name: "Cilium, legacy routing", objs: []runtime.Object{ciliumConfig(map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true", "enable-host-legacy-routing": "true"})}, logHas: "legacy"},
		{name: "Cilium, BPF host routing", objs: []runtime.Object{ciliumConfig(bpf)}, refuse: true},
		{name: "Cilium, BPF host routing, allowed", objs: []runtime.Object{ciliumConfig(bpf)}, allow: true, logHas: "allowCiliumHostRouting"},
		{name: "forbidden: a warning naming the permission", err: apierrors.NewForbidden(ciliumGR, CiliumConfigName, errors.New("RBAC")),
			logHas: "lacks get on ConfigMap kube-system/cilium-config"},
		{name: "another namespace's cilium-config is not Cilium's", objs: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: CiliumConfigName}, Data: bpf}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(c.objs...)
			if c.err != nil {
				cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, c.err })
			}
			var logs bytes.Buffer
			err := checkCilium(context.Background(), cs.CoreV1(), c.allow, slog.New(slog.NewTextHandler(&logs, nil)))
			if c.refuse {
				if err == nil || !strings.Contains(err.Error(), `enable-host-legacy-routing: "true"`) || !strings.Contains(err.Error(), "bpf.hostLegacyRouting=true") {
					t.Fatalf("err %v, want a refusal naming the setting and the fix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v, want a start", err)
			}
			if !strings.Contains(logs.String(), c.logHas) {
				t.Errorf("log %q lacks %q", logs.String(), c.logHas)
			}
		})
	}
}

// TestCheckCiliumRetries: an API that does not answer yet is asked again
// with backoff (a refusal once it answers), and the wait ends with ctx.
func TestCheckCiliumRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(ciliumConfig(map[string]string{"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true"}))
		fails := 3
		cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			if fails > 0 {
				fails--
				return true, nil, apierrors.NewServiceUnavailable("etcd")
			}
			return false, nil, nil
		})
		err := checkCilium(context.Background(), cs.CoreV1(), false, slog.New(slog.DiscardHandler))
		if fails != 0 || err == nil || !strings.Contains(err.Error(), "eBPF host routing") {
			t.Fatalf("after %d failures left: %v, want the refusal", fails, err)
		}

		cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd")
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- checkCilium(ctx, cs.CoreV1(), false, slog.New(slog.DiscardHandler)) }()
		synctest.Wait()
		cancel()
		if err := <-done; err == nil || !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("cancelled: %v, want the API's last error", err)
		}
	})
}
