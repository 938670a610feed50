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

// NodePodCIDRs returns a node's pod networks (spec.podCIDRs, else
// spec.podCIDR); unparsable entries are left out.
func NodePodCIDRs(n *corev1.Node) []netip.Prefix {
	list := n.Spec.PodCIDRs
	if len(list) == 0 && n.Spec.PodCIDR != "" {
		list = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Zone() == "" && !p.Addr().Is4In6() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// InPodCIDRs reports whether ip may be a pod address of a node with pod
// networks cidrs: the node's kubelet writes its pods' status, so an address
// outside them could be another node's pod (or anything else) claimed as
// this node's. Only networks of ip's family count: a node with no pod
// network of that family (a single-stack podCIDR beside dual-stack pods, a
// CNI that does not use spec.podCIDRs for that family) leaves it unchecked.
func InPodCIDRs(cidrs []netip.Prefix, ip netip.Addr) bool {
	ip = ip.Unmap()
	known := false
	for _, c := range cidrs {
		if c.Addr().Is4() != ip.Is4() {
			continue
		}
		if c.Contains(ip) {
			return true
		}
		known = true
	}
	return !known
}
