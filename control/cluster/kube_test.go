package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A Kube source watches what its role reads: Only leaves the other kinds
// out of the View, PodsOn keeps only the pods bound to one node.
func TestKubeWatchesWhatItIsAsked(t *testing.T) {
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cr := metav1.CreateOptions{}
	for _, n := range []string{"n1", "n2"} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, cr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, cr); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{"a", "n1"}, {"b", "n2"}, {"c", "n1"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p[0], Namespace: "shop"},
			Spec: corev1.PodSpec{NodeName: p[1], Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		if _, err := cs.CoreV1().Pods("shop").Create(ctx, pod, cr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := eips.Create(ctx, &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec: egressv1.EgressIPSpec{EgressIPs: []string{"192.0.2.10"}}}, cr); err != nil {
		t.Fatal(err)
	}
	traffic := eips.Traffic()
	if _, err := traffic.Create(ctx, &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: egressv1.EgressIPTrafficSpec{DestinationNetworks: []string{"192.0.2.0/24"}}}, cr); err != nil {
		t.Fatal(err)
	}
	view := func(opts ...KubeOption) View {
		t.Helper()
		src, err := NewKube(env.Config, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Start(ctx, func(Kind) {}); err != nil {
			t.Fatal(err)
		}
		return src.View()
	}
	podNames := func(v View) []string {
		var out []string
		for _, p := range v.Pods {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}

	all := view()
	if len(all.EgressIPs) != 1 || len(all.Nodes) != 2 || !slices.Equal(podNames(all), []string{"a", "b", "c"}) || len(all.Namespaces) == 0 ||
		len(all.Traffic) != 1 || all.Traffic[0].Name != "db" {
		t.Errorf("every kind: %d EgressIPs, %d nodes, pods %v, %d namespaces, %d EgressIPTraffics", len(all.EgressIPs), len(all.Nodes), podNames(all), len(all.Namespaces), len(all.Traffic))
	}
	ctl := view(Only(KindEgressIP, KindNode))
	if len(ctl.EgressIPs) != 1 || len(ctl.Nodes) != 2 || ctl.Pods != nil || ctl.Namespaces != nil || ctl.Traffic != nil {
		t.Errorf("Only(EgressIP, Node): %d EgressIPs, %d nodes, pods %v, %d namespaces, %d EgressIPTraffics", len(ctl.EgressIPs), len(ctl.Nodes), podNames(ctl), len(ctl.Namespaces), len(ctl.Traffic))
	}
	if tr := view(Only(KindTraffic)); len(tr.Traffic) != 1 || tr.EgressIPs != nil {
		t.Errorf("Only(EgressIPTraffic): %d EgressIPTraffics, %d EgressIPs", len(tr.Traffic), len(tr.EgressIPs))
	}
	n1 := view(PodsOn("n1"))
	if !slices.Equal(podNames(n1), []string{"a", "c"}) || len(n1.Nodes) != 2 || len(n1.EgressIPs) != 1 {
		t.Errorf("PodsOn(n1): pods %v, %d nodes, %d EgressIPs", podNames(n1), len(n1.Nodes), len(n1.EgressIPs))
	}
}

// The Kube source reports EgressIPTraffic changes and writes their status
// through the status subresource, with the API server's conflict and
// not-found errors.
func TestKubeTraffic(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, filepath.Join(testbin.Root(t), "deploy", "crd"))
	c, err := egressv1.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := NewKube(env.Config, Only(KindTraffic))
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan Kind, 100)
	if err := src.Start(ctx, func(k Kind) { changes <- k }); err != nil {
		t.Fatal(err)
	}
	created, err := c.Traffic().Create(ctx, &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: egressv1.EgressIPTrafficSpec{DNSNames: []string{"db.example.com"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitKind := func(want Kind) {
		t.Helper()
		for {
			select {
			case k := <-changes:
				if k == want {
					return
				}
				t.Errorf("change of %v reported, only %v is watched", k, want)
			case <-time.After(30 * time.Second):
				t.Fatalf("no change of %v reported", want)
			}
		}
	}
	waitKind(KindTraffic)
	if v := src.View(); len(v.Traffic) != 1 || v.Traffic[0].Name != "db" {
		t.Fatalf("View().Traffic = %v after the create was reported", v.Traffic)
	}

	mine := src.View().Traffic[0].DeepCopy()
	mine.Status.DNSNames = []egressv1.ResolvedName{{Name: "db.example.com", Addresses: []string{"192.0.2.5"}}}
	mine.Spec.DNSNames = []string{"other.example.com"} // not stored: only status is
	if err := src.UpdateTrafficStatus(ctx, mine); err != nil {
		t.Fatalf("UpdateTrafficStatus: %v", err)
	}
	got, err := c.Traffic().Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Spec.DNSNames, []string{"db.example.com"}) || len(got.Status.DNSNames) != 1 || got.Status.DNSNames[0].Addresses[0] != "192.0.2.5" {
		t.Errorf("after UpdateTrafficStatus: spec %+v status %+v", got.Spec, got.Status)
	}
	waitKind(KindTraffic)
	// created carries the resourceVersion before the status write.
	if err := src.UpdateTrafficStatus(ctx, created); !apierrors.IsConflict(err) {
		t.Errorf("UpdateTrafficStatus with a stale resourceVersion: %v, want Conflict", err)
	}
	if err := c.Traffic().Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := src.UpdateTrafficStatus(ctx, got); !apierrors.IsNotFound(err) {
		t.Errorf("UpdateTrafficStatus of a deleted object: %v, want NotFound", err)
	}
	waitKind(KindTraffic)

	// An identity that may not list them is told so by Start, with the
	// API server's Forbidden error (egret status explains it), instead of
	// waiting forever.
	denied, err := NewKube(env.UserConfig(t, "no-grants"), Only(KindTraffic))
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := denied.Start(sctx, func(Kind) {}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "EgressIPTraffic") {
		t.Errorf("Start without the right to list EgressIPTraffic: %v, want Forbidden", err)
	}
}

// An upgrade that applies deploy/ before deploy/crd/ leaves the API server
// without EgressIPTraffic: the agents still start, with no such objects
// and one warning.
func TestKubeWithoutTrafficCRD(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, filepath.Join(testbin.Root(t), "deploy", "crd", "k8s.ovn.org_egressips.yaml"))
	c, err := egressv1.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Create(ctx, &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec: egressv1.EgressIPSpec{EgressIPs: []string{"192.0.2.10"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]KubeOption{nil, {Only(KindTraffic, KindEgressIP)}} {
		src, err := NewKube(env.Config, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		src.log = slog.New(slog.NewTextHandler(&logs, nil))
		if err := src.Start(ctx, func(Kind) {}); err != nil {
			t.Fatalf("Start without the EgressIPTraffic CRD: %v", err)
		}
		v := src.View()
		if len(v.EgressIPs) != 1 || v.Traffic != nil {
			t.Errorf("View: %d EgressIPs, EgressIPTraffic %v; want 1 and none", len(v.EgressIPs), v.Traffic)
		}
		if n := strings.Count(logs.String(), "does not serve EgressIPTraffic"); n != 1 || !strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("logged %d warnings about the missing CRD, want 1:\n%s", n, logs.String())
		}
		t.Logf("warning as logged: %s", logs.String())
	}
}
