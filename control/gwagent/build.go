// Package gwagent is the gateway agent: it follows the EgressIP objects, Nodes,
// Namespaces and Pods (from the Kubernetes API or a directory of YAML files),
// builds the data plane's configuration from them (which worker nodes may
// tunnel to this gateway, which of their pods use which policy, which egress
// IPs are hosted here), reloads the engine when it changes, claims and
// releases egress IPs, serves the gRPC health check and fences itself off
// when it loses contact with its source. docs/gateway-agent.md describes the
// behaviour.
package gwagent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/gateway/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Result is the built configuration with what was left out and why.
type Result struct {
	// Spec is base with Nodes and Policies filled (and VTEPs and InnerMAC
	// defaulted from this node's Node object when base has none): typed
	// values the engine settles as they are, without parsing them again.
	Spec config.Spec
	// Hosted are the egress IPs hosted here, sorted.
	Hosted []netip.Addr
	// Problems are inputs that were skipped; the rest is still built.
	Problems []error
}

// Options are the agent's settings that Build depends on.
type Options struct {
	// TrustPodIPs accepts a pod's addresses as the API gives them, even
	// outside its Node's spec.podCIDRs (for CNIs whose IPAM ignores them:
	// Calico IPAM, AWS VPC CNI). By default such addresses are refused,
	// so a node cannot claim another node's pod address (docs/security.md).
	TrustPodIPs bool
	// Admission, if set, has Build fill the Spec's admission filter
	// (docs/security.md#admission-filter); nil: no filter.
	Admission *Admission
}

// Build computes the engine configuration of gateway node from the view
// in. It is a pure function of its arguments and modifies nothing in in.
//
// Who leaves as what is the egress plan's (control/plan), the same value
// the steer agents render: Build only turns the gateway's part of it into
// the engine's Spec.
func Build(base config.Spec, node string, in cluster.View, opt Options) Result {
	var r Result
	problem := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Errorf(format, a...)) }
	pl := plan.Build(in, plan.Options{TrustPodIPs: opt.TrustPodIPs})
	r.Problems = append(r.Problems, pl.Problems...)
	c := base
	c.Node = node
	c.Nodes, c.Policies = nil, nil
	c.VTEPs = slices.Clone(base.VTEPs)

	if len(c.VTEPs) == 0 {
		if self := pl.Nodes[node]; self == nil {
			problem("no VTEP configured and no Node object %q to take it from", node)
		} else {
			for _, v := range []netip.Addr{self.VTEP4, self.VTEP6} {
				if v.IsValid() {
					c.VTEPs = append(c.VTEPs, v)
				}
			}
			if len(c.VTEPs) == 0 {
				problem("no VTEP configured and Node %q has neither the %s annotation nor an InternalIP", node, cluster.AnnotationVTEP)
			}
		}
	}
	var gwVTEPs []netip.Addr
	for _, a := range c.VTEPs {
		if a.IsValid() {
			gwVTEPs = append(gwVTEPs, a.Unmap())
		}
	}
	if c.InnerMAC == [6]byte{} && len(gwVTEPs) > 0 {
		c.InnerMAC = cluster.VTEPMAC(gwVTEPs[0])
	}

	who := podsByAddr(in)
	named := func(a netip.Addr, owner string) config.Pod {
		p := who[a]
		return config.Pod{Addr: a, Policy: owner, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	}
	part := pl.Gateway(node, gwVTEPs)
	r.Problems = append(r.Problems, part.Problems...)
	for _, p := range part.Policies {
		c.Policies = append(c.Policies, config.Policy{Name: p.Name, EgressIPs: p.Hosted})
	}
	r.Hosted = part.Hosted
	for _, w := range part.Workers {
		mac, err := cluster.NodeTunnelMAC(w.Object, w.VTEP)
		if err != nil {
			problem("node %s: %v; using %v", w.Name, err, net.HardwareAddr(mac[:]))
		}
		n := config.Node{Name: w.Name, VTEP: w.VTEP, InnerMAC: mac}
		for _, p := range w.Pods {
			n.Pods = append(n.Pods, named(p.Addr, p.Owner))
		}
		c.Nodes = append(c.Nodes, n)
	}
	if lv := config.LocalVTEP(gwVTEPs); c.LocalPort && lv.IsValid() {
		n := config.Node{Name: node, VTEP: lv, InnerMAC: config.LocalKernelMAC, Local: true}
		for _, p := range part.Local {
			n.Pods = append(n.Pods, named(p.Addr, p.Owner))
		}
		c.Nodes = append(c.Nodes, n)
	} else if len(part.Local) > 0 {
		problem("%d selected pod addresses run on this gateway node, whose local port is off (--local-port); they cannot leave through it", len(part.Local))
	}
	c.DeniedDestinations = append(slices.Clone(base.DeniedDestinations), pl.NodeNetworks...)
	if opt.Admission != nil {
		var errs []error
		c.Admission, errs = admission(node, in, *opt.Admission)
		r.Problems = append(r.Problems, errs...)
	}
	r.Spec = c
	return r
}

// Fenced returns s with no egress IP hosted: the data plane keeps its nodes,
// pods and policies (and flows) but answers for no address.
func Fenced(s config.Spec) config.Spec {
	out := s
	out.Policies = make([]config.Policy, len(s.Policies))
	for i, p := range s.Policies {
		out.Policies[i] = config.Policy{Name: p.Name}
	}
	return out
}

// podsByAddr maps the addresses of in's pods to the pods, for the names the
// NAT log writes: the plan has the addresses, not the objects' UIDs.
func podsByAddr(in cluster.View) map[netip.Addr]metav1.ObjectMeta {
	m := make(map[netip.Addr]metav1.ObjectMeta, len(in.Pods))
	for _, p := range in.Pods {
		if p == nil || p.Spec.HostNetwork {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				m[a.Unmap()] = metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
			}
		}
	}
	return m
}
