package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Defaults of the config-file keys that Spec does not have. The ports are
// the ones the XDP program steers (gateway/xdp's PortVXLAN, PortGeneve; a
// test of the engine holds them equal).
const (
	DefaultTunnel     = "vxlan"
	DefaultVXLANPort  = 4789
	DefaultGenevePort = 6081
)

// Config is the file `egret gateway --config` reads (YAML; the JSON names
// are the keys): the topology (the lab writes it from this type, docs/lab.md)
// plus the run-time settings that flags may also give. It is the file's
// schema only: Spec parses it into the typed Spec, and Settle settles
// that.
type Config struct {
	// Node is this gateway's node name (for logs).
	Node string `json:"node,omitempty"`
	// Interfaces are the interfaces the gateway serves; one interface may
	// carry both tunnel and outside traffic.
	Interfaces []string `json:"interfaces"`
	// LocalPort serves the gateway node's own pods through the veth pair
	// egret-lh/egret-lg (docs/gateway.md#pods-on-gateway-nodes).
	LocalPort bool `json:"localPort,omitempty"`
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
	// PodFlowLimit and EgressIPFlowLimit cap the flows of one pod and of
	// one egress IP (0: conntrackMax/16 and conntrackMax/2).
	PodFlowLimit      int `json:"podFlowLimit,omitempty"`
	EgressIPFlowLimit int `json:"egressIPFlowLimit,omitempty"`

	// VTEPs are the gateway's tunnel addresses, at most one per family.
	VTEPs []string `json:"vteps"`
	// InnerMAC is the gateway's MAC inside the tunnel.
	InnerMAC string `json:"innerMAC"`
	// RouterV4, RouterV6 are the sources of ICMP errors the gateway sends to pods.
	RouterV4 string `json:"routerV4,omitempty"`
	RouterV6 string `json:"routerV6,omitempty"`
	// Tunnel is vxlan (default) or geneve, VNI its VNI (0: DefaultVNI);
	// the gateway accepts no other. Port, if given, must be the tunnel
	// type's UDP port (4789, 6081): the XDP program knows no other.
	Tunnel string `json:"tunnel,omitempty"`
	VNI    int    `json:"vni,omitempty"`
	Port   int    `json:"port,omitempty"`

	// Nodes are the worker nodes allowed to send tunnel traffic.
	Nodes []NodeEntry `json:"nodes"`
	// Policies are the egress policies; EgressIPs lists only those hosted here.
	Policies []PolicyEntry `json:"policies"`
	// DestTables are destination rules that pods name (PodEntry.Dest).
	DestTables []DestTableEntry `json:"destTables,omitempty"`
	// EgressIPsClaimed says the hosted egress IPs are already on the
	// interface (put there by someone else): the gateway neither claims nor
	// releases them.
	EgressIPsClaimed bool `json:"egressIPsClaimed,omitempty"`
	// DeniedDestinations (CIDRs) are destinations pods may not reach
	// through the gateway, besides the built-in deny-list (link-local and
	// metadata, loopback, multicast, broadcast, special-purpose ranges) and
	// the nodes' own addresses: put the cluster's node networks here.
	// AllowedDestinations (CIDRs) override both (docs/security.md).
	DeniedDestinations  []string `json:"deniedDestinations,omitempty"`
	AllowedDestinations []string `json:"allowedDestinations,omitempty"`
}

// NodeEntry is a worker node as a config file lists it.
type NodeEntry struct {
	Name     string     `json:"name"`
	VTEP     string     `json:"vtep"`
	InnerMAC string     `json:"innerMAC"`
	Pods     []PodEntry `json:"pods"`
	// Local marks the gateway's own node (reached through the local port).
	Local bool `json:"local,omitempty"`
}

// PodEntry is a pod of a node as a config file lists it; Policy is "" when
// no policy selects it. Dest names its destination rules in destTables
// ("" for none); then Policy serves only what no rule decides.
type PodEntry struct {
	Addr   string `json:"addr"`
	Policy string `json:"policy,omitempty"`
	Dest   string `json:"dest,omitempty"`
}

// DestTableEntry is a named set of destination rules as a config file
// lists it.
type DestTableEntry struct {
	Name  string          `json:"name"`
	Rules []DestRuleEntry `json:"rules"`
}

// DestRuleEntry is a destination network (a masked CIDR) and the policy
// serving it, or an exclusion (exclude: true, no policy): the longest
// rule holding a destination decides it.
type DestRuleEntry struct {
	Prefix  string `json:"prefix"`
	Policy  string `json:"policy,omitempty"`
	Exclude bool   `json:"exclude,omitempty"`
}

// PolicyEntry is an egress policy as a config file lists it, with the
// egress IPs of it hosted here.
type PolicyEntry struct {
	Name      string   `json:"name"`
	EgressIPs []string `json:"egressIPs"`
}

// ParseConfig parses YAML (or JSON) config data.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

func parseAddr(field, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fieldErr(field, "%q is not an IP address", s)
	}
	return a, nil
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

