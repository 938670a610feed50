package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// TestLabEgretRefusals runs, with the real `egret gateway` in the lab, what
// the gateway refuses a pod (destinations on its deny-list) and how a
// connection it does not know after a restart goes on (picked up).
func TestLabEgretRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lab test; skipped with -short")
	}
	requireRoot(t)
	if os.Getenv("EGRET_LAB_GATEWAY") == ModeKernel {
		t.Skip("the deny-list and the pick-up are egret's; EGRET_LAB_GATEWAY=kernel runs the kernel gateway only")
	}
	l := upLab(t, testLabName("r"), ModeEgret)
	t.Run("DeniedDestinations", func(t *testing.T) { testDeniedDestinations(t, l) })
	t.Run("PickedUpAfterGatewayRestart", func(t *testing.T) { testPickUpAfterGatewayRestart(t, l) })
	t.Run("ResumedAfterGracefulRestart", func(t *testing.T) { testResumedAfterGracefulRestart(t, l) })
}

// gatewayMetric reads the value of one sample of gateway gw's /metrics
// (served on its namespace's loopback), 0 when the sample is absent.
func gatewayMetric(t *testing.T, s *Spec, gw, sample string) float64 {
	t.Helper()
	return nodeMetric(t, s, gw, "http://127.0.0.1:9110/metrics", "egret_gateway_dropped_packets_total", sample)
}

// steerMetric is gatewayMetric for node's steer agent.
func steerMetric(t *testing.T, s *Spec, node, sample string) float64 {
	t.Helper()
	return nodeMetric(t, s, node, "http://127.0.0.1:9112/metrics", "egret_steer_reconciles_total", sample)
}

// nodeMetric reads one sample of the /metrics at url in node's namespace,
// 0 when absent; marker is a series the process always serves.
func nodeMetric(t *testing.T, s *Spec, node, url, marker, sample string) float64 {
	t.Helper()
	var body []byte
	var err error
	nstest.Poll(5*time.Second, 100*time.Millisecond, func() bool { // the server may be starting
		var resp *http.Response
		if resp, err = podClient(s.NS(node)).Get(url); err != nil {
			return false
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), marker)
	})
	if err != nil {
		t.Fatalf("metrics of %s at %s: %v", node, url, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metrics of %s: %q: %v", node, line, err)
			}
			return f
		}
	}
	if !strings.Contains(string(body), marker) {
		t.Fatalf("%s at %s serves no %s:\n%s", node, url, marker, body)
	}
	return 0
}

const deniedSample = `egret_gateway_dropped_packets_total{reason="denied_destination"}`

// testDeniedDestinations: a selected pod cannot reach, through its gateway,
// the gateway node's own address, another node's address, or the cloud
// metadata address, each of which has a listener that an unselected pod
// (leaving with its node's address, not through the gateway) reaches; every
// attempt is counted as denied_destination. A destination
// outside still works.
func testDeniedDestinations(t *testing.T, l *Lab) {
	s := l.Spec
	p := s.Workers[0].Pods[0] // w1-p1, policy blue on g1
	eip, gw, ok := s.Steering(p)
	if !ok {
		t.Fatalf("pod %s is not steered", p.Name)
	}
	unsel := s.Workers[1].Pods[1] // w2-p2, selected by no policy
	if _, _, steered := s.Steering(unsel); steered {
		t.Fatalf("pod %s is steered; the test needs an unselected pod", unsel.Name)
	}
	const metadata = "169.254.169.254"
	// The router serves the metadata address, as a cloud's would: a pod
	// whose packets reached it would get an answer.
	if _, err := run("ip", "-n", s.NS(s.Router.Name), "addr", "add", metadata+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run("ip", "-n", s.NS(s.Router.Name), "addr", "del", metadata+"/32", "dev", "lo") })
	targets := []struct {
		what, ns string
		addr     netip.Addr
	}{
		{"the gateway node's own address", s.NS(gw.Name), gw.IP},
		{"another node's address", s.NS(s.Workers[1].Name), s.Workers[1].IP},
		{"the cloud metadata address", s.NS(s.Router.Name), netip.MustParseAddr(metadata)},
	}
	const port = 10250 // the kubelet's
	for _, tg := range targets {
		dst := netip.AddrPortFrom(tg.addr, port).String()
		var ln net.Listener
		if err := Do(tg.ns, func() (err error) { ln, err = net.Listen("tcp", dst); return err }); err != nil {
			t.Fatalf("listener on %s: %v", dst, err)
		}
		accepted := make(chan netip.Addr, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- netip.MustParseAddrPort(c.RemoteAddr().String()).Addr()
				c.Close()
			}
		}()
		// The listener answers a pod that does not go through the gateway
		// (unselected, it leaves with its node's address), so a failure
		// below is the gateway's.
		from := s.NS(unsel.Name)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c, err := DialContext(ctx, from, "tcp", dst)
		cancel()
		if err != nil {
			ln.Close()
			t.Fatalf("%s (%s) from %s, without the gateway: %v; the check below would prove nothing", tg.what, dst, from, err)
		}
		c.Close()
		select {
		case <-accepted:
		case <-time.After(3 * time.Second):
			t.Fatalf("%s (%s): the listener saw no connection from %s", tg.what, dst, unsel.Name)
		}

		before := gatewayMetric(t, s, gw.Name, deniedSample)
		ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
		c, err = DialContext(ctx, s.NS(p.Name), "tcp", dst)
		cancel()
		ln.Close()
		if err == nil {
			c.Close()
			t.Errorf("pod %s reached %s (%s) through gateway %s", p.Name, tg.what, dst, gw.Name)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) && !os.IsTimeout(err) {
			t.Errorf("pod %s to %s (%s): %v, want a timeout (dropped, not refused)", p.Name, tg.what, dst, err)
		}
		select {
		case a := <-accepted:
			t.Errorf("%s (%s) accepted a connection from %v", tg.what, dst, a)
		default:
		}
		after := gatewayMetric(t, s, gw.Name, deniedSample)
		if after <= before {
			t.Errorf("pod %s to %s (%s): denied_destination %v → %v, want it counted", p.Name, tg.what, dst, before, after)
		}
		t.Logf("%s (%s): refused, denied_destination %v → %v", tg.what, dst, before, after)
	}
	if got := httpGetSource(t, s.NS(p.Name), s).Addr(); got != eip {
		t.Errorf("pod %s to the outside server: seen as %v, want its egress IP %v", p.Name, got, eip)
	}
}

