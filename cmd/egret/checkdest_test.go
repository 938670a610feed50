package main

import (
	"net/netip"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCompareByDestination: for a pod whose objects choose by destination,
// egret check expects the egress IP of the object the echo server's
// address picks, not any of the pod's objects', and an egress IP towards a
// destination no object claims is a mismatch.
func TestCompareByDestination(t *testing.T) {
	obj := func(name, ip, to string) *egressv1.EgressIP {
		e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
		e.Spec.EgressIPs = []string{ip}
		e.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{"team": "pay"}}
		e.Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"to": to}}
		e.Status.Items = []egressv1.EgressIPStatusItem{{Node: "g1", EgressIP: ip}}
		return e
	}
	traffic := func(name, net string) *egressv1.EgressIPTraffic {
		return &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"to": name}},
			Spec: egressv1.EgressIPTrafficSpec{DestinationNetworks: []string{net}}}
	}
	node := func(name, ip, cidr string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if cidr != "" {
			n.Spec.PodCIDRs = []string{cidr}
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		return n
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pay", Name: "probe"}}
	pod.Spec.NodeName = "w1"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "10.128.1.5"}}
	v := cluster.View{
		EgressIPs:  []*egressv1.EgressIP{obj("a", "192.0.2.10", "one"), obj("b", "192.0.2.20", "two")},
		Traffic:    []*egressv1.EgressIPTraffic{traffic("one", "203.0.113.0/24"), traffic("two", "198.51.100.0/24")},
		Nodes:      []*corev1.Node{node("w1", "10.0.0.11", "10.128.1.0/24"), node("g1", "10.0.0.21", "")},
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "pay", Labels: map[string]string{"team": "pay"}}}},
		Pods:       []*corev1.Pod{pod},
	}
	for _, c := range []struct {
		dst, seen string
		mismatch  bool
	}{
		{"203.0.113.1", "192.0.2.10:4000", false},
		{"203.0.113.1", "192.0.2.20:4000", true}, // the pod's other object's IP
		{"198.51.100.1", "192.0.2.20:4000", false},
		{"198.51.100.1", "192.0.2.10:4000", true},
		{"8.8.8.8", "10.0.0.11:4000", false}, // no object claims it: the node
		{"8.8.8.8", "192.0.2.10:4000", true},
	} {
		row := compare(v, answer{pod: pod, out: c.seen}, netip.MustParseAddr(c.dst), false)
		if row.Mismatch != c.mismatch {
			t.Errorf("to %s seen %s: mismatch %v (expected %q), want %v", c.dst, c.seen, row.Mismatch, row.Expected, c.mismatch)
		}
	}
}
