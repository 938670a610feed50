package controller

import (
	"log/slog"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readyNode(name, ifaddr string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{cluster.LabelEgressAssignable: ""},
		Annotations: map[string]string{cluster.AnnotationPrimaryIfAddr: `{"ipv4":"` + ifaddr + `"}`}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func eipObject(name, ip string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
	e.Spec.EgressIPs = []string{ip}
	return e
}

// A status decided and queued, not yet written, is not decided again from
// the old status when another object arrives: recomputing b and c from
// their empty statuses would place the new a first, on n0, and move both
// (b to n1, c to n0) before either was ever written. With the queued
// status as the input, only a is placed, and the next cycle, its inputs
// unchanged, queues nothing new.
func TestQueuedStatusIsNotDecidedAgain(t *testing.T) {
	src := &staticSource{nodes: []*corev1.Node{readyNode("n0", "10.0.0.1/24"), readyNode("n1", "10.0.0.2/24")},
		eips: []*egressv1.EgressIP{eipObject("b", "10.0.0.20"), eipObject("c", "10.0.0.30")}}
	off := 0
	c, err := New(src, Config{ReachabilityTotalTimeoutSeconds: &off}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	c.assign()
	node := func(name string) string {
		t.Helper()
		d := c.mem.desired[name]
		if len(d.items) != 1 {
			t.Fatalf("%s: desired %+v, want one item", name, d.items)
		}
		return d.items[0].Node
	}
	b, cn := node("b"), node("c")
	if b == cn {
		t.Fatalf("b and c both on %s, want them balanced", b)
	}
	if got := c.queue.Len(); got != 2 {
		t.Fatalf("%d status writes queued, want 2", got)
	}

	src.eips = append(src.eips, eipObject("a", "10.0.0.10"))
	c.assign()
	if node("b") != b || node("c") != cn {
		t.Fatalf("b moved %s → %s, c moved %s → %s before either was written", b, node("b"), cn, node("c"))
	}
	if node("a") == node("b") && node("a") == node("c") {
		t.Fatalf("a placed on %s with both others", node("a"))
	}
	if got := c.queue.Len(); got != 3 {
		t.Fatalf("%d status writes queued, want 3 (b, c, a)", got)
	}
}
