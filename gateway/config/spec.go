// Package config is the gateway's configuration as plain data: the file
// `egret gateway --config` reads (Config), its typed form (Spec), which the
// gateway agent builds from the cluster, and Settled, a Spec checked and
// normalised by Settle, which the engine (gateway/engine) runs. It imports
// no data-plane package, so that the gateway agent and the lab, which only
// write configurations, do not depend on the engine.
package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Defaults of the fields a Spec (or a config file) may leave out.
const (
	DefaultBatch        = 64
	DefaultMode         = "auto"
	DefaultConntrackMax = 1 << 20
	// DefaultVNI is the steer agent's default VNI (control/steer), so that
	// both ends agree when neither names one.
	DefaultVNI = 100
)

// Tunnel is the encapsulation the gateway accepts.
type Tunnel uint8

const (
	// TunnelNone takes the default, TunnelVXLAN.
	TunnelNone Tunnel = iota
	// TunnelVXLAN is VXLAN (RFC 7348) on UDP port 4789.
	TunnelVXLAN
	// TunnelGeneve is Geneve (RFC 8926) on UDP port 6081.
	TunnelGeneve
)

// Node is a worker node allowed to send tunnel traffic: its VTEP, its MAC
// inside the tunnel and its pods.
type Node struct {
	Name     string
	VTEP     netip.Addr
	InnerMAC [6]byte
	Pods     []Pod
	// Local marks the gateway's own node, whose pods reach it through the
	// local port (local.go): its VTEP is LocalVTEP(VTEPs) and its InnerMAC
	// LocalKernelMAC. At most one node is local, and only with LocalPort.
	Local bool
}

// Pod is a pod address of a node and the policy that selects it ("" for
// none: its packets are dropped as not selected, unless Dest names rules).
type Pod struct {
	Addr   netip.Addr
	Policy string
	// Dest names the pod's destination rules in Spec.DestTables ("" for
	// none: every destination uses Policy). With rules, a new flow uses
	// the policy of the longest rule holding its destination, and Policy
	// (the fallback) where none does.
	Dest string
	// Namespace, Name and UID name the pod when the gateway agent built
	// the configuration (a config file does not): drop samples, the
	// agent's Events and the NAT log (gateway/natlog) report them. The
	// data path never reads them.
	Namespace, Name, UID string
}

// Policy is an egress policy with the egress IPs of it hosted here.
type Policy struct {
	Name      string
	EgressIPs []netip.Addr
}

// DestTable is destination rules that pods share by name (Pod.Dest): the
// gateway agent makes one per set of EgressIP objects selecting pods
// (plan.Dest.Key), so that ten thousand pods and a thousand networks are
// a thousand rules, not ten million.
type DestTable struct {
	Name  string
	Rules []DestRule
}

// DestRule is a destination network and the policy that serves it, or an
// exclusion: no egress IP serves it (the pod's fallback neither).
type DestRule struct {
	Prefix netip.Prefix
	// Policy names the policy; "" iff Exclude.
	Policy  string
	Exclude bool
}

