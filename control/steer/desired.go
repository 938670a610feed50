package steer

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
)

// Pod is what the steer agent needs to know about a pod.
type Pod struct {
	Namespace, Name string
	// Node is the node the pod is scheduled on (spec.nodeName).
	Node   string
	Labels map[string]string
	// IPs are the pod's addresses (status.podIPs), at most one per family.
	IPs []netip.Addr
	// HostNetwork pods share the node's addresses and are never steered.
	HostNetwork bool
	// Done is true for pods in phase Succeeded or Failed: their IPs may
	// already belong to another pod.
	Done bool
}

// Inputs are the objects the desired state is computed from. Nothing in it is
// modified.
type Inputs struct {
	// Node is the name of the node the agent runs on; only its pods are steered.
	Node string
	// Pods may include pods of other nodes; they are ignored.
	Pods []Pod
	// Namespaces maps a namespace name to its labels.
	Namespaces map[string]map[string]string
	// EgressIPs are the EgressIP objects, with their status.
	EgressIPs []*egressv1.EgressIP
	// VTEPs maps a node name to its tunnel endpoint addresses.
	VTEPs map[string][]netip.Addr
	// NodeKnown says the source holds this node's Node object;
	// NodePodCIDRs are its spec.podCIDRs (spec.podCIDR when empty).
	NodeKnown    bool
	NodePodCIDRs []string
	// Problems are inputs refused while converting the objects (a node's
	// VTEP annotation naming an address that is not its own); Desired
	// reports them with its own.
	Problems []error
}

// RouteType says what a route in an object's table does.
type RouteType uint8

// Route types the agent programs.
const (
	// RouteUnicast sends the packet to one of NextHops (multipath when several).
	RouteUnicast RouteType = iota
	// RouteBlackhole drops silently: the object has no usable gateway for
	// the family yet (or any more). Fail closed.
	RouteBlackhole
	// RouteThrow ends the lookup in this table, so rule processing continues
	// with the main table: used for cluster, service and node networks.
	RouteThrow
)

func (t RouteType) String() string {
	switch t {
	case RouteUnicast:
		return "unicast"
	case RouteBlackhole:
		return "blackhole"
	case RouteThrow:
		return "throw"
	}
	return fmt.Sprintf("RouteType(%d)", uint8(t))
}

// NextHop is one gateway as seen from this node's tunnel device: the
// address the route names and the gateway's VTEP the frame is sent to.
type NextHop struct {
	// Addr is the route's next hop: the gateway's IPv4 VTEP for IPv4 routes
	// over an IPv4 underlay, otherwise a link-local address derived from MAC.
	Addr netip.Addr
	MAC  [6]byte
	VTEP netip.Addr
}

// Route is one route in an object's table.
type Route struct {
	Table    uint32
	Dst      netip.Prefix
	Type     RouteType
	NextHops []NextHop // sorted by VTEP; only for RouteUnicast
}

// Rule sends the traffic of one pod address to its object's table.
type Rule struct {
	Src   netip.Addr
	Table uint32
}

// Neigh is a permanent neighbour entry on the tunnel device.
type Neigh struct {
	Addr netip.Addr
	MAC  [6]byte
}

// FDB is a permanent forwarding entry on the tunnel device: frames to MAC go
// to VTEP.
type FDB struct {
	MAC  [6]byte
	VTEP netip.Addr
}

