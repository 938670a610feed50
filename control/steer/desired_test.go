package steer

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

func eip(name string, ns, pod metav1.LabelSelector, ips []string, status ...string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: egressv1.EgressIPSpec{EgressIPs: ips, NamespaceSelector: ns, PodSelector: pod}}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
	}
	return e
}

func match(kv ...string) metav1.LabelSelector {
	s := metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func baseInputs() Inputs {
	return Inputs{
		Node: "w1",
		Namespaces: map[string]map[string]string{
			"prod": {"env": "prod"}, "dev": {"env": "dev", "environment": "development"}, "qa": {"env": "qa"},
		},
		Pods: []Pod{
			{Namespace: "prod", Name: "web", Node: "w1", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("10.128.1.2"), addr("fd00:10::2")}},
			{Namespace: "prod", Name: "db", Node: "w1", Labels: map[string]string{"app": "db"}, IPs: []netip.Addr{addr("10.128.1.3")}},
			{Namespace: "prod", Name: "remote", Node: "w2", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("10.128.2.2")}},
			{Namespace: "dev", Name: "web", Node: "w1", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("10.128.1.4")}},
			{Namespace: "prod", Name: "host", Node: "w1", HostNetwork: true, Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("192.0.2.11")}},
			{Namespace: "prod", Name: "done", Node: "w1", Done: true, Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("10.128.1.9")}},
			{Namespace: "prod", Name: "pending", Node: "w1", Labels: map[string]string{"app": "web"}},
		},
		VTEPs: map[string][]netip.Addr{
			"g1": {addr("192.0.2.21"), addr("2001:db8::21")},
			"g2": {addr("192.0.2.22")},
			"g6": {addr("2001:db8::26")},
		},
	}
}

var params = Params{
	Excluded:   []netip.Prefix{pfx("10.128.0.0/14"), pfx("172.30.0.0/16"), pfx("fd00::/8")},
	LocalVTEP:  addr("192.0.2.11"),
	TableBase:  DefaultTableBase,
	TableCount: DefaultTableCount,
}

func TestDesiredSelectors(t *testing.T) {
	in := baseInputs()
	in.EgressIPs = []*egressv1.EgressIP{
		eip("web", match("env", "prod"), match("app", "web"), []string{"192.0.2.101", "192.0.2.102"},
			"g1", "192.0.2.101", "g2", "192.0.2.102"),
	}
	st := desired(in, params)
	// Only prod/web on w1: not db (pod label), not dev/web (namespace), not
	// the remote, host-network, finished or address-less pods.
	want := []netip.Addr{addr("10.128.1.2"), addr("fd00:10::2")}
	if !slices.Equal(st.Selected, want) {
		t.Fatalf("Selected = %v, want %v", st.Selected, want)
	}
	if len(st.Rules) != 2 || st.Rules[0].Src != want[0] || st.Rules[1].Src != want[1] || st.Rules[0].Table != st.Rules[1].Table {
		t.Fatalf("Rules = %+v, want one per address into one table", st.Rules)
	}
	tbl := st.Rules[0].Table
	if tbl < params.TableBase || tbl >= params.TableBase+params.TableCount {
		t.Fatalf("table %d outside the owned range", tbl)
	}
	def4 := findRoute(t, st, tbl, "0.0.0.0/0")
	if def4.Type != RouteUnicast || len(def4.NextHops) != 2 ||
		def4.NextHops[0].VTEP != addr("192.0.2.21") || def4.NextHops[1].VTEP != addr("192.0.2.22") ||
		def4.NextHops[0].Addr != addr("192.0.2.21") {
		t.Fatalf("IPv4 default = %+v, want multipath via g1 and g2", def4)
	}
	// No IPv6 egress IP: the pod's IPv6 traffic is blackholed, not leaked.
	if def6 := findRoute(t, st, tbl, "::/0"); def6.Type != RouteBlackhole {
		t.Fatalf("IPv6 default = %+v, want blackhole (no IPv6 egress IP)", def6)
	}
	for _, x := range []string{"10.128.0.0/14", "172.30.0.0/16", "fd00::/8"} {
		if r := findRoute(t, st, tbl, x); r.Type != RouteThrow {
			t.Fatalf("excluded %s = %+v, want throw", x, r)
		}
	}
	if len(st.FDB) != 2 || len(st.Neighs) != 2 {
		t.Fatalf("FDB %+v, neighbours %+v: want one each per gateway", st.FDB, st.Neighs)
	}
	if st.FDB[0].MAC != cluster.VTEPMAC(addr("192.0.2.21")) || st.FDB[0].VTEP != addr("192.0.2.21") {
		t.Fatalf("FDB[0] = %+v", st.FDB[0])
	}
	if len(st.Objects) != 1 || !slices.Equal(st.Objects[0].Gateways, []string{"g1", "g2"}) {
		t.Fatalf("Objects = %+v", st.Objects)
	}
}