// Spec is the engine's configuration in typed form. The gateway agent
// builds it from the cluster; a config file becomes one through
// Config.Spec. Settle validates it, once, into what the engine's New and
// Reload take. Zero fields take the defaults their comments give.
type Spec struct {
	// Node is this gateway's node name (for logs).
	Node string
	// Interfaces are the interfaces the gateway serves; one interface may
	// carry both tunnel and outside traffic.
	Interfaces []string
	// LocalPort has the engine create and serve the local port (local.go),
	// so that pods on the gateway's own node can leave through it.
	LocalPort bool
	// Mode is auto (the default: AF_XDP, AF_PACKET where XDP cannot
	// attach), afxdp or afpacket.
	Mode string
	// Queues is the number of receive queues (one goroutine each); 0 takes
	// the first interface's RX queue count.
	Queues int
	// Batch is how many frames one Process/Transmit call handles, 32–64
	// (DefaultBatch).
	Batch int
	// ConntrackMax bounds the flow table (DefaultConntrackMax); memory is
	// sized for it up front.
	ConntrackMax int
	// PodFlowLimit caps the flows of one pod (inner source address) and
	// EgressIPFlowLimit those on one egress IP, so that no pod or egress
	// IP can fill the flow table for the others (drops pod_flow_limit,
	// egressip_flow_limit). 0 takes conntrack.DefaultLimits: a sixteenth
	// and a half of ConntrackMax (the flow table's conntrack.DefaultLimits).
	PodFlowLimit      int
	EgressIPFlowLimit int
	// EgressIPsClaimed says the hosted egress IPs are already on the
	// interface (put there by someone else): the engine neither claims nor
	// releases them.
	EgressIPsClaimed bool

	// Tunnel is the only encapsulation accepted (TunnelVXLAN when
	// TunnelNone), VNI its VNI (DefaultVNI when 0): the XDP program and the
	// pipeline drop and count tunnel packets of the other type or another VNI.
	Tunnel Tunnel
	VNI    uint32
	// VTEPs are the gateway's tunnel addresses, at most one per family.
	VTEPs []netip.Addr
	// InnerMAC is the gateway's MAC inside the tunnel.
	InnerMAC [6]byte
	// RouterV4, RouterV6 are the sources of ICMP errors the gateway sends
	// to pods (optional).
	RouterV4, RouterV6 netip.Addr
	// Nodes are the worker nodes allowed to send tunnel traffic, with their pods.
	Nodes []Node
	// Policies are the egress policies, each with the egress IPs of it
	// hosted here.
	Policies []Policy
	// DestTables are the destination rules pods name (Pod.Dest).
	DestTables []DestTable
	// EgressIPSubnets are the interface subnets (an interface address
	// with its mask, or a masked cloud subnet) the controller placed the
	// hosted egress IPs on (internal/hostsubnet.Pick, the gateway agent
	// fills it): the engine claims each on the served interface holding
	// that subnet, and on no other. A hosted IP absent here goes to the
	// served interface whose subnets Pick chooses (longest prefix).
	EgressIPSubnets map[netip.Addr]netip.Prefix
	// DeniedDestinations are destinations pods may not reach through the
	// gateway besides the pipeline's built-in deny-list (always denied):
	// the cluster's node networks (the gateway agent adds every node's
	// InternalIPs and host-cidrs). AllowedDestinations override both.
	DeniedDestinations, AllowedDestinations []netip.Prefix
	// Admission is the packet filter in front of the gateway's own TCP
	// listeners (health, flow sync, metrics): only the node itself and
	// each one's From may connect. Nil: no filter (docs/security.md).
	Admission []Admit
}

// Admit is one listener behind the admission filter: TCP to Port is
// accepted from the node itself (loopback) and from From, and dropped
// (counted under Name) from anywhere else.
type Admit struct {
	// Name labels the listener's drop counter: health, sync or metrics.
	Name string
	// Port is the listener's TCP port.
	Port uint16
	// From are the sources allowed besides the node itself.
	From []netip.Prefix
}

// Settled is a Spec that Settle validated, with defaults applied and
// addresses unmapped: what the engine's New and Reload take. Nothing in it may be
// modified.
type Settled struct {
	Spec
	// Hosted are the egress IPs of all policies: the addresses the XDP
	// program steers besides the VTEPs, and the claims.
	Hosted []netip.Addr
}

// fieldErr names the field at fault by its config-file key, so that an
// error reads the same for a file and for a Spec built in code.
func fieldErr(field string, format string, a ...any) error {
	return fmt.Errorf("config field %s: %s", field, fmt.Sprintf(format, a...))
}

// plainAddr checks that a is given and has no zone, and unmaps it.
func plainAddr(field string, a netip.Addr) (netip.Addr, error) {
	if !a.IsValid() {
		return a, fieldErr(field, "no address given")
	}
	if a.Zone() != "" {
		return a, fieldErr(field, "%v has a zone; give a plain address", a)
	}
	return a.Unmap(), nil
}

