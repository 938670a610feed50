package steer

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Defaults and the ranges the agent owns in the kernel.
const (
	// DefaultDevice is the name of the tunnel device.
	DefaultDevice = "egret0"
	// DefaultVNI matches the lab and the gateway, which echoes the VNI back.
	DefaultVNI = 100
	// DefaultPort is the IANA VXLAN port; the gateway parses only this one.
	DefaultPort = 4789
	// DefaultRulePriority is the priority of the agent's ip rules: after the
	// local table (0), before main (32766).
	DefaultRulePriority = 27000
	// DefaultTableBase and DefaultTableCount: the agent owns route tables
	// [base, base+count).
	DefaultTableBase  = 0x65670000
	DefaultTableCount = 1 << 16
	// RouteProtocol marks the routes and rules the agent adds
	// (`ip route show proto 231`); everything in its tables with another
	// protocol is left alone.
	RouteProtocol = 231
	// NFTTable is the agent's nftables table (family inet).
	NFTTable = "egret-steer"
	// FailClosedPodCIDR drops the forwarded traffic of every address in the
	// node's pod CIDRs to outside destinations until the agent has
	// classified the address as a pod no EgressIP selects (the default).
	FailClosedPodCIDR = "podCIDR"
	// FailClosedSelected drops only the traffic of pods the agent has seen
	// selected; a new pod can leave with the node's address until then.
	FailClosedSelected = "selected"
	// NoEgressIPBlock drops the traffic of a selected pod's address whose
	// EgressIP has no usable egress IP of that address's family (none
	// assigned, no node can host one, no IP of that family listed): the
	// default, so a pod never leaves with another source than its egress IP.
	NoEgressIPBlock = "block"
	// NoEgressIPNode lets such traffic leave as if no EgressIP selected the
	// address (the node's own routing and SNAT), as OVN-Kubernetes does.
	NoEgressIPNode = "node"
)

// Config is the agent's configuration file (YAML); flags override it.
type Config struct {
	// Tunnel is "vxlan" (default). "geneve" is recognised and refused with a
	// clear error when the kernel lacks it.
	Tunnel string `json:"tunnel,omitempty"`
	// Device is the tunnel device name (default egret0).
	Device string `json:"device,omitempty"`
	// VNI is the VXLAN network identifier (default 100).
	VNI uint32 `json:"vni,omitempty"`
	// Port is the VXLAN UDP port (default 4789).
	Port uint16 `json:"port,omitempty"`
	// Underlay is the interface the tunnel runs over (its first global
	// address is the VTEP unless VTEP is set). Required unless VTEP is set.
	Underlay string `json:"underlay,omitempty"`
	// VTEP is this node's tunnel address; optional.
	VTEP string `json:"vtep,omitempty"`
	// TunnelMAC is the tunnel device's MAC, the inner destination of the
	// gateway's replies; default cluster.VTEPMAC(VTEP).
	TunnelMAC string `json:"tunnelMAC,omitempty"`
	// MTU of the tunnel device; default the underlay's MTU minus the
	// encapsulation (50 bytes over IPv4, 70 over IPv6).
	MTU int `json:"mtu,omitempty"`
	// ClusterCIDRs, ServiceCIDRs and NodeCIDRs are never steered.
	ClusterCIDRs []string `json:"clusterCIDRs,omitempty"`
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	NodeCIDRs    []string `json:"nodeCIDRs,omitempty"`
	// PodCIDRs are this node's pod networks; default the Node's
	// spec.podCIDRs.
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// TrustPodIPs steers a selected pod's addresses as the API gives them,
	// even outside this node's pod networks, for CNIs whose IPAM ignores
	// spec.podCIDRs (Calico IPAM, AWS VPC CNI). Default false: such an
	// address is held (blocked, not steered). The gateways' --trust-pod-ips
	// must agree (docs/security.md).
	TrustPodIPs bool `json:"trustPodIPs,omitempty"`
	// FailClosed is "podCIDR" (default: block unclassified pod addresses;
	// falls back to "selected" while no pod CIDRs are known) or "selected".
	FailClosed string `json:"failClosed,omitempty"`
	// NoEgressIP is what happens to a selected pod address of a family its
	// EgressIP has no usable egress IP of: "block" (default) or "node"
	// (leave through the node's normal routing and SNAT). An EgressIP's
	// annotation egret.io/no-egress-ip overrides it for that object.
	NoEgressIP string `json:"noEgressIP,omitempty"`
	// AllowCiliumHostRouting starts the agent even where Cilium's
	// ConfigMap means eBPF host routing, which the agent otherwise refuses
	// (CiliumHostRouting). Only if you know pod traffic still traverses the
	// host's routing (docs/operations.md#supported-cnis).
	AllowCiliumHostRouting bool `json:"allowCiliumHostRouting,omitempty"`
	// RulePriority, TableBase and TableCount set the owned ranges.
	RulePriority int    `json:"rulePriority,omitempty"`
	TableBase    uint32 `json:"tableBase,omitempty"`
	TableCount   uint32 `json:"tableCount,omitempty"`
	// MarkMask are the packet and connection mark bits the agent owns
	// to steer pods whose EgressIP depends on the destination (default
	// 0x0fff0000): contiguous bits no other component on the node uses.
	MarkMask uint32 `json:"markMask,omitempty"`
	// Resync is how often the kernel is reconciled without a change (default 30s).
	Resync Duration `json:"resync,omitempty"`
	// LogFormat is "text" (default) or "json".
	LogFormat string `json:"logFormat,omitempty"`
	// ProcSysNet is the directory through which the agent sets the
	// node's net sysctls (fib_multipath_hash_policy and _fields); default
	// /proc/sys/net. A container that is not privileged sees /proc/sys
	// read-only, so the DaemonSet mounts the node's /proc/sys/net
	// elsewhere (hostPath) and names it here. The files resolve to the
	// network namespace of the process that opens them: the node's, for
	// a host-network pod.
	ProcSysNet string `json:"procSysNet,omitempty"`
}

