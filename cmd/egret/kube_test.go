package main

import (
	"context"
	"path/filepath"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubeFixture is a real kube-apiserver with the EgressIP CRD, for the
// tests that run egret's commands against a cluster, and the objects they
// put in it as a cluster's components would.
type kubeFixture struct {
	t    *testing.T
	env  *kubetest.Env
	cs   *kubernetes.Clientset
	eips *egressv1.Client
	ctx  context.Context
}

func newKubeFixture(t *testing.T) *kubeFixture {
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
	return &kubeFixture{t: t, env: env, cs: cs, eips: eips, ctx: context.Background()}
}

// must fails the test on err (the result of a create or update).
func (k *kubeFixture) must(_ any, err error) {
	k.t.Helper()
	if err != nil {
		k.t.Fatal(err)
	}
}

// node creates Node name with InternalIP ip and, unless it is "", podCIDR.
func (k *kubeFixture) node(name, ip, podCIDR string) {
	k.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	created, err := k.cs.CoreV1().Nodes().Create(k.ctx, n, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	k.must(k.cs.CoreV1().Nodes().UpdateStatus(k.ctx, created, metav1.UpdateOptions{}))
}

// namespace creates namespace name with labels.
func (k *kubeFixture) namespace(name string, labels map[string]string) {
	k.t.Helper()
	k.must(k.cs.CoreV1().Namespaces().Create(k.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}))
}

// pod creates pod ns/name with labels on node and, as its kubelet would,
// makes it Running with address ip.
func (k *kubeFixture) pod(ns, name, node, ip string, labels map[string]string) *corev1.Pod {
	k.t.Helper()
	p, err := k.cs.CoreV1().Pods(ns).Create(k.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	return k.setPodStatus(p, runningStatus(ip))
}

// runningStatus is a kubelet's status of a Running pod with address ip.
func runningStatus(ip string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
}

// setPodStatus writes st as pod p's status.
func (k *kubeFixture) setPodStatus(p *corev1.Pod, st corev1.PodStatus) *corev1.Pod {
	k.t.Helper()
	p.Status = st
	p, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(k.ctx, p, metav1.UpdateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	return p
}

// egressIP is EgressIP name of ip, selecting the namespaces labelled env=env
// and, when node is not "", placed on node by its status (the CRD has no
// status subresource: the status is written with the object).
func egressIP(name, ip, env, node string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: egressv1.EgressIPSpec{EgressIPs: []string{ip}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": env}}}}
	if node != "" {
		e.Status.Items = []egressv1.EgressIPStatusItem{{Node: node, EgressIP: ip}}
	}
	return e
}

// create creates EgressIP e.
func (k *kubeFixture) create(e *egressv1.EgressIP) {
	k.t.Helper()
	k.must(k.eips.Create(k.ctx, e, metav1.CreateOptions{}))
}
