package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/xdp"
)

// Lab is a Spec plus what Up needs to run it.
type Lab struct {
	Spec *Spec
	// Impl starts the gateways (Kernel when nil).
	Impl Impl
	// Binary is the egret binary; the echo server runs as
	// `egret lab echo-server` so that it outlives `egret lab up`.
	Binary string
	// RunRoot is the parent of the run folder (RunRoot when empty).
	RunRoot string
}

// state is what Up leaves in the run folder for Status and a second Up.
type state struct {
	Name   string `json:"name"`
	Mode   string `json:"mode"`
	Binary string `json:"binary"`
	// Underlay is the lab's variant (UnderlayIPv4 when empty: a lab
	// built before there was a choice).
	Underlay string `json:"underlay,omitempty"`
}

// BuiltUnderlay is the underlay lab name was built with (its state file),
// UnderlayIPv4 when it is not up or was built before there was a choice.
func BuiltUnderlay(runRoot, name string) string {
	var saved state
	b, err := os.ReadFile(filepath.Join(runDir(runRoot, name), "state.json"))
	if err != nil || json.Unmarshal(b, &saved) != nil || saved.Underlay == "" {
		return UnderlayIPv4
	}
	return saved.Underlay
}

// RunDir is the lab's run folder.
func (l *Lab) RunDir() string { return runDir(l.RunRoot, l.Spec.Name) }

func runDir(root, name string) string {
	if root == "" {
		root = RunRoot
	}
	return filepath.Join(root, name)
}

func (l *Lab) impl() Impl {
	if l.Impl == nil {
		return Kernel{}
	}
	return l.Impl
}

// Up builds the lab. When the same lab in the same mode is already up and
// healthy it does nothing; leftovers of anything else with this name (a
// crash, another mode) are removed first. On failure everything built is
// removed again.
func (l *Lab) Up() error {
	if err := l.Spec.Validate(); err != nil {
		return err
	}
	if l.Binary == "" {
		return errors.New("lab: Binary (the egret binary for the echo server) is not set")
	}
	st, err := l.Status()
	if err == nil && st.Up && st.Mode == l.impl().Mode() && st.Underlay == l.Spec.Underlay() && len(st.Problems) == 0 {
		return nil
	}
	if err := Down(l.RunRoot, l.Spec.Name); err != nil {
		return fmt.Errorf("remove leftovers of lab %s: %w", l.Spec.Name, err)
	}
	if err := l.build(); err != nil {
		if derr := Down(l.RunRoot, l.Spec.Name); derr != nil {
			err = fmt.Errorf("%w (and cleaning up failed: %v)", err, derr)
		}
		return err
	}
	return nil
}