// testPickUpAfterGatewayRestart: a pod's established connection through a
// gateway that restarts (SIGKILL, then started again: its flow table is
// empty) goes on: the gateway picks the flow up from the pod's next segment
// on the pod's own source port (port preservation gave it that port
// before), so the server sees the same address and port and answers on the
// same connection; flows_picked_up counts it. (A segment that cannot be
// picked up is answered with an RST: gateway/pickup_test.go,
// tcpreset_test.go.)
func testPickUpAfterGatewayRestart(t *testing.T, l *Lab) {
	s := l.Spec
	p := s.Workers[0].Pods[0]
	_, gw, _ := s.Steering(p)
	ns := s.NS(p.Name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := DialContext(ctx, ns, "tcp", netip.AddrPortFrom(s.Server.IP, HTTPPort).String())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func() (netip.AddrPort, error) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %v\r\n\r\n", s.Server.IP); err != nil {
			return netip.AddrPort{}, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return netip.AddrPort{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return netip.AddrPort{}, err
		}
		return netip.ParseAddrPort(strings.Fields(string(body) + " ")[0])
	}
	before, err := get()
	if err != nil {
		t.Fatalf("first request on the connection: %v", err)
	}
	pid := readPid(filepath.Join(l.RunDir(), "gateway-"+gw.Name+".pid"))
	if err := l.KillGateway(gw.Name); err != nil {
		t.Fatal(err)
	}
	// KillGateway returns once the process is a zombie; its other threads
	// may still hold its sockets (the metrics port) until it is reaped.
	nstest.Eventually(t, fmt.Sprintf("egret gateway on %s (pid %d) reaped after SIGKILL", gw.Name, pid), 5*time.Second, func() bool { return gone(pid) })
	if err := l.StartGateway(gw.Name); err != nil {
		t.Fatal(err)
	}
	after, err := get()
	if err != nil {
		t.Fatalf("request on the connection after the gateway restarted: %v, want an answer (the flow picked up); the server saw %v before, the pod's end is %v; gateway counters: no_flow %v, picked_up %v, resets %v",
			err, before, c.LocalAddr(), gatewayMetric(t, s, gw.Name, `egret_gateway_dropped_packets_total{reason="tcp_no_flow"}`),
			gatewayMetric(t, s, gw.Name, "egret_gateway_flows_picked_up_total"), gatewayMetric(t, s, gw.Name, "egret_gateway_tcp_resets_sent_total"))
	}
	if after != before {
		t.Errorf("after the restart the server saw %v, before %v: want the same address and port", after, before)
	}
	if n := gatewayMetric(t, s, gw.Name, "egret_gateway_flows_picked_up_total"); n < 1 {
		t.Errorf("flows_picked_up %v after the restart, want the connection counted", n)
	}
	t.Logf("the connection went on after the gateway restarted, seen as %v before and after", after)
}