func TestDesiredMatchExpressions(t *testing.T) {
	in := baseInputs()
	// The spec's egress-group2: every namespace whose environment is not development.
	in.EgressIPs = []*egressv1.EgressIP{eip("group2", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "environment", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"development"}},
	}}, metav1.LabelSelector{}, []string{"192.0.2.30"}, "g1", "192.0.2.30")}
	st := desired(in, params)
	want := []netip.Addr{addr("10.128.1.2"), addr("10.128.1.3"), addr("fd00:10::2")}
	if !slices.Equal(st.Selected, want) {
		t.Fatalf("Selected = %v, want %v (prod pods, not dev)", st.Selected, want)
	}
	in.EgressIPs[0].Spec.NamespaceSelector.MatchExpressions[0].Operator = "Bogus"
	st = desired(in, params)
	if len(st.Selected) != 0 || len(st.Problems) == 0 {
		t.Fatalf("invalid selector: selected %v, problems %v; want nothing and a problem", st.Selected, st.Problems)
	}
}

func TestDesiredSeveralObjectsFirstNameWins(t *testing.T) {
	in := baseInputs()
	in.EgressIPs = []*egressv1.EgressIP{
		eip("zeta", match("env", "prod"), metav1.LabelSelector{}, []string{"192.0.2.120"}, "g2", "192.0.2.120"),
		eip("alpha", match("env", "prod"), match("app", "web"), []string{"192.0.2.110"}, "g1", "192.0.2.110"),
	}
	st := desired(in, params)
	tables := map[netip.Addr]uint32{}
	for _, r := range st.Rules {
		tables[r.Src] = r.Table
	}
	var alpha, zeta uint32
	for _, o := range st.Objects {
		switch o.Name {
		case "alpha":
			alpha = o.Table
		case "zeta":
			zeta = o.Table
		}
	}
	if alpha == 0 || zeta == 0 || alpha == zeta {
		t.Fatalf("Objects = %+v, want two tables", st.Objects)
	}
	if tables[addr("10.128.1.2")] != alpha || tables[addr("10.128.1.3")] != zeta {
		t.Fatalf("web → %d, db → %d; want web in alpha (%d, first by name) and db in zeta (%d)",
			tables[addr("10.128.1.2")], tables[addr("10.128.1.3")], alpha, zeta)
	}
	if !slices.ContainsFunc(st.Problems, func(e error) bool { return strings.Contains(e.Error(), "alpha and zeta") }) {
		t.Fatalf("the overlap is not reported: %v", st.Problems)
	}
	// Input order does not matter.
	slices.Reverse(in.EgressIPs)
	if st2 := desired(in, params); !st2.Equal(st) {
		t.Fatalf("result depends on input order:\n%+v\n%+v", st, st2)
	}
}

