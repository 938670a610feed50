package main

import (
	"fmt"
	"net/netip"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Scale is the size of the simulated cluster.
type Scale struct {
	Nodes      int `json:"nodes"`       // assignable (gateway) nodes, on one /16
	Workers    int `json:"workers"`     // nodes that are not assignable, where the pods run
	EgressIPs  int `json:"egress_ips"`  // objects of one egress IP each
	Pods       int `json:"pods"`        // each selected by exactly one object
	Namespaces int `json:"namespaces"`  // the pods are spread over these
	WorkerPods int `json:"worker_pods"` // pods on worker 0, whose steer agent is measured
}

// NewScale is the cluster (500 assignable nodes, 10k EgressIPs,
// 100k pods on 100 workers, 10k of them on the measured one) times f.
func NewScale(f float64) (Scale, error) {
	if f <= 0 || f > 1 {
		return Scale{}, fmt.Errorf("scale %v: give a fraction of the full run, 0 < scale ≤ 1", f)
	}
	at := func(n int) int { return max(1, int(float64(n)*f+0.5)) }
	s := Scale{Nodes: max(3, at(500)), Workers: max(2, at(100)), EgressIPs: at(10000), Pods: at(100000), Namespaces: at(100), WorkerPods: at(10000)}
	return s, nil
}

// nodeAddr is node i's InternalIP and primary address: 10.0.0.0/16 from .0.1.
func nodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 0, byte((i + 1) >> 8), byte(i + 1)})
}

// workerAddr is worker i's InternalIP: 10.0.60.1 on.
func workerAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 0, byte(60 + (i+1)>>8), byte(i + 1)})
}

// egressAddr is the k-th egress IP: 10.0.100.1 on, 250 to a /24, on the nodes' subnet.
func egressAddr(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 0, byte(100 + k/250), byte(1 + k%250)})
}

// podAddr is pod j's address, in 10.128.0.0/9.
func podAddr(j int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(128 + j>>16), byte(j >> 8), byte(j)})
}

func nodeName(i int) string   { return fmt.Sprintf("node-%03d", i) }
func workerName(i int) string { return fmt.Sprintf("worker-%03d", i) }
func eipName(i int) string    { return fmt.Sprintf("eip-%05d", i) }
func nsName(i int) string     { return fmt.Sprintf("ns-%03d", i) }
func podName(j int) string    { return fmt.Sprintf("pod-%06d", j) }

// nodeObject is an assignable node with the annotation that gives the
// controller its subnet, Ready and with an InternalIP (status is written
// separately: the API server drops it on create).
func nodeObject(i int) *corev1.Node {
	a := nodeAddr(i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName(i),
			Labels: map[string]string{cluster.LabelEgressAssignable: ""},
			Annotations: map[string]string{cluster.AnnotationPrimaryIfAddr: cluster.FormatPrimaryIfAddr(
				cluster.IfAddr{IPv4: netip.PrefixFrom(a, 16)})}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.String()}},
		},
	}
}

// workerObject is a Ready node that hosts no egress IP, with an InternalIP
// (its VTEP for the agents).
func workerObject(i int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: workerName(i)},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: workerAddr(i).String()}},
		},
	}
}

func namespaceObject(i int) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: map[string]string{"bench": nsName(i)}}}
}

// eipObject selects the pods labelled eip=<its name> in its namespace.
func (s Scale) eipObject(i int) *egressv1.EgressIP {
	return &egressv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: eipName(i)},
		Spec: egressv1.EgressIPSpec{
			EgressIPs:         []string{egressAddr(i).String()},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"bench": nsName(i % s.Namespaces)}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"eip": eipName(i)}},
		},
	}
}

// podOwner is the object that selects pod j.
func (s Scale) podOwner(j int) int { return j % s.EgressIPs }

// podWorker is the worker pod j runs on: the first WorkerPods on worker 0,
// the rest spread over the others.
func (s Scale) podWorker(j int) int {
	if j < s.WorkerPods {
		return 0
	}
	return 1 + j%(s.Workers-1)
}

// podObject is pod j, running with one address (status is written
// separately: the API server resets it on create).
func (s Scale) podObject(j int) *corev1.Pod {
	owner := s.podOwner(j)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(j), Namespace: nsName(owner % s.Namespaces),
			Labels: map[string]string{"eip": eipName(owner)}},
		Spec: corev1.PodSpec{NodeName: workerName(s.podWorker(j)),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podAddr(j).String(),
			PodIPs: []corev1.PodIP{{IP: podAddr(j).String()}}},
	}
}
