package cluster

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
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
	if len(all.EgressIPs) != 1 || len(all.Nodes) != 2 || !slices.Equal(podNames(all), []string{"a", "b", "c"}) || len(all.Namespaces) == 0 {
		t.Errorf("every kind: %d EgressIPs, %d nodes, pods %v, %d namespaces", len(all.EgressIPs), len(all.Nodes), podNames(all), len(all.Namespaces))
	}
	ctl := view(Only(KindEgressIP, KindNode))
	if len(ctl.EgressIPs) != 1 || len(ctl.Nodes) != 2 || ctl.Pods != nil || ctl.Namespaces != nil {
		t.Errorf("Only(EgressIP, Node): %d EgressIPs, %d nodes, pods %v, %d namespaces", len(ctl.EgressIPs), len(ctl.Nodes), podNames(ctl), len(ctl.Namespaces))
	}
	n1 := view(PodsOn("n1"))
	if !slices.Equal(podNames(n1), []string{"a", "c"}) || len(n1.Nodes) != 2 || len(n1.EgressIPs) != 1 {
		t.Errorf("PodsOn(n1): pods %v, %d nodes, %d EgressIPs", podNames(n1), len(n1.Nodes), len(n1.EgressIPs))
	}
}
