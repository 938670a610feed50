package lab

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// testIPv6Only checks what only the IPv6-only lab has: the workers' tunnel
// device is VXLAN over IPv6 with UDP checksums and the 70-byte overhead
// (MTU 1430), the pods' links carry that MTU, tunnel frames on the fabric
// are IPv6 UDP with a non-zero checksum both ways, every egress IP is a
// /128 without DAD, unsolicited inbound to an IPv6 egress IP reaches no
// pod, and PMTU discovery works through the IPv6 tunnel.
func testIPv6Only(t *testing.T, l *Lab, st *Status) {
	s := l.Spec
	for _, w := range s.Workers {
		out, err := run("ip", "-n", s.NS(w.Name), "-d", "link", "show", "dev", "egret0")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"mtu 1430 ", "vxlan id 100 local " + w.IP.String() + " ", " udpcsum ", " noudp6zerocsumrx "} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: egret0 lacks %q:\n%s", w.Name, want, out)
			}
		}
		for _, p := range w.Pods {
			if out, _ := run("ip", "-n", s.NS(p.Name), "link", "show", "dev", "eth0"); !strings.Contains(out, "mtu 1430 ") {
				t.Errorf("pod %s: eth0 is not at MTU 1430: %s", p.Name, out)
			}
		}
	}
	for _, a := range st.Assignment {
		checkNoDAD(t, l, a)
	}
	p := st.Pod("w1-p2") // green: one egress IP, so every flow leaves as it
	if p.Policy != "green" || len(p.EgressIPs) != 1 || !p.EgressIPs[0].Is6() {
		t.Fatalf("w1-p2 is not green's pod with one IPv6 egress IP: %+v", p)
	}
	eip, gw := p.EgressIPs[0], p.Gateways[0]

	t.Run("TunnelFrames", func(t *testing.T) {
		// Captures see incoming frames only, and the gateway's AF_XDP
		// socket takes its frames before a capture there could: the
		// worker's bridge port in the fabric sees what w1 sends, w1's eth0
		// what it gets.
		w := s.Workers[0]
		port := startCapture(t, s.NS("fabric"), w.Name)
		c := startCapture(t, s.NS(w.Name), "eth0")
		if got, err := probeRetry(s, p.Namespace, ProbeUDP); err != nil || got != eip {
			t.Fatalf("w1-p2 udp: server saw %v (%v), want %v", got, err, eip)
		}
		var in, out int
		for _, f := range append(c.Stop(), port.Stop()...) {
			ip := ipv6Frame(f)
			if ip == nil || ip[6] != 17 || len(ip) < 48 || binary.BigEndian.Uint16(ip[42:]) != VXLANPort {
				continue
			}
			if binary.BigEndian.Uint16(ip[46:]) == 0 {
				t.Errorf("a tunnel frame over IPv6 has a zero UDP checksum: %v → %v", ip6Src(ip), ip6Dst(ip))
			}
			switch g := s.Gateway(gw).IP; {
			case ip6Src(ip) == w.IP && ip6Dst(ip) == g:
				out++
			case ip6Src(ip) == g && ip6Dst(ip) == w.IP:
				in++
			}
		}
		if in == 0 || out == 0 {
			t.Errorf("%s sent %d VXLAN-over-IPv6 frames to %s and got %d back; want both", w.Name, out, gw, in)
		}
	})
	t.Run("TunnelFromStranger", func(t *testing.T) { testTunnelFromStranger6(t, l) })
	t.Run("Unsolicited", func(t *testing.T) { checkUnsolicited(t, s, p.Name, p.Namespace, s.Server.IP, eip) })
	t.Run("PMTU", func(t *testing.T) { testPMTU6(t, l, p.Name, p.Namespace, p.IP, s.Server.IP, eip) })
}

// ndWatch captures on the router while a gateway fails over, to check
// neighbour discovery for the moved IPv6 egress IPs: the new owner
// announces each with unsolicited neighbour advertisements, the killed
// gateway (fenced, its claims still on its eth0) never advertises one after
// the kill, not even when the router solicits the IP afresh, and the
// router's neighbour entry ends up on the new owner's MAC.
type ndWatch struct {
	c      *capture
	killed []byte // MAC of the gateway that is killed
}

func watchND(t *testing.T, l *Lab, gw string) *ndWatch {
	return &ndWatch{c: startCapture(t, l.Spec.NS(l.Spec.Router.Name), "eth0"), killed: linkMAC(t, l.Spec.NS(gw), "eth0")}
}

