package controller_test

import (
	"context"

	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestEgretAnnotatedNodeKube: on a cluster without OVN-Kubernetes the
// only interface subnets are the ones Egret's gateway agent writes; the
// controller places an egress IP on such a node, and explains by name a
// labelled node that has none.
func TestEgretAnnotatedNodeKube(t *testing.T) {
	_, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	port, hs := healthServers(t, 2)
	ea := egressNode("egret-annotated", hs[0].addr, "", true)
	ea.Annotations = map[string]string{
		cluster.AnnotationEgretPrimaryIfAddr: `{"ipv4":"192.168.127.2/24"}`,
		cluster.AnnotationEgretHostCIDRs:     `["192.168.127.2/24","198.51.100.2/26"]`,
	}
	k.applyNode(t, ea)
	un := egressNode("unannotated", hs[1].addr, "", true)
	un.Annotations = nil
	k.applyNode(t, un)
	k.applyEgressIP(t, egressIP("primary", "192.168.127.11"))
	k.applyEgressIP(t, egressIP("secondary", "198.51.100.9"))
	k.applyEgressIP(t, egressIP("elsewhere", "10.99.0.5"))

	timeout := 1
	k.run(t, controller.Config{ReachabilityTotalTimeoutSeconds: &timeout, HealthPort: port, LeaderElection: controller.LeaderElection{Disabled: true}})
	nstest.Until(t, "IP on the Egret-annotated node's primary subnet", 10*time.Second, statusIs(t, k, "primary", map[string]string{"192.168.127.11": "egret-annotated"}))
	nstest.Until(t, "IP on its other interface subnet", 10*time.Second, statusIs(t, k, "secondary", map[string]string{"198.51.100.9": "egret-annotated"}))
	nstest.Until(t, "an Event naming the unannotated node", 10*time.Second, func() (bool, string) {
		var msgs []string
		for _, e := range k.events(t) {
			if e.name == "elsewhere" {
				msgs = append(msgs, e.message)
				if strings.Contains(e.message, "unannotated") && strings.Contains(e.message, cluster.AnnotationEgretHostCIDRs) {
					return true, ""
				}
			}
		}
		return false, strings.Join(msgs, " | ")
	})
}

// TestNodeSelectorKube: with the controller's nodeSelector set to a label
// kubelets cannot set on themselves, a node that labelled itself
// egress-assignable hosts nothing; the admin-labelled node takes every IP.
func TestNodeSelectorKube(t *testing.T) {
	_, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	port, hs := healthServers(t, 2)
	self := egressNode("a-self-labelled", hs[0].addr, "192.168.128.2/24", true)
	admin := egressNode("b-admin-labelled", hs[1].addr, "192.168.128.3/24", true)
	admin.Labels["node-restriction.kubernetes.io/egress-gateway"] = "true"
	k.applyNode(t, self)
	k.applyNode(t, admin)
	k.applyEgressIP(t, egressIP("one", "192.168.128.11"))
	k.applyEgressIP(t, egressIP("two", "192.168.128.12"))

	timeout := 1
	k.run(t, controller.Config{ReachabilityTotalTimeoutSeconds: &timeout, HealthPort: port,
		NodeSelector:   "node-restriction.kubernetes.io/egress-gateway=true",
		LeaderElection: controller.LeaderElection{Disabled: true}})
	nstest.Until(t, "one on the admin-labelled node", 10*time.Second, statusIs(t, k, "one", map[string]string{"192.168.128.11": "b-admin-labelled"}))
	nstest.Until(t, "two on the admin-labelled node", 10*time.Second, statusIs(t, k, "two", map[string]string{"192.168.128.12": "b-admin-labelled"}))

	// The admin-labelled node goes away: the self-labelled one still gets nothing, and the Event says why.
	if err := cs.CoreV1().Nodes().Delete(context.Background(), admin.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nstest.Until(t, "no node for one", 10*time.Second, statusIs(t, k, "one", map[string]string{}))
	nstest.Until(t, "an Event naming the nodeSelector", 10*time.Second, func() (bool, string) {
		var msgs []string
		for _, e := range k.events(t) {
			if e.name == "one" {
				msgs = append(msgs, e.message)
				if strings.Contains(e.message, "a-self-labelled does not match the controller's nodeSelector") {
					return true, ""
				}
			}
		}
		return false, strings.Join(msgs, " | ")
	})
}