func TestDesiredDualStack(t *testing.T) {
	in := baseInputs()
	in.EgressIPs = []*egressv1.EgressIP{eip("dual", match("env", "prod"), match("app", "web"),
		[]string{"192.0.2.50", "2001:db8:1::50"}, "g2", "192.0.2.50", "g1", "2001:db8:1::50")}
	st := desired(in, params)
	tbl := st.Objects[0].Table
	d4, d6 := findRoute(t, st, tbl, "0.0.0.0/0"), findRoute(t, st, tbl, "::/0")
	if d4.Type != RouteUnicast || len(d4.NextHops) != 1 || d4.NextHops[0].VTEP != addr("192.0.2.22") {
		t.Fatalf("IPv4 default = %+v, want via g2 (hosts the IPv4 egress IP)", d4)
	}
	// IPv6 traffic goes to g1 over the IPv4 underlay, next hop link-local from g1's MAC.
	if d6.Type != RouteUnicast || len(d6.NextHops) != 1 || d6.NextHops[0].VTEP != addr("192.0.2.21") ||
		!d6.NextHops[0].Addr.IsLinkLocalUnicast() || d6.NextHops[0].Addr != linkLocal(cluster.VTEPMAC(addr("192.0.2.21"))) {
		t.Fatalf("IPv6 default = %+v, want via g1 with a link-local next hop", d6)
	}
	if got := linkLocal([6]byte{0x02, 0x65, 0xc0, 0x00, 0x02, 0x15}); got != addr("fe80::65:c0ff:fe00:215") {
		t.Fatalf("linkLocal = %v", got)
	}
	// A gateway with only an IPv6 VTEP cannot be reached over this node's IPv4 underlay.
	in.EgressIPs[0].Status.Items[1].Node = "g6"
	st = desired(in, params)
	if d6 := findRoute(t, st, tbl, "::/0"); d6.Type != RouteBlackhole {
		t.Fatalf("IPv6 default = %+v, want blackhole (gateway unreachable over the underlay)", d6)
	}
	if len(st.Problems) == 0 {
		t.Fatal("unreachable gateway not reported")
	}
}

func TestDesiredStatusEdgeCases(t *testing.T) {
	in := baseInputs()
	in.EgressIPs = []*egressv1.EgressIP{eip("web", match("env", "prod"), match("app", "web"), []string{"192.0.2.101"},
		"g1", "192.0.2.199", // not in spec
		"nosuch", "192.0.2.101", // node without VTEP
	)}
	st := desired(in, params)
	if r := findRoute(t, st, st.Objects[0].Table, "0.0.0.0/0"); r.Type != RouteBlackhole {
		t.Fatalf("default = %+v, want blackhole: no usable gateway", r)
	}
	if len(st.Problems) != 2 || len(st.FDB) != 0 {
		t.Fatalf("problems %v, FDB %v", st.Problems, st.FDB)
	}
	// No EgressIP: nothing at all (failClosed: selected; in podCIDR mode
	// the pods are allowed, see TestDesiredFailClosed).
	in.EgressIPs = nil
	sel := params
	sel.FailClosed = FailClosedSelected
	if st := desired(in, sel); !st.Equal(State{}) {
		t.Fatalf("no objects: %+v", st)
	}
	// Pod in a namespace the agent has not seen yet: not matched.
	in = baseInputs()
	delete(in.Namespaces, "prod")
	in.EgressIPs = []*egressv1.EgressIP{eip("all", metav1.LabelSelector{}, metav1.LabelSelector{}, []string{"192.0.2.101"})}
	if st := desired(in, params); slices.Contains(st.Selected, addr("10.128.1.2")) {
		t.Fatal("pod of an unknown namespace selected")
	}
}

func TestTableForStableAndDistinct(t *testing.T) {
	used := map[uint32]bool{}
	seen := map[uint32]string{}
	for i := range 3 {
		name := []string{"a", "b", "c"}[i]
		tb, ok := tableFor(name, 1000, 2, used)
		if i < 2 && (!ok || seen[tb] != "") {
			t.Fatalf("table for %s: %d %v (seen %v)", name, tb, ok, seen)
		}
		if i == 2 && ok {
			t.Fatalf("third table in a range of two: %d", tb)
		}
		seen[tb] = name
	}
	a1, _ := tableFor("prod", DefaultTableBase, DefaultTableCount, map[uint32]bool{})
	a2, _ := tableFor("prod", DefaultTableBase, DefaultTableCount, map[uint32]bool{})
	if a1 != a2 {
		t.Fatal("table of a name is not stable")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Underlay: "eth0", ClusterCIDRs: []string{"10.128.0.0/14"}}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"geneve":   {Tunnel: "geneve", Underlay: "eth0"},
		"cidr":     {Underlay: "eth0", ServiceCIDRs: []string{"10.0.0.0/33"}},
		"vni":      {Underlay: "eth0", VNI: 1 << 24},
		"underlay": {},
		"device":   {Underlay: "eth0", Device: "a-very-long-device-name"},
		"mac":      {Underlay: "eth0", TunnelMAC: "01:00:5e:00:00:01"},
		"priority": {Underlay: "eth0", RulePriority: 40000},
		"tables":   {Underlay: "eth0", TableBase: 10},
		"log":      {Underlay: "eth0", LogFormat: "xml"},
	} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	if err := (Config{Tunnel: "geneve", Underlay: "eth0"}).WithDefaults().Validate(); !strings.Contains(err.Error(), "Geneve") {
		t.Errorf("geneve error does not say why: %v", err)
	}
}

