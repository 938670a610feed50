package steer

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
)

// TestRunOnceThenUninstall: --once programs the node's kernel for the
// selected pod and returns with it programmed; at a stop the state stays
// while the DaemonSet is there or the API cannot say, and goes (device,
// rules) once the stop is an uninstall.
func TestRunOnceThenUninstall(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	k, err := NewKernel(testConfig(), l.nodeH, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	src := &memSource{o: cluster.View{
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "blue", Labels: map[string]string{"team": "blue"}}}},
		EgressIPs:  []*egressv1.EgressIP{eip("blue", match("team", "blue"), metav1.LabelSelector{}, []string{"192.0.2.101"})},
		Pods:       []*corev1.Pod{k8sPod("blue", "p1", "w1", podIP4.String())},
	}}
	a := &Agent{Node: "w1", Source: src, Kernel: k, Log: slog.New(slog.DiscardHandler)}
	if err := a.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	device := func() bool {
		return exec.Command("ip", "-n", l.node, "link", "show", testConfig().Device).Run() == nil
	}
	programmed := func() bool {
		st, err := k.Actual()
		return err == nil && len(st.Rules) == 1 && len(st.Selected) == 1
	}
	if !device() || !programmed() {
		t.Fatalf("after --once: device %v, pod steered %v", device(), programmed())
	}
	for _, c := range []struct {
		name      string
		gone      bool
		err       error
		wantClean bool
	}{
		{name: "restart: DaemonSet in place", gone: false},
		{name: "API cannot say", err: errors.New("connection refused")},
		{name: "uninstall", gone: true, wantClean: true},
	} {
		asked := false
		k.CleanupIfUninstalled(func() (bool, error) { asked = true; return c.gone, c.err }, a.Log)
		if !asked {
			t.Fatalf("%s: the stop did not ask whether it is an uninstall", c.name)
		}
		if d, p := device(), programmed(); d == c.wantClean || p == c.wantClean {
			t.Fatalf("%s: device %v, pod steered %v; want both %v", c.name, d, p, !c.wantClean)
		}
	}
}
