package cluster

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PodIPs returns a pod's addresses (status.podIPs, then status.podIP),
// each once; unparsable ones are left out.
func PodIPs(p *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if p.Status.PodIP != "" {
		add(p.Status.PodIP)
	}
	return out
}

// PodDone reports a pod in phase Succeeded or Failed: it sends nothing any
// more and its addresses may already belong to another pod.
func PodDone(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
