package steer

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/nsenter"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lab is the test topology:
//
//	pod ──veth── node ──veth──┐
//	                          fabric (bridge br0, 192.0.2.1: the node's default router)
//	             g1   ──veth──┤
//	             g2   ──veth──┘
type testLab struct {
	node, pod, fabric, g1, g2 string
	nodeH, podH, g1H, g2H     netns.NsHandle
}

var (
	podIP4   = addr("198.18.1.2")
	podIP6   = addr("fd00:18:1::2")
	outside4 = addr("203.0.113.10")
	outside6 = addr("2001:db8:100::10")
	nodeVTEP = addr("192.0.2.11")
	g1VTEP   = addr("192.0.2.21")
	g2VTEP   = addr("192.0.2.22")
)

func buildLab(t testing.TB) *testLab {
	t.Helper()
	l := &testLab{}
	l.fabric, _ = newNS(t, "fab")
	l.node, l.nodeH = newNS(t, "node")
	l.pod, l.podH = newNS(t, "pod")
	l.g1, l.g1H = newNS(t, "g1")
	l.g2, l.g2H = newNS(t, "g2")
	ipb(t, l.fabric, "link add br0 type bridge", "link set br0 up",
		"addr add 192.0.2.1/24 dev br0", "addr add 2001:db8:f::1/64 dev br0 nodad")
	for _, m := range []struct{ ns, port, ip string }{{l.node, "n0", "192.0.2.11"}, {l.g1, "p1", "192.0.2.21"}, {l.g2, "p2", "192.0.2.22"}} {
		ipb(t, l.fabric, "link add "+m.port+" type veth peer name eth0 netns "+m.ns, "link set "+m.port+" master br0 up")
		ipb(t, m.ns, "addr add "+m.ip+"/24 dev eth0", "link set eth0 up")
	}
	ipb(t, l.node, "addr add 2001:db8:f::11/64 dev eth0 nodad", "route add default via 192.0.2.1",
		"route add default via 2001:db8:f::1",
		"link add vp1 type veth peer name eth0 netns "+l.pod,
		"addr add 198.18.1.1/24 dev vp1", "addr add fd00:18:1::1/64 dev vp1 nodad", "link set vp1 up")
	ipb(t, l.pod, "addr add 198.18.1.2/24 dev eth0", "addr add fd00:18:1::2/64 dev eth0 nodad", "link set eth0 up",
		"route add default via 198.18.1.1", "route add default via fd00:18:1::1")
	sh(t, "ip", "netns", "exec", l.node, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	return l
}

// setupKernel opens a Kernel for the namespace ns, closed when the test
// ends, and runs its Setup.
func setupKernel(t testing.TB, cfg Config, ns netns.NsHandle) *Kernel {
	t.Helper()
	k, err := NewKernel(cfg, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	if err := k.Setup(); err != nil {
		t.Fatal(err)
	}
	return k
}

func testConfig() Config {
	return Config{
		Underlay:     "eth0",
		ClusterCIDRs: []string{"198.18.0.0/16", "fd00:18::/32"},
		ServiceCIDRs: []string{"198.19.0.0/16"},
		NodeCIDRs:    []string{"192.0.2.0/24", "2001:db8:f::/64"},
		VNI:          4242,
	}.WithDefaults()
}

func testInputs(status ...string) Inputs {
	e := eip("blue", match("team", "blue"), metav1.LabelSelector{},
		[]string{"192.0.2.101", "192.0.2.102", "2001:db8:f::101", "2001:db8:f::102"}, status...)
	return Inputs{
		Node:       "w1",
		Namespaces: map[string]map[string]string{"blue": {"team": "blue"}},
		Pods:       []Pod{{Namespace: "blue", Name: "p1", Node: "w1", IPs: []netip.Addr{podIP4, podIP6}}},
		EgressIPs:  []*egressv1.EgressIP{e},
		VTEPs:      map[string][]netip.Addr{"g1": {g1VTEP}, "g2": {g2VTEP}},
	}
}

var bothGateways = []string{"g1", "192.0.2.101", "g2", "192.0.2.102", "g1", "2001:db8:f::101", "g2", "2001:db8:f::102"}

func ports(from, n int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(from + i)
	}
	return out
}

// leaks are frames on the node's uplink that carry pod traffic to the
// outside without the tunnel.
func leaks(frames []frame) []frame {
	var out []frame
	for _, f := range frames {
		if !f.vxlan && (f.dst == outside4 || f.dst == outside6) {
			out = append(out, f)
		}
	}
	return out
}

func TestSteerInNetns(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	cfg := testConfig()
	k, err := NewKernel(cfg, l.nodeH, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if k.VTEP() != nodeVTEP {
		t.Fatalf("VTEP %v, want %v from eth0", k.VTEP(), nodeVTEP)
	}
	if err := k.Setup(); err != nil {
		t.Fatal(err)
	}
	uplink := capture(t, l.nodeH, "eth0")
	gw1 := capture(t, l.g1H, "eth0")
	gw2 := capture(t, l.g2H, "eth0")

	// Control: an unselected pod's traffic does leave by the uplink, so the
	// capture below can see a leak if there is one.
	// IPv6 frames wait for neighbour discovery of the router: wait for all
	// of them, so none turns up later as a false leak.
	sendUDP(t, l.podH, podIP4, outside4, ports(30000, 2))
	sendUDP(t, l.podH, podIP6, outside6, ports(30000, 2))
	var got4, got6 int
	for deadline := time.Now().Add(5 * time.Second); (got4 < 4 || got6 < 4) && time.Now().Before(deadline); {
		for _, f := range leaks(uplink.take()) {
			if f.dst == outside4 {
				got4++
			} else {
				got6++
			}
		}
	}
	if got4 < 4 || got6 < 4 {
		t.Fatalf("unselected pod: %d IPv4 and %d IPv6 plain frames to the outside on the uplink, want 4 each (capture broken?)", got4, got6)
	}

	t.Run("fail closed before routes", func(t *testing.T) {
		// The pod is selected but only the filter is programmed (the
		// first step of Apply): its traffic must be dropped.
		full := desired(testInputs(bothGateways...), k.Params())
		if _, err := k.Apply(State{Selected: full.Selected}); err != nil {
			t.Fatal(err)
		}
		before, _ := k.Drops()
		sendUDP(t, l.podH, podIP4, outside4, ports(31000, 4))
		sendUDP(t, l.podH, podIP6, outside6, ports(31000, 4))
		if got := leaks(uplink.take()); len(got) != 0 {
			t.Fatalf("%d frames leaked by the uplink before steering: %+v", len(got), got[0])
		}
		if after, _ := k.Drops(); after < before+16 {
			t.Fatalf("filter counted %d drops, want ≥ 16", after-before)
		}
		// Cluster destinations stay reachable.
		sendUDP(t, l.podH, podIP4, addr("192.0.2.1"), ports(31100, 1))
		if !hasPlain(uplink.take(), addr("192.0.2.1")) {
			t.Fatal("traffic to the node network was dropped or steered")
		}
	})

	t.Run("fail closed without gateway", func(t *testing.T) {
		st := desired(testInputs(), k.Params())
		if _, err := k.Apply(st); err != nil {
			t.Fatal(err)
		}
		r := findRoute(t, st, st.Objects[0].Table, "0.0.0.0/0")
		if r.Type != RouteBlackhole {
			t.Fatalf("route %+v, want blackhole", r)
		}
		sendUDP(t, l.podH, podIP4, outside4, ports(32000, 4))
		sendUDP(t, l.podH, podIP6, outside6, ports(32000, 4))
		if got := leaks(uplink.take()); len(got) != 0 {
			t.Fatalf("%d frames leaked without a gateway", len(got))
		}
		if n := countVXLAN(gw1.take()) + countVXLAN(gw2.take()); n != 0 {
			t.Fatalf("%d frames reached gateways that are not assigned", n)
		}
	})

	var steered State
	t.Run("spread over two gateways", func(t *testing.T) {
		steered = desired(testInputs(bothGateways...), k.Params())
		if _, err := k.Apply(steered); err != nil {
			t.Fatal(err)
		}
		sendUDP(t, l.podH, podIP4, outside4, ports(40000, 32))
		sendUDP(t, l.podH, podIP6, outside6, ports(40000, 32))
		sendTCP(t, l.podH, outside4, 16)
		if got := leaks(uplink.take()); len(got) != 0 {
			t.Fatalf("%d frames leaked while steered", len(got))
		}
		flows := map[string]string{} // inner 5-tuple → gateway
		perGW := map[string]map[string]int{"g1": {}, "g2": {}}
		for gw, c := range map[string]*capturer{"g1": gw1, "g2": gw2} {
			vtep := map[string]netip.Addr{"g1": g1VTEP, "g2": g2VTEP}[gw]
			for _, f := range c.take() {
				if !f.vxlan || (f.inDst != outside4 && f.inDst != outside6) {
					continue
				}
				if f.src != nodeVTEP || f.dst != vtep || f.vni != cfg.VNI || f.innerDstMAC != cluster.VTEPMAC(vtep) {
					t.Fatalf("bad encapsulation at %s: %+v", gw, f)
				}
				if f.innerSrc != podIP4 && f.innerSrc != podIP6 {
					t.Fatalf("inner source %v at %s, want the pod", f.innerSrc, gw)
				}
				key := fmt.Sprint(f.innerSrc, f.inSport, f.inDst, f.inDport)
				if prev, ok := flows[key]; ok && prev != gw {
					t.Fatalf("flow %v:%d → %v reached both gateways", f.innerSrc, f.inSport, f.inDst)
				}
				flows[key] = gw
				fam := "v4"
				if f.innerSrc.Is6() {
					fam = "v6"
				}
				if f.inDport == 443 {
					fam = "tcp"
				}
				perGW[gw][fam]++
			}
		}
		t.Logf("frames per gateway and family: %v (%d flows)", perGW, len(flows))
		if len(flows) < 64 {
			t.Fatalf("%d flows arrived at the gateways, want ≥ 64 of the 64 UDP flows (+ TCP)", len(flows))
		}
		for _, fam := range []string{"v4", "v6", "tcp"} {
			if perGW["g1"][fam] == 0 || perGW["g2"][fam] == 0 {
				t.Fatalf("%s flows did not spread over both gateways: %v", fam, perGW)
			}
		}
		// Cluster destinations are not steered.
		sendUDP(t, l.podH, podIP4, addr("192.0.2.1"), ports(41000, 1))
		if !hasPlain(uplink.take(), addr("192.0.2.1")) {
			t.Fatal("traffic to the node network was steered or dropped")
		}
		if n := countVXLAN(gw1.take()) + countVXLAN(gw2.take()); n != 0 {
			t.Fatalf("%d tunnel frames for a cluster destination", n)
		}
	})

	t.Run("reply from a gateway reaches the pod", func(t *testing.T) {
		// Strict reverse-path filtering on the node must not drop replies:
		// the pod's rule also applies to the reverse lookup.
		sh(t, "ip", "netns", "exec", l.node, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.default.rp_filter=1")
		sh(t, "ip", "netns", "exec", l.node, "sysctl", "-qw", "net.ipv4.conf."+cfg.Device+".rp_filter=1")
		pc, err := listenUDP(l.podH, netip.AddrPortFrom(podIP4, 45000))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		// What the gateway sends back (gateway/encap.go): VXLAN to the
		// node's VTEP, inner destination MAC the node's tunnel MAC.
		frame := vxlanReply(cfg.VNI, k.TunnelMAC(), cluster.VTEPMAC(g1VTEP), outside4, podIP4, 9999, 45000, []byte("reply"))
		err = nsenter.Do(l.g1H, func() error {
			return writeUDP(netip.AddrPort{}, netip.AddrPortFrom(nodeVTEP, DefaultPort), frame, 1)
		})
		if err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 100)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("pod got no reply through the tunnel: %v", err)
		}
		if string(buf[:n]) != "reply" || from.(*net.UDPAddr).AddrPort() != netip.AddrPortFrom(outside4, 9999) {
			t.Fatalf("pod got %q from %v", buf[:n], from)
		}
	})

	t.Run("restart reconciles", func(t *testing.T) {
		// Leftovers of an earlier run: a rule and a route in an owned table.
		h, _ := netlink.NewHandleAt(l.nodeH)
		defer h.Close()
		stale := k.nlRule(Rule{Src: addr("198.18.1.99"), Table: cfg.TableBase + 7})
		if err := h.RuleAdd(stale); err != nil {
			t.Fatal(err)
		}
		if err := h.RouteAdd(k.nlRoute(Route{Table: cfg.TableBase + 7, Dst: pfx("0.0.0.0/0"), Type: RouteBlackhole}, 0, 0, nil)); err != nil {
			t.Fatal(err)
		}
		k2, err := NewKernel(cfg, l.nodeH, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer k2.Close()
		if err := k2.Setup(); err != nil {
			t.Fatal(err)
		}
		ch, err := k2.Apply(steered)
		if err != nil {
			t.Fatal(err)
		}
		if ch != (Changes{Removed: 2}) {
			t.Fatalf("restart changed %v, want exactly the 2 leftovers removed", ch)
		}
		if ch, err := k2.Apply(steered); err != nil || !ch.Zero() {
			t.Fatalf("second apply changed %v (%v), want nothing", ch, err)
		}
		got, err := k2.Actual()
		if err != nil {
			t.Fatal(err)
		}
		if !got.Selected[0].IsValid() || len(got.Rules) != 2 || len(got.Routes) != len(steered.Routes) || len(got.FDB) != 2 || len(got.Neighs) != 4 {
			t.Fatalf("after restart: %+v", got)
		}
		if n := strings.Count(rulesAt(t, l.node), "lookup"); n != 2 {
			t.Fatalf("%d rules at priority 27000, want 2 (no duplicates)", n)
		}
	})

	t.Run("gateway move", func(t *testing.T) {
		st := desired(testInputs("g1", "192.0.2.101", "g1", "2001:db8:f::101"), k.Params())
		if _, err := k.Apply(st); err != nil {
			t.Fatal(err)
		}
		sendUDP(t, l.podH, podIP4, outside4, ports(42000, 16))
		if n := countVXLAN(gw2.take()); n != 0 {
			t.Fatalf("%d frames still go to the removed gateway", n)
		}
		if n := countVXLAN(gw1.take()); n < 32 {
			t.Fatalf("%d frames at g1, want all 32", n)
		}
		if got := leaks(uplink.take()); len(got) != 0 {
			t.Fatalf("%d frames leaked during the move: %+v", len(got), got)
		}
	})

	t.Run("removal removes everything", func(t *testing.T) {
		in := testInputs()
		in.EgressIPs = nil
		if _, err := k.Apply(desired(in, k.Params())); err != nil {
			t.Fatal(err)
		}
		got, err := k.Actual()
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(State{}) {
			t.Fatalf("left behind: %+v", got)
		}
		if out := rulesAt(t, l.node); out != "" {
			t.Fatalf("rules left: %s", out)
		}
		// No longer selected: the pod leaves with the node's routing again.
		sendUDP(t, l.podH, podIP4, outside4, ports(43000, 2))
		if got := leaks(uplink.take()); len(got) < 4 {
			t.Fatalf("unselected pod's traffic: %d frames on the uplink, want 4", len(got))
		}
	})

	t.Run("cleanup", func(t *testing.T) {
		if _, err := k.Apply(desired(testInputs(bothGateways...), k.Params())); err != nil {
			t.Fatal(err)
		}
		if err := k.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := sh(t, "ip", "-n", l.node, "link", "show"); strings.Contains(out, cfg.Device) {
			t.Fatalf("device left: %s", out)
		}
		if out := rulesAt(t, l.node); out != "" {
			t.Fatalf("rules left: %s", out)
		}
		if out := sh(t, "ip", "netns", "exec", l.node, "nft", "list", "tables"); strings.Contains(out, NFTTable) {
			t.Fatalf("nftables table left: %s", out)
		}
	})
}

func hasPlain(frames []frame, dst netip.Addr) bool {
	for _, f := range frames {
		if !f.vxlan && f.dst == dst {
			return true
		}
	}
	return false
}

func countVXLAN(frames []frame) int {
	n := 0
	for _, f := range frames {
		if f.vxlan && (f.inDst == outside4 || f.inDst == outside6) {
			n++
		}
	}
	return n
}

// rulesAt lists the IPv4 and IPv6 rules at the agent's priority.
func rulesAt(t *testing.T, ns string) string {
	return sh(t, "ip", "-4", "-n", ns, "rule", "show", "pref", "27000") + sh(t, "ip", "-6", "-n", ns, "rule", "show", "pref", "27000")
}

func listenUDP(ns netns.NsHandle, ap netip.AddrPort) (net.PacketConn, error) {
	var pc net.PacketConn
	err := nsenter.Do(ns, func() error {
		var err error
		pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		return err
	})
	return pc, err
}

// vxlanReply builds a VXLAN payload carrying an IPv4/UDP packet.
func vxlanReply(vni uint32, dstMAC, srcMAC [6]byte, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8+14+20+8+len(payload))
	b[0] = 0x08
	binary.BigEndian.PutUint32(b[4:], vni<<8)
	eth := b[8:]
	copy(eth[0:6], dstMAC[:])
	copy(eth[6:12], srcMAC[:])
	binary.BigEndian.PutUint16(eth[12:], 0x0800)
	ip := eth[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(udp[8:], payload)
	return b
}
