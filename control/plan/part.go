package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// WorkerPart is a node's share of the plan as its steer agent sees it:
// which of its pods leave through which gateways.
type WorkerPart struct {
	// Node is the node's name; Known says the plan has its Node object, whose
	// pod networks are PodCIDRs.
	Node     string
	Known    bool
	PodCIDRs []netip.Prefix
	// Pods are the node's pods, selected or not, in namespace/name order.
	Pods []Pod
	// Objects are the owners of the node's selected pods (every object
	// whose egress IPs some of their traffic uses), in name order.
	Objects []Route
	// TunnelPeers are the endpoints, of the local endpoint's family, of every
	// node hosting an egress IP (the local one left out): the only sources
	// whose tunnel frames the node takes, since any of them may still answer
	// a flow of a pod whose object or placement just changed.
	TunnelPeers []netip.Addr
	// Problems are the gateways that could not be used, and why.
	Problems []error
}

// Route is an object as a worker uses it: its gateways per family.
type Route struct {
	*Object
	// Gateways lists, for IPv4 (0) and IPv6 (1) egress IPs, the nodes
	// hosting one and their endpoints of the local family, sorted by
	// endpoint, each once.
	Gateways [2][]Hop
}

// Hop is a gateway node reached through its tunnel endpoint.
type Hop struct {
	Node string
	VTEP netip.Addr
}

// Worker returns node's part of the plan for a steer agent whose tunnel
// endpoint is local (gateways without an endpoint of that family are left
// out).
func (p *Plan) Worker(node string, local netip.Addr) WorkerPart {
	w := WorkerPart{Node: node}
	if n := p.Nodes[node]; n != nil {
		w.Known, w.PodCIDRs = true, n.PodCIDRs
	}
	local = local.Unmap()
	owners := map[string]bool{}
	for _, pod := range p.Pods {
		if pod.Node != node {
			continue
		}
		w.Pods = append(w.Pods, pod)
		if pod.Selected() && len(pod.IPs) > 0 {
			for _, o := range pod.Owners() {
				owners[o] = true
			}
		}
	}
	for i := range p.Objects {
		o := &p.Objects[i]
		if !owners[o.Name] {
			continue
		}
		r := Route{Object: o}
		for _, pl := range o.Placements {
			vtep, ok := p.vtepOf(pl.Node, local)
			if !ok {
				w.Problems = append(w.Problems, fmt.Errorf("EgressIP %s: node %q hosting %v has no VTEP of this node's underlay family; not used", o.Name, pl.Node, pl.IP))
				continue
			}
			f := Family(pl.IP)
			if !slices.ContainsFunc(r.Gateways[f], func(h Hop) bool { return h.VTEP == vtep }) {
				r.Gateways[f] = append(r.Gateways[f], Hop{Node: pl.Node, VTEP: vtep})
			}
		}
		for f := range r.Gateways {
			slices.SortFunc(r.Gateways[f], func(a, b Hop) int { return a.VTEP.Compare(b.VTEP) })
		}
		w.Objects = append(w.Objects, r)
	}
	for _, o := range p.Objects {
		for _, pl := range o.Placements {
			if v, ok := p.vtepOf(pl.Node, local); ok && v != local {
				w.TunnelPeers = append(w.TunnelPeers, v)
			}
		}
	}
	slices.SortFunc(w.TunnelPeers, netip.Addr.Compare)
	w.TunnelPeers = slices.Compact(w.TunnelPeers)
	return w
}

// vtepOf is node's endpoint of local's family.
func (p *Plan) vtepOf(node string, local netip.Addr) (netip.Addr, bool) {
	n := p.Nodes[node]
	if n == nil {
		return netip.Addr{}, false
	}
	v := n.VTEP6
	if local.Is4() {
		v = n.VTEP4
	}
	return v, v.IsValid()
}

// GatewayPart is a gateway node's share of the plan: the policies and the
// egress IPs it hosts, and the worker nodes and pods it takes tunnelled
// traffic from.
type GatewayPart struct {
	Node string
	// Policies are every usable object, in name order, each with the egress
	// IPs placed on this node.
	Policies []Policy
	// Hosted are the egress IPs placed on this node, sorted.
	Hosted []netip.Addr
	// Standbys maps a hosted egress IP to its standby node, where it has one
	// other than this node.
	Standbys map[netip.Addr]string
	// Workers are the other nodes with an endpoint of a family the gateway
	// has, in name order, each with its selected pods' addresses.
	Workers []Worker
	// Local are the selected pods' addresses of the gateway's own node,
	// sorted: they reach it without a tunnel (the local port).
	Local []PodAddr
	// Problems are the parts left out, and why.
	Problems []error
}