// State is the kernel configuration the agent wants. Every slice is sorted,
// so two States built from the same inputs are equal (see Equal).
type State struct {
	// Selected are the local pod addresses selected by some EgressIP. The
	// fail-closed filter drops their traffic to non-cluster destinations
	// unless it leaves through the tunnel device.
	Selected []netip.Addr
	// Allowed are the local pod addresses in PodCIDRs that no EgressIP
	// selects: the only sources in PodCIDRs whose traffic may leave
	// outside the tunnel. Empty in failClosed: selected; with KeepPodCIDRs
	// every unselected local pod (Apply keeps those in the kernel's pod
	// networks).
	Allowed []netip.Addr
	// PodCIDRs are the node's pod networks (failClosed: podCIDR): their
	// traffic to non-cluster destinations is dropped unless it leaves
	// through the tunnel device or its source is in Allowed. Empty in
	// failClosed: selected.
	PodCIDRs []netip.Prefix
	// KeepPodCIDRs says the node's pod networks are not known yet (its
	// Node object has not been seen): Apply leaves the kernel's as they
	// are, so a restarting agent keeps blocking.
	KeepPodCIDRs bool
	// TunnelPeers are the VTEPs of every node in any EgressIP's
	// status.items (those of FDB among them): the only sources the
	// tunnel device accepts frames of its VNI from, and the destinations
	// local pods may not send VXLAN or Geneve to.
	TunnelPeers []netip.Addr
	Rules       []Rule
	Routes      []Route
	Neighs      []Neigh
	FDB         []FDB
	// FailClosed is the mode in effect ("podCIDR" or "selected") and
	// FailClosedWhy the reason when it is not the configured one, for logs.
	FailClosed, FailClosedWhy string
	// Objects says, per EgressIP that selects a local pod, its table and
	// gateways, for logs and status.
	Objects []ObjectState
	// Problems are input errors that were skipped (an invalid selector,
	// a gateway without VTEP...). They do not stop the rest.
	Problems []error
}

// ObjectState summarises what one EgressIP object got on this node.
type ObjectState struct {
	Name     string
	Table    uint32
	Pods     int
	Gateways []string // node names, sorted
}

// Params are the parts of the agent's configuration the desired state depends on.
type Params struct {
	// Excluded are the cluster, service and node networks: never steered.
	Excluded []netip.Prefix
	// LocalVTEP is this node's VTEP; gateway VTEPs of the other family are skipped.
	LocalVTEP netip.Addr
	// TableBase and TableCount are the route tables the agent owns.
	TableBase, TableCount uint32
	// FailClosed is "podCIDR" (or "") or "selected"; see Config.FailClosed.
	FailClosed string
	// PodCIDRs, if set, are the node's pod networks; otherwise the Node
	// object's spec.podCIDRs are used.
	PodCIDRs []netip.Prefix
	// TrustPodIPs steers selected pods' addresses outside the pod
	// networks too (Config.TrustPodIPs).
	TrustPodIPs bool
	// NoEgressIP is "block" (or "") or "node"; see Config.NoEgressIP.
	NoEgressIP string
}