// Settle checks every field and returns the settled configuration; each
// error names the field at fault (e.g. nodes[1].pods[0].addr). It shares no
// slice with s.
func (s Spec) Settle() (*Settled, error) {
	set := &Settled{Spec: s}
	sp := &set.Spec
	sp.DeniedDestinations = slices.Clone(s.DeniedDestinations)
	sp.AllowedDestinations = slices.Clone(s.AllowedDestinations)
	var err error
	if err := checkPrefixes("deniedDestinations", s.DeniedDestinations); err != nil {
		return nil, err
	}
	if err := checkPrefixes("allowedDestinations", s.AllowedDestinations); err != nil {
		return nil, err
	}
	if sp.Admission, err = settleAdmission(s.Admission); err != nil {
		return nil, err
	}
	if len(s.Interfaces) == 0 {
		return nil, fieldErr("interfaces", "no interface given; name at least one (or pass --iface)")
	}
	sp.Interfaces = nil
	seen := map[string]bool{}
	for i, n := range s.Interfaces {
		if n == "" || len(n) >= 16 || strings.ContainsAny(n, "/ \t") {
			return nil, fieldErr(fmt.Sprintf("interfaces[%d]", i), "%q is not an interface name", n)
		}
		if seen[n] {
			return nil, fieldErr(fmt.Sprintf("interfaces[%d]", i), "%q is listed twice", n)
		}
		seen[n] = true
		sp.Interfaces = append(sp.Interfaces, n)
	}
	switch sp.Mode {
	case "":
		sp.Mode = DefaultMode
	case "auto", "afxdp", "afpacket":
	default:
		return nil, fieldErr("mode", "%q: use auto, afxdp or afpacket", s.Mode)
	}
	if sp.Queues < 0 || sp.Queues > 256 {
		return nil, fieldErr("queues", "%d: use 1–256 (or 0 for the interface's RX queue count)", s.Queues)
	}
	switch {
	case sp.Batch == 0:
		sp.Batch = DefaultBatch
	case sp.Batch < 32 || sp.Batch > 64:
		return nil, fieldErr("batch", "%d: use 32–64 frames", s.Batch)
	}
	switch {
	case sp.ConntrackMax == 0:
		sp.ConntrackMax = DefaultConntrackMax
	case sp.ConntrackMax < 1024 || sp.ConntrackMax > 1<<27:
		return nil, fieldErr("conntrackMax", "%d: use 1024–134217728 flows", s.ConntrackMax)
	}
	defPod, defIP := DefaultFlowLimits(sp.ConntrackMax)
	for _, l := range []struct {
		key string
		v   *int
		def int
	}{{"podFlowLimit", &sp.PodFlowLimit, defPod}, {"egressIPFlowLimit", &sp.EgressIPFlowLimit, defIP}} {
		switch {
		case *l.v == 0:
			*l.v = l.def
		case *l.v < 0 || *l.v > sp.ConntrackMax:
			return nil, fieldErr(l.key, "%d: use 1–conntrackMax (%d) flows, or 0 for the default %d", *l.v, sp.ConntrackMax, l.def)
		}
	}
	switch sp.Tunnel {
	case TunnelNone:
		sp.Tunnel = TunnelVXLAN
	case TunnelVXLAN, TunnelGeneve:
	default:
		return nil, fieldErr("tunnel", "%d: use vxlan or geneve", s.Tunnel)
	}
	switch {
	case sp.VNI == 0:
		sp.VNI = DefaultVNI
	case sp.VNI > 1<<24-1:
		return nil, fieldErr("vni", "%d: a VNI is 0–16777215", s.VNI)
	}

	if len(s.VTEPs) == 0 {
		return nil, fieldErr("vteps", "no local VTEP address given")
	}
	sp.VTEPs = nil
	for i, v := range s.VTEPs {
		f := fmt.Sprintf("vteps[%d]", i)
		a, err := plainAddr(f, v)
		if err != nil {
			return nil, err
		}
		if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
			return nil, fieldErr(f, "%v is not a unicast address", a)
		}
		for _, o := range sp.VTEPs {
			if o.Is4() == a.Is4() {
				return nil, fieldErr(f, "%v: at most one VTEP per address family", a)
			}
		}
		sp.VTEPs = append(sp.VTEPs, a)
	}
	if s.InnerMAC == [6]byte{} {
		return nil, fieldErr("innerMAC", "missing or all zero; give the gateway's MAC inside the tunnel")
	}
	if s.RouterV4.IsValid() {
		if sp.RouterV4, err = plainAddr("routerV4", s.RouterV4); err != nil {
			return nil, err
		}
		if !sp.RouterV4.Is4() {
			return nil, fieldErr("routerV4", "%v is not an IPv4 address", sp.RouterV4)
		}
	}
	if s.RouterV6.IsValid() {
		if sp.RouterV6, err = plainAddr("routerV6", s.RouterV6); err != nil {
			return nil, err
		}
		if !sp.RouterV6.Is6() {
			return nil, fieldErr("routerV6", "%v is not an IPv6 address", sp.RouterV6)
		}
	}

	sp.Policies = nil
	policies := map[string]bool{}
	hosted := map[netip.Addr]string{}
	for i, p := range s.Policies {
		f := fmt.Sprintf("policies[%d]", i)
		if p.Name == "" {
			return nil, fieldErr(f+".name", "empty; every policy needs a name")
		}
		if policies[p.Name] {
			return nil, fieldErr(f+".name", "policy %q is listed twice", p.Name)
		}
		policies[p.Name] = true
		gp := Policy{Name: p.Name}
		for j, e := range p.EgressIPs {
			ff := fmt.Sprintf("%s.egressIPs[%d]", f, j)
			a, err := plainAddr(ff, e)
			if err != nil {
				return nil, err
			}
			if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast() {
				return nil, fieldErr(ff, "%v is not a usable egress IP", a)
			}
			if other, dup := hosted[a]; dup {
				return nil, fieldErr(ff, "%v is also an egress IP of policy %q", a, other)
			}
			for _, v := range sp.VTEPs {
				if v == a {
					return nil, fieldErr(ff, "%v is also a VTEP of this gateway", a)
				}
			}
			hosted[a] = p.Name
			gp.EgressIPs = append(gp.EgressIPs, a)
			set.Hosted = append(set.Hosted, a)
		}
		sp.Policies = append(sp.Policies, gp)
	}

	if sp.EgressIPSubnets, err = settleSubnets(s.EgressIPSubnets, hosted); err != nil {
		return nil, err
	}

	tables, err := settleDestTables(s.DestTables, policies)
	if err != nil {
		return nil, err
	}
	sp.DestTables = tables

	sp.Nodes = nil
	nodeNames := map[string]bool{}
	vtepNode := map[netip.Addr]string{}
	podNode := map[netip.Addr]string{}
	for i, n := range s.Nodes {
		f := fmt.Sprintf("nodes[%d]", i)
		if n.Name == "" {
			return nil, fieldErr(f+".name", "empty; every node needs a name")
		}
		if nodeNames[n.Name] {
			return nil, fieldErr(f+".name", "node %q is listed twice", n.Name)
		}
		nodeNames[n.Name] = true
		gn := Node{Name: n.Name, InnerMAC: n.InnerMAC, Local: n.Local}
		if gn.VTEP, err = plainAddr(f+".vtep", n.VTEP); err != nil {
			return nil, err
		}
		if err := checkLocal(f, gn, sp, s.Nodes[:i]); err != nil {
			return nil, err
		}
		if !unicast(gn.VTEP) {
			return nil, fieldErr(f+".vtep", "%v is not a unicast address", gn.VTEP)
		}
		if other, dup := vtepNode[gn.VTEP]; dup {
			return nil, fieldErr(f+".vtep", "%v is also the VTEP of node %q", gn.VTEP, other)
		}
		vtepNode[gn.VTEP] = n.Name
		fam := false
		for _, v := range sp.VTEPs {
			fam = fam || v.Is4() == gn.VTEP.Is4()
		}
		if !fam {
			return nil, fieldErr(f+".vtep", "%v: the gateway has no VTEP of that family (see vteps)", gn.VTEP)
		}
		gn.Pods = make([]Pod, 0, len(n.Pods))
		for j, p := range n.Pods {
			ff := fmt.Sprintf("%s.pods[%d]", f, j)
			a, err := plainAddr(ff+".addr", p.Addr)
			if err != nil {
				return nil, err
			}
			if !unicast(a) {
				return nil, fieldErr(ff+".addr", "%v is not a unicast address", a)
			}
			if other, dup := podNode[a]; dup {
				return nil, fieldErr(ff+".addr", "%v is also a pod of node %q", a, other)
			}
			podNode[a] = n.Name
			if p.Policy != "" && !policies[p.Policy] {
				return nil, fieldErr(ff+".policy", "%q is not in policies", p.Policy)
			}
			if p.Dest != "" && !slices.ContainsFunc(tables, func(t DestTable) bool { return t.Name == p.Dest }) {
				return nil, fieldErr(ff+".dest", "%q is not in destTables", p.Dest)
			}
			gn.Pods = append(gn.Pods, Pod{Addr: a, Policy: p.Policy, Dest: p.Dest, Namespace: p.Namespace, Name: p.Name, UID: p.UID})
		}
		sp.Nodes = append(sp.Nodes, gn)
	}
	return set, nil
}

