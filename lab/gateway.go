package lab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/gateway/config"
)

// Impl starts one gateway implementation in a gateway namespace. The lab has
// already created the namespace with eth0 addressed, the default route via
// the router and the gateway's egress IPs as /32 on eth0; the worker side
// (VXLAN device, fdb, policy routing) is the same for every implementation.
// Processes an Impl starts must write a pid file under env.RunDir so Down
// finds them (it also kills anything left in the lab's namespaces).
type Impl interface {
	// Mode names the implementation: "kernel", "egret" or "managed".
	Mode() string
	// Start runs the gateway and returns once it forwards traffic.
	Start(env GatewayEnv) error
}

// GatewayEnv is what an Impl gets to start one gateway.
type GatewayEnv struct {
	Spec    *Spec
	Gateway Gateway
	NS      string // the gateway's network namespace
	RunDir  string // the lab's run folder
}

// Mode names for NewImpl and EGRET_LAB_GATEWAY.
const (
	ModeKernel = "kernel"
	ModeEgret  = "egret"
)

// NewImpl returns the implementation for mode; binary is the egret binary
// that egret mode runs.
func NewImpl(mode, binary string) (Impl, error) {
	switch mode {
	case ModeKernel, "":
		return Kernel{}, nil
	case ModeEgret:
		if binary == "" {
			return nil, errors.New("egret gateway mode needs the path of the egret binary")
		}
		return Egret{Binary: binary}, nil
	case ModeManaged:
		if binary == "" {
			return nil, errors.New("managed mode needs the path of the egret binary")
		}
		return Managed{Binary: binary, DualStack: true}, nil
	}
	return nil, fmt.Errorf("gateway mode %q: use %q, %q or %q", mode, ModeKernel, ModeEgret, ModeManaged)
}

// Kernel is the kernel's own gateway: a VXLAN device decapsulates, nftables
// SNATs each selected pod to its policy's egress IP and conntrack takes the
// replies (and ICMP errors about them) back into the tunnel. It is also the
// baseline the lab benchmark compares Egret with.
type Kernel struct{}

// Mode implements Impl.
func (Kernel) Mode() string { return ModeKernel }

// Start implements Impl.
func (Kernel) Start(env GatewayEnv) error {
	s, g := env.Spec, env.Gateway
	lines := []string{
		fmt.Sprintf("link add egv0 address %s type vxlan id %d local %v dstport %d nolearning",
			mac(g.TunnelMAC), VNI, g.IP, VXLANPort),
		fmt.Sprintf("link set egv0 mtu %d up", s.PodMTU()),
		fmt.Sprintf("addr add %v/%d dev egv0%s", g.TunnelIP, s.TunnelSubnet.Bits(), nodad(g.TunnelIP)),
	}
	var fdb []string
	for _, w := range s.Workers {
		lines = append(lines,
			fmt.Sprintf("neigh replace %v lladdr %s dev egv0 nud permanent", w.TunnelIP, mac(w.TunnelMAC)),
			fmt.Sprintf("route replace %v via %v dev egv0", w.PodSubnet, w.TunnelIP))
		fdb = append(fdb, fmt.Sprintf("fdb append %s dev egv0 dst %v", mac(w.TunnelMAC), w.IP))
	}
	if err := ipBatch(env.NS, lines...); err != nil {
		return err
	}
	if _, err := runIn(strings.Join(fdb, "\n")+"\n", "bridge", "-n", env.NS, "-batch", "-"); err != nil {
		return err
	}
	_, err := runIn(kernelRules(s, g.Name), "ip", "netns", "exec", env.NS, "nft", "-f", "-")
	return err
}

