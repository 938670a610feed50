package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/nstest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOpenShiftNetworkReachabilityKube: Egret's own setting disables the
// reachability check (0), and the only egress node answers no probe. On a
// cluster without OpenShift's Network API that setting applies: the node
// keeps the IP. With the API and the specification's Network "cluster"
// (reachabilityTotalTimeoutSeconds: 5) the check runs and the node loses
// it; changing the object is followed (0: the IP returns; 1: it leaves
// again), and deleting it brings Egret's own setting back. The controller
// runs as in production (RunKube) with deploy/rbac's rights only.
func TestOpenShiftNetworkReachabilityKube(t *testing.T) {
	env, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	port, hs := healthServers(t, 1)
	hs[0].stop(t) // the node answers no probe
	k.applyNode(t, egressNode("dead", hs[0].addr, "192.168.130.2/24", true))
	k.applyEgressIP(t, egressIP("e1", "192.168.130.10"))

	own := 0
	cfg := controller.Config{ReachabilityTotalTimeoutSeconds: &own, HealthPort: port,
		HoldDown: &metav1.Duration{}, LeaderElection: controller.LeaderElection{Disabled: true}}
	run := func() func() {
		stop := runController(t, func(ctx context.Context) error {
			return controller.RunKube(ctx, user, cfg, "", testLogger(t), nil)
		})
		t.Cleanup(stop)
		return stop
	}
	assigned := statusIs(t, k, "e1", map[string]string{"192.168.130.10": "dead"})
	unassigned := statusIs(t, k, "e1", map[string]string{})

	stop := run()
	nstest.Until(t, "no OpenShift API: Egret's 0 applies, the node keeps the IP", 15*time.Second, assigned)
	stop()

	env.InstallCRDs(t, filepath.Join("testdata", "networks.operator.openshift.io.yaml"))
	if out, err := env.Kubectl(t, "apply", "-f", filepath.Join("testdata", "network-cluster.yaml")); err != nil {
		t.Fatalf("applying the Network: %v\n%s", err, out)
	}
	run()
	nstest.Until(t, "Network says 5: the check runs and the node loses the IP", 30*time.Second, unassigned)
	setTimeout := func(v string) {
		t.Helper()
		p := `{"spec":{"defaultNetwork":{"ovnKubernetesConfig":{"egressIPConfig":{"reachabilityTotalTimeoutSeconds":` + v + `}}}}}`
		if out, err := env.Kubectl(t, "patch", "networks.operator.openshift.io", "cluster", "--type=merge", "-p", p); err != nil {
			t.Fatalf("patching the Network: %v\n%s", err, out)
		}
	}
	setTimeout("0")
	nstest.Until(t, "Network says 0: the check is off, the IP returns", 15*time.Second, assigned)
	setTimeout("1")
	nstest.Until(t, "Network says 1: the IP leaves again", 15*time.Second, unassigned)
	if out, err := env.Kubectl(t, "delete", "networks.operator.openshift.io", "cluster"); err != nil {
		t.Fatalf("deleting the Network: %v\n%s", err, out)
	}
	nstest.Until(t, "no Network object: Egret's 0 applies again", 15*time.Second, assigned)
}
