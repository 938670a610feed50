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
	"github.com/egret-gw/egret/internal/hostsubnet"
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
	// Conflicts are the destinations two EgressIP objects selecting a pod
	// in common both claim (plan.Plan.Conflicts): the agent tells both
	// objects with an Event.
	Conflicts []plan.Conflict
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
	r.Conflicts = pl.Conflicts
	c := base
	c.Node = node
	c.Nodes, c.Policies, c.DestTables = nil, nil, nil
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

	part := pl.Gateway(node, gwVTEPs)
	// The pods' names, for drop samples and Events: the plan's pods by
	// the addresses they leave with.
	pods := make(map[netip.Addr]*plan.Pod)
	for i := range pl.Pods {
		if p := &pl.Pods[i]; p.Selected() {
			for _, ip := range p.IPs {
				pods[ip] = p
			}
		}
	}
	r.Problems = append(r.Problems, part.Problems...)
	for _, p := range part.Policies {
		c.Policies = append(c.Policies, config.Policy{Name: p.Name, EgressIPs: p.Hosted})
	}
	r.Hosted = part.Hosted
	c.EgressIPSubnets = nil
	if self := pl.Nodes[node]; self != nil && len(r.Hosted) > 0 {
		var errs []error
		c.EgressIPSubnets, errs = placedSubnets(self.Object.Annotations, r.Hosted)
		r.Problems = append(r.Problems, errs...)
	}
	tables := destTables{}
	for _, w := range part.Workers {
		mac, err := cluster.NodeTunnelMAC(w.Object, w.VTEP)
		if err != nil {
			problem("node %s: %v; using %v", w.Name, err, net.HardwareAddr(mac[:]))
		}
		n := config.Node{Name: w.Name, VTEP: w.VTEP, InnerMAC: mac}
		for _, p := range w.Pods {
			n.Pods = append(n.Pods, tables.podOf(p, pods))
		}
		c.Nodes = append(c.Nodes, n)
	}
	if lv := config.LocalVTEP(gwVTEPs); c.LocalPort && lv.IsValid() {
		n := config.Node{Name: node, VTEP: lv, InnerMAC: config.LocalKernelMAC, Local: true}
		for _, p := range part.Local {
			n.Pods = append(n.Pods, tables.podOf(p, pods))
		}
		c.Nodes = append(c.Nodes, n)
	} else if len(part.Local) > 0 {
		problem("%d selected pod addresses run on this gateway node, whose local port is off (--local-port); they cannot leave through it", len(part.Local))
	}
	c.DestTables = tables.list
	c.DeniedDestinations = append(slices.Clone(base.DeniedDestinations), pl.NodeNetworks...)
	if opt.Admission != nil {
		var errs []error
		c.Admission, errs = admission(node, in, *opt.Admission)
		r.Problems = append(r.Problems, errs...)
	}
	r.Spec = c
	return r
}

// destTables are the engine's destination tables of the pods rendered so
// far, one per plan.Dest (pods selected by the same objects share it, by
// Key), in the order first met.
type destTables struct {
	list []config.DestTable
	seen map[string]bool
}

// podOf is the engine's pod for address p of the plan, named after the
// pod pods gives for it, with its destination rules added to t.
func (t *destTables) podOf(p plan.PodAddr, pods map[netip.Addr]*plan.Pod) config.Pod {
	c := config.Pod{Addr: p.Addr, Policy: p.Owner}
	if d := p.Dest; d != nil {
		c.Dest = d.Key
		if !t.seen[d.Key] {
			if t.seen == nil {
				t.seen = map[string]bool{}
			}
			t.seen[d.Key] = true
			ct := config.DestTable{Name: d.Key, Rules: make([]config.DestRule, len(d.Rules))}
			for i, r := range d.Rules {
				ct.Rules[i] = config.DestRule{Prefix: r.Prefix, Exclude: r.Exclude}
				if !r.Exclude {
					ct.Rules[i].Policy = r.Owner
				}
			}
			t.list = append(t.list, ct)
		}
	}
	if pp := pods[p.Addr]; pp != nil {
		c.Namespace, c.Name, c.UID = pp.Namespace, pp.Name, string(pp.UID)
	}
	return c
}

// Fenced returns s with no egress IP hosted: the data plane keeps its nodes,
// pods and policies (and flows) but answers for no address. The subnets of
// the hosted IPs go too: Settle refuses a subnet for an IP no policy hosts,
// and a fence that does not settle releases nothing.
func Fenced(s config.Spec) config.Spec {
	out := s
	out.Policies = make([]config.Policy, len(s.Policies))
	for i, p := range s.Policies {
		out.Policies[i] = config.Policy{Name: p.Name}
	}
	out.EgressIPSubnets = nil
	return out
}

// placedSubnets picks the interface subnet of each hosted egress IP from
// this node's annotations, with the controller's rule (hostsubnet.Pick, as
// control/assign places it): the engine claims the IP on the interface
// that holds that subnet. An IP no subnet holds is left out and reported;
// the engine then refuses it unless a served interface's subnet holds it.
func placedSubnets(annotations map[string]string, hosted []netip.Addr) (map[netip.Addr]netip.Prefix, []error) {
	var p4, p6 netip.Prefix
	var host []netip.Prefix
	var errs []error
	if s, ok := annotations[cluster.AnnotationEgressIPConfig]; ok {
		c, err := cluster.ParseEgressIPConfig(s)
		if err != nil {
			return nil, []error{fmt.Errorf("this node's interface subnets: %w", err)}
		}
		p4, p6 = c.IfAddr.IPv4, c.IfAddr.IPv6
	} else {
		primary, h, found, err := cluster.NodeInterfaces(annotations)
		if err != nil {
			return nil, []error{fmt.Errorf("this node's interface subnets: %w", err)}
		}
		if !found {
			return nil, nil // not published yet: the controller placed nothing by them
		}
		p4, p6, host = primary.IPv4, primary.IPv6, h
	}
	out := make(map[netip.Addr]netip.Prefix, len(hosted))
	for _, a := range hosted {
		if p, ok := hostsubnet.Pick(p4, p6, host, a); ok {
			out[a] = p
		} else {
			errs = append(errs, fmt.Errorf("egress IP %v is placed here, but none of this node's interface subnets holds it; it is not claimed", a))
		}
	}
	return out, errs
}