func findRoute(t *testing.T, st State, table uint32, dst string) Route {
	t.Helper()
	for _, r := range st.Routes {
		if r.Table == table && r.Dst == pfx(dst) {
			return r
		}
	}
	t.Fatalf("no route %s in table %d: %+v", dst, table, st.Routes)
	return Route{}
}

func TestLoadConfigDocExample(t *testing.T) {
	p := t.TempDir() + "/steer.yaml"
	doc := "tunnel: vxlan\ndevice: egret0\nvni: 100\nport: 4789\nunderlay: eth0\nclusterCIDRs: [10.128.0.0/14, fd00:10::/48]\nserviceCIDRs: [172.30.0.0/16]\nnodeCIDRs: [192.0.2.0/24]\npodCIDRs: [10.128.1.0/24]\nfailClosed: podCIDR\nrulePriority: 27000\ntableBase: 1701249024\ntableCount: 65536\nresync: 30s\nlogFormat: json\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil || c.Resync.Duration != 30*time.Second || c.TableBase != DefaultTableBase || len(c.ClusterCIDRs) != 2 ||
		c.FailClosed != FailClosedPodCIDR || len(c.PodCIDRs) != 1 {
		t.Fatalf("%+v: %v", c, err)
	}
	os.WriteFile(p, []byte("vni: 1\nbogus: 2\n"), 0o644)
	if _, err := LoadConfig(p); err == nil {
		t.Fatal("unknown field accepted")
	}
}

// TestDesiredPodOutsidePodCIDRs: a selected pod whose address is outside
// the node's pod networks is not steered but stays selected (its traffic
// is held in), and is reported; a family without a known network is not
// checked.
func TestDesiredPodOutsidePodCIDRs(t *testing.T) {
	in := baseInputs()
	in.NodeKnown = true
	in.NodePodCIDRs = []string{"10.128.1.0/24"}
	in.Pods = append(in.Pods, Pod{Namespace: "prod", Name: "stray", Node: "w1", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("10.128.2.7")}})
	in.EgressIPs = []*egressv1.EgressIP{
		eip("web", match("env", "prod"), match("app", "web"), []string{"192.0.2.101"}, "g1", "192.0.2.101"),
	}
	for _, p := range []Params{params, {Excluded: params.Excluded, LocalVTEP: params.LocalVTEP, TableBase: params.TableBase,
		TableCount: params.TableCount, FailClosed: FailClosedSelected}} {
		st := desired(in, p)
		var srcs []netip.Addr
		for _, r := range st.Rules {
			srcs = append(srcs, r.Src)
		}
		if want := []netip.Addr{addr("10.128.1.2"), addr("fd00:10::2")}; !slices.Equal(srcs, want) {
			t.Errorf("%s: steered %v, want %v", st.FailClosed, srcs, want)
		}
		if !slices.Contains(st.Selected, addr("10.128.2.7")) || slices.Contains(st.Allowed, addr("10.128.2.7")) {
			t.Errorf("%s: stray address not held in: selected %v allowed %v", st.FailClosed, st.Selected, st.Allowed)
		}
		if !slices.ContainsFunc(st.Problems, func(e error) bool {
			return strings.Contains(e.Error(), "pod prod/stray (EgressIP web): address 10.128.2.7 does not use the egress IPs: it is outside node w1's pod networks")
		}) {
			t.Errorf("%s: not reported: %v", st.FailClosed, st.Problems)
		}
	}
	// A configured pod network is the filter's, not the plan's: the
	// gateways check the Node's, so the address is still not steered.
	p := params
	p.PodCIDRs = []netip.Prefix{pfx("10.128.0.0/16")}
	if st := desired(in, p); len(st.Rules) != 2 {
		t.Errorf("config pod networks: rules %v", st.Rules)
	}
	// The admin's opt-out (trustPodIPs): steered as the API gives it.
	p = params
	p.TrustPodIPs = true
	st := desired(in, p)
	if len(st.Rules) != 3 || slices.ContainsFunc(st.Problems, func(e error) bool { return strings.Contains(e.Error(), "outside node") }) {
		t.Errorf("trustPodIPs: rules %v, problems %v; want the stray address steered", st.Rules, st.Problems)
	}
}
