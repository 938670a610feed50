package lab

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/internal/nstest"
)

func TestDefaultSpec(t *testing.T) {
	s, err := DefaultSpec("egl")
	if err != nil {
		t.Fatal(err)
	}
	doc := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")}
	inDoc := func(a netip.Addr) bool {
		for _, p := range doc {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	want := map[string]string{"w1-p1": "192.0.2.101", "w2-p1": "192.0.2.101", "w1-p2": "192.0.2.102", "w1-p3": "192.0.2.104", "w2-p2": "192.0.2.12", "w2-p3": "192.0.2.12"}
	dual := 0
	for _, w := range s.Workers {
		if !inDoc(w.IP6) || !w.IP6.Is6() || !inDoc(w.PodSubnet6.Addr()) {
			t.Errorf("worker %s: IPv6 %v / pods %v missing or outside 2001:db8::/32", w.Name, w.IP6, w.PodSubnet6)
		}
		for _, p := range w.Pods {
			if !inDoc(p.IP) || !inDoc(w.IP) || !inDoc(w.TunnelIP) || (p.IP6.IsValid() && !inDoc(p.IP6)) {
				t.Errorf("%s uses an address outside the documentation ranges", p.Name)
			}
			if p.IP6.IsValid() {
				dual++
			}
			if got := s.ExpectedSource(w, p).String(); got != want[p.Name] {
				t.Errorf("%s: expected source %s, want %s", p.Name, got, want[p.Name])
			}
		}
	}
	if ips, _ := s.Hosted("g3"); len(ips) != 0 {
		t.Errorf("g3 should be spare, hosts %v", ips)
	}
	if ns := s.Namespaces(); len(ns) != 16 || ns[0] != "egl-fabric" || !slices.Contains(ns, "egl-srv2") {
		t.Errorf("namespaces %v", ns)
	}
	if dual != 2 {
		t.Errorf("%d dual-stack pods, want w1-p3 and w2-p2", dual)
	}
	// The second server is in a destination network of its own, in the
	// addresses issue 30 gives it.
	if v := s.Server2; v.Name != "srv2" || v.IP != netip.MustParseAddr("203.0.113.10") || v.IP6 != netip.MustParseAddr("2001:db8:5200::10") ||
		s.Router.Outside2.Overlaps(s.Router.Outside) || s.Router.Outside2v6.Overlaps(s.Router.Outside6) || !s.Router.Outside2.Contains(v.Excluded) {
		t.Errorf("second server %+v in %v / %v", v, s.Router.Outside2, s.Router.Outside2v6)
	}
	if sv := s.Servers(); len(sv) != 2 || sv[0] != s.Server || sv[1] != s.Server2 {
		t.Errorf("Servers() = %+v", sv)
	}
	for _, a := range []netip.Addr{s.Router.IP6, s.Router.OutIP6, s.Server.IP6, s.Controller.IP6, s.Gateways[0].IP6, s.Server2.IP6, s.Router.OutIP2v6} {
		if !a.Is6() || !inDoc(a) {
			t.Errorf("IPv6 address %v missing or outside 2001:db8::/32", a)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, name := range []string{"", "Egl", "a-b", "1abc", "abcdefghijklm", "a/b"} {
		if err := ValidName(name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	breakers := map[string]func(s *Spec){
		"duplicate pod IP":      func(s *Spec) { s.Workers[1].Pods[0].IP = s.Workers[0].Pods[0].IP },
		"pod outside subnet":    func(s *Spec) { s.Workers[0].Pods[0].IP = netip.MustParseAddr("198.18.9.9") },
		"pod on the bridge IP":  func(s *Spec) { s.Workers[0].Pods[0].IP = netip.MustParseAddr("198.18.1.1") },
		"unknown policy":        func(s *Spec) { s.Workers[0].Pods[0].Policy = "red" },
		"unknown gateway":       func(s *Spec) { s.Policies[0].Hosts[0] = "g9" },
		"egress IP = node IP":   func(s *Spec) { s.Policies[0].EgressIPs[0] = s.Gateways[0].IP },
		"egress IP off-subnet":  func(s *Spec) { s.Policies[0].EgressIPs[0] = netip.MustParseAddr("203.0.113.5") },
		"hosts mismatch":        func(s *Spec) { s.Policies[0].Hosts = nil },
		"duplicate member name": func(s *Spec) { s.Gateways[1].Name = "g1" },
		"missing address":       func(s *Spec) { s.Gateways[0].TunnelIP = netip.Addr{} },
		"IPv6 pod off-subnet":   func(s *Spec) { s.Workers[0].Pods[2].IP6 = netip.MustParseAddr("2001:db8:18:2::9") },
		"IPv6 pod on gateway":   func(s *Spec) { s.Workers[0].Pods[2].IP6 = netip.MustParseAddr("2001:db8:18:1::1") },
		"IPv6 duplicate":        func(s *Spec) { s.Gateways[1].IP6 = s.Workers[0].IP6 },
		"IPv4 as IPv6":          func(s *Spec) { s.Server.IP6 = netip.MustParseAddr("198.51.100.20") },
		"negative queues":       func(s *Spec) { s.GatewayQueues = -1 },
		"too many queues":       func(s *Spec) { s.GatewayQueues = 17 },
		"server 2 in server 1's network": func(s *Spec) {
			s.Router.Outside2, s.Server2.IP, s.Router.OutIP2 = s.Router.Outside, netip.MustParseAddr("198.51.100.20"), netip.MustParseAddr("198.51.100.2")
		},
		"server 2 off its network":   func(s *Spec) { s.Server2.IP = netip.MustParseAddr("203.0.114.10") },
		"server 2 named as server 1": func(s *Spec) { s.Server2.Name = s.Server.Name },
		"server 2 = router eth2":     func(s *Spec) { s.Server2.IP = s.Router.OutIP2 },
		"excluded = server 2":        func(s *Spec) { s.Server2.Excluded = s.Server2.IP },
		"excluded off-network":       func(s *Spec) { s.Server2.Excluded = netip.MustParseAddr("198.51.100.11") },
		"server 2 IPv6 off-network":  func(s *Spec) { s.Server2.IP6 = netip.MustParseAddr("2001:db8:5100::20") },
		"unnamed server 2":           func(s *Spec) { s.Server2.Name = "" },
	}
	for what, brk := range breakers {
		s, _ := DefaultSpec("egl")
		brk(s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", what)
		}
	}
}

func TestKernelRules(t *testing.T) {
	s, _ := DefaultSpec("egl")
	r := kernelRules(s, "g1")
	for _, want := range []string{
		"ip saddr 198.18.1.2 snat to 192.0.2.101", "ip saddr 198.18.2.2 snat to 192.0.2.101",
		"ip saddr { 198.18.1.2, 198.18.2.2 } accept", "ip daddr { 192.0.2.101 } ct state new,invalid drop",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("g1 rules lack %q:\n%s", want, r)
		}
	}
	if strings.Contains(r, "198.18.1.3") || strings.Contains(r, "198.18.2.3") {
		t.Errorf("g1 rules mention pods it does not serve:\n%s", r)
	}
	if r3 := kernelRules(s, "g3"); strings.Contains(r3, "snat to") || strings.Contains(r3, "saddr") || strings.Contains(r3, "daddr") {
		t.Errorf("spare g3 forwards or SNATs:\n%s", r3)
	}
}

func TestGatewayConfigYAML(t *testing.T) {
	s, _ := DefaultSpec("egl")
	b, err := yaml.Marshal(NewGatewayConfig(s, "g2"))
	if err != nil {
		t.Fatal(err)
	}
	var c config.Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("round trip: %v\n%s", err, b)
	}
	if _, err := c.Settle(); err != nil {
		t.Errorf("the gateway rejects the lab's config: %v\n%s", err, b)
	}
	if c.Node != "g2" || c.VTEPs[0] != "192.0.2.22" || c.InnerMAC != "02:65:67:00:00:16" || c.VNI != VNI || c.Port != VXLANPort || !c.EgressIPsClaimed {
		t.Errorf("config header wrong:\n%s", b)
	}
	hosted := map[string][]string{}
	for _, p := range c.Policies {
		hosted[p.Name] = p.EgressIPs
	}
	if len(hosted["blue"]) != 0 || len(hosted["green"]) != 1 || hosted["green"][0] != "192.0.2.102" {
		t.Errorf("g2 policies %v: want green with 192.0.2.102 and blue empty", hosted)
	}
	if !strings.Contains(string(b), "egressIPs: []") {
		t.Errorf("a policy hosted elsewhere must say egressIPs: [] (not null):\n%s", b)
	}
	if len(c.Nodes) != 2 || c.Nodes[1].Pods[1].Policy != "" || c.Nodes[0].Pods[1].Policy != "green" {
		t.Errorf("nodes %+v", c.Nodes)
	}
}

func TestNewImpl(t *testing.T) {
	if i, err := NewImpl("", ""); err != nil || i.Mode() != ModeKernel {
		t.Errorf("default mode: %v %v", i, err)
	}
	if _, err := NewImpl(ModeEgret, ""); err == nil {
		t.Error("egret mode without a binary accepted")
	}
	if _, err := NewImpl("ovs", "x"); err == nil {
		t.Error("unknown mode accepted")
	}
}

func TestPatternDeterministic(t *testing.T) {
	a, _ := io.ReadAll(Pattern(100000))
	b, _ := io.ReadAll(Pattern(100000))
	if len(a) != 100000 || string(a) != string(b) {
		t.Fatal("Pattern is not deterministic or has the wrong length")
	}
	if c, _ := io.ReadAll(Pattern(10)); string(c) != string(a[:10]) {
		t.Fatal("Pattern prefixes differ")
	}
}

func TestEchoHandler(t *testing.T) {
	srv := httptest.NewServer(echoHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if ap := parseSource(t, line); !ap.Addr().IsLoopback() || ap.Port() == 0 {
		t.Errorf("GET / answered %q", line)
	}
	resp, err = http.Post(srv.URL+"/sink", "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256([]byte("hello"))
	if f := strings.Fields(string(body)); len(f) != 3 || f[1] != "5" || f[2] != hex.EncodeToString(sum[:]) {
		t.Errorf("POST /sink answered %q", body)
	}
	for _, bad := range []string{"", "x", "-1", fmt.Sprint(int64(MaxPatternBytes) + 1)} {
		resp, err := http.Get(srv.URL + "/bytes?n=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /bytes?n=%s: status %d, want 400", bad, resp.StatusCode)
		}
	}
	resp, err = http.Get(srv.URL + "/bytes?n=4096")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want, _ := io.ReadAll(Pattern(4096))
	if string(got) != string(want) {
		t.Errorf("GET /bytes returned %d bytes, not the pattern", len(got))
	}
}

func TestEchoServerUDP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e := &EchoServer{HTTPAddr: "127.0.0.1:0", UDPAddr: "127.0.0.1:0"}
	// Ports are chosen by the kernel, so find the UDP one by listening first.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.UDPAddr = pc.LocalAddr().String()
	pc.Close()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	c, err := net.Dial("udp", e.UDPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got netip.AddrPort
	// Refused until the server listens: try again shortly.
	nstest.Soon(3*time.Second, func() bool {
		c.Write([]byte("ping"))
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil {
			return false
		}
		head, body, _ := strings.Cut(string(buf[:n]), "\n")
		if body != "ping" {
			t.Fatalf("UDP reply %q", buf[:n])
		}
		got = parseSource(t, head)
		return true
	})
	if got.String() != c.LocalAddr().String() {
		t.Fatalf("UDP echo reported %v, the client is %v", got, c.LocalAddr())
	}
}

func TestEchoServerBadAddress(t *testing.T) {
	e := &EchoServer{HTTPAddr: "256.0.0.1:1", UDPAddr: "127.0.0.1:0"}
	if err := e.Run(context.Background()); err == nil {
		t.Fatal("Run accepted an invalid listen address")
	}
}