// checkLocal checks that a local node is the only one, on a gateway with
// the local port, with the local VTEP and MAC, and that no other node
// claims the local VTEP.
func checkLocal(f string, n Node, sp *Spec, before []Node) error {
	lv := LocalVTEP(sp.VTEPs)
	if !n.Local {
		if n.VTEP == LocalVTEP4 || n.VTEP == LocalVTEP6 {
			return fieldErr(f+".vtep", "%v is the local port's VTEP; only the local node may use it", n.VTEP)
		}
		return nil
	}
	switch {
	case !sp.LocalPort:
		return fieldErr(f+".local", "node %q is local but the local port is off (localPort)", n.Name)
	case slices.ContainsFunc(before, func(o Node) bool { return o.Local }):
		return fieldErr(f+".local", "a second local node; only the gateway's own node is local")
	case n.VTEP != lv:
		return fieldErr(f+".vtep", "%v: the local node's VTEP is %v", n.VTEP, lv)
	case n.InnerMAC != LocalKernelMAC:
		return fieldErr(f+".innerMAC", "the local node's inner MAC is %v's", LocalKernelLink)
	}
	return nil
}

// settleAdmission checks the admission filter and returns it with each
// From masked, unmapped, sorted and without duplicates.
func settleAdmission(l []Admit) ([]Admit, error) {
	if l == nil {
		return nil, nil
	}
	out := make([]Admit, 0, len(l))
	names, ports := map[string]bool{}, map[uint16]bool{}
	for i, a := range l {
		f := fmt.Sprintf("admission[%d]", i)
		switch {
		case a.Name == "" || len(a.Name) > 32 || strings.ContainsAny(a.Name, " \t\x00"):
			return nil, fieldErr(f+".name", "%q is not a counter name", a.Name)
		case names[a.Name]:
			return nil, fieldErr(f+".name", "%q is listed twice", a.Name)
		case a.Port == 0:
			return nil, fieldErr(f+".port", "no port given")
		case ports[a.Port]:
			return nil, fieldErr(f+".port", "%d is listed twice", a.Port)
		}
		names[a.Name], ports[a.Port] = true, true
		from := make([]netip.Prefix, 0, len(a.From))
		for j, p := range a.From {
			if !p.IsValid() || p.Addr().Zone() != "" {
				return nil, fieldErr(fmt.Sprintf("%s.from[%d]", f, j), "%v is not a plain IPv4 or IPv6 prefix", p)
			}
			if p.Addr().Is4In6() {
				bits := p.Bits() - 96
				if bits < 0 {
					return nil, fieldErr(fmt.Sprintf("%s.from[%d]", f, j), "%v is shorter than the IPv4-mapped prefix", p)
				}
				p = netip.PrefixFrom(p.Addr().Unmap(), bits)
			}
			from = append(from, p.Masked())
		}
		slices.SortFunc(from, func(x, y netip.Prefix) int {
			if c := x.Addr().Compare(y.Addr()); c != 0 {
				return c
			}
			return x.Bits() - y.Bits()
		})
		out = append(out, Admit{Name: a.Name, Port: a.Port, From: slices.Compact(from)})
	}
	return out, nil
}