// testResumedAfterGracefulRestart: a pod's connection whose port was NOT
// preserved (another pod holds that port on the same egress IP towards the
// same server, so pick-up could not save it) goes on through a graceful
// restart of its gateway: SIGTERM, as the kubelet sends on an update,
// leaves the flows in the state file; the next process resumes them with
// their ports before it forwards anything. Both connections answer from the
// same address and port after the restart, no RST, and nothing is counted
// picked up: the flows were resumed, not rebuilt.
func testResumedAfterGracefulRestart(t *testing.T, l *Lab) {
	s := l.Spec
	p, q := s.Workers[0].Pods[0], s.Workers[1].Pods[0]
	eip, gw, _ := s.Steering(p)
	if e2, g2, _ := s.Steering(q); e2 != eip || g2.Name != gw.Name {
		t.Fatalf("pods %s and %s leave through %v on %s and %v on %s; the test needs one egress IP", p.Name, q.Name, eip, gw.Name, e2, g2.Name)
	}
	server := netip.AddrPortFrom(s.Server.IP, HTTPPort).String()
	port := 20000 + os.Getpid()%20000
	dial := func(ns string) *KeepAlive {
		var c net.Conn
		err := Do(ns, func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}, Timeout: 5 * time.Second}
			var err error
			c, err = d.Dial("tcp", server)
			return err
		})
		if err != nil {
			t.Fatalf("dial %s from %s with source port %d: %v", server, ns, port, err)
		}
		t.Cleanup(func() { c.Close() })
		return &KeepAlive{conn: c, br: bufio.NewReader(c)}
	}
	first := dial(s.NS(q.Name)) // holds egress:port towards the server
	held, err := first.Get(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	moved := dial(s.NS(p.Name))
	before, err := moved.Get(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if held.Port() != uint16(port) || before.Port() == uint16(port) || before.Addr() != eip {
		t.Fatalf("server saw %v and %v for two connections from port %d: want the first on its own port, the second on another port of %v", held, before, port, eip)
	}
	pickedBefore := gatewayMetric(t, s, gw.Name, "egret_gateway_flows_picked_up_total")

	pid := readPid(filepath.Join(l.RunDir(), "gateway-"+gw.Name+".pid"))
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, fmt.Sprintf("egret gateway on %s (pid %d) exiting after SIGTERM", gw.Name, pid), 10*time.Second, func() bool { return gone(pid) })
	if _, err := os.Stat(StateFile(l.RunDir(), gw.Name)); err != nil {
		t.Fatalf("the stopped gateway left no state file: %v", err)
	}
	// A request in the gap: its segments reach the gateway node while no
	// process runs there, and the held XDP program must drop them (TCP
	// resends them once the next process runs), not give them to the kernel.
	moved.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(moved.conn, "GET / HTTP/1.1\r\nHost: egret-lab\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartGateway(gw.Name); err != nil {
		t.Fatal(err)
	}
	after, err := moved.read()
	if err != nil {
		t.Fatalf("answer to the request sent on the connection whose port was not preserved during the graceful restart: %v, want one (its flow resumed)", err)
	}
	heldFrames, passedFrames := takeoverCounts(t, filepath.Join(l.RunDir(), "gateway-"+gw.Name+".log"))
	if heldFrames == 0 || passedFrames != 0 {
		t.Errorf("the next gateway found %d frames held and %d passed to the kernel in the gap, want the request's segments held and none passed", heldFrames, passedFrames)
	}
	heldAfter, err := first.Get(10 * time.Second)
	if err != nil {
		t.Fatalf("request on the connection with the preserved port, after the graceful restart: %v", err)
	}
	if after != before || heldAfter != held {
		t.Errorf("after the restart the server saw %v and %v, before %v and %v: want the same addresses and ports", after, heldAfter, before, held)
	}
	if n := gatewayMetric(t, s, gw.Name, "egret_gateway_flows_picked_up_total"); n != 0 {
		t.Errorf("flows_picked_up %v after the graceful restart (before it: %v), want 0: the flows were to be resumed from the state file", n, pickedBefore)
	}
	t.Logf("both connections went on through the graceful restart: %v (port not preserved) and %v; in the gap XDP dropped %d frames and passed none to the kernel", after, heldAfter, heldFrames)
}

// takeoverCounts reads, from a gateway's log, what the XDP program it took
// over counted while no process ran: frames dropped (held) and passed to
// the kernel for lack of a socket. It fails the test if the gateway took
// nothing over.
func takeoverCounts(t *testing.T, logPath string) (held, passed uint64) {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`took over the program a previous run left attached.*held_drops=(\d+) passed_without_socket=(\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("the restarted gateway did not take over the XDP program left attached; log:\n%s", data)
	}
	held, _ = strconv.ParseUint(string(m[1]), 10, 64)
	passed, _ = strconv.ParseUint(string(m[2]), 10, 64)
	return held, passed
}