// Spec parses the file's values into the typed Spec; each error
// names the key at fault. Absent addresses and MACs stay zero, so a partial
// file (the gateway agent's static part) parses too; Settle checks the rest.
func (c *Config) Spec() (*Spec, error) {
	s := &Spec{Node: c.Node, Interfaces: slices.Clone(c.Interfaces), LocalPort: c.LocalPort, Mode: c.Mode, Queues: c.Queues, Batch: c.Batch,
		ConntrackMax: c.ConntrackMax, PodFlowLimit: c.PodFlowLimit, EgressIPFlowLimit: c.EgressIPFlowLimit,
		EgressIPsClaimed: c.EgressIPsClaimed}
	tun := c.Tunnel
	if tun == "" {
		tun = DefaultTunnel
	}
	var port int
	switch tun {
	case "vxlan":
		s.Tunnel, port = TunnelVXLAN, DefaultVXLANPort
	case "geneve":
		s.Tunnel, port = TunnelGeneve, DefaultGenevePort
	default:
		return nil, fieldErr("tunnel", "%q: use vxlan or geneve", c.Tunnel)
	}
	if c.Port != 0 && c.Port != port {
		return nil, fieldErr("port", "%d: the XDP program steers %s on UDP %d only", c.Port, tun, port)
	}
	if c.VNI < 0 || c.VNI > 1<<24-1 {
		return nil, fieldErr("vni", "%d: a VNI is 0–16777215", c.VNI)
	}
	s.VNI = uint32(c.VNI)
	var err error
	for i, v := range c.VTEPs {
		a, err := parseAddr(fmt.Sprintf("vteps[%d]", i), v)
		if err != nil {
			return nil, err
		}
		s.VTEPs = append(s.VTEPs, a)
	}
	if c.InnerMAC != "" {
		if s.InnerMAC, err = parseMAC("innerMAC", c.InnerMAC); err != nil {
			return nil, err
		}
	}
	if c.RouterV4 != "" {
		if s.RouterV4, err = parseAddr("routerV4", c.RouterV4); err != nil {
			return nil, err
		}
	}
	if c.RouterV6 != "" {
		if s.RouterV6, err = parseAddr("routerV6", c.RouterV6); err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		key  string
		in   []string
		into *[]netip.Prefix
	}{{"deniedDestinations", c.DeniedDestinations, &s.DeniedDestinations}, {"allowedDestinations", c.AllowedDestinations, &s.AllowedDestinations}} {
		for i, v := range l.in {
			p, err := netip.ParsePrefix(strings.TrimSpace(v))
			if err != nil || p.Addr().Zone() != "" {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", l.key, i), "%q is not a CIDR such as 10.0.0.0/16", v)
			}
			*l.into = append(*l.into, p.Masked())
		}
	}
	for i, p := range c.Policies {
		gp := Policy{Name: p.Name}
		for j, e := range p.EgressIPs {
			a, err := parseAddr(fmt.Sprintf("policies[%d].egressIPs[%d]", i, j), e)
			if err != nil {
				return nil, err
			}
			gp.EgressIPs = append(gp.EgressIPs, a)
		}
		s.Policies = append(s.Policies, gp)
	}
	for i, t := range c.DestTables {
		gt := DestTable{Name: t.Name}
		for j, r := range t.Rules {
			p, err := netip.ParsePrefix(strings.TrimSpace(r.Prefix))
			if err != nil || p.Addr().Zone() != "" {
				return nil, fieldErr(fmt.Sprintf("destTables[%d].rules[%d].prefix", i, j), "%q is not a CIDR such as 10.0.0.0/16", r.Prefix)
			}
			gt.Rules = append(gt.Rules, DestRule{Prefix: p, Policy: r.Policy, Exclude: r.Exclude})
		}
		s.DestTables = append(s.DestTables, gt)
	}
	for i, n := range c.Nodes {
		f := fmt.Sprintf("nodes[%d]", i)
		gn := Node{Name: n.Name, Local: n.Local}
		if gn.VTEP, err = parseAddr(f+".vtep", n.VTEP); err != nil {
			return nil, err
		}
		if gn.InnerMAC, err = parseMAC(f+".innerMAC", n.InnerMAC); err != nil {
			return nil, err
		}
		for j, p := range n.Pods {
			a, err := parseAddr(fmt.Sprintf("%s.pods[%d].addr", f, j), p.Addr)
			if err != nil {
				return nil, err
			}
			gn.Pods = append(gn.Pods, Pod{Addr: a, Policy: p.Policy, Dest: p.Dest})
		}
		s.Nodes = append(s.Nodes, gn)
	}
	return s, nil
}

// Settle checks the whole file: the command's own keys (logFormat,
// metricsAddr) and the engine's, parsed by Spec and settled by
// Spec.Settle.
func (c *Config) Settle() (*Settled, error) {
	switch c.LogFormat {
	case "", "text", "json":
	default:
		return nil, fieldErr("logFormat", "%q: use text or json", c.LogFormat)
	}
	if c.MetricsAddr != "" && c.MetricsAddr != "off" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return nil, fieldErr("metricsAddr", "%q is not host:port", c.MetricsAddr)
		}
	}
	s, err := c.Spec()
	if err != nil {
		return nil, err
	}
	return s.Settle()
}
