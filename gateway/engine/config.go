package engine

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/route"
)

// Defaults of the fields a config file may leave out.
const (
	DefaultBatch        = 64
	DefaultMode         = "auto"
	DefaultTunnel       = "vxlan"
	DefaultVXLANPort    = 4789
	DefaultGenevePort   = 6081
	DefaultConntrackMax = 1 << 20
)

// Config is the file `egret gateway --config` reads (YAML; the JSON names
// are the keys): the topology (the lab writes it from this type, docs/lab.md)
// plus the run-time settings that flags may also give. Plain data: Validate turns it
// into a gateway.Config.
type Config struct {
	// Node is this gateway's node name (for logs).
	Node string `json:"node,omitempty"`
	// Interfaces are the interfaces the gateway serves; one interface may
	// carry both tunnel and outside traffic.
	Interfaces []string `json:"interfaces"`
	// Mode is auto (AF_XDP, AF_PACKET where XDP cannot attach), afxdp or afpacket.
	Mode string `json:"mode,omitempty"`
	// Queues is the number of receive queues (one worker each); 0 takes the
	// first interface's RX queue count.
	Queues int `json:"queues,omitempty"`
	// Batch is how many frames one Process/Transmit call handles (32–64).
	Batch int `json:"batch,omitempty"`
	// LogFormat is text or json.
	LogFormat string `json:"logFormat,omitempty"`
	// MetricsAddr is where `egret gateway` serves /metrics, /healthz and
	// /readyz (metrics.DefaultGatewayAddr when empty; "off" disables).
	MetricsAddr string `json:"metricsAddr,omitempty"`
	// ConntrackMax bounds the flow table (memory is sized for it up front).
	ConntrackMax int `json:"conntrackMax,omitempty"`

	// VTEPs are the gateway's tunnel addresses, at most one per family.
	VTEPs []string `json:"vteps"`
	// InnerMAC is the gateway's MAC inside the tunnel.
	InnerMAC string `json:"innerMAC"`
	// RouterV4, RouterV6 are the sources of ICMP errors the gateway sends to pods.
	RouterV4 string `json:"routerV4,omitempty"`
	RouterV6 string `json:"routerV6,omitempty"`
	// Tunnel is vxlan or geneve; VNI and Port are its parameters.
	Tunnel string `json:"tunnel,omitempty"`
	VNI    int    `json:"vni,omitempty"`
	Port   int    `json:"port,omitempty"`

	// Nodes are the worker nodes allowed to send tunnel traffic.
	Nodes []Node `json:"nodes"`
	// Policies are the egress policies; EgressIPs lists only those hosted here.
	Policies []Policy `json:"policies"`
	// EgressIPsClaimed says the hosted egress IPs are already on the
	// interface (put there by someone else): the gateway neither claims nor
	// releases them.
	EgressIPsClaimed bool `json:"egressIPsClaimed,omitempty"`
}

// Node is a worker node.
type Node struct {
	Name     string `json:"name"`
	VTEP     string `json:"vtep"`
	InnerMAC string `json:"innerMAC"`
	Pods     []Pod  `json:"pods"`
}

// Pod is a pod of a node; Policy is "" when no policy selects it.
type Pod struct {
	Addr   string `json:"addr"`
	Policy string `json:"policy,omitempty"`
}

// Policy is an egress policy and the egress IPs of it hosted here.
type Policy struct {
	Name      string   `json:"name"`
	EgressIPs []string `json:"egressIPs"`
}

// LoadConfig reads and parses a config file; unknown keys are errors.
// It does not validate: apply flag overrides, then call Validate.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig parses YAML (or JSON) config data.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

// Settled is a validated Config: the data-plane configuration and the
// run-time settings with defaults applied.
type Settled struct {
	Node         string
	Interfaces   []string
	Mode         string
	Queues       int // 0: ask the first interface
	Batch        int
	LogFormat    string
	MetricsAddr  string
	ConntrackMax int
	Claim        bool // claim and release hosted egress IPs
	// Gateway is the data-plane configuration without Routes.
	Gateway gateway.Config
	// VTEPs and Hosted are the addresses the XDP program steers.
	VTEPs  []netip.Addr
	Hosted []netip.Addr
}

func fieldErr(field string, format string, a ...any) error {
	return fmt.Errorf("config field %s: %s", field, fmt.Sprintf(format, a...))
}

