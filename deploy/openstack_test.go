package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestHelmOpenStackNodePolicy installs the chart with cloud.provider=openstack
// into a real kube-apiserver and patches a Node as the controller's
// ServiceAccount, through the controller's own AnnotateNode: its RBAC and
// ValidatingAdmissionPolicy let it write the egress-ipconfig and its
// publisher marker (failurePolicy Fail: a policy that refused them would
// stop every OpenStack install from publishing capacity), and nothing
// else of the Node.
func TestHelmOpenStackNodePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	hb, kc := helmBin(t), kubectl(t)
	env := kubetest.Start(t)
	run(t, nil, hb, "--kubeconfig", env.Kubeconfig, "install", "egret", chart, "-n", "egret-system", "--create-namespace",
		"--set", "interfaces.gateway={eth1},interfaces.underlay=eth0,cloud.provider=openstack,cloud.openstack.cloudsSecret=egret-openstack")
	run(t, []byte(`{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"k8s.ovn.org/egress-assignable": ""},
"annotations": {"other": "kept"}}, "spec": {"providerID": "openstack:///vm-1"}}`), kc, "--kubeconfig", env.Kubeconfig, "apply", "-f", "-")

	as := env.UserConfig(t, "system:serviceaccount:egret-system:egret-controller", "system:serviceaccounts", "system:serviceaccounts:egret-system")
	kube, err := cluster.NewKube(as, cluster.Only(cluster.KindNode))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(as)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The API server loads a new policy asynchronously: wait until it
	// refuses what it must, then check what it must let through.
	// A dry run, so that what passes before then changes nothing.
	nstest.Until(t, "the controller's node policy enforced", 30*time.Second, func() (bool, string) {
		_, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"other":"changed"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "egret-controller-node-facts"), errString(err)
	})
	if err := kube.AnnotateNode(ctx, "n1", map[string]*string{"other": ptr("changed")}); err == nil {
		t.Error("the controller changed another annotation of a Node")
	}
	cfg := `[{"interface":"port-1","ifaddr":{"ipv4":"10.0.0.0/24"},"capacity":{"ip":10}}]`
	if err := kube.AnnotateNode(ctx, "n1", map[string]*string{cluster.AnnotationEgressIPConfig: &cfg, cluster.AnnotationEgretCloudPublisher: ptr("egret-controller")}); err != nil {
		t.Fatalf("the controller publishing the egress-ipconfig: %v", err)
	}
	if err := kube.AnnotateNode(ctx, "n1", map[string]*string{cluster.AnnotationEgressIPConfig: nil}); err != nil {
		t.Fatalf("the controller removing the egress-ipconfig: %v", err)
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":null}}}`), metav1.PatchOptions{})
	if err == nil {
		t.Error("the controller removed a Node's label")
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err == nil {
		t.Error("the controller cordoned a Node")
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err == nil {
		t.Error("the controller deleted a Node")
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations["other"] != "kept" || n.Spec.Unschedulable || n.Labels[cluster.LabelEgressAssignable] != "" || n.Annotations[cluster.AnnotationEgretCloudPublisher] != "egret-controller" {
		t.Errorf("Node after the controller's patches: annotations %v, labels %v, unschedulable %v", n.Annotations, n.Labels, n.Spec.Unschedulable)
	}
}

func ptr(s string) *string { return &s }

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
