package controller_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/nstest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// eventWith waits for a Warning Event on EgressIP name with reason whose
// message holds every one of parts.
func eventWith(t *testing.T, k *kubeCluster, name, reason string, parts ...string) {
	t.Helper()
	nstest.Until(t, reason+" Event on "+name, 15*time.Second, func() (bool, string) {
		var msgs []string
		for _, e := range k.events(t) {
			if e.name != name || e.reason != reason {
				continue
			}
			msgs = append(msgs, e.message)
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e.message, p)
			}
			if ok {
				return true, ""
			}
		}
		return false, strings.Join(msgs, " | ")
	})
}

// TestUpstreamObjectsKube applies upstream's own manifests (the
// specification's examples, and OKEP-6227's EgressIP with a
// trafficSelector), some made unusable the way the CRD still accepts, on
// a real API server and checks what the controller does with each: the
// trafficSelector is stored and the object assigned as any other; every object the
// shared validation refuses gets an Event saying what is wrong; a status
// written by another controller (OVN-Kubernetes' JSON patch, under its
// user agent) is left alone until it is cleared; and on AWS, control-plane
// nodes (current and legacy label) never receive an egress IP.
func TestUpstreamObjectsKube(t *testing.T) {
	env, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	port, hs := healthServers(t, 5)
	k.applyNode(t, egressNode("bm1", hs[0].addr, "192.168.126.2/24", true))
	k.applyNode(t, egressNode("bm2", hs[1].addr, "192.168.126.3/24", true))
	// The specification's AWS annotation, as written there.
	const awsConfig = `[
  {
    "interface":"eni-078d267045138e436",
    "ifaddr":{"ipv4":"10.0.128.0/18"},
    "capacity":{"ipv4":14,"ipv6":15}
  }
]`
	for i, n := range []struct{ name, role string }{
		{"aws-cp", cluster.LabelControlPlane}, {"aws-master", cluster.LabelMaster}, {"aws-worker", "node-role.kubernetes.io/worker"},
	} {
		node := egressNode(n.name, hs[2+i].addr, "", true)
		node.Annotations = map[string]string{cluster.AnnotationEgressIPConfig: awsConfig}
		node.Labels[n.role] = ""
		node.Spec.ProviderID = "aws:///us-east-1a/i-0" + n.name
		k.applyNode(t, node)
	}
	k.applyEgressIP(t, egressIP("aws-eips", "10.0.129.1", "10.0.129.2", "10.0.129.3"))
	up := filepath.Join("testdata", "upstream")
	for _, f := range []string{"egressip-traffic-selector.yaml", "egress-group2-empty-values.yaml", "egress-project1-no-ips.yaml", "egressips-prod.yaml"} {
		if out, err := env.Kubectl(t, "apply", "--validate=strict", "-f", filepath.Join(up, f)); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
	}
	timeout := 1
	k.run(t, controller.Config{ReachabilityTotalTimeoutSeconds: &timeout, HealthPort: port, LeaderElection: controller.LeaderElection{Disabled: true}})

	t.Run("trafficSelector", func(t *testing.T) {
		got, err := eip.Get(context.Background(), "egressip-mgmt", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ts := got.Spec.TrafficSelector; ts == nil || ts.MatchLabels["traffic-group"] != "mgmt" {
			t.Fatalf("trafficSelector stored as %+v, want matchLabels traffic-group: mgmt", ts)
		}
		nstest.Until(t, "egressip-mgmt assigned all the same", 10*time.Second, func() (bool, string) {
			items := k.status(t, "egressip-mgmt")
			return len(items) == 1, ""
		})
	})

	t.Run("invalid objects raise Events", func(t *testing.T) {
		eventWith(t, k, "egress-group2", controller.ReasonInvalidSpec, "spec.namespaceSelector", "values set can't be empty")
		eventWith(t, k, "egress-project1", controller.ReasonInvalidSpec, "spec.egressIPs: must list at least one IP address")
	})

	t.Run("status written by another controller", func(t *testing.T) {
		// Applied with the specification's status (node1, node3): kubectl
		// is a person, not a controller, so Egret writes its own.
		nstest.Until(t, "Egret's status replaces the manifest's", 10*time.Second, func() (bool, string) {
			items := k.status(t, "egressips-prod")
			ok := len(items) == 2
			for _, it := range items {
				ok = ok && (it.Node == "bm1" || it.Node == "bm2")
			}
			return ok, ""
		})
		// OVN-Kubernetes' cluster manager: its user agent starts with the
		// node name, and it replaces /status with a JSON patch.
		ovnk := rest.CopyConfig(env.Config)
		ovnk.UserAgent = "ovn-control-plane/ovnkube@a1b2c3d (linux/amd64) kubernetes/v1.33.0"
		oc, err := egressv1.NewForConfig(ovnk)
		if err != nil {
			t.Fatal(err)
		}
		patch := `[{"op":"replace","path":"/status","value":{"items":[{"node":"ovn-worker","egressIP":"192.168.126.10"},{"node":"ovn-worker2","egressIP":"192.168.126.102"}]}}]`
		if _, err := oc.Patch(context.Background(), "egressips-prod", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("OVN-Kubernetes' status patch: %v", err)
		}
		eventWith(t, k, "egressips-prod", controller.ReasonStatusOwnedElsewhere, `"ovn-control-plane"`, "kubectl patch egressip egressips-prod")
		// The decision not to write is taken in the pass that raised the Event.
		if items := k.status(t, "egressips-prod"); nodeOf(items, "192.168.126.10") != "ovn-worker" || nodeOf(items, "192.168.126.102") != "ovn-worker2" {
			t.Fatalf("Egret overwrote the other controller's status: %v", items)
		}
		// Hand-over, as docs/api.md says: clear the status.
		if out, err := env.Kubectl(t, "patch", "egressip", "egressips-prod", "--type=merge", "-p", `{"status":null}`); err != nil {
			t.Fatalf("clearing status: %v\n%s", err, out)
		}
		nstest.Until(t, "Egret writes status after the hand-over", 10*time.Second, func() (bool, string) {
			items := k.status(t, "egressips-prod")
			ok := len(items) == 2
			for _, it := range items {
				ok = ok && (it.Node == "bm1" || it.Node == "bm2")
			}
			return ok, ""
		})
	})

	t.Run("AWS control-plane nodes", func(t *testing.T) {
		nstest.Until(t, "one AWS IP on the worker", 10*time.Second, func() (bool, string) {
			items := k.status(t, "aws-eips")
			return len(items) == 1 && items[0].Node == "aws-worker", ""
		})
		// Without the worker (and the other eligible nodes), the Event names
		// the control-plane nodes and why they host nothing.
		for _, n := range []string{"aws-worker", "bm1", "bm2"} {
			if err := cs.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		nstest.Until(t, "no AWS IP assigned", 10*time.Second, statusIs(t, k, "aws-eips", map[string]string{}))
		eventWith(t, k, "aws-eips", "NoMatchingNodeFound", "aws-cp is a control-plane node of a cluster on AWS", "aws-master is a control-plane node")
	})
}