func parseAddr(field, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fieldErr(field, "%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fieldErr(field, "%q has a zone; give a plain address", s)
	}
	return a.Unmap(), nil
}

func parseMAC(field, s string) ([6]byte, error) {
	var m [6]byte
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return m, fieldErr(field, "%q is not an Ethernet MAC address (like 02:00:00:00:00:01)", s)
	}
	copy(m[:], hw)
	return m, nil
}

// Validate checks every field and returns the settled configuration; each
// error names the field at fault (e.g. nodes[1].pods[0].addr).
func (c *Config) Validate() (*Settled, error) {
	s := &Settled{Node: c.Node, Mode: c.Mode, Queues: c.Queues, Batch: c.Batch, LogFormat: c.LogFormat,
		MetricsAddr: c.MetricsAddr, ConntrackMax: c.ConntrackMax, Claim: !c.EgressIPsClaimed}
	if len(c.Interfaces) == 0 {
		return nil, fieldErr("interfaces", "no interface given; name at least one (or pass --iface)")
	}
	seen := map[string]bool{}
	for i, n := range c.Interfaces {
		if n == "" || len(n) >= 16 || strings.ContainsAny(n, "/ \t") {
			return nil, fieldErr(fmt.Sprintf("interfaces[%d]", i), "%q is not an interface name", n)
		}
		if seen[n] {
			return nil, fieldErr(fmt.Sprintf("interfaces[%d]", i), "%q is listed twice", n)
		}
		seen[n] = true
		s.Interfaces = append(s.Interfaces, n)
	}
	switch s.Mode {
	case "":
		s.Mode = DefaultMode
	case "auto", "afxdp", "afpacket":
	default:
		return nil, fieldErr("mode", "%q: use auto, afxdp or afpacket", c.Mode)
	}
	if s.Queues < 0 || s.Queues > 256 {
		return nil, fieldErr("queues", "%d: use 1–256 (or 0 for the interface's RX queue count)", c.Queues)
	}
	switch {
	case s.Batch == 0:
		s.Batch = DefaultBatch
	case s.Batch < 32 || s.Batch > 64:
		return nil, fieldErr("batch", "%d: use 32–64 frames", c.Batch)
	}
	switch s.LogFormat {
	case "":
		s.LogFormat = "text"
	case "text", "json":
	default:
		return nil, fieldErr("logFormat", "%q: use text or json", c.LogFormat)
	}
	if s.MetricsAddr != "" && s.MetricsAddr != "off" {
		if _, _, err := net.SplitHostPort(s.MetricsAddr); err != nil {
			return nil, fieldErr("metricsAddr", "%q is not host:port", c.MetricsAddr)
		}
	}
	switch {
	case s.ConntrackMax == 0:
		s.ConntrackMax = DefaultConntrackMax
	case s.ConntrackMax < 1024 || s.ConntrackMax > 1<<27:
		return nil, fieldErr("conntrackMax", "%d: use 1024–134217728 flows", c.ConntrackMax)
	}

	tun := c.Tunnel
	if tun == "" {
		tun = DefaultTunnel
	}
	wantPort := map[string]int{"vxlan": DefaultVXLANPort, "geneve": DefaultGenevePort}[tun]
	if wantPort == 0 {
		return nil, fieldErr("tunnel", "%q: use vxlan or geneve", c.Tunnel)
	}
	if c.Port != 0 && c.Port != wantPort {
		return nil, fieldErr("port", "%d: the XDP program steers %s on UDP %d only", c.Port, tun, wantPort)
	}
	if c.VNI < 0 || c.VNI > 1<<24-1 {
		return nil, fieldErr("vni", "%d: a VNI is 0–16777215", c.VNI)
	}

	g := &s.Gateway
	if len(c.VTEPs) == 0 {
		return nil, fieldErr("vteps", "no local VTEP address given")
	}
	for i, v := range c.VTEPs {
		a, err := parseAddr(fmt.Sprintf("vteps[%d]", i), v)
		if err != nil {
			return nil, err
		}
		if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
			return nil, fieldErr(fmt.Sprintf("vteps[%d]", i), "%v is not a unicast address", a)
		}
		for _, o := range g.VTEPs {
			if o.Is4() == a.Is4() {
				return nil, fieldErr(fmt.Sprintf("vteps[%d]", i), "%v: at most one VTEP per address family", a)
			}
		}
		g.VTEPs = append(g.VTEPs, a)
	}
	s.VTEPs = g.VTEPs
	var err error
	if g.InnerMAC, err = parseMAC("innerMAC", c.InnerMAC); err != nil {
		return nil, err
	}
	if c.RouterV4 != "" {
		if g.RouterV4, err = parseAddr("routerV4", c.RouterV4); err != nil {
			return nil, err
		}
		if !g.RouterV4.Is4() {
			return nil, fieldErr("routerV4", "%v is not an IPv4 address", g.RouterV4)
		}
	}
	if c.RouterV6 != "" {
		if g.RouterV6, err = parseAddr("routerV6", c.RouterV6); err != nil {
			return nil, err
		}
		if !g.RouterV6.Is6() {
			return nil, fieldErr("routerV6", "%v is not an IPv6 address", g.RouterV6)
		}
	}

	policies := map[string]bool{}
	hosted := map[netip.Addr]string{}
	for i, p := range c.Policies {
		f := fmt.Sprintf("policies[%d]", i)
		if p.Name == "" {
			return nil, fieldErr(f+".name", "empty; every policy needs a name")
		}
		if policies[p.Name] {
			return nil, fieldErr(f+".name", "policy %q is listed twice", p.Name)
		}
		policies[p.Name] = true
		gp := gateway.Policy{Name: p.Name}
		for j, e := range p.EgressIPs {
			ff := fmt.Sprintf("%s.egressIPs[%d]", f, j)
			a, err := parseAddr(ff, e)
			if err != nil {
				return nil, err
			}
			if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast() {
				return nil, fieldErr(ff, "%v is not a usable egress IP", a)
			}
			if other, dup := hosted[a]; dup {
				return nil, fieldErr(ff, "%v is also an egress IP of policy %q", a, other)
			}
			for _, v := range g.VTEPs {
				if v == a {
					return nil, fieldErr(ff, "%v is also a VTEP of this gateway", a)
				}
			}
			hosted[a] = p.Name
			gp.EgressIPs = append(gp.EgressIPs, a)
			s.Hosted = append(s.Hosted, a)
		}
		g.Policies = append(g.Policies, gp)
	}

	nodeNames := map[string]bool{}
	podNode := map[netip.Addr]string{}
	for i, n := range c.Nodes {
		f := fmt.Sprintf("nodes[%d]", i)
		if n.Name == "" {
			return nil, fieldErr(f+".name", "empty; every node needs a name")
		}
		if nodeNames[n.Name] {
			return nil, fieldErr(f+".name", "node %q is listed twice", n.Name)
		}
		nodeNames[n.Name] = true
		gn := gateway.Node{Name: n.Name}
		if gn.VTEP, err = parseAddr(f+".vtep", n.VTEP); err != nil {
			return nil, err
		}
		fam := false
		for _, v := range g.VTEPs {
			fam = fam || v.Is4() == gn.VTEP.Is4()
		}
		if !fam {
			return nil, fieldErr(f+".vtep", "%v: the gateway has no VTEP of that family (see vteps)", gn.VTEP)
		}
		if gn.InnerMAC, err = parseMAC(f+".innerMAC", n.InnerMAC); err != nil {
			return nil, err
		}
		for j, p := range n.Pods {
			ff := fmt.Sprintf("%s.pods[%d]", f, j)
			a, err := parseAddr(ff+".addr", p.Addr)
			if err != nil {
				return nil, err
			}
			if other, dup := podNode[a]; dup {
				return nil, fieldErr(ff+".addr", "%v is also a pod of node %q", a, other)
			}
			podNode[a] = n.Name
			if p.Policy != "" && !policies[p.Policy] {
				return nil, fieldErr(ff+".policy", "%q is not in policies", p.Policy)
			}
			gn.Pods = append(gn.Pods, gateway.Pod{Addr: a, Policy: p.Policy})
		}
		g.Nodes = append(g.Nodes, gn)
	}
	// The pipeline's own checks (the same ones a reload meets).
	g.Routes = route.NewStatic()
	if _, err := gateway.NewSnapshot(*g); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	g.Routes = nil
	return s, nil
}