// Policy is an object with the egress IPs of it hosted on one gateway.
type Policy struct {
	Name   string
	Hosted []netip.Addr
}

// Worker is a node a gateway takes tunnelled traffic from, and the pod
// addresses it takes, each with the object it leaves by.
type Worker struct {
	*Node
	// VTEP is the node's endpoint the gateway takes frames from.
	VTEP netip.Addr
	Pods []PodAddr
}

// PodAddr is a pod address and the objects it leaves by.
type PodAddr struct {
	Addr netip.Addr
	// Owner is the object serving destinations Dest does not decide ("" for
	// none), Dest the pod's destination rules (nil when it has none): as
	// in Pod.
	Owner string
	Dest  *Dest
}

// Gateway returns node's part of the plan for a gateway whose tunnel
// endpoints are vteps.
func (p *Plan) Gateway(node string, vteps []netip.Addr) GatewayPart {
	g := GatewayPart{Node: node, Standbys: map[netip.Addr]string{}}
	problem := func(format string, a ...any) { g.Problems = append(g.Problems, fmt.Errorf(format, a...)) }
	var have4, have6 bool
	for _, v := range vteps {
		have4, have6 = have4 || v.Unmap().Is4(), have6 || !v.Unmap().Is4()
	}
	for _, o := range p.Objects {
		pol := Policy{Name: o.Name}
		for _, pl := range o.Placements {
			if pl.Node != node {
				continue
			}
			if slices.ContainsFunc(vteps, func(v netip.Addr) bool { return v.Unmap() == pl.IP }) {
				problem("EgressIP %s: %v is this gateway's VTEP; not hosted", o.Name, pl.IP)
				continue
			}
			pol.Hosted = append(pol.Hosted, pl.IP)
			if sb, ok := o.Standbys[pl.IP]; ok && sb != node {
				g.Standbys[pl.IP] = sb
			}
		}
		g.Hosted = append(g.Hosted, pol.Hosted...)
		g.Policies = append(g.Policies, pol)
	}
	slices.SortFunc(g.Hosted, netip.Addr.Compare)

	workers := map[string]int{}
	names := make([]string, 0, len(p.Nodes))
	for name := range p.Nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		n := p.Nodes[name]
		if name == node {
			continue
		}
		vtep, ok := n.VTEP(have4, have6)
		if !ok {
			continue
		}
		if slices.ContainsFunc(vteps, func(v netip.Addr) bool { return v.Unmap() == vtep }) {
			problem("node %s: VTEP %v is this gateway's own; its tunnel traffic is not accepted", name, vtep)
			continue
		}
		workers[name] = len(g.Workers)
		g.Workers = append(g.Workers, Worker{Node: n, VTEP: vtep})
	}
	for _, pod := range p.Pods {
		if !pod.Selected() || len(pod.IPs) == 0 {
			continue
		}
		i, ok := workers[pod.Node]
		if !ok {
			switch {
			case pod.Node == node:
				for _, ip := range pod.IPs {
					g.Local = append(g.Local, PodAddr{Addr: ip, Owner: pod.Owner, Dest: pod.Dest})
				}
			case p.Nodes[pod.Node] != nil:
				problem("pod %s (EgressIP %s): node %s has no VTEP of this gateway's families; not accepted", pod.Key(), pod.Owner, pod.Node)
			default:
				problem("pod %s (EgressIP %s): node %s is unknown; not accepted", pod.Key(), pod.Owner, pod.Node)
			}
			continue
		}
		for _, ip := range pod.IPs {
			g.Workers[i].Pods = append(g.Workers[i].Pods, PodAddr{Addr: ip, Owner: pod.Owner, Dest: pod.Dest})
		}
	}
	for i := range g.Workers {
		slices.SortFunc(g.Workers[i].Pods, func(a, b PodAddr) int { return a.Addr.Compare(b.Addr) })
	}
	slices.SortFunc(g.Local, func(a, b PodAddr) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(g.Workers, func(a, b Worker) int { return cmp.Compare(a.Name, b.Name) })
	return g
}
