// Package lab builds Egret's network-namespace lab: worker nodes with pods,
// gateway nodes, a router and two outside echo servers, joined by a bridge in
// a namespace of its own. The demo, the end-to-end tests and the lab
// benchmark use it; docs/lab.md draws the topology.
//
// A Spec is the deterministic description of what to build (plain data);
// Up turns it into namespaces, links, routes and processes, Down removes
// everything with the lab's prefix, and Status reports what is running.
package lab

import (
	"fmt"
	"net/netip"
	"regexp"
)

// Fixed parameters of the lab's tunnel and outside server.
const (
	// VNI is the VXLAN network identifier used between workers and gateways.
	VNI = 100
	// VXLANPort is the VXLAN UDP destination port (IANA).
	VXLANPort = 4789
	// TunnelMTU is the MTU of the tunnel devices and of the pods' links:
	// 1500 on the fabric minus 50 bytes of VXLAN over IPv4 (outer IPv4 20,
	// UDP 8, VXLAN 8, inner Ethernet 14). IPv6 inside the tunnel uses the
	// same IPv4 underlay, so the same MTU.
	TunnelMTU = 1450
	// TunnelMTU6 is TunnelMTU over an IPv6 underlay: the outer IPv6 header
	// is 40 bytes, 20 more than IPv4's, so VXLAN costs 70 bytes.
	TunnelMTU6 = 1430
	// UnderlayIPv4 and UnderlayIPv6 name the lab's two variants: the
	// dual-stack lab whose nodes and VTEPs use IPv4 (DefaultSpec), and the
	// IPv6-only lab (IPv6Spec).
	UnderlayIPv4 = "ipv4"
	UnderlayIPv6 = "ipv6"
	// HTTPPort and UDPPort are the echo server's ports.
	HTTPPort = 8080
	UDPPort  = 8081
	// DefaultName is the namespace prefix of `egret lab up` without --name.
	DefaultName = "egl"
	// RunRoot holds one folder per lab with pid files, logs, gateway configs
	// and the topology state.
	RunRoot = "/run/egret-lab"
)

// Spec describes a lab. Build one with DefaultSpec or IPv6Spec (NewSpec
// picks by underlay); the zero value is not usable.
//
// The fields without a 6 hold the lab's primary family, the family of
// NodeSubnet: IPv4 in the default lab, IPv6 in the IPv6-only lab, which
// leaves every field with a 6 unset.
type Spec struct {
	// Name prefixes every namespace ("<name>-w1") and names the run folder.
	Name         string
	NodeSubnet   netip.Prefix // fabric: node eth0 addresses and egress IPs
	NodeSubnet6  netip.Prefix // the fabric's IPv6 subnet: node addresses and IPv6 egress IPs
	TunnelSubnet netip.Prefix // inner addresses of the VXLAN devices
	Router       Router
	Server       Server
	// Server2 is the second outside echo server, in a network of its own
	// behind the router (Router.Outside2), so that objects can choose the
	// source by destination. A spec without one leaves it zero.
	Server2 Server
	// Controller is the namespace on the fabric where managed mode runs
	// `egret controller` (built in every mode, empty outside managed).
	Controller Controller
	// KubeNamespaces are the Kubernetes namespaces of the pods, with the
	// labels EgressIP namespace selectors match (managed mode).
	KubeNamespaces []KubeNamespace
	Workers        []WorkerNode
	Gateways       []Gateway
	Policies       []Policy
	// GatewayQueues is the number of receive and transmit queues of each
	// gateway's eth0 (a multi-queue veth; 0 or 1: one). The data-plane
	// benchmark's two-queue scenario sets it.
	GatewayQueues int
}

// Router joins the fabric to the outside network; it is every node's default gateway.
type Router struct {
	Name    string
	IP      netip.Addr // on eth0, in NodeSubnet
	Outside netip.Prefix
	OutIP   netip.Addr // on eth1, towards the server
	// IP6, Outside6 and OutIP6 are the IPv6 counterparts.
	IP6      netip.Addr
	Outside6 netip.Prefix
	OutIP6   netip.Addr
	// Outside2 and OutIP2 (on eth2, towards Server2), Outside2v6 and
	// OutIP2v6 are the same for the second server's network.
	Outside2   netip.Prefix
	OutIP2     netip.Addr
	Outside2v6 netip.Prefix
	OutIP2v6   netip.Addr
}