func (l *Lab) build() error {
	s := l.Spec
	dir := l.RunDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var adds []string
	for _, ns := range s.Namespaces() {
		adds = append(adds, "netns add "+ns)
	}
	if err := ipBatch("", adds...); err != nil {
		return err
	}
	for _, ns := range s.Namespaces() {
		// Forwarding where routing happens; no reverse-path filter, since
		// replies come back out of the tunnel on asymmetric paths. No
		// duplicate address detection: addresses (link-local ones too) are
		// usable at once, and the lab's addresses are unique by Validate.
		if _, err := nsExec(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1",
			"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
			"net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"); err != nil {
			return err
		}
	}

	fabric := []string{"link set lo up", "link add br0 type bridge", "link set br0 up"}
	members := []string{s.Router.Name}
	if s.Controller.Name != "" {
		members = append(members, s.Controller.Name)
	}
	for _, w := range s.Workers {
		members = append(members, w.Name)
	}
	for _, g := range s.Gateways {
		members = append(members, g.Name)
	}
	for i, m := range members {
		q := ""
		if i >= len(members)-len(s.Gateways) && s.GatewayQueues > 1 {
			q = fmt.Sprintf(" numtxqueues %d numrxqueues %d", s.GatewayQueues, s.GatewayQueues)
		}
		fabric = append(fabric,
			fmt.Sprintf("link add %s%s type veth peer name eth0%s netns %s", m, q, q, s.NS(m)),
			fmt.Sprintf("link set %s master br0 up", m))
	}
	if err := ipBatch(s.NS("fabric"), fabric...); err != nil {
		return err
	}
	bits := s.NodeSubnet.Bits()
	r := s.Router
	bits6 := s.NodeSubnet6.Bits()
	if err := ipBatch(s.NS(r.Name), append([]string{"link set lo up",
		fmt.Sprintf("addr add %v/%d dev eth0", r.IP, bits), "link set eth0 up",
		fmt.Sprintf("link add eth1 type veth peer name eth0 netns %s", s.NS(s.Server.Name)),
		fmt.Sprintf("addr add %v/%d dev eth1", r.OutIP, r.Outside.Bits()), "link set eth1 up"},
		addr6(r.IP6, bits6, "eth0", r.IP6)...)...); err != nil {
		return err
	}
	if err := ipBatch(s.NS(r.Name), addr6(r.OutIP6, r.Outside6.Bits(), "eth1", r.OutIP6)...); err != nil {
		return err
	}
	if err := ipBatch(s.NS(s.Server.Name), append([]string{"link set lo up",
		fmt.Sprintf("addr add %v/%d dev eth0", s.Server.IP, r.Outside.Bits()), "link set eth0 up",
		fmt.Sprintf("route add default via %v", r.OutIP)},
		addr6(s.Server.IP6, r.Outside6.Bits(), "eth0", r.OutIP6)...)...); err != nil {
		return err
	}
	if err := l.buildServer2(); err != nil {
		return fmt.Errorf("second server: %w", err)
	}
	if c := s.Controller; c.Name != "" {
		if err := ipBatch(s.NS(c.Name), append([]string{"link set lo up",
			fmt.Sprintf("addr add %v/%d dev eth0", c.IP, bits), "link set eth0 up",
			fmt.Sprintf("route add default via %v", r.IP)},
			addr6(c.IP6, bits6, "eth0", r.IP6)...)...); err != nil {
			return fmt.Errorf("controller namespace: %w", err)
		}
	}
	managed := l.impl().Mode() == ModeManaged
	for _, w := range s.Workers {
		if err := l.buildWorker(w, !managed); err != nil {
			return fmt.Errorf("worker %s: %w", w.Name, err)
		}
	}
	for _, g := range s.Gateways {
		lines := []string{"link set lo up",
			fmt.Sprintf("addr add %v/%d dev eth0", g.IP, bits), "link set eth0 up",
			fmt.Sprintf("route add default via %v", r.IP)}
		lines = append(lines, addr6(g.IP6, bits6, "eth0", r.IP6)...)
		ips, _ := s.Hosted(g.Name)
		if managed {
			ips = nil // the gateway agent claims what the controller assigns
		}
		for _, ip := range ips {
			lines = append(lines, hostAddr(ip, "eth0"))
		}
		if err := ipBatch(s.NS(g.Name), lines...); err != nil {
			return fmt.Errorf("gateway %s: %w", g.Name, err)
		}
	}
	// Real-NIC conditions on the fabric: full checksums, no TSO/GSO
	// super-frames. Both gateway modes see the same frames.
	offload := [][2]string{{s.NS(r.Name), "eth0"}, {s.NS(r.Name), "eth1"}, {s.NS(s.Server.Name), "eth0"}}
	if s.Server2.Name != "" {
		offload = append(offload, [2]string{s.NS(r.Name), "eth2"}, [2]string{s.NS(s.Server2.Name), "eth0"})
	}
	for _, m := range members[1:] {
		offload = append(offload, [2]string{s.NS(m), "eth0"})
	}
	for _, o := range offload {
		if err := offloadsOff(o[0], o[1]); err != nil {
			return err
		}
	}
	if managed {
		m, _ := l.impl().(Managed)
		if err := writeObjects(s, ObjectsDir(dir), m.DualStack, m.Cloud != nil); err != nil {
			return err
		}
	}
	for _, g := range s.Gateways {
		env := GatewayEnv{Spec: s, Gateway: g, NS: s.NS(g.Name), RunDir: dir}
		if err := l.impl().Start(env); err != nil {
			return fmt.Errorf("gateway %s (%s mode): %w", g.Name, l.impl().Mode(), err)
		}
	}
	if err := l.startEcho(); err != nil {
		return err
	}
	if managed {
		if err := l.startControlPlane(); err != nil {
			return err
		}
	}
	if err := l.probe(); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(state{Name: s.Name, Mode: l.impl().Mode(), Binary: l.Binary, Underlay: s.Underlay()}, "", "  ")
	return os.WriteFile(filepath.Join(dir, "state.json"), b, 0o644)
}