// kernelRules is the gateway's nftables ruleset: SNAT of the pods whose
// policy has an egress IP here, forwarding only for those pods and for
// replies, and no answer at all to unsolicited packets for an egress IP
// (Egret drops those too).
func kernelRules(s *Spec, gw string) string {
	var b strings.Builder
	ips, _ := s.Hosted(gw)
	fam := nftFamily(s.NodeSubnet.Addr())
	fmt.Fprintf(&b, "table %s egret_lab {\n\tchain snat_pods {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n", fam)
	var allowed []string
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			if e, host, ok := s.Steering(p); ok && host.Name == gw {
				fmt.Fprintf(&b, "\t\toifname \"eth0\" %s saddr %v snat to %v\n", fam, p.IP, e)
				allowed = append(allowed, p.IP.String())
			}
		}
	}
	b.WriteString("\t}\n\tchain forward_pods {\n\t\ttype filter hook forward priority filter; policy drop;\n\t\tct state established,related accept\n")
	if len(allowed) > 0 {
		fmt.Fprintf(&b, "\t\tiifname \"egv0\" oifname \"eth0\" %s saddr { %s } accept\n", fam, strings.Join(allowed, ", "))
	}
	b.WriteString("\t}\n\tchain egress_ip_input {\n\t\ttype filter hook input priority filter; policy accept;\n")
	if len(ips) > 0 {
		strs := make([]string, len(ips))
		for i, ip := range ips {
			strs[i] = ip.String()
		}
		if fam == "ip6" {
			// Neighbour discovery for an egress IP is answered, as ARP is.
			b.WriteString("\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept\n")
		}
		fmt.Fprintf(&b, "\t\t%s daddr { %s } ct state new,invalid drop\n", fam, strings.Join(strs, ", "))
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// Egret runs `egret gateway --config <file>` in the gateway namespace; the
// lab writes the file (GatewayConfig, documented in docs/lab.md).
type Egret struct {
	Binary string
	FlowLimits
	// NATLog has the gateway write its NAT log into NATLogDir (the
	// benchmark measures it on and off).
	NATLog bool
	// BusyPoll runs the gateway with --busy-poll (the benchmark measures
	// it on and off), under ip netns exec (startDaemon): the mode sets the
	// interface's NAPI knobs in sysfs, which must be the namespace's own.
	// Its pinned XDP program then lives in that mount namespace's bpffs
	// and dies with it: a restarted gateway cannot take it over, which a
	// benchmark never does.
	BusyPoll bool
	// BusyPollNap is the gateway's --busy-poll-nap with BusyPoll.
	BusyPollNap time.Duration
}

// FlowLimits go into a gateway's file when set (the benchmark's one pod
// and one egress IP open millions of flows).
type FlowLimits struct {
	ConntrackMax, PodFlowLimit, EgressIPFlowLimit int
}

// apply sets the limits that are set in c.
func (fl FlowLimits) apply(c *config.Config) {
	c.ConntrackMax, c.PodFlowLimit, c.EgressIPFlowLimit = fl.ConntrackMax, fl.PodFlowLimit, fl.EgressIPFlowLimit
}

// Mode implements Impl.
func (Egret) Mode() string { return ModeEgret }

// EgretAvailable reports whether binary has the gateway subcommand.
func EgretAvailable(binary string) bool {
	out, _ := exec.Command(binary, "gateway", "--help").CombinedOutput()
	return !strings.Contains(string(out), "unknown command")
}

// StateFile is where gateway gw of the lab in runDir leaves its flows for
// its next process (egret gateway --state-file): one per gateway, since the
// lab's gateways share a host.
func StateFile(runDir, gw string) string { return filepath.Join(runDir, "state-"+gw, "flows.state") }

// Start implements Impl: write the config, start the process with a pid
// file and wait until it says it runs (or, failing that, until it has run
// for a few seconds without exiting). An XDP program on eth0 proves
// nothing: after a graceful stop the previous one is still there, held.
func (e Egret) Start(env GatewayEnv) error {
	if !EgretAvailable(e.Binary) {
		return fmt.Errorf("%s has no gateway subcommand yet; use the kernel gateway mode", e.Binary)
	}
	cfg := NewGatewayConfig(env.Spec, env.Gateway.Name)
	e.apply(&cfg)
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(env.RunDir, "gateway-"+env.Gateway.Name+".yaml")
	if err := os.WriteFile(path, append([]byte("# written by egret lab up; format in docs/lab.md\n"), data...), 0o644); err != nil {
		return err
	}
	// Frames on the fabric carry full checksums and no TSO/GSO super-frames,
	// as on a real NIC, so the data plane sees what it would in production.
	if err := offloadsOff(env.NS, "eth0"); err != nil {
		return err
	}
	if err := muteEgressIPs(env.NS, cfg); err != nil {
		return err
	}
	args := []string{"gateway", "--config", path, "--state-file", StateFile(env.RunDir, env.Gateway.Name)}
	if e.NATLog {
		args = append(args, "--natlog-dir", NATLogDir(env.RunDir, env.Gateway.Name))
	}
	start := startGatewayDaemon
	if e.BusyPoll {
		args = append(args, "--busy-poll", "--busy-poll-nap", e.BusyPollNap.String())
		start = startDaemon
	}
	pid, err := start(env.RunDir, "gateway-"+env.Gateway.Name, env.NS, e.Binary, args...)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	started := time.Now()
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return fmt.Errorf("egret gateway in %s exited during start; log: %s", env.NS, tail(filepath.Join(env.RunDir, "gateway-"+env.Gateway.Name+".log")))
		}
		log, _ := os.ReadFile(filepath.Join(env.RunDir, "gateway-"+env.Gateway.Name+".log"))
		if strings.Contains(string(log), "gateway: running") || time.Since(started) > 4*time.Second {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func offloadsOff(ns, dev string) error {
	_, err := nsExec(ns, "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off")
	return err
}

// muteEgressIPs keeps the gateway node's kernel from answering for the
// egress IPs the lab put on its interface (egressIPsClaimed: the gateway
// claims nothing, so it installs no fence; docs/security.md): a packet to
// one that XDP does not take, while the gateway restarts, is dropped
// instead of answered with an RST that would kill the server's end of a
// connection the next process is about to pick up. ARP still answers, as
// the lab's router needs it.
func muteEgressIPs(ns string, cfg config.Config) error {
	var v4, v6 []string
	for _, p := range cfg.Policies {
		for _, ip := range p.EgressIPs {
			if a := netip.MustParseAddr(ip); a.Is4() {
				v4 = append(v4, ip)
			} else {
				v6 = append(v6, ip)
			}
		}
	}
	rules := "table inet egret-lab-mute {}\nflush table inet egret-lab-mute\ntable inet egret-lab-mute {\n chain in {\n  type filter hook input priority 0; policy accept;\n"
	if len(v4) > 0 {
		rules += "  ip daddr { " + strings.Join(v4, ", ") + " } drop\n"
	}
	if len(v6) > 0 {
		rules += "  ip6 daddr { " + strings.Join(v6, ", ") + " } drop\n"
	}
	rules += " }\n}\n"
	if _, err := runIn(rules, "ip", "netns", "exec", ns, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("mute the egress IPs in %s: %w", ns, err)
	}
	return nil
}

// NewGatewayConfig builds the file `egret gateway --config` reads for
// gateway gw. The hosted egress IPs are on its interface already (the lab
// puts them there as /32), so the gateway must not claim or release them.
func NewGatewayConfig(s *Spec, gw string) config.Config {
	g := s.Gateway(gw)
	c := config.Config{
		Node: g.Name, Interfaces: []string{"eth0"}, VTEPs: []string{g.IP.String()},
		InnerMAC: mac(g.TunnelMAC), RouterV4: g.TunnelIP.String(),
		Tunnel: "vxlan", VNI: VNI, Port: VXLANPort, EgressIPsClaimed: true,
	}
	if s.IPv6Only() {
		c.RouterV4, c.RouterV6 = "", g.TunnelIP.String()
	}
	for _, w := range s.Workers {
		n := config.NodeEntry{Name: w.Name, VTEP: w.IP.String(), InnerMAC: mac(w.TunnelMAC)}
		for _, p := range w.Pods {
			n.Pods = append(n.Pods, config.PodEntry{Addr: p.IP.String(), Policy: p.Policy})
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, p := range s.Policies {
		cp := config.PolicyEntry{Name: p.Name, EgressIPs: []string{}}
		for i, h := range p.Hosts {
			if h == gw {
				cp.EgressIPs = append(cp.EgressIPs, p.EgressIPs[i].String())
			}
		}
		c.Policies = append(c.Policies, cp)
	}
	return c
}

func mac(m [6]byte) string { return net.HardwareAddr(m[:]).String() }
