package controller

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// staticSource serves fixed objects.
type staticSource struct {
	eips  []*egressv1.EgressIP
	nodes []*corev1.Node
}

func (s *staticSource) Start(context.Context, func(cluster.Kind)) error { return nil }
func (s *staticSource) View() cluster.View {
	return cluster.View{EgressIPs: s.eips, Nodes: s.nodes}
}
func (s *staticSource) Check(context.Context) (cluster.Statuses, error) { return nil, nil }
func (s *staticSource) EgressIP(string) (*egressv1.EgressIP, bool) {
	return nil, false
}
func (s *staticSource) UpdateEgressIP(context.Context, *egressv1.EgressIP) error { return nil }
func (s *staticSource) UpdateTrafficStatus(context.Context, *egressv1.EgressIPTraffic) error {
	return nil
}
func (s *staticSource) Event(*corev1.ObjectReference, string, string, string) {}

// BenchmarkAssignCycle is one assignment cycle from the cache, as run on
// every EgressIP or Node change: 1,000 objects of 2 IPs over 50 nodes, and
// 10,000 of one IP over 500 nodes (bench/controlplane's cluster). "same"
// is a cycle whose inputs did not change (the watch event of the
// controller's own status write), "one" one object's spec changed, "node"
// one node changed (a full recomputation).
func BenchmarkAssignCycle(b *testing.B) {
	for _, sz := range []struct{ nodes, objs, ips int }{{50, 1000, 2}, {500, 10000, 1}} {
		b.Run(fmt.Sprintf("%dx%d", sz.objs, sz.nodes), func(b *testing.B) { benchAssignCycle(b, sz.nodes, sz.objs, sz.ips) })
	}
}

func benchAssignCycle(b *testing.B, nNodes, nObjs, ips int) {
	src := &staticSource{}
	for i := range nNodes {
		src.nodes = append(src.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%03d", i),
			Labels:      map[string]string{cluster.LabelEgressAssignable: ""},
			Annotations: map[string]string{cluster.AnnotationPrimaryIfAddr: fmt.Sprintf(`{"ipv4":"10.0.%d.%d/16"}`, i/200, 1+i%200)}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	for i := range nObjs {
		e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%05d", i), ResourceVersion: "1"}}
		e.Spec.EgressIPs = []string{fmt.Sprintf("10.0.%d.%d", 10+i/250, 1+i%250), fmt.Sprintf("10.0.%d.%d", 100+i/250, 1+i%250)}[:ips]
		src.eips = append(src.eips, e)
	}
	off := 0
	c, err := New(src, Config{ReachabilityTotalTimeoutSeconds: &off}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer c.queue.ShutDown()
	c.assign()
	assigned := 0
	for _, d := range c.mem.desired {
		assigned += len(d.items)
	}
	if got := assigned; got != nObjs*ips {
		b.Fatalf("assigned %d IPs, want %d", got, nObjs*ips)
	}
	// The statuses as written: what the cache holds in the steady state.
	for i, e := range src.eips {
		e = e.DeepCopy()
		e.ResourceVersion = "2"
		e.Status.Items = c.mem.desired[e.Name].items
		e.Annotations = map[string]string{egressv1.AnnotationStandby: c.mem.desired[e.Name].standby}
		src.eips[i] = e
	}
	c.assign()
	b.Run("same", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.assign()
		}
	})
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			// A new egress IP for one object (the old one back on the
			// next), then its status as written, as the watch shows them.
			e := src.eips[0].DeepCopy()
			k++
			e.ResourceVersion = fmt.Sprint(10 + 2*k)
			e.Spec.EgressIPs = []string{fmt.Sprintf("10.0.200.%d", 1+k%2)}
			src.eips[0] = e
			c.assign()
			e = e.DeepCopy()
			e.ResourceVersion = fmt.Sprint(11 + 2*k)
			e.Status.Items = c.mem.desired[e.Name].items
			e.Annotations[egressv1.AnnotationStandby] = c.mem.desired[e.Name].standby
			src.eips[0] = e
			c.assign()
		}
	})
	b.Run("node", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			n := src.nodes[0].DeepCopy()
			k++
			n.Annotations[cluster.AnnotationPrimaryIfAddr] = fmt.Sprintf(`{"ipv4":"10.0.250.%d/16"}`, 1+k%2)
			src.nodes[0] = n
			c.assign()
		}
	})
}
