package gwagent

import (
	"errors"
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
	// MetricsPort is the metrics endpoint's: the scraper's pods and the
	// nodes they run on may connect, and MetricsAllow. Nothing else by
	// default: the port usage of every egress IP is no business of other
	// pods (issue 33).
	MetricsPort  uint16
	MetricsAllow []netip.Prefix
	// ControllerNamespace and ControllerSelector find the controller's
	// pods ("" namespace: every namespace).
	ControllerNamespace string
	ControllerSelector  labels.Selector
	// ScraperNamespace and ScraperSelector find the pods that scrape the
	// metrics port, Prometheus ("" namespace: every namespace; a nil
	// selector: none).
	ScraperNamespace string
	ScraperSelector  labels.Selector
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
// controller pod is known: the controller must not be locked out. The
// metrics port is not: without a scraper pod it admits the node alone.
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
		from, found := podSources(in.Pods, byName, o.ControllerNamespace, o.ControllerSelector)
		if found == 0 {
			errs = append(errs, fmt.Errorf("no controller pod (namespace %q, labels %v) in the view: the health port admits every source until one appears", o.ControllerNamespace, o.ControllerSelector))
		} else {
			out = append(out, config.Admit{Name: AdmitHealth, Port: o.HealthPort, From: append(from, own...)})
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
		// Unlike the controller, a missing scraper locks no one out who
		// keeps Egret running: the port admits the node alone (and the
		// named sources), and the agent says why a scrape times out.
		from, found := podSources(in.Pods, byName, o.ScraperNamespace, o.ScraperSelector)
		switch {
		case len(o.MetricsAllow) > 0 || found > 0:
		case o.ScraperSelector == nil:
			errs = append(errs, errors.New("no metrics scraper selector and no --metrics-allow: the metrics port admits only this node"))
		default:
			errs = append(errs, fmt.Errorf("no metrics scraper pod (namespace %q, labels %v) in the view and no --metrics-allow: the metrics port admits only this node", o.ScraperNamespace, o.ScraperSelector))
		}
		from = append(append(from, own...), o.MetricsAllow...)
		out = append(out, config.Admit{Name: AdmitMetrics, Port: o.MetricsPort, From: from})
	}
	for i := range out {
		out[i].From = sortPrefixes(out[i].From)
	}
	return out, errs
}

// podSources are the addresses of the running pods in namespace ns (""
// every namespace) that sel matches, and the InternalIPs of the nodes they
// run on: a CNI that masquerades pod traffic gives a pod its node's
// address. found counts the pods; a nil sel matches none.
func podSources(pods []*corev1.Pod, byName map[string]*corev1.Node, ns string, sel labels.Selector) (from []netip.Prefix, found int) {
	if sel == nil {
		return nil, 0
	}
	for _, p := range pods {
		if p == nil || cluster.PodDone(p) || (ns != "" && p.Namespace != ns) || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		found++
		for _, a := range cluster.PodIPs(p) {
			from = append(from, netip.PrefixFrom(a, a.BitLen()))
		}
		from = append(from, nodeAddrs(byName[p.Spec.NodeName])...)
	}
	return from, found
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
