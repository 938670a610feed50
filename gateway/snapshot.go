package gateway

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
)

// Config is the plain data a Snapshot is built from.
type Config struct {
	// VTEPs are this gateway's tunnel addresses, at most one per family:
	// tunnel packets must be addressed to one, and replies are sent from the
	// one of the node's family.
	VTEPs []netip.Addr
	// InnerMAC is the gateway's MAC on the tunnel (inner source of replies).
	InnerMAC [6]byte
	// RouterV4 and RouterV6 are the source addresses of ICMP errors the
	// gateway itself sends to pods (time exceeded, too big). Optional: without
	// one, such packets are dropped and counted instead.
	RouterV4, RouterV6 netip.Addr
	// Tunnels are the only encapsulations accepted, at least one and at
	// most MaxTunnels: a tunnel packet to a VTEP of another type or with
	// another VNI is dropped (DropTunnelMismatch). Only these pairs are
	// ever numbered for flows' return paths, so no sender can fill that
	// numbering with VNIs of its choice.
	Tunnels []TunnelVNI
	// Nodes are the worker nodes allowed to send tunnel traffic.
	Nodes []Node
	// Policies are the egress policies with the egress IPs hosted here.
	Policies []Policy
	// DestTables are the destination rules pods name by Pod.Dest, each
	// compiled once however many pods share it.
	DestTables []DestTable
	// DeniedDestinations are destinations a pod may not open a flow to
	// (DropDeniedDestination), besides DefaultDeniedDestinations and every
	// node's and this gateway's VTEP, which are always denied: the cluster's
	// node networks belong here. AllowedDestinations override all of them
	// (e.g. a service on a node subnet that pods must reach).
	DeniedDestinations  []netip.Prefix
	AllowedDestinations []netip.Prefix
	// Routes is the next-hop table, both to the outside and to node VTEPs:
	// the kernel's in production (route.NewCache), a fixed one otherwise
	// (route.NewStatic).
	Routes *route.Cache
}

// Node is a worker node and its pods.
type Node struct {
	Name string
	// VTEP is the node's tunnel address (outer source of its packets).
	VTEP netip.Addr
	// InnerMAC is the MAC of the node's tunnel device (inner destination of replies).
	InnerMAC [6]byte
	// Pods are the pods that live on the node.
	Pods []Pod
	// Local marks the gateway's own node, whose frames come only through
	// the local port (Processor.ProcessLocal): frames from its VTEP on any
	// other port are dropped as from an unknown VTEP, and its VTEP stands
	// for the gateway's own VTEP in a flow's portable ReturnPath.
	Local bool
}

// Pod is one pod address and the policy that selects it ("" for none).
type Pod struct {
	Addr   netip.Addr
	Policy string
	// Dest names the pod's table in Config.DestTables, "" for none: then
	// every destination uses Policy. With one, a new flow uses the policy
	// of the table's rule for its destination, and Policy only where no
	// rule decides (DropDestNotOwned where that leaves none).
	Dest string
	// Ref names the pod, when the configuration knows it: drop samples
	// and the NAT log report it. The packet path never reads it.
	Ref natlog.Pod
}

// Policy is an egress policy (one EgressIP object) and the egress IPs of it
// that this gateway hosts.
type Policy struct {
	Name      string
	EgressIPs []netip.Addr
}

// Snapshot is an immutable, validated configuration. Lookups allocate nothing.
type Snapshot struct {
	vtep     [2][16]byte // by family index: 0 IPv4, 1 IPv6
	hasVTEP  [2]bool
	router   [2][16]byte
	hasRoute [2]bool
	innerMAC [6]byte
	tunnels  []tunnelID // accepted encapsulations, 1 to MaxTunnels

	nodes      []snapNode
	localNode  int32    // index in nodes of the local node; -1: none
	localWrap  snapNode // the local node's frames as they arrive (WrapLocal)
	nodeByVTEP addrTable[int32]
	pods       addrTable[snapPod]
	policies   []snapPolicy
	dests      []snapDest
	hosted     addrTable[struct{}]
	routes     *route.Cache
	destFilter // destinations no flow may be opened to (deny.go)
	// podNames names the pods the configuration names, by address: read
	// only for drop samples (dropsample.go) and by the NAT log's writer,
	// off the packet path.
	podNames *natlog.Pods
}

type snapNode struct {
	name     string
	vtep     [16]byte
	innerMAC [6]byte
	fam      uint8
	encap    encapTemplate // headers of packets sent to the node
}