func (w *ndWatch) check(t *testing.T, l *Lab, moved []AssignmentStatus) {
	t.Helper()
	s := l.Spec
	rtr := s.NS(s.Router.Name)
	// Solicit each moved IP afresh: the router forgets it and sends to it,
	// so a multicast neighbour solicitation reaches every gateway, the
	// killed one included.
	for _, m := range moved {
		if !m.IP.Is6() {
			continue
		}
		run("ip", "-n", rtr, "-6", "neigh", "del", m.IP.String(), "dev", "eth0")
		if c, err := DialContext(t.Context(), rtr, "udp", netip.AddrPortFrom(m.IP, 9).String()); err == nil {
			c.Write([]byte("solicit"))
			c.Close()
		}
	}
	// sleep: an advertisement the killed gateway must not send raises no event; frames in flight get this long
	time.Sleep(300 * time.Millisecond)
	frames := w.c.Stop()
	for _, m := range moved {
		if !m.IP.Is6() {
			continue
		}
		mac := linkMAC(t, s.NS(m.Node), "eth0")
		unsolicited := 0
		for _, f := range frames {
			ip := ipv6Frame(f)
			if ip == nil || ip[6] != 58 || len(ip) < 40+24 || ip[40] != 136 || netip.AddrFrom16([16]byte(ip[48:64])) != m.IP {
				continue
			}
			if bytes.Equal(f[6:12], w.killed) {
				t.Errorf("the killed gateway (%s) advertised %v after the kill: its fence should keep ND mute", net.HardwareAddr(w.killed), m.IP)
			}
			if bytes.Equal(f[6:12], mac) && ip6Dst(ip) == netip.MustParseAddr("ff02::1") && ip[44]&0x40 == 0 && ip[44]&0x20 != 0 {
				unsolicited++
			}
		}
		if unsolicited == 0 {
			t.Errorf("no unsolicited neighbour advertisement for %v from its new owner %s reached the router", m.IP, m.Node)
		}
		// The router may still be probing the old entry; new traffic has
		// gone through (Failover saw it), so the entry must have moved.
		var out string
		nstest.Poll(3*time.Second, 100*time.Millisecond, func() bool {
			out, _ = run("ip", "-n", s.NS(s.Router.Name), "-6", "neigh", "show", m.IP.String())
			return strings.Contains(out, "lladdr "+net.HardwareAddr(mac).String())
		})
		if !strings.Contains(out, "lladdr "+net.HardwareAddr(mac).String()) {
			t.Errorf("the router's neighbour entry for %v is %q, want %s's MAC %s", m.IP, strings.TrimSpace(out), m.Node, net.HardwareAddr(mac))
		}
		t.Logf("%v moved to %s: %d unsolicited NAs reached the router", m.IP, m.Node, unsolicited)
	}
}

// testTunnelFromStranger6: a VXLAN frame of the lab's VNI over IPv6 from a
// host on the node network that is no gateway (the controller namespace),
// carrying an IPv6 datagram for pod w1-p1 as if from the server, is dropped
// by the steer agent's tunnel filter on w1 (its IPv6 counter rises) and
// never reaches the pod.
func testTunnelFromStranger6(t *testing.T, l *Lab) {
	s := l.Spec
	w := s.Workers[0]
	pod := w.Pods[0]
	marker := []byte("FORGED-TUNNEL-FRAME-OVER-IPV6")
	mac := linkMAC(t, s.NS(w.Name), "egret0")
	inner := make([]byte, 14+40+8+len(marker))
	copy(inner[0:6], mac)
	copy(inner[6:12], []byte{0x02, 0x66, 0, 0, 0, 0x21})
	binary.BigEndian.PutUint16(inner[12:], 0x86dd)
	ip := inner[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(marker)))
	ip[6], ip[7] = 17, 64
	src, dst := s.Server.IP.As16(), pod.IP.As16()
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	udp := ip[40:]
	binary.BigEndian.PutUint16(udp[0:], UDPPort)
	binary.BigEndian.PutUint16(udp[2:], 40000)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(marker)))
	copy(udp[8:], marker)
	vx := append([]byte{0x08, 0, 0, 0, byte(VNI >> 16), byte(VNI >> 8), byte(VNI), 0}, inner...)

	before := steerDrops6(t, s.NS(w.Name))
	c := startCapture(t, s.NS(pod.Name), "eth0")
	conn, err := DialContext(t.Context(), s.NS(s.Controller.Name), "udp", netip.AddrPortFrom(w.IP, VXLANPort).String())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		conn.Write(vx)
	}
	conn.Close()
	// The filter's counter says the frames were judged; only then is the
	// pod's capture complete.
	nstest.Poll(3*time.Second, 100*time.Millisecond, func() bool { return steerDrops6(t, s.NS(w.Name)) >= before+3 })
	for _, f := range c.Stop() {
		if bytes.Contains(f, marker) {
			t.Fatalf("pod %s received a tunnel frame sent by %v, which is no gateway", pod.Name, s.Controller.IP)
		}
	}
	if after := steerDrops6(t, s.NS(w.Name)); after < before+3 {
		t.Errorf("the steer agent's IPv6 tunnel filter on %s counted %d → %d packets, want 3 more", w.Name, before, after)
	}
}

// steerDrops6 reads the packet counter of the steer agent's rule that drops
// tunnel frames over IPv6 from senders that are no gateway.
func steerDrops6(t *testing.T, ns string) int {
	t.Helper()
	out, err := nsExec(ns, "nft", "list", "chain", "inet", "egret-steer", "input")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "ip6 saddr != @peers6") {
			continue
		}
		f := strings.Fields(line)
		for i := range f[:len(f)-1] {
			if f[i] == "packets" {
				n, err := strconv.Atoi(f[i+1])
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatalf("no IPv6 tunnel filter rule in %s:\n%s", ns, out)
	return 0
}