// Server is an outside echo server.
type Server struct {
	Name string
	IP   netip.Addr
	IP6  netip.Addr
	// Excluded is a further address of the server, in the family of IP,
	// answered by the same echo service: the destination the lab's example
	// objects exclude (egret.io/exclude), so that traffic to it leaves as
	// the node while traffic to IP leaves as an egress IP. Optional.
	Excluded netip.Addr
}

// Controller is the control-plane namespace on the fabric.
type Controller struct {
	Name string
	IP   netip.Addr // on eth0, in NodeSubnet
	IP6  netip.Addr // on eth0, in NodeSubnet6
}

// KubeNamespace is a Kubernetes namespace object of the managed mode.
type KubeNamespace struct {
	Name   string
	Labels map[string]string
}

// WorkerNode is a worker node with its pods.
type WorkerNode struct {
	Name       string
	IP         netip.Addr // eth0 and VTEP
	IP6        netip.Addr // eth0's IPv6 address in the default lab (its VTEP is IP)
	TunnelIP   netip.Addr
	TunnelMAC  [6]byte
	PodSubnet  netip.Prefix // on the worker's cni0 bridge; .1 is the pods' gateway
	PodSubnet6 netip.Prefix // IPv6 on cni0; ::1 is the pods' gateway
	Pods       []Pod
}

// Pod is one pod: a namespace with eth0 on its worker's cni0 bridge.
type Pod struct {
	Name string // unique in the lab, e.g. "w1-p1"
	IP   netip.Addr
	// IP6 is the pod's IPv6 address in its worker's PodSubnet6; the zero
	// Addr for an IPv4-only pod.
	IP6    netip.Addr
	Policy string // "" when no policy selects the pod
	// KubeNamespace and Labels are the pod object's namespace and labels
	// in managed mode, where the EgressIP selectors decide (Policy then
	// names the object expected to select the pod).
	KubeNamespace string
	Labels        map[string]string
}

// Gateway is an egress gateway node.
type Gateway struct {
	Name      string
	IP        netip.Addr // eth0 and VTEP
	IP6       netip.Addr // eth0's IPv6 address, in NodeSubnet6
	TunnelIP  netip.Addr
	TunnelMAC [6]byte
}

// Policy is one EgressIP object: its egress IPs and the gateway hosting each.
type Policy struct {
	Name      string
	EgressIPs []netip.Addr
	Hosts     []string // Hosts[i] is the gateway hosting EgressIPs[i]
}

var mustAddr = netip.MustParseAddr

func tunnelMAC(last byte) [6]byte { return [6]byte{0x02, 0x65, 0x67, 0x00, 0x00, last} }

