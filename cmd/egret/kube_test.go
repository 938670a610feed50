package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/access"
	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// asUser binds the roles deploy/rbac/users.yaml ships for command
// (access.Commands) to a user of its own, as docs/operations.md says:
// egret-viewer cluster-wide, egret-checker in the namespaces checked,
// egret-natlog in egret-system. It returns that user's kubeconfig, so that
// the command runs with those rights and no others, once the authorizer
// allows each request access lists for it.
func (k *kubeFixture) asUser(command string, checked ...string) string {
	k.t.Helper()
	objs, err := kubetest.ReadObjects(filepath.Join(testbin.Root(k.t), "deploy", "rbac", "users.yaml"))
	if err != nil {
		k.t.Fatal(err)
	}
	c, ok := access.Commands[command]
	if !ok {
		k.t.Fatalf("access lists no command %s", command)
	}
	user, cr := "user-"+command, metav1.CreateOptions{}
	rbac := k.cs.RbacV1()
	for _, role := range c.Roles {
		for _, o := range objs {
			if o.GetName() != role {
				continue
			}
			switch o.GetKind() {
			case "ClusterRole":
				var r rbacv1.ClusterRole
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
					k.t.Fatal(err)
				}
				k.must(rbac.ClusterRoles().Create(k.ctx, &r, cr))
			case "Role":
				var r rbacv1.Role
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
					k.t.Fatal(err)
				}
				k.must(rbac.Roles(r.Namespace).Create(k.ctx, &r, cr))
			}
		}
		subjects := []rbacv1.Subject{{Kind: "User", Name: user}}
		switch role {
		case access.Viewer:
			k.must(rbac.ClusterRoleBindings().Create(k.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}, cr))
		case access.Checker:
			for _, ns := range checked {
				k.must(rbac.RoleBindings(ns).Create(k.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}, cr))
			}
		case access.NATLog:
			k.must(rbac.RoleBindings("egret-system").Create(k.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}, Subjects: subjects}, cr))
		}
	}
	// The authorizer learns of bindings through a watch: wait until it
	// allows every request, so that a refusal below is the roles' fault.
	for _, r := range c.Requests {
		ns := map[string]string{access.Egret: "egret-system", access.Cluster: ""}[r.Where]
		if r.Where == access.Probed && len(checked) > 0 {
			ns = checked[0]
		}
		for _, v := range r.Verbs {
			attrs := &authzv1.ResourceAttributes{Namespace: ns, Verb: v, Group: r.Group, Resource: r.Resource, Subresource: r.Subresource}
			if len(r.Names) > 0 {
				attrs.Name = r.Names[0]
			}
			nstest.Until(k.t, fmt.Sprintf("%s may %s %s", user, v, r.Resource), 10*time.Second, func() (bool, string) {
				sar, err := k.cs.AuthorizationV1().SubjectAccessReviews().Create(k.ctx, &authzv1.SubjectAccessReview{
					Spec: authzv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}, cr)
				if err != nil {
					k.t.Fatal(err)
				}
				return sar.Status.Allowed, sar.Status.Reason
			})
		}
	}
	return k.env.UserKubeconfig(k.t, user)
}
