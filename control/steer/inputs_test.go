package steer

import (
	"net/netip"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Inputs is a compact way for tests to write a cluster as one worker sees
// it; view turns it into the objects the plan is built from.
type Inputs struct {
	// Node is the worker under test.
	Node       string
	Pods       []Pod
	Namespaces map[string]map[string]string
	EgressIPs  []*egressv1.EgressIP
	Traffic    []*egressv1.EgressIPTraffic
	// VTEPs maps a node name to its InternalIP addresses (its VTEPs).
	VTEPs map[string][]netip.Addr
	// NodeKnown puts Node's own Node object in the view, with NodePodCIDRs.
	NodeKnown    bool
	NodePodCIDRs []string
}

// Pod is a pod as Inputs lists it.
type Pod struct {
	Namespace, Name, Node string
	Labels                map[string]string
	IPs                   []netip.Addr
	HostNetwork, Done     bool
}

func (in Inputs) view() cluster.View {
	var v cluster.View
	v.EgressIPs = in.EgressIPs
	v.Traffic = in.Traffic
	for name, l := range in.Namespaces {
		v.Namespaces = append(v.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
	}
	for name, vteps := range in.VTEPs {
		if name == in.Node && !in.NodeKnown {
			continue
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, a := range vteps {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
		}
		if name == in.Node {
			n.Spec.PodCIDRs = in.NodePodCIDRs
		}
		v.Nodes = append(v.Nodes, n)
	}
	if _, ok := in.VTEPs[in.Node]; in.NodeKnown && !ok {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Node}}
		n.Spec.PodCIDRs = in.NodePodCIDRs
		v.Nodes = append(v.Nodes, n)
	}
	for _, p := range in.Pods {
		kp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels}}
		kp.Spec.NodeName, kp.Spec.HostNetwork = p.Node, p.HostNetwork
		kp.Status.Phase = corev1.PodRunning
		if p.Done {
			kp.Status.Phase = corev1.PodSucceeded
		}
		for _, ip := range p.IPs {
			kp.Status.PodIPs = append(kp.Status.PodIPs, corev1.PodIP{IP: ip.String()})
		}
		v.Pods = append(v.Pods, kp)
	}
	return v
}

// desired is Desired over the plan of in.
func desired(in Inputs, p Params) State {
	return Desired(plan.Build(in.view(), plan.Options{TrustPodIPs: p.TrustPodIPs}), in.Node, p)
}