// buildServer2 links the second server's namespace to the router's eth2,
// in a network of its own: every node reaches it through its default
// route to the router, as it reaches the first server.
func (l *Lab) buildServer2() error {
	s := l.Spec
	v, r := s.Server2, s.Router
	if v.Name == "" {
		return nil
	}
	lines := []string{fmt.Sprintf("link add eth2 type veth peer name eth0 netns %s", s.NS(v.Name)),
		fmt.Sprintf("addr add %v/%d dev eth2%s", r.OutIP2, r.Outside2.Bits(), nodad(r.OutIP2)), "link set eth2 up"}
	if r.OutIP2v6.IsValid() {
		lines = append(lines, addr6(r.OutIP2v6, r.Outside2v6.Bits(), "eth2", netip.Addr{})...)
	}
	if err := ipBatch(s.NS(r.Name), lines...); err != nil {
		return err
	}
	lines = []string{"link set lo up",
		fmt.Sprintf("addr add %v/%d dev eth0%s", v.IP, r.Outside2.Bits(), nodad(v.IP)), "link set eth0 up",
		fmt.Sprintf("route add default via %v", r.OutIP2)}
	if v.Excluded.IsValid() {
		lines = append(lines, fmt.Sprintf("addr add %v/%d dev eth0%s", v.Excluded, r.Outside2.Bits(), nodad(v.Excluded)))
	}
	lines = append(lines, addr6(v.IP6, r.Outside2v6.Bits(), "eth0", r.OutIP2v6)...)
	return ipBatch(s.NS(v.Name), lines...)
}

