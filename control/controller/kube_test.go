package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/nstest"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// controllerUser is the service account of deploy/rbac; tests run the
// controller with its rights only, so missing RBAC rules fail them.
const controllerUser = "system:serviceaccount:egret-system:egret-controller"

// startAPI runs a real kube-apiserver with the EgressIP CRD and the
// controller's RBAC, and returns the admin clients and the controller's config.
func startAPI(t *testing.T) (*kubetest.Env, kubernetes.Interface, *egressv1.Client, *rest.Config) {
	env := kubetest.Start(t)
	root := testbin.Root(t)
	env.InstallCRDs(t, filepath.Join(root, "deploy", "crd"))
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "egret-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(t, "apply", "-f", filepath.Join(root, "deploy", "rbac")); err != nil {
		t.Fatalf("applying deploy/rbac: %v\n%s", err, out)
	}
	eip, err := egressv1.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	user := env.UserConfig(t, controllerUser, "system:serviceaccounts", "system:serviceaccounts:egret-system", "system:authenticated")
	return env, cs, eip, user
}

// kubeCluster keeps the scenario's objects in a real API server.
type kubeCluster struct {
	cs   kubernetes.Interface
	eip  *egressv1.Client
	user *rest.Config
}

func (k *kubeCluster) applyNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = k.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil {
				return err
			}
		} else if err != nil {
			return err
		} else {
			cur.Labels, cur.Annotations, cur.Spec = n.Labels, n.Annotations, n.Spec
			if cur, err = k.cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		cur.Status = n.Status
		_, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("applying node %s: %v", n.Name, err)
	}
}

func (k *kubeCluster) applyEgressIP(t *testing.T, e *egressv1.EgressIP) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.eip.Get(ctx, e.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = k.eip.Create(ctx, e, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cur.Spec = e.Spec
		_, err = k.eip.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("applying EgressIP %s: %v", e.Name, err)
	}
}

func (k *kubeCluster) status(t *testing.T, name string) []egressv1.EgressIPStatusItem {
	t.Helper()
	e, err := k.eip.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading EgressIP %s: %v", name, err)
	}
	return e.Status.Items
}

func (k *kubeCluster) events(t *testing.T) []recorded {
	t.Helper()
	l, err := k.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []recorded
	for _, e := range l.Items {
		if e.Source.Component != cluster.Component || e.Type != corev1.EventTypeWarning {
			continue
		}
		out = append(out, recorded{kind: e.InvolvedObject.Kind, name: e.InvolvedObject.Name, reason: e.Reason, message: e.Message})
	}
	return out
}

func (k *kubeCluster) run(t *testing.T, cfg controller.Config) *controller.Controller {
	src, err := cluster.NewKube(k.user)
	if err != nil {
		t.Fatal(err)
	}
	return startController(t, src, cfg)
}

func TestScenarioKube(t *testing.T) {
	_, cs, eip, user := startAPI(t)
	runScenario(t, &kubeCluster{cs: cs, eip: eip, user: user})
}

// TestLeaderElection runs two replicas: one leads and assigns; when it
// stops, the other takes the Lease over and assigns.
func TestLeaderElection(t *testing.T) {
	_, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	port, hs := healthServers(t, 2)
	k.applyNode(t, egressNode("le-a", hs[0].addr, "192.168.126.2/24", true))
	k.applyNode(t, egressNode("le-b", hs[1].addr, "192.168.126.3/24", true))
	k.applyEgressIP(t, egressIP("le1", "192.168.126.11"))

	timeout := 1
	cfg := controller.Config{
		ReachabilityTotalTimeoutSeconds: &timeout,
		HealthPort:                      port,
		LeaderElection: controller.LeaderElection{
			Namespace:     "egret-system",
			Name:          "egret-controller",
			LeaseDuration: metav1.Duration{Duration: 3 * time.Second},
			RenewDeadline: metav1.Duration{Duration: 2 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 250 * time.Millisecond},
		},
	}
	start := func(id string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- controller.RunKube(ctx, user, cfg, id, testLogger(t), nil) }()
		t.Cleanup(cancel)
		return cancel, done
	}
	holder := func() (bool, string) {
		l, err := cs.CoordinationV1().Leases("egret-system").Get(context.Background(), "egret-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, ""
		}
		return true, *l.Spec.HolderIdentity
	}
	stopFirst, firstDone := start("replica-1")
	nstest.Until(t, "replica-1 leads", 15*time.Second, func() (bool, string) {
		ok, h := holder()
		return ok && h == "replica-1", h
	})
	started2 := time.Now()
	_, secondDone := start("replica-2")
	nstest.Until(t, "le1 assigned by the leader", 10*time.Second, statusIs(t, k, "le1", map[string]string{"192.168.126.11": "le-a"}))
	// replica-2 must not take over while replica-1 renews: the Lease
	// stays replica-1's until replica-1 has renewed it a lease duration
	// and a retry period after replica-2 started, by when replica-2 would
	// have found it expired had replica-1 not renewed.
	nstest.Until(t, "replica-1 renews past a lease duration", 15*time.Second, func() (bool, string) {
		l, err := cs.CoordinationV1().Leases("egret-system").Get(context.Background(), "egret-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			return false, fmt.Sprint(err)
		}
		if h := *l.Spec.HolderIdentity; h != "replica-1" {
			t.Fatalf("lease holder %q while replica-1 is alive", h)
		}
		past := started2.Add(cfg.LeaderElection.LeaseDuration.Duration + cfg.LeaderElection.RetryPeriod.Duration)
		return l.Spec.RenewTime.Time.After(past), fmt.Sprint("renewed ", l.Spec.RenewTime.Time, ", waiting past ", past)
	})

	stopFirst()
	select {
	case err := <-firstDone:
		if err != nil {
			t.Fatalf("replica-1 ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("replica-1 did not stop")
	}
	took := nstest.Until(t, "replica-2 takes over", 15*time.Second, func() (bool, string) {
		ok, h := holder()
		return ok && h == "replica-2", h
	})
	t.Logf("replica-2 leads %v after replica-1 stopped", took.Round(time.Millisecond))
	k.applyEgressIP(t, egressIP("le2", "192.168.126.12"))
	nstest.Until(t, "le2 assigned by the new leader", 10*time.Second, statusIs(t, k, "le2", map[string]string{"192.168.126.12": "le-b"}))
	select {
	case err := <-secondDone:
		t.Fatalf("replica-2 ended early: %v", err)
	default:
	}
}
