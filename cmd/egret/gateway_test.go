package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/egret-gw/egret/control/identity"
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

// TestNodeIdentityFlags: --node-identity=csr is taken with the Kubernetes
// API and a namespace for the CA, with the shared key too (an upgrade's
// transition), and refused beside the TLS files it replaces or where no
// certificate can be issued.
func TestNodeIdentityFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	ok := []string{"--source=kube", "--node=g1", "--pod-namespace=egret-system", "--node-identity=csr"}
	f, err := parseGatewayFlags(ok)
	if err != nil {
		t.Fatalf("%q: %v", ok, err)
	}
	if f.nodeIdentity != "csr" {
		t.Fatalf("--node-identity %q", f.nodeIdentity)
	}
	if _, err := parseGatewayFlags(append(ok[:4:4], "--sync-key-file=/etc/egret-sync/key")); err != nil {
		t.Errorf("with the shared key too: %v", err)
	}
	for _, bad := range [][]string{
		append(ok[:4:4], "--health-tls-cert=/c", "--health-tls-key=/k", "--health-tls-client-ca=/ca"),
		{"--source=kube", "--node=g1", "--node-identity=csr"},
		{"--source=dir:/x", "--node=g1", "--pod-namespace=egret-system", "--node-identity=csr"},
		{"--source=kube", "--node=g1", "--pod-namespace=egret-system", "--node-identity=spiffe"},
	} {
		if _, err := parseGatewayFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else {
			t.Logf("%q: %v", bad, err)
		}
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
	hs, err := f.listenHealth(nil, false)
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
		{"--controller-lease=plain"},
	} {
		if _, err := parseGatewayFlags(append([]string{"--source=dir:/x", "--node=g1"}, bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	for _, good := range []string{"tls", "any", "off"} {
		if _, err := parseGatewayFlags([]string{"--source=dir:/x", "--node=g1", "--controller-lease=" + good}); err != nil {
			t.Errorf("--controller-lease=%s: %v", good, err)
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

// TestAdmissionFlags: --metrics-allow, --controller-selector and the
// metrics scraper's selector and namespace are checked at parse time (so
// --check-config refuses them), and the filter guards the ports of the
// listeners the flags run: the flow sync only with a key, the metrics port
// not with "any" nor when off; a directory source has none.
func TestAdmissionFlags(t *testing.T) {
	kube := []string{"--source=kube", "--node=g1", "--pod-namespace=egret-system",
		"--health-addr=10.0.0.21:9107", "--sync-addr=10.0.0.21:9108"}
	f, err := parseGatewayFlags(append(kube, "--metrics-allow=10.9.0.0/16, 192.0.2.7"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.admissionOptions()
	if err != nil || a == nil {
		t.Fatalf("admission %v, %v", a, err)
	}
	if got := fmt.Sprintf("%v %s %v %q %v", a.MetricsAllow, a.ControllerNamespace, a.ControllerSelector, a.ScraperNamespace, a.ScraperSelector); got != `[10.9.0.0/16 192.0.2.7/32] egret-system app.kubernetes.io/name=egret-controller "" app.kubernetes.io/name=prometheus` {
		t.Errorf("admission options %s", got)
	}
	f.admissionPorts(a, "", true)
	if a.HealthPort != 9107 || a.SyncPort != 9108 || a.MetricsPort != 9110 {
		t.Errorf("ports %d %d %d, want 9107 9108 9110", a.HealthPort, a.SyncPort, a.MetricsPort)
	}
	a.HealthPort, a.SyncPort, a.MetricsPort = 0, 0, 0
	f.admissionPorts(a, "off", false)
	if a.HealthPort != 9107 || a.SyncPort != 0 || a.MetricsPort != 0 {
		t.Errorf("without a sync key and metrics off: ports %d %d %d, want 9107 0 0", a.HealthPort, a.SyncPort, a.MetricsPort)
	}

	f, err = parseGatewayFlags(append(kube, "--metrics-allow=any"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ = f.admissionOptions()
	f.admissionPorts(a, "[10.0.0.21]:9110", false)
	if a.MetricsPort != 0 {
		t.Errorf("--metrics-allow=any filters the metrics port %d", a.MetricsPort)
	}
	// The scraper: bound to a namespace, another selector, or none at all
	// ("" must not become labels.Everything(): every pod a scraper).
	f, err = parseGatewayFlags(append(kube, "--metrics-scraper-namespace=monitoring", "--metrics-scraper-selector=app.kubernetes.io/name in (prometheus,vmagent)"))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ = f.admissionOptions(); a.ScraperNamespace != "monitoring" || a.ScraperSelector.String() != "app.kubernetes.io/name in (prometheus,vmagent)" {
		t.Errorf("scraper %q %v", a.ScraperNamespace, a.ScraperSelector)
	}
	if f, err = parseGatewayFlags(append(kube, "--metrics-scraper-selector=")); err != nil {
		t.Fatal(err)
	}
	if a, _ = f.admissionOptions(); a.ScraperSelector != nil {
		t.Errorf(`--metrics-scraper-selector="": selector %v, want none`, a.ScraperSelector)
	}
	for _, off := range [][]string{{"--source=dir:/x", "--node=g1"}, append(kube, "--admission=false")} {
		f, err := parseGatewayFlags(off)
		if err != nil {
			t.Fatal(err)
		}
		if a, err := f.admissionOptions(); a != nil || err != nil {
			t.Errorf("%v: admission %+v, %v; want none", off, a, err)
		}
	}
	for bad, want := range map[string]string{"--metrics-allow=10.0.0.0/33": "neither a CIDR", "--metrics-allow=any,10.0.0.1": "neither a CIDR",
		"--controller-selector=a in (": "--controller-selector", "--metrics-scraper-selector=a in (": "--metrics-scraper-selector",
		"--metrics-scraper-namespace=Monitoring": "not a namespace name"} {
		if _, err := parseGatewayFlags(append(kube, bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", bad, err, want)
		}
	}
}

// TestGatewayCloudOpenStack: on OpenStack the controller publishes the
// nodes' egress-ipconfig, so a gateway agent given the provider refuses it
// with the reason, rather than failing later without credentials.
func TestGatewayCloudOpenStack(t *testing.T) {
	_, err := parseGatewayFlags([]string{"--source=kube", "--node=g1", "--health-addr=10.0.0.21:9107", "--cloud-provider=openstack"})
	if err == nil || !strings.Contains(err.Error(), "controller publishes") {
		t.Fatalf("--cloud-provider=openstack on the gateway: %v; want a refusal naming the controller", err)
	}
	if _, err := parseGatewayFlags([]string{"--source=kube", "--node=g1", "--health-addr=10.0.0.21:9107", "--cloud-provider=gcp"}); err != nil {
		t.Fatalf("--cloud-provider=gcp on the gateway: %v", err)
	}
}

// TestNotReadyWithoutCertificate: with node identity the gateway is not
// ready until its certificate is issued; without, nothing is asked.
func TestNotReadyWithoutCertificate(t *testing.T) {
	if err := certified(nil); err != nil {
		t.Fatalf("without node identity: %v", err)
	}
	r, err := identity.NewRequester(identity.RequesterConfig{Client: fake.NewClientset(), Namespace: "egret-system", Node: "gw1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := certified(r); err == nil || !strings.Contains(err.Error(), "CertificateSigningRequest") {
		t.Fatalf("before any certificate: %v", err)
	}
}
