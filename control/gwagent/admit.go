package gwagent

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/config"
)

// Admission says which of the gateway's own listeners the admission filter
// guards (config.Spec.Admission) and how their sources are found. A zero
// port leaves its listener unfiltered.
type Admission struct {
	// HealthPort is the gRPC health service's: the controller's pods and
	// the nodes they run on may connect (a masquerading CNI gives a pod its
	// node's address).
	HealthPort uint16
	// SyncPort is the flow sync's: the egress-assignable nodes (the
	// gateways) may connect.
	SyncPort uint16
	// MetricsPort is the metrics endpoint's: MetricsAllow may connect, or
	// by default every node, every Node's spec.podCIDRs and this node's
	// primary network (its node-primary-ifaddr subnet).
	MetricsPort  uint16
	MetricsAllow []netip.Prefix
	// ControllerNamespace and ControllerSelector find the controller's
	// pods ("" namespace: every namespace).
	ControllerNamespace string
	ControllerSelector  labels.Selector
}

// Admission names of the listeners, the labels of
// egret_gateway_admission_drops_total.
const (
	AdmitHealth  = "health"
	AdmitSync    = "sync"
	AdmitMetrics = "metrics"
)

// admission computes the filter of node's listeners from the view. The
// node's own addresses may always connect (loopback is accepted by the
// engine). The health port is left open, with a problem, while no
// controller pod is known: the controller must not be locked out.
func admission(node string, in cluster.View, o Admission) ([]config.Admit, []error) {
	var errs []error
	byName := make(map[string]*corev1.Node, len(in.Nodes))
	for _, n := range in.Nodes {
		if n != nil {
			byName[n.Name] = n
		}
	}
	own := nodeAddrs(byName[node])
	out := []config.Admit{}
	if o.HealthPort != 0 {
		from := append([]netip.Prefix(nil), own...)
		found := 0
		for _, p := range in.Pods {
			if p == nil || cluster.PodDone(p) || (o.ControllerNamespace != "" && p.Namespace != o.ControllerNamespace) ||
				o.ControllerSelector == nil || !o.ControllerSelector.Matches(labels.Set(p.Labels)) {
				continue
			}
			found++
			for _, a := range cluster.PodIPs(p) {
				from = append(from, netip.PrefixFrom(a, a.BitLen()))
			}
			from = append(from, nodeAddrs(byName[p.Spec.NodeName])...)
		}
		if found == 0 {
			errs = append(errs, fmt.Errorf("no controller pod (namespace %q, labels %v) in the view: the health port admits every source until one appears", o.ControllerNamespace, o.ControllerSelector))
		} else {
			out = append(out, config.Admit{Name: AdmitHealth, Port: o.HealthPort, From: from})
		}
	}
	if o.SyncPort != 0 {
		from := append([]netip.Prefix(nil), own...)
		for _, n := range byName {
			if _, ok := n.Labels[cluster.LabelEgressAssignable]; ok {
				from = append(from, nodeAddrs(n)...)
			}
		}
		out = append(out, config.Admit{Name: AdmitSync, Port: o.SyncPort, From: from})
	}
	if o.MetricsPort != 0 {
		from := append([]netip.Prefix(nil), own...)
		if o.MetricsAllow != nil {
			from = append(from, o.MetricsAllow...)
		} else {
			for _, n := range byName {
				from = append(append(from, nodeAddrs(n)...), cluster.NodePodCIDRs(n)...)
			}
			// The node network, where a scraper outside the cluster sits.
			if self := byName[node]; self != nil {
				if ifa, _, _, err := cluster.NodeInterfaces(self.Annotations); err == nil {
					for _, p := range []netip.Prefix{ifa.IPv4, ifa.IPv6} {
						if p.IsValid() {
							from = append(from, p.Masked())
						}
					}
				}
			}
		}
		out = append(out, config.Admit{Name: AdmitMetrics, Port: o.MetricsPort, From: from})
	}
	for i := range out {
		out[i].From = sortPrefixes(out[i].From)
	}
	return out, errs
}

// sortPrefixes sorts l and drops repeats: the view's order is not stable,
// and an unchanged filter must build an equal Spec (no reload).
func sortPrefixes(l []netip.Prefix) []netip.Prefix {
	slices.SortFunc(l, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	return slices.Compact(l)
}

// nodeAddrs are n's InternalIPs (both families), or the address its
// services listen on (cluster.NodeAddress) when it has none, as /32 or
// /128 prefixes; none for nil.
func nodeAddrs(n *corev1.Node) []netip.Prefix {
	if n == nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Zone() == "" {
			ip = ip.Unmap()
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	if len(out) == 0 {
		if ip, ok := cluster.NodeAddress(n); ok && ip.Zone() == "" {
			ip = ip.Unmap()
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	return out
}