// unicast reports whether a is an address a packet may come from.
func unicast(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsMulticast()
}

// checkPrefixes checks a destination list built in code (a file's are
// parsed plain and masked by Config.Spec).
func checkPrefixes(key string, l []netip.Prefix) error {
	for i, p := range l {
		if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return fieldErr(fmt.Sprintf("%s[%d]", key, i), "%v is not a plain IPv4 or IPv6 prefix", p)
		}
	}
	return nil
}

// DefaultFlowLimits are the per-pod and per-egress-IP flow limits for a
// table of maxFlows flows: a sixteenth and a half of it, as the flow
// table's conntrack.DefaultLimits says (a test of the engine holds them
// equal).
func DefaultFlowLimits(maxFlows int) (pod, egressIP int) {
	return max(1, maxFlows/16), max(1, maxFlows/2)
}

// settleSubnets checks that each egress IP of m is hosted and inside its
// subnet, and returns a copy with unmapped addresses (nil when empty).
func settleSubnets(m map[netip.Addr]netip.Prefix, hosted map[netip.Addr]string) (map[netip.Addr]netip.Prefix, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[netip.Addr]netip.Prefix, len(m))
	for a, p := range m {
		f := fmt.Sprintf("egressIPSubnets[%v]", a)
		a = a.Unmap()
		if _, ok := hosted[a]; !ok {
			return nil, fieldErr(f, "%v is not an egress IP of any policy", a)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-(p.Addr().BitLen()-p.Addr().Unmap().BitLen()))
		if !p.IsValid() || !p.Contains(a) {
			return nil, fieldErr(f, "subnet %v does not hold the egress IP", p)
		}
		out[a] = p
	}
	return out, nil
}

