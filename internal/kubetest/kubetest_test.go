package kubetest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egret-gw/egret/internal/nstest"
)

func TestBinDir(t *testing.T) {
	t.Setenv("EGRET_TOOLS_DIR", "")
	if got := BinDir(); got != DefaultBinDir {
		t.Errorf("BinDir() with EGRET_TOOLS_DIR unset = %q, want %q", got, DefaultBinDir)
	}
	t.Setenv("EGRET_TOOLS_DIR", "/tmp/x-tools")
	if got := BinDir(); got != "/tmp/x-tools" {
		t.Errorf("BinDir() = %q, want /tmp/x-tools", got)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("freePorts returned %v: want 8 distinct positive ports", ports)
		}
		seen[p] = true
	}
}

// TestControlPlane starts a real etcd + kube-apiserver and checks that it
// stores objects, that the kubeconfig file works, and that RBAC is enforced
// for users outside system:masters.
func TestControlPlane(t *testing.T) {
	env := Start(t)
	ctx := context.Background()

	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubetest", Labels: map[string]string{"env": "qa"}}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a namespace as admin: %v", err)
	}
	// Pods must be creatable without a controller-manager.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "kubetest", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	if _, err := admin.CoreV1().Pods("kubetest").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a pod as admin: %v", err)
	}

	// The kubeconfig file reaches the same apiserver as the same user.
	kc, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", env.Kubeconfig, err)
	}
	viaFile, err := kubernetes.NewForConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := viaFile.CoreV1().Namespaces().Get(ctx, "kubetest", metav1.GetOptions{})
	if err != nil || got.Labels["env"] != "qa" {
		t.Fatalf("reading the namespace through the kubeconfig: %v, labels %v", err, got.Labels)
	}
	review, err := viaFile.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking who the kubeconfig user is: %v", err)
	}
	if review.Status.UserInfo.Username != AdminUser {
		t.Errorf("kubeconfig user = %q, want %q", review.Status.UserInfo.Username, AdminUser)
	}

	// A plain user is denied until RBAC grants it something.
	user, err := kubernetes.NewForConfig(env.UserConfig(t, "alice", "egret-testers"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = user.CoreV1().Pods("kubetest").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods as alice without RBAC: err = %v, want Forbidden", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Namespace: "kubetest"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}},
	}
	if _, err := admin.RbacV1().Roles("kubetest").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Namespace: "kubetest"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "egret-testers"}},
	}
	if _, err := admin.RbacV1().RoleBindings("kubetest").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of the binding from its informer, a moment after
	// the create returns: forbidden until then (seen in CI), not after.
	var pods *corev1.PodList
	nstest.Soon(10*time.Second, func() bool {
		pods, err = user.CoreV1().Pods("kubetest").List(ctx, metav1.ListOptions{})
		return !apierrors.IsForbidden(err)
	})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "p" {
		t.Fatalf("listing pods as alice with RBAC: %v, %d pods", err, len(pods.Items))
	}
	// Still forbidden outside the grant: RBAC, not AlwaysAllow, is in force.
	sar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "kubetest", Verb: "delete", Resource: "pods"},
	}}
	res, err := user.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.Allowed {
		t.Errorf("alice may delete pods, want denied")
	}

	t.Run("kubectl", func(t *testing.T) {
		if out, err := env.Kubectl(t, "get", "ns", "kubetest", "-o", "name"); err != nil || strings.TrimSpace(out) != "namespace/kubetest" {
			t.Errorf("kubectl get ns: %q, %v", out, err)
		}
		// kubectl as alice is refused with RBAC's message.
		if out, err := env.Kubectl(t, "auth", "can-i", "delete", "pods", "-n", "kubetest", "--as=alice", "--as-group=egret-testers"); err == nil || !strings.Contains(out, "no") {
			t.Errorf("kubectl auth can-i delete pods as alice: %q, %v; want no", out, err)
		}
	})
}

// recordingTB captures Skip and Fatal instead of ending the real test.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func startWithout(t *testing.T) *recordingTB {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(r)
		t.Error("Start returned with no binaries")
	}()
	<-done
	return r
}

// Without binaries Start skips, except on CI where it must fail.
func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv("EGRET_TOOLS_DIR", t.TempDir())
	t.Setenv("CI", "")
	r := startWithout(t)
	if r.fatal != "" || !strings.Contains(r.skipped, "hack/k8s-bins.sh") {
		t.Errorf("CI unset: skipped %q, fatal %q; want a skip naming hack/k8s-bins.sh", r.skipped, r.fatal)
	}
	t.Setenv("CI", "true")
	r = startWithout(t)
	if r.skipped != "" || !strings.Contains(r.fatal, "hack/k8s-bins.sh") || !strings.Contains(r.fatal, "CI=true") {
		t.Errorf("CI=true: skipped %q, fatal %q; want a failure naming hack/k8s-bins.sh", r.skipped, r.fatal)
	}
}