// DefaultSpec is the topology: workers w1 and w2 with pods, gateways
// g1–g3, policy "blue" selecting w1-p1 and w2-p1 (egress IP 192.0.2.101 on
// g1), policy "green" selecting w1-p2 (192.0.2.102 on g2), policy "dual"
// selecting the dual-stack pod w1-p3 (192.0.2.104 on g2 in the static
// modes; managed mode adds its IPv6 egress IP), w2-p2 (dual-stack too)
// selected by none, w2-p3 selected by none in the static modes and by
// destination in managed mode (deploy/examples/lab/partner.yaml), g3
// spare. A second server, srv2, sits in a network of its own
// (203.0.113.0/24, 2001:db8:5200::/64). Every node, the router and the
// servers are dual-stack; the VTEPs stay IPv4 (IPv6 inside the tunnel).
// Only documentation and benchmark ranges are used (2001:db8::/32 for
// IPv6).
func DefaultSpec(name string) (*Spec, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	s := &Spec{
		Name:         name,
		NodeSubnet:   netip.MustParsePrefix("192.0.2.0/24"),
		NodeSubnet6:  netip.MustParsePrefix("2001:db8:2::/64"),
		TunnelSubnet: netip.MustParsePrefix("198.19.0.0/24"),
		Router: Router{Name: "rtr", IP: mustAddr("192.0.2.1"),
			Outside: netip.MustParsePrefix("198.51.100.0/24"), OutIP: mustAddr("198.51.100.1"),
			IP6: mustAddr("2001:db8:2::1"), Outside6: netip.MustParsePrefix("2001:db8:5100::/64"), OutIP6: mustAddr("2001:db8:5100::1"),
			Outside2: netip.MustParsePrefix("203.0.113.0/24"), OutIP2: mustAddr("203.0.113.1"),
			Outside2v6: netip.MustParsePrefix("2001:db8:5200::/64"), OutIP2v6: mustAddr("2001:db8:5200::1")},
		Server:     Server{Name: "srv", IP: mustAddr("198.51.100.10"), IP6: mustAddr("2001:db8:5100::10")},
		Server2:    Server{Name: "srv2", IP: mustAddr("203.0.113.10"), IP6: mustAddr("2001:db8:5200::10"), Excluded: mustAddr("203.0.113.11")},
		Controller: Controller{Name: "ctl", IP: mustAddr("192.0.2.2"), IP6: mustAddr("2001:db8:2::2")},
		KubeNamespaces: []KubeNamespace{
			{Name: "shop", Labels: map[string]string{"team": "shop"}},
			{Name: "billing", Labels: map[string]string{"team": "billing"}},
			{Name: "qa", Labels: map[string]string{"env": "qa"}},
			{Name: "partner", Labels: map[string]string{"team": "partner"}},
		},
		Policies: []Policy{
			{Name: "blue", EgressIPs: []netip.Addr{mustAddr("192.0.2.101")}, Hosts: []string{"g1"}},
			{Name: "green", EgressIPs: []netip.Addr{mustAddr("192.0.2.102")}, Hosts: []string{"g2"}},
			{Name: "dual", EgressIPs: []netip.Addr{mustAddr("192.0.2.104")}, Hosts: []string{"g2"}},
		},
	}
	for i := 1; i <= 2; i++ {
		s.Workers = append(s.Workers, WorkerNode{
			Name:       fmt.Sprintf("w%d", i),
			IP:         netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}),
			IP6:        mustAddr(fmt.Sprintf("2001:db8:2::%d", 10+i)),
			TunnelIP:   netip.AddrFrom4([4]byte{198, 19, 0, byte(10 + i)}),
			TunnelMAC:  tunnelMAC(byte(10 + i)),
			PodSubnet:  netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24),
			PodSubnet6: netip.MustParsePrefix(fmt.Sprintf("2001:db8:18:%d::/64", i)),
		})
	}
	w1, w2 := &s.Workers[0], &s.Workers[1]
	// Managed mode: deploy/examples/lab selects app=web in team=shop (blue),
	// all of team=billing (green) and egressip=ds in env=qa (dual); w2-p2
	// is in shop but not app=web.
	web := map[string]string{"app": "web"}
	w1.Pods = []Pod{
		{Name: "w1-p1", IP: mustAddr("198.18.1.2"), Policy: "blue", KubeNamespace: "shop", Labels: web},
		{Name: "w1-p2", IP: mustAddr("198.18.1.3"), Policy: "green", KubeNamespace: "billing", Labels: map[string]string{"app": "invoices"}},
		{Name: "w1-p3", IP: mustAddr("198.18.1.4"), IP6: mustAddr("2001:db8:18:1::4"), Policy: "dual", KubeNamespace: "qa", Labels: map[string]string{"egressip": "ds"}}}
	w2.Pods = []Pod{
		{Name: "w2-p1", IP: mustAddr("198.18.2.2"), Policy: "blue", KubeNamespace: "shop", Labels: web},
		{Name: "w2-p2", IP: mustAddr("198.18.2.3"), IP6: mustAddr("2001:db8:18:2::3"), KubeNamespace: "shop", Labels: map[string]string{"app": "batch"}},
		// Managed mode: partner-a and partner-b select it by destination
		// (deploy/examples/lab/partner.yaml); the static modes leave it
		// with its node's address.
		{Name: "w2-p3", IP: mustAddr("198.18.2.4"), KubeNamespace: "partner", Labels: map[string]string{"app": "api"}}}
	for i := 1; i <= 3; i++ {
		s.Gateways = append(s.Gateways, Gateway{
			Name:      fmt.Sprintf("g%d", i),
			IP:        netip.AddrFrom4([4]byte{192, 0, 2, byte(20 + i)}),
			IP6:       mustAddr(fmt.Sprintf("2001:db8:2::%d", 20+i)),
			TunnelIP:  netip.AddrFrom4([4]byte{198, 19, 0, byte(20 + i)}),
			TunnelMAC: tunnelMAC(byte(20 + i)),
		})
	}
	return s, s.Validate()
}