type snapPod struct {
	vtep   [16]byte // the node's VTEP: one compare settles the VTEP and anti-spoof checks
	node   int32
	policy int32 // -1: none (not selected, unless dest says otherwise)
	dest   int32 // index in Snapshot.dests; -1: none
}

type snapPolicy struct {
	name   string
	ips    [2][]nat.Addr // by family
	hosted bool          // some egress IP of it is hosted here
}

func famOf(a netip.Addr) uint8 {
	if a.Is4() {
		return 0
	}
	return 1
}

// NewSnapshot validates cfg and builds a Snapshot from it. The result shares
// nothing mutable with cfg.
func NewSnapshot(cfg Config) (*Snapshot, error) {
	if cfg.Routes == nil {
		return nil, errors.New("gateway config: Routes is nil; give a next-hop table")
	}
	if len(cfg.Tunnels) == 0 || len(cfg.Tunnels) > MaxTunnels {
		return nil, fmt.Errorf("gateway config: %d tunnels given; name 1 to %d (tunnel type, VNI) pairs to accept", len(cfg.Tunnels), MaxTunnels)
	}
	s := &Snapshot{innerMAC: cfg.InnerMAC, routes: cfg.Routes, localNode: -1}
	for _, t := range cfg.Tunnels {
		if (t.Tunnel != TunnelVXLAN && t.Tunnel != TunnelGeneve) || t.VNI >= 1<<24 {
			return nil, fmt.Errorf("gateway config: tunnel %d with VNI %d: use TunnelVXLAN or TunnelGeneve and a 24-bit VNI", t.Tunnel, t.VNI)
		}
		s.tunnels = append(s.tunnels, tunnelID{t.Tunnel, t.VNI})
	}
	nodeByVTEP := make(map[[16]byte]int32, len(cfg.Nodes))
	pods := make(map[[16]byte]snapPod)
	refs := make(map[netip.Addr]natlog.Pod)
	hosted := make(map[[16]byte]struct{})
	for _, v := range cfg.VTEPs {
		v = v.Unmap()
		if !v.IsValid() || v.IsUnspecified() || v.IsMulticast() {
			return nil, fmt.Errorf("gateway config: VTEP %v is not a unicast address", v)
		}
		f := famOf(v)
		if s.hasVTEP[f] {
			return nil, fmt.Errorf("gateway config: two VTEPs of one family (%v); give at most one IPv4 and one IPv6", v)
		}
		s.vtep[f], s.hasVTEP[f] = v.As16(), true
	}
	for i, r := range []netip.Addr{cfg.RouterV4, cfg.RouterV6} {
		if !r.IsValid() {
			continue
		}
		r = r.Unmap()
		if int(famOf(r)) != i {
			return nil, fmt.Errorf("gateway config: router address %v is of the wrong family", r)
		}
		s.router[i], s.hasRoute[i] = r.As16(), true
	}
	policyIdx := make(map[string]int32, len(cfg.Policies))
	for _, p := range cfg.Policies {
		if p.Name == "" {
			return nil, errors.New("gateway config: a policy has no name")
		}
		if _, dup := policyIdx[p.Name]; dup {
			return nil, fmt.Errorf("gateway config: policy %q is listed twice", p.Name)
		}
		sp := snapPolicy{name: p.Name}
		for _, ip := range p.EgressIPs {
			ip = ip.Unmap()
			if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLoopback() {
				return nil, fmt.Errorf("gateway config: policy %q: egress IP %v is not a usable unicast address", p.Name, ip)
			}
			k := ip.As16()
			if _, dup := hosted[k]; dup {
				return nil, fmt.Errorf("gateway config: egress IP %v is listed twice (an egress IP belongs to one policy)", ip)
			}
			if (s.hasVTEP[0] && k == s.vtep[0]) || (s.hasVTEP[1] && k == s.vtep[1]) {
				return nil, fmt.Errorf("gateway config: egress IP %v is also a VTEP of this gateway", ip)
			}
			hosted[k] = struct{}{}
			f := famOf(ip)
			sp.ips[f] = append(sp.ips[f], nat.Addr(k))
			sp.hosted = true
		}
		policyIdx[p.Name] = int32(len(s.policies))
		s.policies = append(s.policies, sp)
	}
	destIdx := make(map[string]int32, len(cfg.DestTables))
	for _, t := range cfg.DestTables {
		if t.Name == "" {
			return nil, errors.New("gateway config: a destination table has no name")
		}
		if _, dup := destIdx[t.Name]; dup {
			return nil, fmt.Errorf("gateway config: destination table %q is listed twice", t.Name)
		}
		d, err := newSnapDest(t, policyIdx)
		if err != nil {
			return nil, err
		}
		destIdx[t.Name] = int32(len(s.dests))
		s.dests = append(s.dests, d)
	}
	for _, n := range cfg.Nodes {
		v := n.VTEP.Unmap()
		if !v.IsValid() || v.IsUnspecified() || v.IsMulticast() {
			return nil, fmt.Errorf("gateway config: node %q: VTEP %v is not a unicast address", n.Name, n.VTEP)
		}
		f := famOf(v)
		if !s.hasVTEP[f] {
			return nil, fmt.Errorf("gateway config: node %q has an IPv%d VTEP but the gateway has no VTEP of that family", n.Name, 4+2*f)
		}
		k := v.As16()
		if _, dup := nodeByVTEP[k]; dup {
			return nil, fmt.Errorf("gateway config: node %q: VTEP %v is used by another node", n.Name, v)
		}
		idx := int32(len(s.nodes))
		if n.Local {
			if s.localNode >= 0 {
				return nil, fmt.Errorf("gateway config: node %q is local, and so is node %q; only the gateway's own node is", n.Name, s.nodes[s.localNode].name)
			}
			s.localNode = idx
		}
		nodeByVTEP[k] = idx
		s.nodes = append(s.nodes, snapNode{name: n.Name, vtep: k, innerMAC: n.InnerMAC, fam: f,
			encap: newEncapTemplate(f, &s.vtep[f], &k, &s.innerMAC, &n.InnerMAC)})
		if n.Local {
			s.localWrap = snapNode{name: n.Name, vtep: s.vtep[f], fam: f,
				encap: newEncapTemplate(f, &k, &s.vtep[f], &n.InnerMAC, &s.innerMAC)}
		}
		for _, p := range n.Pods {
			a := p.Addr.Unmap()
			if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
				return nil, fmt.Errorf("gateway config: node %q: pod address %v is not a unicast address", n.Name, p.Addr)
			}
			pk := a.As16()
			if _, dup := pods[pk]; dup {
				return nil, fmt.Errorf("gateway config: pod address %v is on two nodes or listed twice", a)
			}
			sp := snapPod{vtep: k, node: idx, policy: -1, dest: -1}
			if p.Dest != "" {
				di, ok := destIdx[p.Dest]
				if !ok {
					return nil, fmt.Errorf("gateway config: pod %v on node %q names destination table %q, which is not configured", a, n.Name, p.Dest)
				}
				sp.dest = di
			}
			if p.Policy != "" {
				pi, ok := policyIdx[p.Policy]
				if !ok {
					return nil, fmt.Errorf("gateway config: pod %v on node %q names policy %q, which is not configured", a, n.Name, p.Policy)
				}
				sp.policy = pi
			}
			pods[pk] = sp
			if p.Ref.Name != "" {
				refs[a] = p.Ref
			}
		}
	}
	for _, list := range [][]netip.Prefix{cfg.DeniedDestinations, cfg.AllowedDestinations} {
		for _, p := range list {
			if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				return nil, fmt.Errorf("gateway config: destination prefix %v is not a plain IPv4 or IPv6 prefix", p)
			}
		}
	}
	s.destFilter = newDestFilter(&cfg)
	s.nodeByVTEP = newAddrTable(nodeByVTEP)
	s.pods = newAddrTable(pods)
	s.hosted = newAddrTable(hosted)
	s.podNames = natlog.NewPods(refs)
	return s, nil
}

// PodNames names the pods behind the configuration's pod addresses: the
// table the NAT log's writer reads (natlog.Log.SetPods).
func (s *Snapshot) PodNames() *natlog.Pods { return s.podNames }

// Hosts reports whether a is an egress IP hosted by this snapshot.
func (s *Snapshot) Hosts(a netip.Addr) bool {
	k := a.Unmap().As16()
	return s.hosted.has(&k)
}

// accepts reports whether tunnel packets of type t with VNI vni are
// accepted. The list is short (one pair in most clusters).
func (s *Snapshot) accepts(t Tunnel, vni uint32) bool {
	for _, id := range s.tunnels {
		if id.kind == t && id.vni == vni {
			return true
		}
	}
	return false
}
