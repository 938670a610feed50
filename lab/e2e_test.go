package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testModes are the gateway modes TestLab runs: EGRET_LAB_GATEWAY picks one
// (and egret then must work); without it, kernel always and egret as soon as
// the binary has `egret gateway`.
func testModes(t *testing.T) []string {
	switch m := os.Getenv("EGRET_LAB_GATEWAY"); m {
	case ModeKernel, ModeEgret:
		return []string{m}
	case "":
		return []string{ModeKernel, ModeEgret}
	default:
		t.Fatalf("EGRET_LAB_GATEWAY=%q: use %q or %q", m, ModeKernel, ModeEgret)
	}
	return nil
}

// TestLab runs the end-to-end checks against one lab per gateway mode and
// underlay: the default lab (VXLAN over IPv4) and the IPv6-only lab (VXLAN
// over IPv6; subtests ipv6-kernel, ipv6-egret), where every check runs over
// IPv6 (ICMPv6 echo, packet-too-big instead of frag-needed).
func TestLab(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lab test; skipped with -short")
	}
	requireRoot(t)
	// Lab names take one letter per mode and underlay (testLabName).
	kinds := map[string]string{ModeKernel: "k", ModeEgret: "e", "ipv6-" + ModeKernel: "x", "ipv6-" + ModeEgret: "y"}
	for _, u := range []struct{ underlay, prefix string }{{UnderlayIPv4, ""}, {UnderlayIPv6, "ipv6-"}} {
		for _, mode := range testModes(t) {
			t.Run(u.prefix+mode, func(t *testing.T) {
				l := upLabUnderlay(t, testLabName(kinds[u.prefix+mode]), mode, u.underlay)
				t.Run("Echo", func(t *testing.T) { testEcho(t, l) })
				t.Run("Unsolicited", func(t *testing.T) { testUnsolicited(t, l) })
				t.Run("Transfer200MB", func(t *testing.T) { testTransfer(t, l) })
				t.Run("Iperf3", func(t *testing.T) { testIperf3(t, l) })
				t.Run("PMTU", func(t *testing.T) { testPMTU(t, l) })
				t.Run("PodMTU1500", func(t *testing.T) { testPodMTU1500(t, l) })
			})
		}
	}
}

type labPod struct {
	w WorkerNode
	p Pod
}

func pods(s *Spec) []labPod {
	var out []labPod
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			out = append(out, labPod{w, p})
		}
	}
	return out
}