// IPv6Spec is DefaultSpec with IPv6 only: nodes, VTEPs, router, server and
// pods have IPv6 addresses only (the same member names and host numbers,
// in the IPv6 ranges of the default lab), so VXLAN runs over an IPv6
// underlay and the pods' MTU is TunnelMTU6. The static policies are blue
// (2001:db8:2::101 on g1) for w1-p1 and w2-p1 and green (2001:db8:2::102
// on g2) for w1-p2; w1-p3 and w2-p2 are selected by none (managed mode
// applies deploy/examples/lab/ipv6, which selects the same pods). The
// second server is 2001:db8:5200::10; there is no w2-p3 and no
// per-destination object.
func IPv6Spec(name string) (*Spec, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	a6 := func(f string, n ...any) netip.Addr { return mustAddr(fmt.Sprintf(f, n...)) }
	s := &Spec{
		Name:         name,
		NodeSubnet:   netip.MustParsePrefix("2001:db8:2::/64"),
		TunnelSubnet: netip.MustParsePrefix("2001:db8:19::/64"),
		Router: Router{Name: "rtr", IP: mustAddr("2001:db8:2::1"),
			Outside: netip.MustParsePrefix("2001:db8:5100::/64"), OutIP: mustAddr("2001:db8:5100::1"),
			Outside2: netip.MustParsePrefix("2001:db8:5200::/64"), OutIP2: mustAddr("2001:db8:5200::1")},
		Server:     Server{Name: "srv", IP: mustAddr("2001:db8:5100::10")},
		Server2:    Server{Name: "srv2", IP: mustAddr("2001:db8:5200::10"), Excluded: mustAddr("2001:db8:5200::11")},
		Controller: Controller{Name: "ctl", IP: mustAddr("2001:db8:2::2")},
		KubeNamespaces: []KubeNamespace{
			{Name: "shop", Labels: map[string]string{"team": "shop"}},
			{Name: "billing", Labels: map[string]string{"team": "billing"}},
			{Name: "qa", Labels: map[string]string{"env": "qa"}},
		},
		Policies: []Policy{
			{Name: "blue", EgressIPs: []netip.Addr{mustAddr("2001:db8:2::101")}, Hosts: []string{"g1"}},
			{Name: "green", EgressIPs: []netip.Addr{mustAddr("2001:db8:2::102")}, Hosts: []string{"g2"}},
		},
	}
	web := map[string]string{"app": "web"}
	pods := [][]Pod{
		{{Name: "w1-p1", IP: a6("2001:db8:18:1::2"), Policy: "blue", KubeNamespace: "shop", Labels: web},
			{Name: "w1-p2", IP: a6("2001:db8:18:1::3"), Policy: "green", KubeNamespace: "billing", Labels: map[string]string{"app": "invoices"}},
			{Name: "w1-p3", IP: a6("2001:db8:18:1::4"), KubeNamespace: "qa", Labels: map[string]string{"egressip": "ds"}}},
		{{Name: "w2-p1", IP: a6("2001:db8:18:2::2"), Policy: "blue", KubeNamespace: "shop", Labels: web},
			{Name: "w2-p2", IP: a6("2001:db8:18:2::3"), KubeNamespace: "shop", Labels: map[string]string{"app": "batch"}}},
	}
	for i := 1; i <= 2; i++ {
		s.Workers = append(s.Workers, WorkerNode{
			Name:      fmt.Sprintf("w%d", i),
			IP:        a6("2001:db8:2::%d", 10+i),
			TunnelIP:  a6("2001:db8:19::%d", 10+i),
			TunnelMAC: tunnelMAC(byte(10 + i)),
			PodSubnet: netip.MustParsePrefix(fmt.Sprintf("2001:db8:18:%d::/64", i)),
			Pods:      pods[i-1],
		})
	}
	for i := 1; i <= 3; i++ {
		s.Gateways = append(s.Gateways, Gateway{
			Name:      fmt.Sprintf("g%d", i),
			IP:        a6("2001:db8:2::%d", 20+i),
			TunnelIP:  a6("2001:db8:19::%d", 20+i),
			TunnelMAC: tunnelMAC(byte(20 + i)),
		})
	}
	return s, s.Validate()
}

// NewSpec returns the lab of underlay: DefaultSpec for "ipv4" (or ""),
// IPv6Spec for "ipv6".
func NewSpec(name, underlay string) (*Spec, error) {
	switch underlay {
	case UnderlayIPv4, "":
		return DefaultSpec(name)
	case UnderlayIPv6:
		return IPv6Spec(name)
	}
	return nil, fmt.Errorf("underlay %q: use %s or %s", underlay, UnderlayIPv4, UnderlayIPv6)
}

