package metrics

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// keepAlive opens n connections from src to addr, each making one
// keep-alive request for /healthz and then holding the connection idle,
// as the attack on the cluster did; they close at the test's end.
func keepAlive(t *testing.T, src, addr string, n int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("attacker connection: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	}
}

// client is an HTTP client that dials from src, without keep-alive.
func client(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

func status(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestHostileClients holds 150 keep-alive connections from one source
// (127.0.0.2) to a real metrics server: a scraper from another address
// still gets /metrics, and the probes, served on their own loopback
// listener, still answer. Without the per-source cap the attacker held all
// MaxConns slots and both failed.
func TestHostileClients(t *testing.T) {
	srv, err := Serve("127.0.0.1:0", NewRegistry("test"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	if err := srv.ServeProbes("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	keepAlive(t, "127.0.0.2", srv.Addr(), 150)
	c := client("127.0.0.1")
	if code, err := status(c, "http://"+srv.Addr()+"/metrics"); err != nil || code != 200 {
		t.Errorf("/metrics under attack: %d, %v", code, err)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, err := status(c, "http://"+srv.ProbeAddr()+p); err != nil || code != 200 {
			t.Errorf("%s under attack: %d, %v", p, code, err)
		}
	}
}

// TestBlockedReadiness: a readiness check that never returns makes
// /readyz answer 503 after probeTimeout instead of holding the connection,
// so more blocked probes than MaxConns leave /healthz answering. The
// gateway was restarted once with no attack, its liveness probe reset by
// a full listener: a blocked /readyz holding slots is what that takes.
func TestBlockedReadiness(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	srv, err := Serve("127.0.0.1:0", NewRegistry("test"), func() error { <-block; return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	// Kubelet probes give up after a second and come back: each leaves
	// its request behind. Sources differ as the kubelet's do not: the
	// per-source cap is not what this shows.
	errs := make(chan error, 2*MaxConns)
	for i := range 2 * MaxConns {
		go func() {
			c := client("127.0.1." + strconv.Itoa(i+1))
			c.Timeout = time.Second
			_, err := status(c, "http://"+srv.Addr()+"/readyz")
			errs <- err
		}()
	}
	for range 2 * MaxConns {
		<-errs
	}
	c := client("127.0.0.1")
	c.Timeout = 10 * time.Second
	if code, err := status(c, "http://"+srv.Addr()+"/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz after blocked readiness checks: %d, %v", code, err)
	}
	if code, err := status(c, "http://"+srv.Addr()+"/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with a blocked check: %d, %v; want 503", code, err)
	}
}