// DefaultProcSysNet is where the net sysctls are outside a container.
const DefaultProcSysNet = "/proc/sys/net"

// Duration is a time.Duration written as "30s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %s: use a form such as 30s or 2m: %w", b, err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// LoadConfig reads a YAML configuration file; unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read steer config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("steer config %s: %w", path, err)
	}
	return c, nil
}

// WithDefaults fills the unset fields.
func (c Config) WithDefaults() Config {
	if c.Tunnel == "" {
		c.Tunnel = "vxlan"
	}
	if c.Device == "" {
		c.Device = DefaultDevice
	}
	if c.VNI == 0 {
		c.VNI = DefaultVNI
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.MarkMask == 0 {
		c.MarkMask = DefaultMarkMask
	}
	if c.RulePriority == 0 {
		c.RulePriority = DefaultRulePriority
	}
	if c.TableBase == 0 {
		c.TableBase = DefaultTableBase
	}
	if c.TableCount == 0 {
		c.TableCount = DefaultTableCount
	}
	if c.Resync.Duration == 0 {
		c.Resync.Duration = 30 * time.Second
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.FailClosed == "" {
		c.FailClosed = FailClosedPodCIDR
	}
	if c.NoEgressIP == "" {
		c.NoEgressIP = NoEgressIPBlock
	}
	if c.ProcSysNet == "" {
		c.ProcSysNet = DefaultProcSysNet
	}
	return c
}

// ErrGeneveUnsupported is returned when Geneve is configured: the kernel of
// this platform has no Geneve devices, and the agent programs VXLAN only.
var ErrGeneveUnsupported = errors.New("tunnel geneve: this agent programs VXLAN devices only (the test kernel has no Geneve support); set tunnel: vxlan")

// Validate checks a configuration with defaults applied.
func (c Config) Validate() error {
	var errs []error
	switch c.Tunnel {
	case "vxlan":
	case "geneve":
		errs = append(errs, ErrGeneveUnsupported)
	default:
		errs = append(errs, fmt.Errorf("tunnel %q: use vxlan", c.Tunnel))
	}
	if len(c.Device) > 15 || c.Device == "" || strings.ContainsAny(c.Device, "/ \t\n:") {
		errs = append(errs, fmt.Errorf("device %q: give an interface name of 1–15 characters without '/', ':' or spaces", c.Device))
	}
	if c.VNI >= 1<<24 {
		errs = append(errs, fmt.Errorf("vni %d: a VXLAN VNI is at most %d", c.VNI, 1<<24-1))
	}
	if c.Underlay == "" && c.VTEP == "" {
		errs = append(errs, errors.New("underlay: name the interface the tunnel runs over (key underlay or --underlay), or give this node's address (key vtep or --vtep)"))
	}
	if c.VTEP != "" {
		if a, err := netip.ParseAddr(c.VTEP); err != nil || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
			errs = append(errs, fmt.Errorf("vtep %q: give a unicast IPv4 or IPv6 address", c.VTEP))
		}
	}
	if c.TunnelMAC != "" {
		if m, err := net.ParseMAC(c.TunnelMAC); err != nil || len(m) != 6 || m[0]&1 != 0 {
			errs = append(errs, fmt.Errorf("tunnelMAC %q: give a unicast Ethernet address such as 02:65:67:00:00:0b", c.TunnelMAC))
		}
	}
	if c.MTU != 0 && (c.MTU < 1280 || c.MTU > 65535) {
		errs = append(errs, fmt.Errorf("mtu %d: give 1280–65535 (IPv6 needs 1280), or 0 for the underlay's MTU minus the encapsulation", c.MTU))
	}
	if _, err := c.Excluded(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.PodNetworks(); err != nil {
		errs = append(errs, err)
	}
	if c.FailClosed != FailClosedPodCIDR && c.FailClosed != FailClosedSelected {
		errs = append(errs, fmt.Errorf("failClosed %q: use podCIDR or selected", c.FailClosed))
	}
	if c.NoEgressIP != NoEgressIPBlock && c.NoEgressIP != NoEgressIPNode {
		errs = append(errs, fmt.Errorf("noEgressIP %q: use block or node", c.NoEgressIP))
	}
	if m := (marks{c.MarkMask}); c.MarkMask != 0 && (m.objects() == 0 || c.MarkMask>>m.shift()&(c.MarkMask>>m.shift()+1) != 0) {
		errs = append(errs, fmt.Errorf("markMask %#x: give contiguous bits, at least two (such as 0x0fff0000)", c.MarkMask))
	}
	if c.RulePriority <= 0 || c.RulePriority >= 32766 {
		errs = append(errs, fmt.Errorf("rulePriority %d: give 1–32765 so the rules come before the main table's", c.RulePriority))
	}
	if c.TableCount == 0 || uint64(c.TableBase)+uint64(c.TableCount) > 1<<32 || c.TableBase <= 255 {
		errs = append(errs, fmt.Errorf("tableBase %d/tableCount %d: the range must lie in 256–4294967295", c.TableBase, c.TableCount))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("logFormat %q: use text or json", c.LogFormat))
	}
	if !strings.HasPrefix(c.ProcSysNet, "/") {
		errs = append(errs, fmt.Errorf("procSysNet %q: give an absolute path (the node's /proc/sys/net as mounted in the container)", c.ProcSysNet))
	}
	if c.Resync.Duration < time.Second {
		errs = append(errs, fmt.Errorf("resync %v: give at least 1s", c.Resync.Duration))
	}
	return errors.Join(errs...)
}

// Excluded parses the cluster, service and node networks.
func (c Config) Excluded() ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, group := range []struct {
		name string
		list []string
	}{{"clusterCIDRs", c.ClusterCIDRs}, {"serviceCIDRs", c.ServiceCIDRs}, {"nodeCIDRs", c.NodeCIDRs}} {
		for _, s := range group.list {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil || p.Addr().Zone() != "" {
				errs = append(errs, fmt.Errorf("%s: %q is not a network such as 10.128.0.0/14", group.name, s))
				continue
			}
			out = append(out, p.Masked())
		}
	}
	return out, errors.Join(errs...)
}

// PodNetworks parses podCIDRs.
func (c Config) PodNetworks() ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range c.PodCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			errs = append(errs, fmt.Errorf("podCIDRs: %q is not a network such as 10.128.1.0/24", s))
			continue
		}
		out = append(out, p.Masked())
	}
	return out, errors.Join(errs...)
}