// settleDestTables checks the destination tables against the policies and
// returns a copy with unmapped, masked prefixes.
func settleDestTables(ts []DestTable, policies map[string]bool) ([]DestTable, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]DestTable, 0, len(ts))
	names := make(map[string]bool, len(ts))
	for i, t := range ts {
		f := fmt.Sprintf("destTables[%d]", i)
		switch {
		case t.Name == "":
			return nil, fieldErr(f+".name", "empty; every destination table needs a name")
		case names[t.Name]:
			return nil, fieldErr(f+".name", "destination table %q is listed twice", t.Name)
		}
		names[t.Name] = true
		gt := DestTable{Name: t.Name, Rules: make([]DestRule, 0, len(t.Rules))}
		seen := make(map[netip.Prefix]int, len(t.Rules))
		for j, r := range t.Rules {
			ff := fmt.Sprintf("%s.rules[%d]", f, j)
			p := r.Prefix
			if !p.IsValid() || p.Addr().Zone() != "" {
				return nil, fieldErr(ff+".prefix", "%v is not a plain IPv4 or IPv6 prefix", p)
			}
			if p.Addr().Is4In6() {
				if p.Bits() < 96 {
					return nil, fieldErr(ff+".prefix", "%v is shorter than the IPv4-mapped prefix", p)
				}
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			if p.Masked() != p {
				return nil, fieldErr(ff+".prefix", "%v has host bits set; give %v", r.Prefix, p.Masked())
			}
			if k, dup := seen[p]; dup {
				return nil, fieldErr(ff+".prefix", "%v is also rule %d of the table; a network has one rule", p, k)
			}
			seen[p] = j
			switch {
			case r.Exclude && r.Policy != "":
				return nil, fieldErr(ff+".policy", "%q on an exclusion; an exclusion names no policy", r.Policy)
			case !r.Exclude && r.Policy == "":
				return nil, fieldErr(ff+".policy", "empty; name the policy serving %v, or make it an exclusion", p)
			case !r.Exclude && !policies[r.Policy]:
				return nil, fieldErr(ff+".policy", "%q is not in policies", r.Policy)
			}
			gt.Rules = append(gt.Rules, DestRule{Prefix: p, Policy: r.Policy, Exclude: r.Exclude})
		}
		out = append(out, gt)
	}
	return out, nil
}
