package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/ec2test"
	"github.com/egret-gw/egret/internal/nstest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// TestCloudAttachKube runs the controller as deploy/ does (its RBAC, the
// CloudPrivateIPConfig CRD, cloud.provider aws) against a real API server,
// the local EC2 server and AWS's metadata emulator: a refused attach
// keeps the IP out of status and raises Events; once the cloud accepts, the
// IP is attached before status names the node; a failover moves the
// attachment; deleting the EgressIP detaches it.
func TestCloudAttachKube(t *testing.T) {
	env, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	srv := ec2test.Start(
		ec2test.ENI{ID: "eni-a", Primary: "10.0.1.10"},
		ec2test.ENI{ID: "eni-b", Primary: "10.0.1.11"},
		ec2test.ENI{ID: "eni-c", Primary: "10.0.1.12"},
	)
	t.Cleanup(srv.Close)
	srv.Env(t, ec2test.StartIMDS(t, "us-west-2", map[string]string{}))

	port, hs := healthServers(t, 3)
	names := []string{"cloud-a", "cloud-b", "cloud-c"}
	enis := map[string]string{"cloud-a": "eni-a", "cloud-b": "eni-b", "cloud-c": "eni-c"}
	for i, name := range names {
		n := egressNode(name, hs[i].addr, fmt.Sprintf("10.0.1.%d/24", 10+i), true)
		n.Annotations[cluster.AnnotationEgressIPConfig] = `[{"interface":"` + enis[name] + `","ifaddr":{"ipv4":"10.0.1.0/24"},"capacity":{"ipv4":9}}]`
		k.applyNode(t, n)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	cpic := func() (node, statusNode, assigned string, found bool) {
		u, err := dyn.Resource(cluster.CloudPrivateIPConfigGVR).Get(context.Background(), "10.0.1.50", metav1.GetOptions{})
		if err != nil {
			return "", "", "", false
		}
		node, _, _ = unstructured.NestedString(u.Object, "spec", "node")
		statusNode, _, _ = unstructured.NestedString(u.Object, "status", "node")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == cluster.ConditionAssigned {
				assigned = fmt.Sprint(m["status"])
			}
		}
		return node, statusNode, assigned, true
	}

	// The cloud refuses every attach at first.
	srv.Fail("AssignPrivateIpAddresses", "PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.", 1000)
	timeout := 1
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controller.RunKube(ctx, user, controller.Config{
			ReachabilityTotalTimeoutSeconds: &timeout,
			HealthPort:                      port,
			HoldDown:                        &metav1.Duration{},
			LeaderElection:                  controller.LeaderElection{Disabled: true},
			Cloud:                           cloud.Config{Provider: cloud.ProviderAWS},
		}, "", testLogger(t), nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	k.applyEgressIP(t, egressIP("cloud1", "10.0.1.50"))

	nstest.Until(t, "a CloudAttachFailed Event on the EgressIP", 30*time.Second, hasEvent(t, k, "EgressIP", "cloud1", controller.ReasonCloudAttachFailed, "PrivateIpAddressLimitExceeded"))
	nstest.Until(t, "the same Event on the CloudPrivateIPConfig", 10*time.Second, hasEvent(t, k, cluster.CloudPrivateIPConfigKind, "10.0.1.50", controller.ReasonCloudAttachFailed, "not in status"))
	// The Event and the object's condition are two writes: wait for the second too.
	nstest.Until(t, "CloudPrivateIPConfig 10.0.1.50 Assigned=False", 10*time.Second, func() (bool, string) {
		_, _, assigned, found := cpic()
		return found && assigned == "False", fmt.Sprintf("found=%v Assigned=%q", found, assigned)
	})
	if items := k.status(t, "cloud1"); len(items) != 0 {
		t.Fatalf("status %v names a node while the cloud refuses the attach", items)
	}

	// The cloud accepts: attached first, then in status.
	srv.Fail("AssignPrivateIpAddresses", "", "", 0)
	var owner string
	nstest.Until(t, "cloud1 in status, on a node whose ENI holds it", 60*time.Second, func() (bool, string) {
		items := k.status(t, "cloud1")
		if len(items) == 0 {
			return false, "no status"
		}
		owner = items[0].Node
		if got := srv.ENI(enis[owner]).IPv4; !slices.Contains(got, "10.0.1.50") {
			t.Fatalf("status names %s while its ENI %s holds %v: claimed before attached", owner, enis[owner], got)
		}
		return true, ""
	})
	if node, statusNode, assigned, _ := cpic(); node != owner || statusNode != owner || assigned != "True" {
		t.Fatalf("CloudPrivateIPConfig spec.node=%q status.node=%q Assigned=%q; want %s, %s, True", node, statusNode, assigned, owner, owner)
	}

	// Failover: the owner stops answering; the IP moves to its recorded
	// standby, attachment first, and stays there while the attach runs
	// (its status is withheld meanwhile, which must not make the
	// assignment place it anew).
	e, err := eip.Get(context.Background(), "cloud1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	standbys, err := egressv1.Standbys(e)
	if err != nil {
		t.Fatal(err)
	}
	other := standbys[netip.MustParseAddr("10.0.1.50")]
	if other == "" || other == owner {
		t.Fatalf("standby of 10.0.1.50 is %q (owner %s)", other, owner)
	}
	hs[slices.Index(names, owner)].stop(t)
	nstest.Until(t, "cloud1 moved to "+other, 30*time.Second, func() (bool, string) {
		items := k.status(t, "cloud1")
		if len(items) == 0 || items[0].Node != other {
			return false, fmt.Sprint(items)
		}
		if got := srv.ENI(enis[other]).IPv4; !slices.Contains(got, "10.0.1.50") {
			t.Fatalf("status names %s while its ENI holds %v", other, got)
		}
		return true, ""
	})
	if got := srv.ENI(enis[owner]).IPv4; len(got) != 0 {
		t.Fatalf("the old owner's ENI still holds %v after the move", got)
	}
	for _, n := range names {
		if got := srv.ENI(enis[n]).IPv4; n != other && len(got) != 0 {
			t.Fatalf("%s's ENI holds %v after the move to %s", n, got, other)
		}
	}
	if node, statusNode, assigned, _ := cpic(); node != other || statusNode != other || assigned != "True" {
		t.Fatalf("after the move CloudPrivateIPConfig spec.node=%q status.node=%q Assigned=%q", node, statusNode, assigned)
	}

	// Deleted: released, then detached, and its state removed.
	if err := eip.Delete(context.Background(), "cloud1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nstest.Until(t, "10.0.1.50 detached and its CloudPrivateIPConfig deleted", 30*time.Second, func() (bool, string) {
		_, _, _, found := cpic()
		got := srv.ENI(enis[other]).IPv4
		return !found && len(got) == 0, fmt.Sprintf("object found=%v, %s holds %v", found, enis[other], got)
	})
}
