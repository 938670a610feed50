package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestCheckKube runs the real binary's `egret check` against a real
// kube-apiserver. There is no kubelet: the test plays it, binding each
// probe pod to a node and ending it with the answer the outside server
// would have given. Checked: the probe pod's spec, the verdict for an
// answer that matches egret status and one that does not, and that the
// probe pods are gone after each run, also one ended by SIGINT or SIGTERM.
func TestCheckKube(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, filepath.Join(testbin.Root(t), "deploy", "crd"))
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	eips, err := egressv1.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cr := metav1.CreateOptions{}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range [][3]string{{"w1", "10.0.0.11", "10.128.1.0/24"}, {"g1", "10.0.0.21", ""}} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n[0]}}
		if n[2] != "" {
			node.Spec.PodCIDR, node.Spec.PodCIDRs = n[2], []string{n[2]}
		}
		created, err := cs.CoreV1().Nodes().Create(ctx, node, cr)
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n[1]}}
		must(cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}))
	}
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}}, cr))
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev"}}, cr))
	// running makes pod a Running pod with address ip on w1, or (msg set)
	// an ended one whose termination message is msg, as a kubelet would.
	running := func(p *corev1.Pod, ip, msg string) {
		t.Helper()
		if p.Spec.NodeName == "" {
			must(nil, cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "w1"}}, cr))
		}
		p, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		if msg != "" {
			p.Status.Phase = corev1.PodSucceeded
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "probe", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg}}}}
		}
		must(cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}))
	}
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", Labels: map[string]string{"app": "web", "pod-template-hash": "abc"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	web, err = cs.CoreV1().Pods("prod").Create(ctx, web, cr)
	if err != nil {
		t.Fatal(err)
	}
	running(web, "10.128.1.2", "")
	must(eips.Create(ctx, &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec: egressv1.EgressIPSpec{EgressIPs: []string{"192.0.2.10"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: egressv1.EgressIPStatus{Items: []egressv1.EgressIPStatusItem{{Node: "g1", EgressIP: "192.0.2.10"}}}}, cr))

	bin := testbin.Build(t, "egret")
	probes := func(ns string) []corev1.Pod {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: checkLabel})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	start := func(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.Command(bin, append([]string{"check", "--kubeconfig", env.Kubeconfig, "--url", "http://198.51.100.1:8080/"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out, &errOut
	}
	probeOf := func(ns string) corev1.Pod {
		t.Helper()
		var p []corev1.Pod
		nstest.Until(t, "the probe pod in "+ns, 20*time.Second, func() (bool, string) {
			p = probes(ns)
			return len(p) == 1, fmt.Sprintf("%d probe pods", len(p))
		})
		return p[0]
	}
	exit := func(cmd *exec.Cmd) int {
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	gone := func(what string) {
		t.Helper()
		for _, ns := range []string{"prod", "dev"} {
			if p := probes(ns); len(p) > 0 {
				t.Errorf("%s: %d probe pods left in %s", what, len(p), ns)
			}
		}
	}

	// 1. The probe leaves as blue's egress IP, as egret status says: exit 0.
	// Only prod has a selected pod.
	cmd, out, errOut := start()
	p := probeOf("prod")
	c := p.Spec.Containers[0]
	if p.Labels["app"] != "web" || p.Labels["pod-template-hash"] != "" || c.Image != "ghcr.io/egret-gw/egret:"+version ||
		!slices.Equal(c.Args, []string{"probe-fetch", "--timeout", "10s", "http://198.51.100.1:8080/"}) || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("probe pod: labels %v, image %s, args %q, restart %s", p.Labels, c.Image, c.Args, p.Spec.RestartPolicy)
	}
	running(&p, "10.128.1.9", "192.0.2.10:40000\n")
	if code := exit(cmd); code != 0 || !strings.Contains(out.String(), "1 namespaces checked") {
		t.Errorf("a matching answer: exit %d\n%s%s", code, out, errOut)
	}
	gone("after a run")

	// 2. The probe leaves as its node: a mismatch, exit 1, with the table.
	// -n dev adds a namespace none selects, whose probe must not leave as
	// an egress IP and does not.
	cmd, out, errOut = start("-n", "prod,dev")
	p, d := probeOf("prod"), probeOf("dev")
	running(&d, "10.128.1.11", "10.0.0.11:41000")
	running(&p, "10.128.1.10", "10.0.0.11:40001")
	code := exit(cmd)
	if code != 1 || !strings.Contains(out.String(), "prod       "+p.Name) || !strings.Contains(out.String(), "192.0.2.10") ||
		!strings.Contains(out.String(), "10.0.0.11") || strings.Contains(out.String(), "dev ") || !strings.Contains(errOut.String(), "1 of 2 namespaces") {
		t.Errorf("a wrong source: exit %d\n%s%s", code, out, errOut)
	}
	gone("after a mismatch")

	// 3. Ctrl-C or SIGTERM while the probes wait (no kubelet runs them):
	// the pods are deleted and the exit is non-zero.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd, out, errOut = start("--timeout", "5m")
		probeOf("prod")
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := exit(cmd); code == 0 || !strings.Contains(errOut.String(), "interrupted") {
			t.Errorf("%v: exit %d\n%s%s", sig, code, out, errOut)
		}
		gone("after " + sig.String())
	}
}
