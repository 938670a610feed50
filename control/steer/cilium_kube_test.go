package steer

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestAgentRefusesCiliumHostRouting starts the real agent (Run and RunOnce,
// as `egret steer` does) against a real kube-apiserver: with a cilium-config
// that means eBPF host routing it refuses, naming the setting, before it
// touches the node's kernel; with legacy routing set it starts; an identity
// that may not read the ConfigMap starts with a warning.
func TestAgentRefusesCiliumHostRouting(t *testing.T) {
	requirePrivileged(t)
	env := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	l := buildLab(t)
	k, err := NewKernel(testConfig(), l.nodeH, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	device := func() bool {
		return exec.Command("ip", "-n", l.node, "link", "show", testConfig().Device).Run() == nil
	}
	ctx := context.Background()
	// The apiserver makes kube-system itself, maybe after /readyz.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CiliumConfigNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(CiliumConfigNamespace).Create(ctx, ciliumConfig(map[string]string{
		// Cilium 1.16+'s Helm chart with kubeProxyReplacement=true, bpf.masquerade=true.
		"kube-proxy-replacement": "true", "enable-bpf-masquerade": "true", "enable-ipv4-masquerade": "true",
		"enable-ipv6-masquerade": "true", "enable-ipv4": "true", "enable-ipv6": "false", "routing-mode": "tunnel",
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func(logs *bytes.Buffer) *Agent {
		return &Agent{Node: "w1", Source: &memSource{}, Kernel: k, ConfigMaps: cs.CoreV1(), Resync: time.Hour,
			Log: slog.New(slog.NewTextHandler(logs, nil))}
	}
	var logs bytes.Buffer
	for name, start := range map[string]func(*Agent) error{
		"Run": func(a *Agent) error {
			// Without the check Run would run on: bound it.
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return a.Run(ctx)
		},
		"RunOnce": func(a *Agent) error { return a.RunOnce(ctx) },
	} {
		err := start(newAgent(&logs))
		if err == nil || !strings.Contains(err.Error(), `enable-host-legacy-routing: "true"`) || !strings.Contains(err.Error(), "kube-proxy-replacement") {
			t.Fatalf("%s under eBPF host routing: %v, want a refusal naming the setting", name, err)
		}
		t.Logf("%s refuses: %v", name, err)
		if device() {
			t.Fatalf("%s refused but set up the kernel (device %s exists)", name, testConfig().Device)
		}
	}

	// A ServiceAccount without the Role: a warning, and the agent starts.
	logs.Reset()
	nobody, err := kubernetes.NewForConfig(env.UserConfig(t, "nobody"))
	if err != nil {
		t.Fatal(err)
	}
	a := newAgent(&logs)
	a.ConfigMaps = nobody.CoreV1()
	if err := a.RunOnce(ctx); err != nil || !device() {
		t.Fatalf("no right to read cilium-config: %v (device %v), want a start", err, device())
	}
	if !strings.Contains(logs.String(), "lacks get on ConfigMap kube-system/cilium-config") {
		t.Errorf("no warning naming the missing permission in %q", logs.String())
	}
	if err := k.Cleanup(); err != nil || device() {
		t.Fatalf("cleanup: %v", err)
	}

	// The supported setting: legacy routing. Run starts and programs.
	cm.Data["enable-host-legacy-routing"] = "true"
	if _, err := cs.CoreV1().ConfigMaps(CiliumConfigNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newAgent(&logs).Run(runCtx) }()
	started := nstest.Soon(30*time.Second, device)
	cancel()
	if err := <-done; err != nil || !started {
		t.Fatalf("legacy routing: Run %v, device set up %v; want a start", err, started)
	}

	// No Cilium at all: nothing to check.
	if err := cs.CoreV1().ConfigMaps(CiliumConfigNamespace).Delete(ctx, CiliumConfigName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := newAgent(&logs).RunOnce(ctx); err != nil {
		t.Fatalf("no cilium-config: %v", err)
	}
}