// IPv6Only reports whether the lab's primary family is IPv6 (IPv6Spec).
func (s *Spec) IPv6Only() bool { return s.NodeSubnet.Addr().Is6() }

// Underlay names the lab's variant: UnderlayIPv6 or UnderlayIPv4.
func (s *Spec) Underlay() string {
	if s.IPv6Only() {
		return UnderlayIPv6
	}
	return UnderlayIPv4
}

// PodMTU is the MTU of the tunnel devices and the pods' links.
func (s *Spec) PodMTU() int {
	if s.IPv6Only() {
		return TunnelMTU6
	}
	return TunnelMTU
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// ValidName checks a lab name: it prefixes namespace names and must not
// contain the separator "-" so that one lab's prefix never matches another's.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("lab name %q: use 1–12 lower-case letters and digits, starting with a letter", name)
	}
	return nil
}

// NS is the network namespace name of a lab member ("fabric", "w1", "w1-p1", "g1", "rtr", "srv").
func (s *Spec) NS(member string) string { return s.Name + "-" + member }

// Servers are the outside echo servers: Server, then Server2 when the spec
// has one.
func (s *Spec) Servers() []Server {
	out := []Server{s.Server}
	if s.Server2.Name != "" {
		out = append(out, s.Server2)
	}
	return out
}

// Namespaces lists every namespace of the lab, fabric first.
func (s *Spec) Namespaces() []string {
	out := []string{s.NS("fabric"), s.NS(s.Router.Name), s.NS(s.Server.Name)}
	if s.Server2.Name != "" {
		out = append(out, s.NS(s.Server2.Name))
	}
	if s.Controller.Name != "" {
		out = append(out, s.NS(s.Controller.Name))
	}
	for _, w := range s.Workers {
		out = append(out, s.NS(w.Name))
		for _, p := range w.Pods {
			out = append(out, s.NS(p.Name))
		}
	}
	for _, g := range s.Gateways {
		out = append(out, s.NS(g.Name))
	}
	return out
}

// Policy returns the named policy, or nil.
func (s *Spec) Policy(name string) *Policy {
	for i := range s.Policies {
		if s.Policies[i].Name == name {
			return &s.Policies[i]
		}
	}
	return nil
}

// Gateway returns the named gateway, or nil.
func (s *Spec) Gateway(name string) *Gateway {
	for i := range s.Gateways {
		if s.Gateways[i].Name == name {
			return &s.Gateways[i]
		}
	}
	return nil
}

// Hosted lists the egress IPs a gateway hosts, with their policies.
func (s *Spec) Hosted(gw string) (ips []netip.Addr, policies []string) {
	for _, p := range s.Policies {
		for i, h := range p.Hosts {
			if h == gw {
				ips = append(ips, p.EgressIPs[i])
				policies = append(policies, p.Name)
			}
		}
	}
	return ips, policies
}

// Steering says where a pod's external traffic goes: the egress IP it is
// expected to leave with and the gateway hosting it, or ok=false when no
// policy selects the pod (it leaves with its node's IP). With several egress
// IPs a flow may use any of them; the lab steers a pod to the first.
func (s *Spec) Steering(p Pod) (egress netip.Addr, gw *Gateway, ok bool) {
	pol := s.Policy(p.Policy)
	if pol == nil || len(pol.EgressIPs) == 0 {
		return netip.Addr{}, nil, false
	}
	return pol.EgressIPs[0], s.Gateway(pol.Hosts[0]), true
}

// ExpectedSource is the source address the outside server should see for a
// pod: its egress IP when steered, its node's IP otherwise.
func (s *Spec) ExpectedSource(w WorkerNode, p Pod) netip.Addr {
	if e, _, ok := s.Steering(p); ok {
		return e
	}
	return w.IP
}

