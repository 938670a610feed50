package lab

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/nstest"
)

// testDualStack checks the dual-stack EgressIP "dual" of a managed lab: its
// IPv4 and IPv6 egress IPs on two gateways, the IPv6 one claimed as /128
// without DAD, HTTP, UDP and ping from w1-p3 over both families seen with
// the object's IP of that family, unsolicited IPv6 reaching no pod, PMTU
// discovery over IPv6, fail-closed while the object has no IPv6 egress IP,
// and unsolicited neighbour advertisements when the IP is claimed again.
func testDualStack(t *testing.T, l *Lab) {
	s := l.Spec
	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := dualAssignment(t, st)
	p := st.Pod("w1-p3")
	if p.Policy != "dual" || !p.IP6.IsValid() {
		t.Fatalf("w1-p3 is not the dual-stack pod of EgressIP dual: %+v", p)
	}
	checkNoDAD(t, l, v6)

	t.Run("Probes", func(t *testing.T) {
		for _, kind := range append(append([]string{}, ProbeKinds...), ProbeKinds6...) {
			want := v4.IP
			if strings.HasSuffix(kind, "6") {
				want = v6.IP
			}
			got, err := probeRetry(s, p.Namespace, kind)
			if err != nil || got != want {
				t.Errorf("w1-p3 %s: server saw %v (%v), want %v", kind, got, err, want)
			}
		}
	})
	t.Run("Unsolicited6", func(t *testing.T) { checkUnsolicited(t, l.Spec, p.Name, p.Namespace, l.Spec.Server.IP6, v6.IP) })
	t.Run("PMTU6", func(t *testing.T) { testPMTU6(t, l, p.Name, p.Namespace, p.IP6, l.Spec.Server.IP6, v6.IP) })
	t.Run("Reclaim6", func(t *testing.T) { testReclaim6(t, l, p) })
}

// dualAssignment returns where the controller put dual's two IPs; they
// must be on two different gateways.
func dualAssignment(t *testing.T, st *Status) (v4, v6 AssignmentStatus) {
	t.Helper()
	for _, a := range st.Assignment {
		if a.EgressIP == "dual" && a.IP.Is4() {
			v4 = a
		} else if a.EgressIP == "dual" {
			v6 = a
		}
	}
	if v4.Node == "" || v6.Node == "" || v4.Node == v6.Node || !v6.IP.Is6() {
		t.Fatalf("dual-stack EgressIP: IPv4 %v on %q, IPv6 %v on %q; want both assigned, to two gateways", v4.IP, v4.Node, v6.IP, v6.Node)
	}
	return v4, v6
}

// checkNoDAD checks the IPv6 egress IP sits on its gateway's eth0 as a
// /128 without duplicate address detection and is not tentative.
func checkNoDAD(t *testing.T, l *Lab, a AssignmentStatus) {
	t.Helper()
	out, err := run("ip", "-n", l.Spec.NS(a.Node), "-6", "-o", "addr", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " "+a.IP.String()+"/128 ") {
			if !strings.Contains(line, "nodad") || strings.Contains(line, "tentative") || strings.Contains(line, "dadfailed") {
				t.Errorf("%s: %v is claimed without nodad or is tentative: %s", a.Node, a.IP, line)
			}
			return
		}
	}
	t.Errorf("%s's eth0 has no %v/128:\n%s", a.Node, a.IP, out)
}

func probeRetry(s *Spec, ns, kind string) (netip.Addr, error) {
	var got netip.Addr
	var err error
	for try := 0; try < 3; try++ {
		if got, err = s.ProbeSource(ns, kind, 2*time.Second); err == nil {
			break
		}
	}
	return got, err
}

// ipv6Frame returns the IPv6 packet inside an Ethernet frame, or nil.
func ipv6Frame(f []byte) []byte {
	if len(f) < 14+40 || binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_IPV6 || f[14]>>4 != 6 {
		return nil
	}
	return f[14:]
}

func ip6Src(p []byte) netip.Addr { return netip.AddrFrom16([16]byte(p[8:24])) }
func ip6Dst(p []byte) netip.Addr { return netip.AddrFrom16([16]byte(p[24:40])) }