// buildWorker builds a worker node and its pods; with static it also
// steers the pods itself (egv0 and policy routing), otherwise `egret steer`
// does that in managed mode.
func (l *Lab) buildWorker(w WorkerNode, static bool) error {
	s := l.Spec
	gw := w.PodSubnet.Addr().Next()
	mtu := s.PodMTU()
	lines := []string{"link set lo up",
		fmt.Sprintf("addr add %v/%d dev eth0", w.IP, s.NodeSubnet.Bits()), "link set eth0 up",
		fmt.Sprintf("route add default via %v", s.Router.IP),
		"link add cni0 type bridge",
		fmt.Sprintf("addr add %v/%d dev cni0%s", gw, w.PodSubnet.Bits(), nodad(gw)),
		fmt.Sprintf("link set cni0 mtu %d up", mtu),
	}
	lines = append(lines, addr6(w.IP6, s.NodeSubnet6.Bits(), "eth0", s.Router.IP6)...)
	gw6 := w.PodSubnet6.Addr().Next()
	if w.PodSubnet6.IsValid() {
		lines = append(lines, addr6(gw6, w.PodSubnet6.Bits(), "cni0", netip.Addr{})...)
	}
	if static {
		lines = append(lines, fmt.Sprintf("link add egv0 address %s type vxlan id %d local %v dstport %d nolearning",
			mac(w.TunnelMAC), VNI, w.IP, VXLANPort),
			fmt.Sprintf("link set egv0 mtu %d up", mtu),
			fmt.Sprintf("addr add %v/%d dev egv0%s", w.TunnelIP, s.TunnelSubnet.Bits(), nodad(w.TunnelIP)))
	}
	var fdb []string
	for i, g := range s.Gateways {
		if !static {
			break
		}
		lines = append(lines,
			fmt.Sprintf("neigh replace %v lladdr %s dev egv0 nud permanent", g.TunnelIP, mac(g.TunnelMAC)),
			fmt.Sprintf("route replace default via %v dev egv0 table %d", g.TunnelIP, gatewayTable(i)))
		fdb = append(fdb, fmt.Sprintf("fdb append %s dev egv0 dst %v", mac(g.TunnelMAC), g.IP))
	}
	var policyRules []string
	for _, p := range w.Pods {
		veth := "veth-" + p.Name
		if len(veth) > 15 {
			veth = veth[:15]
		}
		lines = append(lines,
			fmt.Sprintf("link add %s mtu %d type veth peer name eth0 netns %s", veth, mtu, s.NS(p.Name)),
			fmt.Sprintf("link set %s master cni0 up", veth))
		// Policy routing: the pod's traffic goes into the tunnel towards
		// the gateway that hosts its egress IP.
		if _, g, ok := s.Steering(p); ok && static {
			policyRules = append(policyRules, fmt.Sprintf("rule add from %v lookup %d priority 1000", netip.PrefixFrom(p.IP, p.IP.BitLen()), gatewayTable(s.gatewayIndex(g.Name))))
		}
	}
	if err := ipBatch(s.NS(w.Name), lines...); err != nil {
		return err
	}
	if len(policyRules) > 0 {
		// `ip rule` takes its family from the command line, not from the
		// prefix, and a batch line cannot carry -6.
		if _, err := runIn(strings.Join(policyRules, "\n")+"\n", "ip", "-"+strconv.Itoa(p4or6(s)), "-n", s.NS(w.Name), "-batch", "-"); err != nil {
			return err
		}
	}
	if len(fdb) > 0 {
		if _, err := runIn(strings.Join(fdb, "\n")+"\n", "bridge", "-n", s.NS(w.Name), "-batch", "-"); err != nil {
			return err
		}
	}
	// Pods no policy selects leave with the node's IP, as with any CNI.
	rules := fmt.Sprintf("table inet egret_lab {\n\tchain masquerade_pods {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\t\toifname \"eth0\" %s saddr %v masquerade\n", nftFamily(w.PodSubnet.Addr()), w.PodSubnet)
	if w.PodSubnet6.IsValid() {
		rules += fmt.Sprintf("\t\toifname \"eth0\" ip6 saddr %v masquerade\n", w.PodSubnet6)
	}
	rules += "\t}\n}\n"
	if _, err := runIn(rules, "ip", "netns", "exec", s.NS(w.Name), "nft", "-f", "-"); err != nil {
		return err
	}
	for _, p := range w.Pods {
		if err := ipBatch(s.NS(p.Name), append([]string{"link set lo up",
			fmt.Sprintf("addr add %v/%d dev eth0%s", p.IP, w.PodSubnet.Bits(), nodad(p.IP)), fmt.Sprintf("link set eth0 mtu %d up", mtu),
			fmt.Sprintf("route add default via %v", gw)},
			addr6(p.IP6, w.PodSubnet6.Bits(), "eth0", gw6)...)...); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// addr6 returns the ip batch lines that put IPv6 address a/bits on dev
// (without duplicate address detection) and, when via is valid, a default
// route through it; nothing when a is not set (an IPv4-only member).
func addr6(a netip.Addr, bits int, dev string, via netip.Addr) []string {
	if !a.IsValid() {
		return nil
	}
	lines := []string{fmt.Sprintf("addr add %v/%d dev %s nodad", a, bits, dev)}
	if via.IsValid() && via != a {
		lines = append(lines, fmt.Sprintf("route add default via %v dev %s", via, dev))
	}
	return lines
}

// p4or6 is the primary family's number in `ip -4` / `ip -6`.
func p4or6(s *Spec) int {
	if s.IPv6Only() {
		return 6
	}
	return 4
}

// nodad is the `ip addr add` option that skips duplicate address
// detection for an IPv6 address (nothing for IPv4).
func nodad(a netip.Addr) string {
	if a.Is6() {
		return " nodad"
	}
	return ""
}

// hostAddr is the ip batch line that puts a as a host address (/32 or
// /128, without DAD) on dev: how egress IPs sit on a gateway.
func hostAddr(a netip.Addr, dev string) string {
	return fmt.Sprintf("addr add %v dev %s%s", netip.PrefixFrom(a, a.BitLen()), dev, nodad(a))
}

// nftFamily is the nftables payload keyword of a's family ("ip" or "ip6").
func nftFamily(a netip.Addr) string {
	if a.Is6() {
		return "ip6"
	}
	return "ip"
}

// gatewayTable is the routing table of the i-th gateway on workers.
func gatewayTable(i int) int { return 100 + i }

func (s *Spec) gatewayIndex(name string) int {
	for i, g := range s.Gateways {
		if g.Name == name {
			return i
		}
	}
	return -1
}

// echoID is the daemon id (pid and log file name) of the echo server of
// the i-th server (Spec.Servers): "echo", "echo2".
func echoID(i int) string {
	if i == 0 {
		return "echo"
	}
	return "echo" + strconv.Itoa(i+1)
}

// startEcho starts the echo server of every outside server; the first
// one's process also serves the lab's DNS (DNSAddr) from the records
// file the lab writes (SetDNS).
func (l *Lab) startEcho() error {
	s := l.Spec
	for i, v := range s.Servers() {
		ns := s.NS(v.Name)
		httpAddr := netip.AddrPortFrom(v.IP, HTTPPort).String()
		udpAddr := netip.AddrPortFrom(v.IP, UDPPort).String()
		args := []string{"lab", "echo-server", "--lab", s.Name, "--http", httpAddr, "--udp", udpAddr}
		if v.IP6.IsValid() {
			args = append(args, "--http6", netip.AddrPortFrom(v.IP6, HTTPPort).String(),
				"--udp6", netip.AddrPortFrom(v.IP6, UDPPort).String())
		}
		if v.Excluded.IsValid() {
			args = append(args, "--also", v.Excluded.String())
		}
		if i == 0 {
			if err := writeDNSRecords(l.dnsRecordsFile(), defaultDNSRecords(s)); err != nil {
				return err
			}
			args = append(args, "--dns", s.DNSAddr().String(), "--dns-records", l.dnsRecordsFile())
		}
		id := echoID(i)
		pid, err := startDaemon(l.RunDir(), id, ns, l.Binary, args...)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			c, err := DialContext(ctx, ns, "tcp", httpAddr)
			cancel()
			if err == nil {
				c.Close()
				break
			}
			if !alive(pid) || time.Now().After(deadline) {
				return fmt.Errorf("echo server in %s did not start: %v; log: %s", ns, err, tail(filepath.Join(l.RunDir(), id+".log")))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// probe sends a UDP echo from every pod until one answers, so that Up
// returns a lab that forwards (and with warm neighbour caches).
func (l *Lab) probe() error {
	s := l.Spec
	srv := netip.AddrPortFrom(s.Server.IP, UDPPort).String()
	buf := make([]byte, 512)
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := DialContext(ctx, s.NS(p.Name), "udp", srv)
			cancel()
			if err != nil {
				return fmt.Errorf("probe from pod %s: %w", p.Name, err)
			}
			ok := false
			for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); {
				c.Write([]byte("probe"))
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				_, err = c.Read(buf)
				ok = err == nil
			}
			c.Close()
			if !ok {
				return fmt.Errorf("pod %s gets no UDP echo from the server at %s within 10 s (%s gateway mode); the lab does not forward", p.Name, srv, l.impl().Mode())
			}
		}
	}
	return nil
}

// Namespaces lists the existing network namespaces of lab name.
func Namespaces(name string) []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), name+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// Down removes lab name, also after a crash: processes started for it (pid
// files) and every process inside its namespaces are stopped, the
// namespaces (with the bridges and links in them) deleted and the run folder
// removed. A lab that is not there is not an error.
func Down(runRoot, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	dir := runDir(runRoot, name)
	nss := Namespaces(name)
	paths := make([]string, len(nss))
	for i, ns := range nss {
		paths[i] = "/run/netns/" + ns
	}
	pids := pidsInNamespaces(paths)
	// The namespaces' inodes name the XDP pins their gateways leave (a
	// SIGTERM below is a graceful stop, which keeps the program attached).
	var inodes []uint64
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			inodes = append(inodes, st.Ino)
		}
	}
	// Processes whose namespace file is gone already (an interrupted Down)
	// are found by their pid files, if they are still ours.
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	for _, f := range files {
		if pid := readPid(f); alive(pid) && ours(pid, name, dir) {
			pids = append(pids, pid)
		}
	}
	if err := killAll(pids, 2*time.Second); err != nil {
		return err
	}
	for _, ino := range inodes {
		if err := xdp.RemoveNamespacePins(ino); err != nil {
			return err
		}
	}
	if len(nss) > 0 {
		lines := make([]string, len(nss))
		for i, ns := range nss {
			lines[i] = "netns del " + ns
		}
		if _, err := runIn(strings.Join(lines, "\n")+"\n", "ip", "-force", "-batch", "-"); err != nil {
			return err
		}
	}
	if left := Namespaces(name); len(left) > 0 {
		return fmt.Errorf("namespaces %v are still there after deleting them", left)
	}
	return os.RemoveAll(dir)
}

// ours reports whether pid runs a command the lab started for lab name.
func ours(pid int, name, dir string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	cmd := string(b)
	return strings.Contains(cmd, "\x00--lab\x00"+name+"\x00") || strings.Contains(cmd, dir+"/")
}