// validateServer2 checks the second server and the router's link to it:
// its own member name, addresses in a network that overlaps neither the
// first server's nor the fabric's (so that a destination network tells
// the two apart), each address once.
func (s *Spec) validateServer2(names map[string]bool, claim func(netip.Addr, string) error, claim6 func(netip.Addr, netip.Prefix, string) error) error {
	v, r := s.Server2, s.Router
	if v.Name == "" {
		if v.IP.IsValid() || r.OutIP2.IsValid() {
			return fmt.Errorf("lab spec: the second server has addresses but no name")
		}
		return nil
	}
	if names[v.Name] {
		return fmt.Errorf("lab spec: member name %q is used twice", v.Name)
	}
	names[v.Name] = true
	if !r.Outside2.IsValid() || r.Outside2.Overlaps(r.Outside) || r.Outside2.Overlaps(s.NodeSubnet) ||
		!r.Outside2.Contains(v.IP) || !r.Outside2.Contains(r.OutIP2) || (v.Excluded.IsValid() && !r.Outside2.Contains(v.Excluded)) {
		return fmt.Errorf("lab spec: server %s and the router's eth2 need addresses in %v, a network of their own", v.Name, r.Outside2)
	}
	if r.Outside2v6.IsValid() && r.Outside6.IsValid() && r.Outside2v6.Overlaps(r.Outside6) {
		return fmt.Errorf("lab spec: server %s's IPv6 network %v overlaps %v", v.Name, r.Outside2v6, r.Outside6)
	}
	for _, a := range []struct {
		ip  netip.Addr
		who string
	}{{r.OutIP2, "router eth2"}, {v.IP, "server " + v.Name}} {
		if err := claim(a.ip, a.who); err != nil {
			return err
		}
	}
	if v.Excluded.IsValid() {
		if err := claim(v.Excluded, "server "+v.Name+" (excluded address)"); err != nil {
			return err
		}
	}
	if err := claim6(r.OutIP2v6, r.Outside2v6, "router eth2"); err != nil {
		return err
	}
	return claim6(v.IP6, r.Outside2v6, "server "+v.Name)
}

