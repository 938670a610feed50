package controller

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/egret-gw/egret/control/assign"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Snapshot is the controller's view for the data plane: where each EgressIP
// object's IPs live and which pods use them.
type Snapshot struct {
	// Policies are ordered by EgressIP name.
	Policies []Policy
}

// Policy is one EgressIP object's assignment and selection.
type Policy struct {
	Name string
	// Assignments are the placed egress IPs with their interfaces, by address.
	Assignments []assign.Assignment
	// Pods are the running, non-host-network pods selected, by namespace and name.
	Pods []SelectedPod
}

// SelectedPod is a pod whose external traffic leaves through the policy's IPs.
type SelectedPod struct {
	Namespace, Name, Node string
	IPs                   []netip.Addr
}

// Snapshot returns the last assignment with the current pod selection.
func (c *Controller) Snapshot() Snapshot {
	c.mu.Lock()
	results := make(map[string]assign.ObjectResult, len(c.desired))
	for name, d := range c.desired {
		results[name] = d.result
	}
	c.mu.Unlock()

	nsLabels := map[string]labels.Set{}
	for _, ns := range c.src.Namespaces() {
		nsLabels[ns.Name] = ns.Labels
	}
	pods := c.src.Pods()
	var snap Snapshot
	for _, e := range c.src.EgressIPs() {
		p := Policy{Name: e.Name, Assignments: slices.Clone(results[e.Name].Status)}
		nsSel, err1 := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
		podSel, err2 := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
		if err1 == nil && err2 == nil {
			for _, pod := range pods {
				if !selectable(pod) {
					continue
				}
				nl, ok := nsLabels[pod.Namespace]
				if !ok || !nsSel.Matches(nl) || !podSel.Matches(labels.Set(pod.Labels)) {
					continue
				}
				sp := SelectedPod{Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName}
				for _, ip := range pod.Status.PodIPs {
					if a, err := netip.ParseAddr(ip.IP); err == nil {
						sp.IPs = append(sp.IPs, a)
					}
				}
				p.Pods = append(p.Pods, sp)
			}
		}
		slices.SortFunc(p.Pods, func(x, y SelectedPod) int {
			if c := strings.Compare(x.Namespace, y.Namespace); c != 0 {
				return c
			}
			return strings.Compare(x.Name, y.Name)
		})
		snap.Policies = append(snap.Policies, p)
	}
	slices.SortFunc(snap.Policies, func(x, y Policy) int { return strings.Compare(x.Name, y.Name) })
	return snap
}

// selectable: host-network pods share the node's address and finished pods
// send nothing, so neither is steered.
func selectable(p *corev1.Pod) bool {
	return !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