// Desired computes the kernel state for in. It is a pure function: it reads
// in and p and touches nothing else.
//
// A pod selected by several EgressIP objects is steered by the one whose name
// sorts first (byte order); the others are reported in Problems.
func Desired(in Inputs, p Params) State {
	var st State
	problem := func(format string, a ...any) { st.Problems = append(st.Problems, fmt.Errorf(format, a...)) }

	type object struct {
		eip      *egressv1.EgressIP
		pods     []netip.Addr
		fams     [2]bool
		hops     [2][]NextHop
		gateways []string
	}
	st.Problems = append(st.Problems, in.Problems...)
	sel, problems := cluster.NewSelector(in.EgressIPs)
	st.Problems = append(st.Problems, problems...)
	objs := make([]*object, sel.Len())
	for i := range objs {
		objs[i] = &object{eip: sel.Object(i)}
	}

	podNets := podNetworks(in, p, &st, problem)
	ownNets := knownPodNetworks(in, p)
	// refused are selected addresses outside the node's pod networks: not
	// steered (the kubelet writes its pods' status, and an address outside
	// them is not one this node's pods can have), but kept in Selected so
	// the filter holds their traffic in rather than let it leave unsteered.
	var refused []netip.Addr

	// Pods: the first object (by name) that selects a pod steers it.
	selected := map[netip.Addr]bool{}
	var unselected []netip.Addr
	for _, pod := range in.Pods {
		if pod.Node != in.Node || pod.HostNetwork || pod.Done || len(pod.IPs) == 0 {
			continue
		}
		nsLabels, ok := in.Namespaces[pod.Namespace]
		if !ok {
			// Without its namespace's labels a pod cannot be matched; the
			// namespace will arrive and trigger another pass.
			continue
		}
		var owner *object
		for _, i := range sel.Match(nsLabels, pod.Labels) {
			if owner == nil {
				owner = objs[i]
			} else {
				problem("pod %s/%s is selected by EgressIP %s and %s; steering it with %s (first by name)",
					pod.Namespace, pod.Name, owner.eip.Name, objs[i].eip.Name, owner.eip.Name)
			}
		}
		if owner == nil {
			for _, ip := range pod.IPs {
				if ip = ip.Unmap(); ip.IsValid() && !ip.IsUnspecified() && !ip.IsLoopback() && !ip.IsMulticast() {
					unselected = append(unselected, ip)
				}
			}
			continue
		}
		for _, ip := range pod.IPs {
			ip = ip.Unmap()
			if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() {
				problem("pod %s/%s: address %v cannot be steered", pod.Namespace, pod.Name, ip)
				continue
			}
			if selected[ip] {
				problem("pod %s/%s: address %v is used by another local pod; steering it once", pod.Namespace, pod.Name, ip)
				continue
			}
			if !p.TrustPodIPs && !cluster.InPodCIDRs(ownNets, ip) {
				problem("pod %s/%s: address %v is outside node %s's pod networks %v; not steered, its traffic is blocked", pod.Namespace, pod.Name, ip, in.Node, ownNets)
				selected[ip] = true
				refused = append(refused, ip)
				continue
			}
			selected[ip] = true
			owner.pods = append(owner.pods, ip)
			owner.fams[famIndex(ip)] = true
		}
	}

	// Gateways per object and family, from status.
	neighs := map[netip.Addr][6]byte{}
	fdb := map[[6]byte]netip.Addr{}
	for _, o := range objs {
		if len(o.pods) == 0 {
			continue
		}
		inSpec := map[netip.Addr]bool{}
		for _, s := range o.eip.Spec.EgressIPs {
			if a, err := egressv1.ParseEgressIP(s); err == nil {
				inSpec[a] = true
			}
		}
		gwSeen := map[string]bool{}
		for _, item := range o.eip.Status.Items {
			eip, err := egressv1.ParseEgressIP(item.EgressIP)
			if err != nil || !inSpec[eip] {
				problem("EgressIP %s: status item %q on node %q is not one of its egress IPs; ignored", o.eip.Name, item.EgressIP, item.Node)
				continue
			}
			vtep, ok := pickVTEP(in.VTEPs[item.Node], p.LocalVTEP)
			if !ok {
				problem("EgressIP %s: node %q hosting %v has no VTEP of this node's underlay family; not used", o.eip.Name, item.Node, eip)
				continue
			}
			f := famIndex(eip)
			mac := cluster.VTEPMAC(vtep)
			if prev, dup := fdb[mac]; dup && prev != vtep {
				problem("EgressIP %s: gateway VTEPs %v and %v map to the same tunnel MAC; %v not used", o.eip.Name, prev, vtep, vtep)
				continue
			}
			fdb[mac] = vtep
			nh := NextHop{Addr: nextHopAddr(f, vtep, mac), MAC: mac, VTEP: vtep}
			if !slices.ContainsFunc(o.hops[f], func(h NextHop) bool { return h.VTEP == vtep }) {
				o.hops[f] = append(o.hops[f], nh)
			}
			neighs[nh.Addr] = mac
			if !gwSeen[item.Node] {
				gwSeen[item.Node] = true
				o.gateways = append(o.gateways, item.Node)
			}
		}
	}

	// A family without a usable gateway: blocked (a blackhole route), or
	// with "node" released as if unselected, to the node's own routing.
	for _, o := range objs {
		if len(o.pods) == 0 || noEgressIP(o.eip, p.NoEgressIP, problem) != NoEgressIPNode {
			continue
		}
		o.pods = slices.DeleteFunc(o.pods, func(ip netip.Addr) bool {
			f := famIndex(ip)
			if len(o.hops[f]) > 0 {
				return false
			}
			o.fams[f] = false
			delete(selected, ip)
			unselected = append(unselected, ip)
			return true
		})
	}

	// Tables: a stable hash of the name, probing in name order on collision.
	used := map[uint32]bool{}
	for _, o := range objs {
		if len(o.pods) == 0 {
			continue
		}
		t, ok := tableFor(o.eip.Name, p.TableBase, p.TableCount, used)
		if !ok {
			problem("EgressIP %s: all %d route tables of the agent are in use; not steered", o.eip.Name, p.TableCount)
			for _, ip := range o.pods {
				// Still selected: the filter keeps its traffic in.
				st.Selected = append(st.Selected, ip)
			}
			continue
		}
		slices.SortFunc(o.gateways, cmp.Compare)
		st.Objects = append(st.Objects, ObjectState{Name: o.eip.Name, Table: t, Pods: len(o.pods), Gateways: o.gateways})
		for _, ip := range o.pods {
			st.Selected = append(st.Selected, ip)
			st.Rules = append(st.Rules, Rule{Src: ip, Table: t})
		}
		for f := range 2 {
			if !o.fams[f] {
				continue
			}
			def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if f == 1 {
				def = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			r := Route{Table: t, Dst: def, Type: RouteBlackhole}
			if len(o.hops[f]) > 0 {
				r.Type = RouteUnicast
				r.NextHops = slices.SortedFunc(slices.Values(o.hops[f]), func(a, b NextHop) int { return a.VTEP.Compare(b.VTEP) })
			}
			st.Routes = append(st.Routes, r)
			for _, x := range p.Excluded {
				if famIndex(x.Addr()) == f {
					st.Routes = append(st.Routes, Route{Table: t, Dst: x.Masked(), Type: RouteThrow})
				}
			}
		}
	}
	st.Selected = append(st.Selected, refused...)
	if st.FailClosed == FailClosedPodCIDR {
		for _, ip := range unselected {
			// An address another local pod uses selected stays blocked.
			if selected[ip] {
				continue
			}
			if st.KeepPodCIDRs || slices.ContainsFunc(podNets, func(n netip.Prefix) bool { return n.Contains(ip) }) {
				st.Allowed = append(st.Allowed, ip)
			}
		}
	}
	for a, m := range neighs {
		st.Neighs = append(st.Neighs, Neigh{Addr: a, MAC: m})
	}
	for m, v := range fdb {
		st.FDB = append(st.FDB, FDB{MAC: m, VTEP: v})
	}
	// Every node hosting an egress IP of any object may send tunnel frames
	// here, not only the gateways of this node's pods: a gateway still
	// answers flows of a pod whose object or placement just changed, and a
	// pod selected a moment ago is steered to a gateway the previous pass
	// did not list. Nodes in no status stay out.
	for _, e := range in.EgressIPs {
		if e == nil {
			continue
		}
		for _, item := range e.Status.Items {
			if v, ok := pickVTEP(in.VTEPs[item.Node], p.LocalVTEP); ok && v != p.LocalVTEP {
				st.TunnelPeers = append(st.TunnelPeers, v)
			}
		}
	}
	st.sort()
	return st
}

// noEgressIP is the object's choice for a family without egress IP: its
// annotation, else the agent's setting. A bad annotation blocks.
func noEgressIP(e *egressv1.EgressIP, def string, problem func(string, ...any)) string {
	v, ok := e.Annotations[egressv1.AnnotationNoEgressIP]
	switch {
	case !ok:
		if def == NoEgressIPNode {
			return NoEgressIPNode
		}
		return NoEgressIPBlock
	case v == NoEgressIPBlock || v == NoEgressIPNode:
		return v
	}
	problem("EgressIP %s: annotation %s is %q; use %s or %s; blocking", e.Name, egressv1.AnnotationNoEgressIP, v, NoEgressIPBlock, NoEgressIPNode)
	return NoEgressIPBlock
}

// podNetworks decides the fail-closed mode and the node's pod networks.
func podNetworks(in Inputs, p Params, st *State, problem func(string, ...any)) []netip.Prefix {
	if p.FailClosed == FailClosedSelected {
		st.FailClosed = FailClosedSelected
		return nil
	}
	st.FailClosed = FailClosedPodCIDR
	nets := p.PodCIDRs
	if len(nets) == 0 {
		if !in.NodeKnown {
			st.KeepPodCIDRs = true
			st.FailClosedWhy = fmt.Sprintf("Node %s not seen yet: the pod CIDRs in the kernel are kept", in.Node)
			return nil
		}
		for _, s := range in.NodePodCIDRs {
			n, err := netip.ParsePrefix(s)
			if err != nil || n.Addr().Zone() != "" || n.Addr().Is4In6() {
				problem("Node %s: spec.podCIDRs entry %q is not a network; ignored", in.Node, s)
				continue
			}
			nets = append(nets, n)
		}
	}
	nets = normalizePrefixes(nets)
	if len(nets) == 0 {
		st.FailClosed = FailClosedSelected
		st.FailClosedWhy = fmt.Sprintf("Node %s has no spec.podCIDRs and the config no podCIDRs: only pods the agent has seen selected are blocked, a new pod can leave with the node's address until then", in.Node)
		return nil
	}
	st.PodCIDRs = nets
	return nets
}

// knownPodNetworks are the node's pod networks whatever the fail-closed
// mode: the configured ones, else the Node's spec.podCIDRs (entries that
// are not networks are reported by podNetworks).
func knownPodNetworks(in Inputs, p Params) []netip.Prefix {
	if len(p.PodCIDRs) > 0 {
		return p.PodCIDRs
	}
	var nets []netip.Prefix
	for _, s := range in.NodePodCIDRs {
		if n, err := netip.ParsePrefix(s); err == nil && n.Addr().Zone() == "" && !n.Addr().Is4In6() {
			nets = append(nets, n.Masked())
		}
	}
	return nets
}

// normalizePrefixes masks, sorts and drops networks inside another one:
// an nftables interval set refuses overlapping elements.
func normalizePrefixes(list []netip.Prefix) []netip.Prefix {
	in := make([]netip.Prefix, 0, len(list))
	for _, n := range list {
		if n.IsValid() {
			in = append(in, n.Masked())
		}
	}
	slices.SortFunc(in, prefixCmp)
	var out []netip.Prefix
	for _, n := range in {
		if len(out) > 0 {
			if last := out[len(out)-1]; last.Bits() <= n.Bits() && last.Contains(n.Addr()) {
				continue
			}
		}
		out = append(out, n)
	}
	return out
}

func prefixCmp(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

func (st *State) sort() {
	slices.SortFunc(st.Selected, netip.Addr.Compare)
	st.Selected = slices.Compact(st.Selected)
	slices.SortFunc(st.Allowed, netip.Addr.Compare)
	st.Allowed = slices.Compact(st.Allowed)
	slices.SortFunc(st.PodCIDRs, prefixCmp)
	slices.SortFunc(st.TunnelPeers, netip.Addr.Compare)
	st.TunnelPeers = slices.Compact(st.TunnelPeers)
	slices.SortFunc(st.Rules, func(a, b Rule) int { return a.Src.Compare(b.Src) })
	slices.SortFunc(st.Routes, func(a, b Route) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()))
	})
	st.Routes = slices.CompactFunc(st.Routes, func(a, b Route) bool { return a.Table == b.Table && a.Dst == b.Dst })
	slices.SortFunc(st.Neighs, func(a, b Neigh) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(st.FDB, func(a, b FDB) int { return slices.Compare(a.MAC[:], b.MAC[:]) })
	slices.SortFunc(st.Objects, func(a, b ObjectState) int { return cmp.Compare(a.Name, b.Name) })
}