// testEcho: TCP, UDP and ICMP from every pod reach the server with the
// pod's expected source, and the replies come back.
func testEcho(t *testing.T, l *Lab) {
	s := l.Spec
	srvNS := s.NS(s.Server.Name)
	icmpSeen, err := ListenPacket(srvNS, "ip4:icmp", "0.0.0.0")
	if err != nil {
		t.Fatalf("ICMP listener in the server namespace: %v", err)
	}
	defer icmpSeen.Close()
	seen := map[string]netip.Addr{}
	for i, lp := range pods(s) {
		ns, want := s.NS(lp.p.Name), s.ExpectedSource(lp.w, lp.p)
		if got := httpGetSource(t, ns, s).Addr(); got != want {
			t.Errorf("%s: HTTP: server saw %v, want %v", lp.p.Name, got, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		uc, err := DialContext(ctx, ns, "udp", netip.AddrPortFrom(s.Server.IP, UDPPort).String())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := udpEcho(t, uc, "udp from "+lp.p.Name).Addr(); got != want {
			t.Errorf("%s: UDP: server saw %v, want %v", lp.p.Name, got, want)
		}
		uc.Close()

		if s.IPv6Only() {
			// ICMPv6 echo; PingSource checks the reply and what the server saw.
			if got, err := s.PingSource(ns, 2*time.Second); err != nil || got != want {
				t.Errorf("%s: ICMPv6 echo: server saw %v (%v), want %v", lp.p.Name, got, err, want)
			}
			seen[lp.p.Name] = want
			continue
		}
		// ICMP: the kernel answers; a raw socket on the server side shows
		// the request's source.
		marker := []byte(fmt.Sprintf("egret-lab-icmp-%s-%d", lp.p.Name, i))
		pc, err := ListenPacket(ns, "ip4:icmp", "0.0.0.0")
		if err != nil {
			t.Fatal(err)
		}
		id := uint16(0x4500 + i)
		if _, err := pc.WriteTo(icmpEcho(id, 1, marker), &net.IPAddr{IP: s.Server.IP.AsSlice()}); err != nil {
			t.Fatalf("%s: ICMP send: %v", lp.p.Name, err)
		}
		if !readICMP(pc, 0, id, marker, s.Server.IP) {
			t.Errorf("%s: no ICMP echo reply from %v", lp.p.Name, s.Server.IP)
		}
		pc.Close()
		if !readICMPFrom(icmpSeen, 8, id, marker, want) {
			t.Errorf("%s: the server saw no ICMP echo request from %v", lp.p.Name, want)
		}
		seen[lp.p.Name] = want
	}
	// Two pods of one policy on different nodes share its egress IP; a pod
	// without a policy is not steered.
	if seen["w1-p1"] != seen["w2-p1"] || !seen["w1-p1"].IsValid() {
		t.Errorf("pods of policy blue egress as %v and %v, want one shared egress IP", seen["w1-p1"], seen["w2-p1"])
	}
	if w2 := s.Workers[1]; seen["w2-p2"] != w2.IP {
		t.Errorf("unselected pod w2-p2 egresses as %v, want its node's %v", seen["w2-p2"], w2.IP)
	}
}

// readICMP waits for an ICMP message of type typ with id and payload from src.
func readICMP(pc net.PacketConn, typ byte, id uint16, payload []byte, src netip.Addr) bool {
	return readICMPFrom(pc, typ, id, payload, src)
}

func readICMPFrom(pc net.PacketConn, typ byte, id uint16, payload []byte, src netip.Addr) bool {
	buf := make([]byte, 2048)
	deadline := time.Now().Add(3 * time.Second)
	pc.SetReadDeadline(deadline)
	for time.Now().Before(deadline) {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return false
		}
		m := buf[:n]
		if len(m) < 8 || m[0] != typ || binary.BigEndian.Uint16(m[4:]) != id || !bytes.Equal(m[8:], payload) {
			continue
		}
		if a, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP); ok && a.Unmap() == src {
			return true
		}
	}
	return false
}

// testUnsolicited: packets from the outside to an egress IP that match no
// flow a pod opened reach no pod, while the pod's own flow still works.
func testUnsolicited(t *testing.T, l *Lab) {
	s := l.Spec
	p := s.Workers[0].Pods[0]
	eip, _, _ := s.Steering(p)
	checkUnsolicited(t, s, p.Name, s.NS(p.Name), s.Server.IP, eip)
}

