package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCheckKube runs the real binary's `egret check` against a real
// kube-apiserver. There is no kubelet: the test plays it, binding each
// probe pod to a node and ending it with the answer the outside server
// would have given. Checked: the probe pod's spec, the verdict for an
// answer that matches egret status and one that does not, and that the
// probe pods are gone after each run, also one ended by SIGINT or SIGTERM.
// It runs as a user with only the roles deploy/rbac/users.yaml ships for
// it, egret-checker bound in the namespaces checked.
func TestCheckKube(t *testing.T) {
	k := newKubeFixture(t)
	cs, ctx := k.cs, k.ctx
	k.node("w1", "10.0.0.11", "10.128.1.0/24")
	k.node("g1", "10.0.0.21", "")
	k.namespace("prod", map[string]string{"env": "prod"})
	k.namespace("dev", nil)
	// running makes probe pod p a Running pod with address ip on w1, or
	// (msg set) an ended one whose termination message is msg, as the
	// scheduler and a kubelet would.
	running := func(p *corev1.Pod, ip, msg string) {
		t.Helper()
		if p.Spec.NodeName == "" {
			k.must(nil, cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "w1"}}, metav1.CreateOptions{}))
		}
		p, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := runningStatus(ip)
		if msg != "" {
			st.Phase = corev1.PodSucceeded
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: "probe", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg}}}}
		}
		k.setPodStatus(p, st)
	}
	k.pod("prod", "web", "w1", "10.128.1.2", map[string]string{"app": "web", "pod-template-hash": "abc"})
	blue := egressIP("blue", "192.0.2.10", "prod", "g1")
	blue.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	k.create(blue)

	kubeconfig := k.asUser("check", "prod", "dev")
	bin := testbin.Build(t, "egret")
	probes := func(ns string) []corev1.Pod {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: checkLabel})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	start := func(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.Command(bin, append([]string{"check", "--kubeconfig", kubeconfig, "--url", "http://198.51.100.1:8080/"}, args...)...)
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

	// 4. A namespace where its user may not start pods: the refusal says
	// what egret check needs and which roles grant it.
	k.namespace("qa", nil)
	cmd, out, errOut = start("-n", "qa")
	if code := exit(cmd); code != 1 || !strings.Contains(errOut.String(), "forbidden") ||
		!strings.Contains(errOut.String(), "create,get,delete,deletecollection pods") || !strings.Contains(errOut.String(), "egret-viewer and egret-checker") {
		t.Errorf("unbound namespace: exit %d\n%s%s", code, out, errOut)
	}
}