func famIndex(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
}

// pickVTEP returns the VTEP of the same family as local.
func pickVTEP(vteps []netip.Addr, local netip.Addr) (netip.Addr, bool) {
	for _, v := range vteps {
		v = v.Unmap()
		if v.IsValid() && !v.IsUnspecified() && !v.IsMulticast() && v.Is4() == local.Unmap().Is4() {
			return v, true
		}
	}
	return netip.Addr{}, false
}

// nextHopAddr is the route next hop for a gateway: its IPv4 VTEP for IPv4
// routes over an IPv4 underlay (readable in `ip route`), otherwise the IPv6
// link-local address made from the MAC (RFC 4291 modified EUI-64); IPv4
// routes over an IPv6 underlay then use an IPv6 next hop (RFC 5549).
func nextHopAddr(fam int, vtep netip.Addr, mac [6]byte) netip.Addr {
	if fam == 0 && vtep.Is4() {
		return vtep
	}
	return linkLocal(mac)
}

func linkLocal(mac [6]byte) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// tableFor hashes name into [base, base+count) and probes linearly past
// tables already used in this pass.
func tableFor(name string, base, count uint32, used map[uint32]bool) (uint32, bool) {
	if count == 0 {
		return 0, false
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	start := h.Sum32() % count
	for i := range count {
		t := base + (start+i)%count
		if !used[t] {
			used[t] = true
			return t, true
		}
	}
	return 0, false
}

// errNoVTEP is returned when the local VTEP cannot be found.
var errNoVTEP = errors.New("no VTEP address")
