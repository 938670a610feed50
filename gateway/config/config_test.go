package config_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egret-gw/egret/gateway/config"
)

// labConfig is a file as `egret lab up` writes it for gateway g1 (docs/lab.md).
const labConfig = `# written by egret lab up; format in docs/lab.md
egressIPsClaimed: true
innerMAC: 02:65:67:00:00:15
interfaces:
- eth0
node: g1
nodes:
- innerMAC: 02:65:67:00:00:0b
  name: w1
  pods:
  - addr: 198.18.1.2
    policy: blue
  - addr: 198.18.1.3
    policy: green
  vtep: 192.0.2.11
- innerMAC: 02:65:67:00:00:0c
  name: w2
  pods:
  - addr: 198.18.2.2
    policy: blue
  - addr: 198.18.2.3
  vtep: 192.0.2.12
policies:
- egressIPs:
  - 192.0.2.101
  name: blue
- egressIPs: []
  name: green
port: 4789
routerV4: 198.19.0.21
tunnel: vxlan
vni: 100
vteps:
- 192.0.2.21
`

func TestLabConfig(t *testing.T) {
	c, err := config.ParseConfig([]byte(labConfig))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if !s.EgressIPsClaimed {
		t.Error("egressIPsClaimed: true must turn claiming off")
	}
	if s.Mode != "auto" || s.Batch != config.DefaultBatch || s.ConntrackMax != config.DefaultConntrackMax {
		t.Errorf("defaults not applied: %+v", s)
	}
	if len(s.Hosted) != 1 || s.Hosted[0] != netip.MustParseAddr("192.0.2.101") {
		t.Errorf("hosted %v, want [192.0.2.101]", s.Hosted)
	}
	if len(s.VTEPs) != 1 || s.VTEPs[0] != netip.MustParseAddr("192.0.2.21") {
		t.Errorf("vteps %v", s.VTEPs)
	}
	if s.Tunnel != config.TunnelVXLAN || s.VNI != 100 {
		t.Errorf("tunnel %v VNI %d, want VXLAN 100", s.Tunnel, s.VNI)
	}
	g := s
	if len(g.Nodes) != 2 || len(g.Nodes[1].Pods) != 2 || g.Nodes[1].Pods[1].Policy != "" || g.Nodes[0].Pods[1].Policy != "green" {
		t.Errorf("nodes not carried over: %+v", g.Nodes)
	}
	if g.InnerMAC != [6]byte{2, 0x65, 0x67, 0, 0, 0x15} || g.RouterV4 != netip.MustParseAddr("198.19.0.21") {
		t.Errorf("innerMAC %x routerV4 %v", g.InnerMAC, g.RouterV4)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	base := func() *config.Config {
		c, err := config.ParseConfig([]byte(labConfig))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		field string
		edit  func(c *config.Config)
	}{
		{"interfaces", func(c *config.Config) { c.Interfaces = nil }},
		{"interfaces[1]", func(c *config.Config) { c.Interfaces = []string{"eth0", "eth0"} }},
		{"interfaces[0]", func(c *config.Config) { c.Interfaces = []string{"a/b"} }},
		{"mode", func(c *config.Config) { c.Mode = "dpdk" }},
		{"queues", func(c *config.Config) { c.Queues = -1 }},
		{"batch", func(c *config.Config) { c.Batch = 16 }},
		{"batch", func(c *config.Config) { c.Batch = 65 }},
		{"logFormat", func(c *config.Config) { c.LogFormat = "xml" }},
		{"metricsAddr", func(c *config.Config) { c.MetricsAddr = "9090" }},
		{"conntrackMax", func(c *config.Config) { c.ConntrackMax = 10 }},
		{"podFlowLimit", func(c *config.Config) { c.PodFlowLimit = -1 }},
		{"podFlowLimit", func(c *config.Config) { c.ConntrackMax, c.PodFlowLimit = 4096, 4097 }},
		{"egressIPFlowLimit", func(c *config.Config) { c.EgressIPFlowLimit = -5 }},
		{"egressIPFlowLimit", func(c *config.Config) { c.EgressIPFlowLimit = config.DefaultConntrackMax + 1 }},
		{"tunnel", func(c *config.Config) { c.Tunnel = "gre" }},
		{"port", func(c *config.Config) { c.Port = 8472 }},
		{"port", func(c *config.Config) { c.Tunnel = "geneve" }}, // port 4789 stays
		{"vni", func(c *config.Config) { c.VNI = 1 << 24 }},
		{"vteps", func(c *config.Config) { c.VTEPs = nil }},
		{"vteps[0]", func(c *config.Config) { c.VTEPs = []string{"192.0.2"} }},
		{"vteps[0]", func(c *config.Config) { c.VTEPs = []string{"224.0.0.1"} }},
		{"vteps[1]", func(c *config.Config) { c.VTEPs = append(c.VTEPs, "192.0.2.22") }},
		{"innerMAC", func(c *config.Config) { c.InnerMAC = "" }},
		{"routerV4", func(c *config.Config) { c.RouterV4 = "fd00::1" }},
		{"routerV6", func(c *config.Config) { c.RouterV6 = "10.0.0.1" }},
		{"policies[1].name", func(c *config.Config) { c.Policies[1].Name = "blue" }},
		{"policies[0].name", func(c *config.Config) { c.Policies[0].Name = "" }},
		{"policies[0].egressIPs[0]", func(c *config.Config) { c.Policies[0].EgressIPs[0] = "x" }},
		{"policies[0].egressIPs[0]", func(c *config.Config) { c.Policies[0].EgressIPs[0] = "127.0.0.1" }},
		{"policies[1].egressIPs[0]", func(c *config.Config) { c.Policies[1].EgressIPs = []string{"192.0.2.101"} }},
		{"policies[0].egressIPs[0]", func(c *config.Config) { c.Policies[0].EgressIPs[0] = "192.0.2.21" }},
		{"nodes[0].name", func(c *config.Config) { c.Nodes[0].Name = "" }},
		{"nodes[1].name", func(c *config.Config) { c.Nodes[1].Name = "w1" }},
		{"nodes[0].vtep", func(c *config.Config) { c.Nodes[0].VTEP = "192.0.2.300" }},
		{"nodes[0].vtep", func(c *config.Config) { c.Nodes[0].VTEP = "fd00::11" }},
		{"nodes[1].innerMAC", func(c *config.Config) { c.Nodes[1].InnerMAC = "02:65" }},
		{"nodes[1].pods[0].addr", func(c *config.Config) { c.Nodes[1].Pods[0].Addr = "198.18.1.2" }},
		{"nodes[0].pods[1].addr", func(c *config.Config) { c.Nodes[0].Pods[1].Addr = "" }},
		{"nodes[0].pods[0].policy", func(c *config.Config) { c.Nodes[0].Pods[0].Policy = "red" }},
	} {
		c := base()
		tc.edit(c)
		_, err := c.Settle()
		if err == nil {
			t.Errorf("%s: invalid config accepted", tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "config field "+tc.field+":") {
			t.Errorf("%s: error %q does not name the field", tc.field, err)
		}
	}
}

func TestParseConfigRejects(t *testing.T) {
	for _, in := range []string{
		"interfaces: [eth0]\nvtep: 10.0.0.1\n", // unknown key (typo)
		"interfaces: eth0: x\n",                // not YAML
		"nodes: {name: w1}\n",                  // wrong shape
		"batch: lots\n",                        // wrong type
	} {
		if _, err := config.ParseConfig([]byte(in)); err == nil {
			t.Errorf("%q parsed without error", in)
		}
	}
}

func FuzzConfig(f *testing.F) {
	f.Add([]byte(labConfig))
	f.Add([]byte("interfaces: [eth0]\nvteps: ['::1']\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.ParseConfig(data)
		if err != nil {
			return
		}
		c.Settle() // errors are fine; panics are not
	})
}

// The flow limits default to a sixteenth (pod) and a half (egress IP) of
// the table, follow conntrackMax, and keep what the file sets.
func TestFlowLimitDefaults(t *testing.T) {
	for _, tc := range []struct {
		yaml          string
		max, pod, eip int
	}{
		{"", config.DefaultConntrackMax, 65536, 524288},
		{"conntrackMax: 4096\n", 4096, 256, 2048},
		{"conntrackMax: 4096\npodFlowLimit: 100\negressIPFlowLimit: 4096\n", 4096, 100, 4096},
	} {
		c, err := config.ParseConfig([]byte(labConfig + tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		set, err := c.Settle()
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if set.ConntrackMax != tc.max || set.PodFlowLimit != tc.pod || set.EgressIPFlowLimit != tc.eip {
			t.Errorf("%q: conntrackMax %d podFlowLimit %d egressIPFlowLimit %d, want %d %d %d",
				tc.yaml, set.ConntrackMax, set.PodFlowLimit, set.EgressIPFlowLimit, tc.max, tc.pod, tc.eip)
		}
	}
}

func TestConfigDestinationLists(t *testing.T) {
	c := config.Config{Interfaces: []string{"eth0"}, VTEPs: []string{"10.0.0.1"}, InnerMAC: "02:00:00:00:00:01",
		DeniedDestinations: []string{"10.0.0.0/16"}, AllowedDestinations: []string{"10.0.5.7/32"}}
	s, err := c.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.DeniedDestinations) != 1 || s.DeniedDestinations[0] != netip.MustParsePrefix("10.0.0.0/16") ||
		len(s.AllowedDestinations) != 1 {
		t.Fatalf("lists %v %v", s.DeniedDestinations, s.AllowedDestinations)
	}
	c.DeniedDestinations = []string{"10.0.0.1"}
	if _, err := c.Settle(); err == nil || !strings.Contains(err.Error(), "deniedDestinations[0]") {
		t.Fatalf("a bare address was accepted or the error does not name the field: %v", err)
	}
}

// TestSettleAdmission: sources are masked, unmapped, sorted and deduplicated;
// a listener without a name or port, or listed twice, is refused by field.
func TestSettleAdmission(t *testing.T) {
	c, err := config.ParseConfig([]byte(labConfig))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := c.Spec()
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	spec.Admission = []config.Admit{{Name: "health", Port: 9107,
		From: []netip.Prefix{p("10.0.0.7/24"), p("::ffff:10.1.0.1/128"), p("10.0.0.0/24"), p("fd00::1/64")}}}
	set, err := spec.Settle()
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{p("10.0.0.0/24"), p("10.1.0.1/32"), p("fd00::/64")}
	if got := set.Admission[0].From; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("settled sources %v, want %v", got, want)
	}
	for _, tc := range []struct {
		adm  []config.Admit
		want string
	}{
		{[]config.Admit{{Port: 9107}}, "admission[0].name"},
		{[]config.Admit{{Name: "health"}}, "admission[0].port: no port"},
		{[]config.Admit{{Name: "a", Port: 1}, {Name: "a", Port: 2}}, "admission[1].name: \"a\" is listed twice"},
		{[]config.Admit{{Name: "a", Port: 1}, {Name: "b", Port: 1}}, "admission[1].port: 1 is listed twice"},
		{[]config.Admit{{Name: "a", Port: 1, From: []netip.Prefix{{}}}}, "admission[0].from[0]"},
	} {
		spec.Admission = tc.adm
		if _, err := spec.Settle(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.adm, err, tc.want)
		}
	}
}

// TestSettleLocalNode: the local node needs the local port, the local VTEP
// of the gateway's family and the kernel side's MAC; there is one; no other
// node may claim the local VTEP.
func TestSettleLocalNode(t *testing.T) {
	spec := func(nodes ...config.Node) config.Spec {
		return config.Spec{Interfaces: []string{"eth0"}, LocalPort: true, VTEPs: []netip.Addr{netip.MustParseAddr("192.0.2.21")},
			InnerMAC: [6]byte{2, 0, 0, 0, 0, 1}, Nodes: nodes}
	}
	local := config.Node{Name: "g1", VTEP: config.LocalVTEP4, InnerMAC: config.LocalKernelMAC, Local: true}
	if _, err := spec(local).Settle(); err != nil {
		t.Fatalf("a valid local node: %v", err)
	}
	off := spec(local)
	off.LocalPort = false
	wrongVTEP, wrongMAC := local, local
	wrongVTEP.VTEP = config.LocalVTEP6
	wrongMAC.InnerMAC = [6]byte{2, 0, 0, 0, 0, 9}
	second := local
	second.Name = "g2"
	claim := config.Node{Name: "w1", VTEP: config.LocalVTEP4, InnerMAC: [6]byte{2, 0, 0, 0, 0, 2}}
	for _, c := range []struct {
		name string
		s    config.Spec
		want string
	}{
		{"port off", off, "nodes[0].local"},
		{"wrong VTEP", spec(wrongVTEP), "nodes[0].vtep"},
		{"wrong MAC", spec(wrongMAC), "nodes[0].innerMAC"},
		{"two local nodes", spec(local, second), "nodes[1].local"},
		{"a worker at the local VTEP", spec(claim), "nodes[0].vtep"},
	} {
		if _, err := c.s.Settle(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
}

// TestSettleEgressIPSubnets: a subnet must belong to a hosted egress IP and
// hold it; mapped addresses are unmapped.
func TestSettleEgressIPSubnets(t *testing.T) {
	c, err := config.ParseConfig([]byte(labConfig))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := c.Spec()
	if err != nil {
		t.Fatal(err)
	}
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	spec.EgressIPSubnets = map[netip.Addr]netip.Prefix{a("::ffff:192.0.2.101"): p("::ffff:192.0.2.21/120")}
	set, err := spec.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if got := set.EgressIPSubnets[a("192.0.2.101")]; got != p("192.0.2.21/24") {
		t.Fatalf("settled subnet %v, want 192.0.2.21/24", got)
	}
	for _, tc := range []struct {
		m    map[netip.Addr]netip.Prefix
		want string
	}{
		{map[netip.Addr]netip.Prefix{a("192.0.2.102"): p("192.0.2.21/24")}, "not an egress IP of any policy"},
		{map[netip.Addr]netip.Prefix{a("192.0.2.101"): p("10.81.0.3/24")}, "does not hold the egress IP"},
		{map[netip.Addr]netip.Prefix{a("192.0.2.101"): {}}, "does not hold the egress IP"},
	} {
		spec.EgressIPSubnets = tc.m
		if _, err := spec.Settle(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.m, err, tc.want)
		}
	}
}

// destConfig is labConfig with destination rules: pod 198.18.1.3 leaves
// as green for 203.0.113.0/24 and as blue (its fallback) elsewhere, but
// not at all for 203.0.113.128/25.
const destConfig = labConfig + `destTables:
- name: blue,green
  rules:
  - prefix: 203.0.113.0/24
    policy: green
  - prefix: 203.0.113.128/25
    exclude: true
  - prefix: 2001:db8:1::/48
    policy: blue
`

// TestSettleDestTables: a file's destination tables settle with their
// pods naming them, and every wrong table, rule or reference is refused
// with the field named.
func TestSettleDestTables(t *testing.T) {
	parse := func() *config.Config {
		c, err := config.ParseConfig([]byte(destConfig))
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes[0].Pods[1].Dest = "blue,green"
		c.Nodes[0].Pods[1].Policy = "blue"
		return c
	}
	s, err := parse().Settle()
	if err != nil {
		t.Fatal(err)
	}
	want := config.DestTable{Name: "blue,green", Rules: []config.DestRule{
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Policy: "green"},
		{Prefix: netip.MustParsePrefix("203.0.113.128/25"), Exclude: true},
		{Prefix: netip.MustParsePrefix("2001:db8:1::/48"), Policy: "blue"},
	}}
	if len(s.DestTables) != 1 || s.DestTables[0].Name != want.Name || !slices.Equal(s.DestTables[0].Rules, want.Rules) {
		t.Fatalf("destTables %+v, want %+v", s.DestTables, want)
	}
	if p := s.Nodes[0].Pods[1]; p.Dest != "blue,green" || p.Policy != "blue" {
		t.Fatalf("pod %+v", p)
	}

	for _, tc := range []struct {
		field string
		edit  func(c *config.Config)
	}{
		{"destTables[0].rules[0].prefix", func(c *config.Config) { c.DestTables[0].Rules[0].Prefix = "203.0.113.0" }},
		{"destTables[0].rules[0].prefix", func(c *config.Config) { c.DestTables[0].Rules[0].Prefix = "203.0.113.1/24" }},
		{"destTables[0].rules[1].prefix", func(c *config.Config) { c.DestTables[0].Rules[1].Prefix = "203.0.113.0/24" }},
		{"destTables[0].rules[0].policy", func(c *config.Config) { c.DestTables[0].Rules[0].Policy = "red" }},
		{"destTables[0].rules[0].policy", func(c *config.Config) { c.DestTables[0].Rules[0].Policy = "" }},
		{"destTables[0].rules[1].policy", func(c *config.Config) { c.DestTables[0].Rules[1].Policy = "blue" }},
		{"destTables[0].name", func(c *config.Config) { c.DestTables[0].Name = "" }},
		{"destTables[1].name", func(c *config.Config) { c.DestTables = append(c.DestTables, c.DestTables[0]) }},
		{"nodes[0].pods[1].dest", func(c *config.Config) { c.Nodes[0].Pods[1].Dest = "blue" }},
	} {
		c := parse()
		tc.edit(c)
		_, err := c.Settle()
		if err == nil {
			t.Errorf("%s: invalid config accepted", tc.field)
			continue
		}
		if !strings.Contains(err.Error(), "config field "+tc.field+":") {
			t.Errorf("%s: error %q does not name the field", tc.field, err)
		}
	}

	// A Spec built in code: IPv4-mapped prefixes are unmapped.
	sp, err := parse().Spec()
	if err != nil {
		t.Fatal(err)
	}
	sp.DestTables[0].Rules[0].Prefix = netip.MustParsePrefix("::ffff:203.0.113.0/120")
	set, err := sp.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if got := set.DestTables[0].Rules[0].Prefix; got != netip.MustParsePrefix("203.0.113.0/24") {
		t.Errorf("mapped prefix settled as %v", got)
	}
	if sp.DestTables[0].Rules[0].Prefix == set.DestTables[0].Rules[0].Prefix {
		t.Error("Settle shares the rules with the Spec")
	}
}