// checkUnsolicited: UDP, TCP and ICMP from the server to egress IP eip
// that no pod flow asked for reach no pod, while the flow pod name (in
// namespace ns) opens to server, of eip's family, does (so the captures
// are shown to work).
func checkUnsolicited(t *testing.T, s *Spec, name, ns string, server, eip netip.Addr) {
	v6 := eip.Is6()
	fam := "IPv4"
	if v6 {
		fam = "IPv6"
	}
	var caps []*capture
	for _, lp := range pods(s) {
		caps = append(caps, startCapture(t, s.NS(lp.p.Name), "eth0"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	uc, err := DialContext(ctx, ns, "udp", netip.AddrPortFrom(server, UDPPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	mapped := udpEcho(t, uc, "open an "+fam+" flow")
	if mapped.Addr() != eip {
		t.Fatalf("pod %s egresses over %s as %v, want %v", name, fam, mapped, eip)
	}
	var tag [8]byte
	rand.Read(tag[:])
	bad := "UNSOLICITED-" + fam + "-" + hex.EncodeToString(tag[:])
	srvNS := s.NS(s.Server.Name)
	// From another source port to the mapped port (address-and-port
	// dependent filtering), and to ports nobody opened.
	for _, port := range []uint16{mapped.Port(), 53, 4789, 8081, 40000} {
		c, err := DialContext(ctx, srvNS, "udp", netip.AddrPortFrom(eip, port).String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(bad))
		c.Close()
	}
	for _, port := range []uint16{mapped.Port(), 22, 80} {
		tctx, tcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if c, err := DialContext(tctx, srvNS, "tcp", netip.AddrPortFrom(eip, port).String()); err == nil {
			c.Close()
			t.Errorf("a TCP connection from the outside to %v was accepted", netip.AddrPortFrom(eip, port))
		}
		tcancel()
	}
	network, laddr, req := "ip4:icmp", "0.0.0.0", icmpEcho(0x7777, 1, []byte(bad))
	if v6 {
		// ICMPv6 echo request; the kernel fills in the checksum.
		network, laddr = "ip6:ipv6-icmp", "::"
		req[0], req[2], req[3] = 128, 0, 0
	}
	icmp, err := ListenPacket(srvNS, network, laddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := icmp.WriteTo(req, &net.IPAddr{IP: eip.AsSlice()}); err != nil {
		t.Errorf("ICMP echo to %v: %v", eip, err)
	}
	icmp.Close()
	// The pod's own flow still works: this reply must be captured, which
	// proves the captures see what reaches the pods.
	good := "SOLICITED-" + fam + "-" + hex.EncodeToString(tag[:])
	udpEcho(t, uc, good)
	// sleep: an unsolicited packet that must not reach a pod raises no event; frames in flight get this long
	time.Sleep(300 * time.Millisecond)
	sawGood := false
	for i, c := range caps {
		pod := pods(s)[i].p.Name
		for _, f := range c.Stop() {
			if bytes.Contains(f, []byte(bad)) {
				t.Errorf("pod %s received an unsolicited %s packet: % x", pod, fam, f)
			}
			if bytes.Contains(f, []byte(good)) && pod == name {
				sawGood = true
			}
			if ip, proto, l4 := serverPacket(f, v6, server); ip != nil && !(proto == 17 && srcPort(l4) == UDPPort) && !(proto == 6 && srcPort(l4) == HTTPPort) && !(v6 && proto == 58) {
				t.Errorf("pod %s received an %s packet from the server that no pod flow explains: % x", pod, fam, ip)
			}
		}
	}
	if !sawGood {
		t.Fatalf("the capture in %s did not see the reply of its own %s flow; the check above proves nothing", name, fam)
	}
}

// serverPacket returns the IP packet in frame, its protocol and what
// follows its header if it is of the family v6 says and comes from server;
// otherwise ip is nil.
func serverPacket(frame []byte, v6 bool, server netip.Addr) (ip []byte, proto byte, l4 []byte) {
	if v6 {
		if ip = ipv6Frame(frame); ip == nil || ip6Src(ip) != server {
			return nil, 0, nil
		}
		return ip, ip[6], ip[40:]
	}
	if ip = ipv4(frame); ip == nil || ipSrc(ip) != server {
		return nil, 0, nil
	}
	return ip, ip[9], ipL4(ip)
}

// srcPort is the source port of a UDP or TCP header, 0 if l4 is too short.
func srcPort(l4 []byte) uint16 {
	if len(l4) < 2 {
		return 0
	}
	return binary.BigEndian.Uint16(l4)
}

// testTransfer: 200 MB from the server to a steered pod arrive intact.
func testTransfer(t *testing.T, l *Lab) {
	s := l.Spec
	const n = 200 << 20
	h := sha256.New()
	if _, err := io.Copy(h, Pattern(n)); err != nil {
		t.Fatal(err)
	}
	want := h.Sum(nil)
	p := s.Workers[0].Pods[0]
	start := time.Now()
	resp, err := podClient(s.NS(p.Name)).Get(fmt.Sprintf("http://%v/bytes?n=%d", netip.AddrPortFrom(s.Server.IP, HTTPPort), n))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h.Reset()
	got, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("download after %d bytes: %v", got, err)
	}
	el := time.Since(start)
	if got != n || !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("received %d bytes with sha256 %x, want %d bytes with %x", got, h.Sum(nil), n, want)
	}
	t.Logf("200 MB to %s through its gateway in %v (%.0f Mbit/s)", p.Name, el.Round(time.Millisecond), float64(n)*8/el.Seconds()/1e6)
	// And the other way, with the server's hash.
	body := Pattern(64 << 20)
	resp2, err := podClient(s.NS(p.Name)).Post(fmt.Sprintf("http://%v/sink", netip.AddrPortFrom(s.Server.IP, HTTPPort)), "application/octet-stream", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	checkSink(t, resp2.Body, 64<<20, mustSteer(s, p))
}

func mustSteer(s *Spec, p Pod) netip.Addr {
	e, _, _ := s.Steering(p)
	return e
}

// checkSink compares the server's "<src> <bytes> <sha256>" with Pattern(n).
func checkSink(t *testing.T, r io.Reader, n int64, src netip.Addr) {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("sink answer: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("sink answer %q", line)
	}
	h := sha256.New()
	io.Copy(h, Pattern(n))
	if f[1] != fmt.Sprint(n) || f[2] != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("server received %s bytes with sha256 %s, want %d bytes with %x", f[1], f[2], n, h.Sum(nil))
	}
	if got := parseSource(t, f[0]).Addr(); got != src {
		t.Fatalf("server saw the upload from %v, want %v", got, src)
	}
}

// testIperf3: iperf3 runs through the gateway for 5 s and the server sees
// the egress IP.
func testIperf3(t *testing.T, l *Lab) {
	requireTools(t, "iperf3")
	s := l.Spec
	p := s.Workers[1].Pods[0]
	eip := mustSteer(s, p)
	srv := exec.Command("ip", "netns", "exec", s.NS(s.Server.Name), "iperf3", "-s", "-1", "--forceflush", "-B", s.Server.IP.String(), "-p", "5201")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(substr string) string {
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("iperf3 server ended before printing %q", substr)
				}
				if strings.Contains(l, substr) {
					return l
				}
			case <-timeout:
				t.Fatalf("iperf3 server did not print %q", substr)
			}
		}
	}
	waitLine("Server listening")
	cli, err := nsExec(s.NS(p.Name), "iperf3", "-c", s.Server.IP.String(), "-p", "5201", "-t", "5", "-J")
	if err != nil {
		t.Fatalf("iperf3 client in %s: %v\n%s", p.Name, err, cli)
	}
	var res struct {
		End struct {
			SumReceived struct {
				Bytes int64   `json:"bytes"`
				BPS   float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(cli), &res); err != nil {
		t.Fatalf("iperf3 JSON: %v", err)
	}
	if res.End.SumReceived.Bytes == 0 {
		t.Fatalf("iperf3 moved no bytes: %s", cli)
	}
	acc := waitLine("Accepted connection from")
	if !strings.Contains(acc, eip.String()+",") {
		t.Fatalf("iperf3 server line %q: want the connection from %v", acc, eip)
	}
	t.Logf("iperf3 TCP %s → server via %v: %.0f Mbit/s", p.Name, eip, res.End.SumReceived.BPS/1e6)
}

// testPMTU: with a 1280-byte hop on the outside path the router's
// frag-needed reaches the pod (translated back through the gateway), the pod
// lowers its path MTU and an upload completes.
func testPMTU(t *testing.T, l *Lab) {
	if s := l.Spec; s.IPv6Only() {
		p := s.Workers[0].Pods[0]
		testPMTU6(t, l, p.Name, s.NS(p.Name), p.IP, s.Server.IP, mustSteer(s, p))
		return
	}
	s := l.Spec
	const mtu = 1280
	p := s.Workers[1].Pods[0]
	ns, rtr := s.NS(p.Name), s.NS(s.Router.Name)
	if err := ipBatch(ns, "route flush cache"); err != nil {
		t.Fatal(err)
	}
	if err := ipBatch(rtr, fmt.Sprintf("link set eth1 mtu %d", mtu)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ipBatch(rtr, "link set eth1 mtu 1500")
		ipBatch(ns, "route flush cache")
	})
	c := startCapture(t, ns, "eth0")
	const n = 8 << 20
	resp, err := podClient(ns).Post(fmt.Sprintf("http://%v/sink", netip.AddrPortFrom(s.Server.IP, HTTPPort)), "application/octet-stream", Pattern(n))
	if err != nil {
		t.Fatalf("upload over the %d-byte hop: %v", mtu, err)
	}
	defer resp.Body.Close()
	checkSink(t, resp.Body, n, mustSteer(s, p))
	var fragNeeded int
	for _, f := range c.Stop() {
		ip := ipv4(f)
		if ip == nil || ip[9] != 1 || ipDst(ip) != p.IP {
			continue
		}
		m := ipL4(ip)
		if len(m) >= 8+20 && m[0] == 3 && m[1] == 4 && binary.BigEndian.Uint16(m[6:]) == mtu {
			// The quoted packet must be the pod's own, untranslated.
			if inner := m[8:]; netip.AddrFrom4([4]byte(inner[12:16])) == p.IP {
				fragNeeded++
			}
		}
	}
	if fragNeeded == 0 {
		t.Fatalf("pod %s saw no ICMP frag-needed (mtu %d) quoting its own packet", p.Name, mtu)
	}
	out, err := run("ip", "-n", ns, "route", "get", s.Server.IP.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("mtu %d", mtu)) {
		t.Fatalf("pod %s has no path MTU %d towards the server: %s", p.Name, mtu, out)
	}
	t.Logf("pod %s: %d frag-needed received; route: %s", p.Name, fragNeeded, strings.TrimSpace(out))
}

// testPodMTU1500: a pod whose eth0 says 1500 (the tunnel holds 1450)
// advertises a 1460-byte MSS, so the server sends segments that do not fit
// the tunnel once encapsulated. The gateway must answer them with ICMP
// frag-needed from the egress IP carrying 1450; the server's PMTU discovery
// then shrinks its segments and the download completes.
func testPodMTU1500(t *testing.T, l *Lab) {
	s := l.Spec
	w := s.Workers[0]
	p := w.Pods[0]
	ns, srv := s.NS(p.Name), s.NS(s.Server.Name)
	eip := mustSteer(s, p)
	fam := "-" + strconv.Itoa(p4or6(s))
	if _, err := run("ip", fam, "-n", srv, "route", "flush", "cache"); err != nil {
		t.Fatal(err)
	}
	if err := ipBatch(ns, "link set eth0 mtu 1500"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ipBatch(ns, fmt.Sprintf("link set eth0 mtu %d", s.PodMTU()))
		run("ip", fam, "-n", srv, "route", "flush", "cache")
	})
	const n = 8 << 20
	h := sha256.New()
	io.Copy(h, Pattern(n))
	want := h.Sum(nil)
	c := &http.Client{Timeout: 20 * time.Second, Transport: podClient(ns).Transport}
	resp, err := c.Get(fmt.Sprintf("http://%v/bytes?n=%d", netip.AddrPortFrom(s.Server.IP, HTTPPort), n))
	if err != nil {
		t.Fatalf("download to a pod with MTU 1500: %v", err)
	}
	defer resp.Body.Close()
	h.Reset()
	got, err := io.Copy(h, resp.Body)
	if err != nil || got != n || !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("download to a pod with MTU 1500: %d of %d bytes (%v): the server's full-sized segments never fit the tunnel", got, n, err)
	}
	out, err := run("ip", "-n", srv, "route", "get", eip.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("mtu %d", s.PodMTU())) {
		t.Fatalf("the server has no path MTU %d towards %v (no frag-needed / packet-too-big arrived): %s", s.PodMTU(), eip, out)
	}
	t.Logf("8 MB to %s (MTU 1500) completed; server route: %s", p.Name, strings.TrimSpace(out))
}
