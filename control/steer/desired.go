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
	"github.com/egret-gw/egret/control/plan"
	gwconfig "github.com/egret-gw/egret/gateway/config"
)

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
	// over an IPv4 underlay, otherwise a link-local address derived from MAC;
	// for the gateway of this node, gateway/config's LocalNextHop4/6.
	Addr netip.Addr
	MAC  [6]byte
	VTEP netip.Addr
	// Local says the gateway is this node's own, reached without a tunnel
	// through its local port (config.LocalKernelLink).
	Local bool
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
	// Classes are the destination classes of the local pods whose owner
	// depends on the destination (plan.Pod.Dest), by ID; Classified maps
	// those pods' addresses to their class, and Marks the mark of each
	// object a class sends to, to its table (see dest.go).
	Classes    []Class
	Classified []ClassPod
	Marks      []MarkRule
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
	// LocalPort says this node's gateway has created its local port
	// (config.LocalKernelLink): the node's pods can use the egress IPs it
	// hosts. Without it those IPs are not used from this node.
	LocalPort bool
	// MarkMask are the packet and connection mark bits the agent owns to
	// classify traffic by destination (Config.MarkMask); 0 means
	// DefaultMarkMask.
	MarkMask uint32
}

// Desired computes the kernel state of node from the egress plan. It is a
// pure function: it reads pl and p and touches nothing else.
//
// Which pods leave as which EgressIP, through which gateways, is the plan's
// (control/plan), the same value the gateway agents render; Desired only
// turns this node's part of it into rules, routes and the filter.
func Desired(pl *plan.Plan, node string, p Params) State {
	var st State
	problem := func(format string, a ...any) { st.Problems = append(st.Problems, fmt.Errorf(format, a...)) }
	w := pl.Worker(node, p.LocalVTEP)
	st.Problems = append(st.Problems, pl.Problems...)
	st.Problems = append(st.Problems, w.Problems...)

	type object struct {
		r        plan.Route
		pods     []netip.Addr
		fams     [2]bool
		hops     [2][]NextHop
		gateways []string
		// destPods counts the pods that use the object for some of
		// their destinations (plan.Pod.Dest); table is set (tabled)
		// once allocated.
		destPods int
		table    uint32
		tabled   bool
	}
	podNets := podNetworks(w, p, &st, problem)

	// Pods: the plan's owner steers each usable address; a refused one is
	// kept in Selected so the filter holds its traffic in rather than let
	// it leave unsteered.
	objs := make(map[string]*object, len(w.Objects))
	order := make([]*object, 0, len(w.Objects))
	for _, r := range w.Objects {
		o := &object{r: r}
		objs[r.Name] = o
		order = append(order, o)
	}
	selected := map[netip.Addr]bool{}
	var unselected, refused []netip.Addr
	var classified []classifiedPod
	owners := map[*plan.Dest][]string{} // Dest.Owners walks every rule: once per Dest
	for _, pod := range w.Pods {
		if pod.Dest != nil {
			// Owners by destination: a class, not a rule per address;
			// the pod is selected (held in) whatever its destinations.
			for _, ip := range pod.Refused {
				selected[ip] = true
				refused = append(refused, ip)
			}
			if len(pod.IPs) == 0 {
				continue
			}
			for _, ip := range pod.IPs {
				selected[ip] = true
				classified = append(classified, classifiedPod{ip, pod.Dest})
			}
			names, ok := owners[pod.Dest]
			if !ok {
				names = pod.Dest.Owners()
				owners[pod.Dest] = names
			}
			for _, name := range names {
				o := objs[name]
				if o == nil {
					problem("pod %s: its owner EgressIP %s is not in the node's plan; its traffic there is held", pod.Key(), name)
					continue
				}
				o.destPods++
				for _, ip := range pod.IPs {
					o.fams[plan.Family(ip)] = true
				}
			}
			continue
		}
		if pod.Owner == "" {
			unselected = append(unselected, pod.IPs...)
			continue
		}
		for _, ip := range pod.Refused {
			selected[ip] = true
			refused = append(refused, ip)
		}
		o := objs[pod.Owner]
		for _, ip := range pod.IPs {
			selected[ip] = true
			o.pods = append(o.pods, ip)
			o.fams[plan.Family(ip)] = true
		}
	}

	// Gateways per object and family, from the plan.
	neighs := map[netip.Addr][6]byte{}
	fdb := map[[6]byte]netip.Addr{}
	for _, o := range order {
		gwSeen := map[string]bool{}
		for f, hops := range o.r.Gateways {
			for _, h := range hops {
				if h.Node == node {
					// This node's own gateway: no tunnel to itself.
					if !p.LocalPort {
						problem("EgressIP %s: this node hosts one of its egress IPs but the gateway's local port %s is missing (is the gateway running with --local-port?); not used from here", o.r.Name, gwconfig.LocalKernelLink)
						continue
					}
					o.hops[f] = append(o.hops[f], NextHop{Addr: localNextHop(f), MAC: gwconfig.LocalPortMAC, VTEP: h.VTEP, Local: true})
					if !gwSeen[h.Node] {
						gwSeen[h.Node] = true
						o.gateways = append(o.gateways, h.Node)
					}
					continue
				}
				mac := cluster.VTEPMAC(h.VTEP)
				if prev, dup := fdb[mac]; dup && prev != h.VTEP {
					problem("EgressIP %s: gateway VTEPs %v and %v map to the same tunnel MAC; %v not used", o.r.Name, prev, h.VTEP, h.VTEP)
					continue
				}
				fdb[mac] = h.VTEP
				nh := NextHop{Addr: nextHopAddr(f, h.VTEP, mac), MAC: mac, VTEP: h.VTEP}
				o.hops[f] = append(o.hops[f], nh)
				neighs[nh.Addr] = mac
				if !gwSeen[h.Node] {
					gwSeen[h.Node] = true
					o.gateways = append(o.gateways, h.Node)
				}
			}
		}
	}

	// A family without a usable gateway: blocked (a blackhole route), or
	// with "node" released as if unselected, to the node's own routing.
	for _, o := range order {
		if len(o.pods) == 0 || noEgressIP(o.r.EgressIP, p.NoEgressIP, problem) != NoEgressIPNode {
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
	for _, o := range order {
		if len(o.pods) == 0 && o.destPods == 0 {
			continue
		}
		t, ok := tableFor(o.r.Name, p.TableBase, p.TableCount, used)
		if !ok {
			problem("EgressIP %s: all %d route tables of the agent are in use; not steered", o.r.Name, p.TableCount)
			// Still selected: the filter keeps its traffic in.
			st.Selected = append(st.Selected, o.pods...)
			continue
		}
		o.table, o.tabled = t, true
		slices.SortFunc(o.gateways, cmp.Compare)
		st.Objects = append(st.Objects, ObjectState{Name: o.r.Name, Table: t, Pods: len(o.pods) + o.destPods, Gateways: o.gateways})
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
	if len(classified) > 0 {
		dobjs := make([]destObject, 0, len(order))
		for _, o := range order {
			dobjs = append(dobjs, destObject{name: o.r.Name, hops: [2]bool{len(o.hops[0]) > 0, len(o.hops[1]) > 0},
				table: o.table, used: o.destPods > 0 && o.tabled})
		}
		classify(&st, pl, classified, dobjs, p, problem)
		for _, c := range classified {
			st.Selected = append(st.Selected, c.addr)
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
	st.TunnelPeers = w.TunnelPeers
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
func podNetworks(w plan.WorkerPart, p Params, st *State, problem func(string, ...any)) []netip.Prefix {
	if p.FailClosed == FailClosedSelected {
		st.FailClosed = FailClosedSelected
		return nil
	}
	st.FailClosed = FailClosedPodCIDR
	nets := p.PodCIDRs
	if len(nets) == 0 {
		if !w.Known {
			st.KeepPodCIDRs = true
			st.FailClosedWhy = fmt.Sprintf("Node %s not seen yet: the pod CIDRs in the kernel are kept", w.Node)
			return nil
		}
		nets = w.PodCIDRs
	}
	nets = normalizePrefixes(nets)
	if len(nets) == 0 {
		st.FailClosed = FailClosedSelected
		st.FailClosedWhy = fmt.Sprintf("Node %s has no spec.podCIDRs and the config no podCIDRs: only pods the agent has seen selected are blocked, a new pod can leave with the node's address until then", w.Node)
		return nil
	}
	st.PodCIDRs = nets
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
	slices.SortFunc(st.Classes, func(a, b Class) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(st.Classified, func(a, b ClassPod) int { return a.Addr.Compare(b.Addr) })
	st.Classified = slices.CompactFunc(st.Classified, func(a, b ClassPod) bool { return a.Addr == b.Addr })
	slices.SortFunc(st.Marks, func(a, b MarkRule) int { return cmp.Compare(a.Mark, b.Mark) })
}

func famIndex(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
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

// localNextHop is the next hop of routes of family fam to this node's own
// gateway, on its local port.
func localNextHop(fam int) netip.Addr {
	if fam == 0 {
		return gwconfig.LocalNextHop4
	}
	return gwconfig.LocalNextHop6
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