// Validate checks the spec for the mistakes that would build a broken lab.
func (s *Spec) Validate() error {
	if err := ValidName(s.Name); err != nil {
		return err
	}
	if s.GatewayQueues < 0 || s.GatewayQueues > 16 {
		return fmt.Errorf("lab spec: GatewayQueues %d is outside 0–16", s.GatewayQueues)
	}
	seen := map[netip.Addr]string{}
	claim := func(a netip.Addr, who string) error {
		if !a.IsValid() {
			return fmt.Errorf("lab spec: %s has no address", who)
		}
		if prev, dup := seen[a]; dup {
			return fmt.Errorf("lab spec: address %v is used by %s and %s", a, prev, who)
		}
		seen[a] = who
		return nil
	}
	// IPv6 is optional per member; an address that is set must be IPv6,
	// lie in its subnet and be unique.
	claim6 := func(a netip.Addr, subnet netip.Prefix, who string) error {
		if !a.IsValid() {
			return nil
		}
		if !a.Is6() || a.Is4In6() || !subnet.IsValid() || !subnet.Contains(a) {
			return fmt.Errorf("lab spec: %s: IPv6 address %v is not in %v", who, a, subnet)
		}
		return claim(a, who+" (IPv6)")
	}
	if s.IPv6Only() && (s.NodeSubnet6.IsValid() || s.Router.IP6.IsValid() || s.Server.IP6.IsValid() || s.Controller.IP6.IsValid() ||
		s.Server2.IP6.IsValid() || s.Router.OutIP2v6.IsValid()) {
		return fmt.Errorf("lab spec: an IPv6 node subnet (%v) makes IPv6 the primary family: leave the IPv6 fields (NodeSubnet6, IP6...) unset", s.NodeSubnet)
	}
	if s.TunnelSubnet.Addr().Is6() != s.IPv6Only() {
		return fmt.Errorf("lab spec: the tunnel subnet %v and the node subnet %v must be of one family", s.TunnelSubnet, s.NodeSubnet)
	}
	names := map[string]bool{"fabric": true, s.Router.Name: true, s.Server.Name: true}
	for _, a := range []struct {
		ip     netip.Addr
		subnet netip.Prefix
		who    string
	}{{s.Router.IP6, s.NodeSubnet6, "router eth0"}, {s.Router.OutIP6, s.Router.Outside6, "router eth1"},
		{s.Server.IP6, s.Router.Outside6, "server"}, {s.Controller.IP6, s.NodeSubnet6, "controller"}} {
		if err := claim6(a.ip, a.subnet, a.who); err != nil {
			return err
		}
	}
	if c := s.Controller; c.Name != "" {
		if names[c.Name] || !s.NodeSubnet.Contains(c.IP) {
			return fmt.Errorf("lab spec: controller %q needs its own name and an address in %v", c.Name, s.NodeSubnet)
		}
		names[c.Name] = true
		if err := claim(c.IP, "controller"); err != nil {
			return err
		}
	}
	name := func(n string) error {
		if n == "" || names[n] {
			return fmt.Errorf("lab spec: member name %q is empty or used twice", n)
		}
		names[n] = true
		return nil
	}
	for _, a := range []struct {
		ip  netip.Addr
		who string
	}{{s.Router.IP, "router eth0"}, {s.Router.OutIP, "router eth1"}, {s.Server.IP, "server"}} {
		if err := claim(a.ip, a.who); err != nil {
			return err
		}
	}
	if !s.NodeSubnet.Contains(s.Router.IP) || !s.Router.Outside.Contains(s.Server.IP) || !s.Router.Outside.Contains(s.Router.OutIP) {
		return fmt.Errorf("lab spec: router and server addresses must lie in %v and %v", s.NodeSubnet, s.Router.Outside)
	}
	if err := s.validateServer2(names, claim, claim6); err != nil {
		return err
	}
	for _, g := range s.Gateways {
		if err := name(g.Name); err != nil {
			return err
		}
		if !s.NodeSubnet.Contains(g.IP) || !s.TunnelSubnet.Contains(g.TunnelIP) {
			return fmt.Errorf("lab spec: gateway %s: addresses must lie in %v and %v", g.Name, s.NodeSubnet, s.TunnelSubnet)
		}
		if err := claim(g.IP, g.Name); err != nil {
			return err
		}
		if err := claim(g.TunnelIP, g.Name+" tunnel"); err != nil {
			return err
		}
		if err := claim6(g.IP6, s.NodeSubnet6, g.Name); err != nil {
			return err
		}
	}
	for _, w := range s.Workers {
		if err := name(w.Name); err != nil {
			return err
		}
		if !s.NodeSubnet.Contains(w.IP) || !s.TunnelSubnet.Contains(w.TunnelIP) {
			return fmt.Errorf("lab spec: worker %s: addresses must lie in %v and %v", w.Name, s.NodeSubnet, s.TunnelSubnet)
		}
		if err := claim(w.IP, w.Name); err != nil {
			return err
		}
		if err := claim(w.TunnelIP, w.Name+" tunnel"); err != nil {
			return err
		}
		if err := claim6(w.IP6, s.NodeSubnet6, w.Name); err != nil {
			return err
		}
		for _, p := range w.Pods {
			if err := name(p.Name); err != nil {
				return err
			}
			if !w.PodSubnet.Contains(p.IP) || p.IP == w.PodSubnet.Addr().Next() {
				return fmt.Errorf("lab spec: pod %s: %v is not a pod address of %v", p.Name, p.IP, w.PodSubnet)
			}
			if err := claim(p.IP, p.Name); err != nil {
				return err
			}
			if p.IP6.IsValid() && s.IPv6Only() {
				return fmt.Errorf("lab spec: pod %s: an IPv6-only lab's pods have one address (IP)", p.Name)
			}
			if p.IP6.IsValid() && p.IP6 == w.PodSubnet6.Addr().Next() {
				return fmt.Errorf("lab spec: pod %s: %v is the pods' IPv6 gateway on %s", p.Name, p.IP6, w.Name)
			}
			if err := claim6(p.IP6, w.PodSubnet6, p.Name); err != nil {
				return err
			}
			if p.Policy != "" && s.Policy(p.Policy) == nil {
				return fmt.Errorf("lab spec: pod %s names policy %q, which does not exist", p.Name, p.Policy)
			}
		}
	}
	for _, p := range s.Policies {
		if len(p.EgressIPs) != len(p.Hosts) {
			return fmt.Errorf("lab spec: policy %s: every egress IP needs exactly one hosting gateway", p.Name)
		}
		for i, ip := range p.EgressIPs {
			if !s.NodeSubnet.Contains(ip) {
				return fmt.Errorf("lab spec: policy %s: egress IP %v is outside the node subnet %v", p.Name, ip, s.NodeSubnet)
			}
			if err := claim(ip, "egress IP of "+p.Name); err != nil {
				return err
			}
			if s.Gateway(p.Hosts[i]) == nil {
				return fmt.Errorf("lab spec: policy %s: gateway %q does not exist", p.Name, p.Hosts[i])
			}
		}
	}
	return nil
}