// testPMTU6: with a 1280-byte hop between router and server, the router's
// packet-too-big about an upload from pod (name, namespace ns, IPv6
// address podIP) to the server's IPv6 address, leaving as the IPv6 egress
// IP eip, is translated back to the pod (quoting the pod's own packet), the
// pod caches MTU 1280 and the 8 MB upload completes.
func testPMTU6(t *testing.T, l *Lab, name, ns string, podIP, server, eip netip.Addr) {
	s := l.Spec
	const mtu = 1280
	rtr := s.NS(s.Router.Name)
	run("ip", "-n", ns, "-6", "route", "flush", "cache")
	if err := ipBatch(rtr, fmt.Sprintf("link set eth1 mtu %d", mtu)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ipBatch(rtr, "link set eth1 mtu 1500")
		run("ip", "-n", ns, "-6", "route", "flush", "cache")
	})
	c := startCapture(t, ns, "eth0")
	const n = 8 << 20
	resp, err := podClient(ns).Post(fmt.Sprintf("http://%v/sink", netip.AddrPortFrom(server, HTTPPort)), "application/octet-stream", Pattern(n))
	if err != nil {
		t.Fatalf("IPv6 upload over the %d-byte hop: %v", mtu, err)
	}
	defer resp.Body.Close()
	checkSink(t, resp.Body, n, eip)
	var tooBig int
	for _, f := range c.Stop() {
		ip := ipv6Frame(f)
		if ip == nil || ip[6] != 58 || ip6Dst(ip) != podIP {
			continue
		}
		m := ip[40:]
		if len(m) >= 8+40 && m[0] == 2 && binary.BigEndian.Uint32(m[4:]) == mtu && ip6Src(m[8:]) == podIP {
			tooBig++ // quotes the pod's own, untranslated packet
		}
	}
	if tooBig == 0 {
		t.Fatalf("pod %s saw no ICMPv6 packet-too-big (mtu %d) quoting its own packet", name, mtu)
	}
	out, err := run("ip", "-n", ns, "-6", "route", "get", server.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("mtu %d", mtu)) {
		t.Fatalf("pod %s has no IPv6 path MTU %d towards the server: %s", name, mtu, out)
	}
	t.Logf("pod %s: %d packet-too-big received; route: %s", name, tooBig, strings.TrimSpace(out))
}

// testReclaim6 takes the IPv6 egress IP out of the manifest: the gateway
// releases it and the pod's IPv6 traffic is held back (never leaves as the
// node). Put back, the IP is claimed with unsolicited neighbour
// advertisements, captured on the router, and IPv6 works again.
func testReclaim6(t *testing.T, l *Lab, p PodStatus) {
	s := l.Spec
	path := filepath.Join(ObjectsDir(l.RunDir()), "egressip-"+DualStackManifest)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := l.Status()
	_, v6 := dualAssignment(t, st)
	v4only := bytes.Replace(orig, []byte(`  - "`+v6.IP.String()+`"`+"\n"), nil, 1)
	if bytes.Equal(v4only, orig) {
		t.Fatalf("cannot find %v in %s", v6.IP, path)
	}
	restored := false
	restore := func() {
		if !restored {
			os.WriteFile(path, orig, 0o644)
			restored = true
		}
	}
	t.Cleanup(restore)
	passes := steerMetric(t, s, p.Node, "egret_steer_reconciles_total")
	if err := os.WriteFile(path, v4only, 0o644); err != nil {
		t.Fatal(err)
	}
	nstest.UntilEvery(t, fmt.Sprintf("%s releasing %v once it left the manifest", v6.Node, v6.IP), 5*time.Second, 50*time.Millisecond, func() (bool, string) {
		out, _ := run("ip", "-n", s.NS(v6.Node), "-6", "-o", "addr", "show", "dev", "eth0")
		return !strings.Contains(out, v6.IP.String()+"/128"), out
	})
	// Held back: the selected pod's IPv6 never leaves with the node's address.
	// The pod's steer agent has reconciled since the write: the change its
	// source sees starts a pass. (Its 30 s resync falling between the write
	// and the source's next look would count too; that leaves a window of
	// one poll in 30 s, where the old fixed wait had none it could show.)
	nstest.UntilEvery(t, p.Node+"'s steer agent reconciling after the change", 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		n := steerMetric(t, s, p.Node, "egret_steer_reconciles_total")
		return n > passes, fmt.Sprintf("%v passes, %v before the write", n, passes)
	})
	if got, err := s.ProbeSource(p.Namespace, ProbeUDP6, time.Second); err == nil {
		t.Errorf("w1-p3's IPv6 left as %v while EgressIP dual had no IPv6 address; want it held back", got)
	}

	capt := startCapture(t, s.NS(s.Router.Name), "eth0")
	restore()
	if _, err := l.WaitAssigned(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ = l.Status()
	_, back := dualAssignment(t, st)
	var got netip.Addr
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if got, err = s.ProbeSource(p.Namespace, ProbeUDP6, time.Second); err == nil && got == back.IP {
			break
		}
	}
	if got != back.IP {
		t.Fatalf("w1-p3's IPv6 does not leave as %v (on %s) after the IP returned: %v, %v", back.IP, back.Node, got, err)
	}
	mac := linkMAC(t, s.NS(back.Node), "eth0")
	na := 0
	for _, f := range capt.Stop() {
		ip := ipv6Frame(f)
		// Unsolicited NA: ICMPv6 136 to all-nodes, target = the egress IP,
		// override set, solicited clear, from the claiming gateway's MAC.
		if ip == nil || ip[6] != 58 || len(ip) < 40+24 || ip[40] != 136 || !bytes.Equal(f[6:12], mac) {
			continue
		}
		m := ip[40:]
		if ip6Dst(ip) == netip.MustParseAddr("ff02::1") && netip.AddrFrom16([16]byte(m[8:24])) == back.IP && m[4]&0x40 == 0 && m[4]&0x20 != 0 {
			na++
		}
	}
	if na == 0 {
		t.Errorf("no unsolicited neighbour advertisement for %v from %s (%s) reached the router", back.IP, back.Node, net.HardwareAddr(mac))
	}
	t.Logf("%v released and claimed again on %s with %d unsolicited NAs", back.IP, back.Node, na)
	checkNoDAD(t, l, back)
}

func linkMAC(t *testing.T, ns, dev string) []byte {
	t.Helper()
	var mac []byte
	err := Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}
