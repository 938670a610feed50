package cluster

import (
	"context"
	"log/slog"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/egret-gw/egret/internal/kubetest"
)

// TestUninstallingRealAPI asks a real kube-apiserver what a stopping agent
// asks: its DaemonSet in place is a restart; the DaemonSet deleted, or an
// identity the API no longer admits (RBAC removed with the install), is an
// uninstall.
func TestUninstallingRealAPI(t *testing.T) {
	env := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "egret-system"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "egret-steer"}
	podSpec := corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "steer", Image: "egret"}}}
	ds, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "egret-steer"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controller-manager runs: the pod stays after its DaemonSet goes.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "egret-steer-x", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}}},
		Spec: podSpec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if gone, err := Uninstalling(env.Config, ns, "egret-steer-x", "steer", log); gone || err != nil {
		t.Fatalf("DaemonSet in place: uninstall %v (%v), want a restart", gone, err)
	}
	if gone, err := Uninstalling(env.UserConfig(t, "nobody"), ns, "egret-steer-x", "steer", log); !gone || err != nil {
		t.Fatalf("identity without rights: uninstall %v (%v), want an uninstall", gone, err)
	}
	if err := cs.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if gone, err := Uninstalling(env.Config, ns, "egret-steer-x", "steer", log); !gone || err != nil {
		t.Fatalf("DaemonSet deleted: uninstall %v (%v), want an uninstall", gone, err)
	}
}
