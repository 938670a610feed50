package main

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReloaderKeepsRunningConfigOnError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got []string
	loadErr := errors.New("broken")
	next := 0
	load := func() (int, []byte, error) {
		if next < 0 {
			return 0, nil, loadErr
		}
		return next, nil, nil
	}
	reload := reloader(log, load, func(c int, why string) { got = append(got, why+":"+string(rune('0'+c))) })
	next = 3
	reload("SIGHUP")
	next = -1
	reload("config file changed")
	next = 5
	reload("config file changed")
	want := []string{"SIGHUP:3", "config file changed:5"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("applied %q, want %q", got, want)
	}
}

// TestHealthListenerFlags: the health service binds the node's InternalIP
// from HOST_IP by default, listens there for real with the connection cap
// the flag sets, and half-given TLS settings are refused.
func TestHealthListenerFlags(t *testing.T) {
	t.Setenv("HOST_IP", "127.0.0.1")
	f, err := parseGatewayFlags([]string{"--source=dir:/x", "--node=g1", "--health-max-conns=1"})
	if err != nil {
		t.Fatal(err)
	}
	if f.healthAddr != "127.0.0.1:9107" {
		t.Errorf("default --health-addr %q with HOST_IP=127.0.0.1, want 127.0.0.1:9107", f.healthAddr)
	}
	f.healthAddr = "127.0.0.1:0"
	hs, err := f.listenHealth()
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Stop()
	if ip := hs.Addr().(*net.TCPAddr).IP.String(); ip != "127.0.0.1" {
		t.Errorf("listening on %s", hs.Addr())
	}
	held, err := net.Dial("tcp", hs.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	extra, err := net.Dial("tcp", hs.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the second connection with --health-max-conns=1 was kept: %v", err)
	}
	for _, bad := range [][]string{
		{"--health-max-conns=0"},
		{"--health-tls-cert=/c.pem"},
		{"--health-tls-cert=/c.pem", "--health-tls-key=/k.pem"},
	} {
		if _, err := parseGatewayFlags(append([]string{"--source=dir:/x", "--node=g1"}, bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestListenAddrIPv6: a manifest's $(POD_IP):port on an IPv6 node is refused
// before anything listens, with the bracketed address to write instead; the
// bracketed form serves both families.
func TestListenAddrIPv6(t *testing.T) {
	for _, ok := range []string{"[fd00::5]:9110", "[10.0.0.5]:9110", "10.0.0.5:9110", ":9110", "[::1]:0"} {
		if err := checkListenAddr("--metrics-addr", ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for bad, hint := range map[string]string{"fd00::5:9110": "[fd00::5]:9110", "10.0.0.5": "not host:port", "fd00::5": "brackets"} {
		if err := checkListenAddr("--metrics-addr", bad); err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s: %v, want an error saying %s", bad, err, hint)
		}
	}
	for _, args := range [][]string{
		{"controller", "--check-config", "--metrics-addr=fd00::5:9111"},
		{"steer", "--check-config", "--metrics-addr=fd00::5:9112"},
		{"gateway", "--check-config", "--source=dir:/x", "--node=g1", "--iface=eth0", "--health-addr=fd00::5:9107"},
		{"gateway", "--check-config", "--source=dir:/x", "--node=g1", "--iface=eth0", "--metrics-addr=fd00::5:9110"},
	} {
		_, stderr, code := egret(t, args...)
		if code == 0 || !strings.Contains(stderr, "an IPv6 host goes in brackets") {
			t.Errorf("egret %s: exit %d, %s", strings.Join(args, " "), code, stderr)
		}
	}
	// The bracketed address really listens, IPv4 inside brackets included.
	for _, a := range []string{"[127.0.0.1]:0", "[::1]:0"} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("listen %s: %v", a, err)
			continue
		}
		l.Close()
	}
}
