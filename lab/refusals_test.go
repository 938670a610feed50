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
	"strconv"
	"strings"
	"testing"
	"time"
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
}

// gatewayMetric reads the value of one sample of gateway gw's /metrics
// (served on its namespace's loopback), 0 when the sample is absent.
func gatewayMetric(t *testing.T, s *Spec, gw, sample string) float64 {
	t.Helper()
	var body []byte
	var err error
	for try := 0; try < 50; try++ { // the server may be starting
		var resp *http.Response
		if resp, err = podClient(s.NS(gw)).Get("http://127.0.0.1:9110/metrics"); err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), "egret_gateway_dropped_packets_total") {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("metrics of gateway %s: %v", gw, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metrics of gateway %s: %q: %v", gw, line, err)
			}
			return f
		}
	}
	if !strings.Contains(string(body), "egret_gateway_dropped_packets_total") {
		t.Fatalf("gateway %s serves no data-plane metrics:\n%s", gw, body)
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
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("egret gateway on %s (pid %d) not reaped 5 s after SIGKILL", gw.Name, pid)
		}
	}
	if err := l.StartGateway(gw.Name); err != nil {
		t.Fatal(err)
	}
	after, err := get()
	if err != nil {
		t.Fatalf("request on the connection after the gateway restarted: %v, want an answer (the flow picked up)", err)
	}
	if after != before {
		t.Errorf("after the restart the server saw %v, before %v: want the same address and port", after, before)
	}
	if n := gatewayMetric(t, s, gw.Name, "egret_gateway_flows_picked_up_total"); n < 1 {
		t.Errorf("flows_picked_up %v after the restart, want the connection counted", n)
	}
	t.Logf("the connection went on after the gateway restarted, seen as %v before and after", after)
}
