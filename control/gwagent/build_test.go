package gwagent

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/config"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func eip(name string, ips []string, nsSel, podSel map[string]string, status ...string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
	e.Spec.EgressIPs = ips
	e.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: nsSel}
	e.Spec.PodSelector = metav1.LabelSelector{MatchLabels: podSel}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
	}
	return e
}

// node is a Node with InternalIP addresses internalIPs (comma-separated).
func node(name, internalIPs string, ann map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
	if internalIPs != "" {
		for _, a := range strings.Split(internalIPs, ",") {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
	}
	return n
}

func ns(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func pod(namespace, name, nodeName string, l map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l}}
	p.Spec.NodeName = nodeName
	p.Status.Phase = corev1.PodRunning
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func base() config.Spec {
	return config.Spec{Interfaces: []string{"eth0"}, VTEPs: []netip.Addr{addr("10.0.0.21")}, Tunnel: config.TunnelVXLAN, VNI: 100}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func macOf(v string) [6]byte { return cluster.VTEPMAC(addr(v)) }

// podPolicies flattens the built nodes into "node/addr" → policy.
func podPolicies(c config.Spec) map[string]string {
	out := map[string]string{}
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			out[n.Name+"/"+p.Addr.String()] = p.Policy
		}
	}
	return out
}

func hasProblem(r Result, sub string) bool {
	return slices.ContainsFunc(r.Problems, func(e error) bool { return strings.Contains(e.Error(), sub) })
}

func TestBuild(t *testing.T) {
	in := inputs{
		Node: "g1",
		EgressIPs: []*egressv1.EgressIP{
			eip("blue", []string{"192.0.2.10", "192.0.2.11"}, map[string]string{"env": "prod"}, nil,
				"g1", "192.0.2.10", "g2", "192.0.2.11"),
			// Sorts after blue: a pod both select belongs to blue.
			eip("green", []string{"192.0.2.20", "2001:db8::20"}, map[string]string{"env": "prod"}, map[string]string{"app": "web"},
				"g1", "192.0.2.20", "g1", "2001:db8::20"),
			eip("red", []string{"192.0.2.30"}, nil, nil, "g2", "192.0.2.30"),
		},
		Nodes: []*corev1.Node{
			node("g1", "10.0.0.21", nil),
			node("g2", "10.0.0.22", nil),
			node("w1", "10.0.0.11", nil),
			node("w2", "10.9.9.9,10.0.0.12,fd00::12", map[string]string{cluster.AnnotationVTEP: "10.0.0.12, fd00::12", cluster.AnnotationTunnelMAC: "02:65:67:00:00:12"}),
			node("w3", "fd00::13", nil), // no IPv4 VTEP: the gateway has none of IPv6
		},
		Namespaces: []*corev1.Namespace{ns("prod", map[string]string{"env": "prod"}), ns("dev", map[string]string{"env": "dev"})},
		Pods: []*corev1.Pod{
			pod("prod", "web-1", "w1", map[string]string{"app": "web"}, "10.244.1.5", "fd00:10::5"),
			pod("prod", "db-1", "w2", map[string]string{"app": "db"}, "10.244.2.5"),
			pod("dev", "web-2", "w1", map[string]string{"app": "web"}, "10.244.1.6"),
			pod("prod", "web-3", "w3", map[string]string{"app": "web"}, "10.244.3.5"),
			pod("nowhere", "x", "w1", nil, "10.244.1.99"), // namespace unknown
		},
	}
	hostNet := pod("prod", "host", "w1", nil, "10.0.0.11")
	hostNet.Spec.HostNetwork = true
	done := pod("prod", "done", "w1", nil, "10.244.1.7")
	done.Status.Phase = corev1.PodSucceeded
	in.Pods = append(in.Pods, hostNet, done, pod("prod", "pending", "w1", nil))

	r := build(base(), in)
	c := r.Spec
	if _, err := c.Settle(); err != nil {
		t.Fatalf("built config does not validate: %v", err)
	}
	wantHosted := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("2001:db8::20")}
	if !slices.Equal(r.Hosted, wantHosted) {
		t.Errorf("hosted %v, want %v", r.Hosted, wantHosted)
	}
	wantPol := []config.Policy{{Name: "blue", EgressIPs: []netip.Addr{addr("192.0.2.10")}},
		{Name: "green", EgressIPs: []netip.Addr{addr("192.0.2.20"), addr("2001:db8::20")}}, {Name: "red"}}
	if fmt.Sprint(c.Policies) != fmt.Sprint(wantPol) {
		t.Errorf("policies %v, want %v", c.Policies, wantPol)
	}
	wantNodes := []config.Node{
		{Name: "g2", VTEP: addr("10.0.0.22"), InnerMAC: macOf("10.0.0.22"), Pods: nil},
		{Name: "w1", VTEP: addr("10.0.0.11"), InnerMAC: macOf("10.0.0.11"), Pods: []config.Pod{
			{Addr: addr("10.244.1.5"), Policy: "blue", Namespace: "prod", Name: "web-1"}, {Addr: addr("10.244.1.6"), Policy: "red", Namespace: "dev", Name: "web-2"},
			{Addr: addr("fd00:10::5"), Policy: "blue", Namespace: "prod", Name: "web-1"}}},
		{Name: "w2", VTEP: addr("10.0.0.12"), InnerMAC: [6]byte{2, 0x65, 0x67, 0, 0, 0x12}, Pods: []config.Pod{{Addr: addr("10.244.2.5"), Policy: "blue", Namespace: "prod", Name: "db-1"}}},
	}
	if fmt.Sprint(c.Nodes) != fmt.Sprint(wantNodes) {
		t.Errorf("nodes\n got %v\nwant %v", c.Nodes, wantNodes)
	}
	if !hasProblem(r, "node w3 has no VTEP") {
		t.Errorf("w3's pod without usable VTEP not reported: %v", r.Problems)
	}
	if c.InnerMAC != macOf("10.0.0.21") || c.Node != "g1" {
		t.Errorf("innerMAC %q node %q", c.InnerMAC, c.Node)
	}
}

func TestBuildVTEPFromNode(t *testing.T) {
	b := base()
	b.VTEPs = nil
	in := inputs{Node: "g1", Nodes: []*corev1.Node{node("g1", "10.0.0.21,fd00::21,10.1.0.21", map[string]string{cluster.AnnotationVTEP: "10.0.0.21,fd00::21"}),
		node("w3", "fd00::13", nil)}}
	r := build(b, in)
	if !slices.Equal(r.Spec.VTEPs, []netip.Addr{addr("10.0.0.21"), addr("fd00::21")}) || r.Spec.InnerMAC != macOf("10.0.0.21") {
		t.Fatalf("vteps %v innerMAC %x", r.Spec.VTEPs, r.Spec.InnerMAC)
	}
	if len(r.Spec.Nodes) != 1 || r.Spec.Nodes[0].VTEP != addr("fd00::13") || r.Spec.Nodes[0].InnerMAC != macOf("fd00::13") {
		t.Fatalf("IPv6 worker: %v", r.Spec.Nodes)
	}
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatal(err)
	}
	// A configured innerMAC stays.
	b.InnerMAC = [6]byte{2, 0, 0, 0, 0, 1}
	if r := build(b, in); r.Spec.InnerMAC != b.InnerMAC {
		t.Fatalf("innerMAC %x", r.Spec.InnerMAC)
	}
	// No VTEP anywhere: reported, and the config does not validate.
	r = build(b, inputs{Node: "g1"})
	if !hasProblem(r, "no VTEP configured") {
		t.Fatalf("problems %v", r.Problems)
	}
	if _, err := r.Spec.Settle(); err == nil {
		t.Fatal("config without VTEP validated")
	}
}

func TestBuildBadInputs(t *testing.T) {
	bad := eip("bad", []string{"192.0.2.40"}, nil, nil, "g1", "192.0.2.40")
	bad.Spec.NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Sideways"}}
	in := inputs{
		Node: "g1",
		EgressIPs: []*egressv1.EgressIP{
			nil,
			eip("a", []string{"192.0.2.10", "10.0.0.21", "169.254.1.1"}, nil, nil,
				"g1", "192.0.2.10", "g1", "192.0.2.99", "g1", "not-an-ip", "g1", "10.0.0.21", "g1", "169.254.1.1", "g1", "192.0.2.10"),
			eip("b", []string{"192.0.2.10"}, nil, nil, "g1", "192.0.2.10"), // same IP placed for two objects
			eip("a", []string{"192.0.2.77"}, nil, nil, "g1", "192.0.2.77"), // duplicate name
			bad,
		},
		Nodes: []*corev1.Node{nil, node("w1", "10.0.0.11", map[string]string{cluster.AnnotationTunnelMAC: "zz"}),
			node("w2", "10.0.0.11", nil), node("self-vtep", "10.0.0.21", nil), node("g1", "10.0.0.21", nil)},
		Namespaces: []*corev1.Namespace{nil, ns("default", nil)},
		Pods: []*corev1.Pod{nil,
			pod("default", "a", "w1", nil, "10.244.1.5", "0.0.0.0", "not-an-ip", "192.0.2.10"),
			pod("default", "b", "w1", nil, "10.244.1.5"), // same address
			pod("default", "c", "w2", nil, "10.244.2.5"), // node not accepted
			pod("default", "d", "g1", nil, "10.244.9.5"), // on the gateway itself
			pod("default", "e", "ghost", nil, "10.244.9.6"),
		},
	}
	r := build(base(), in)
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatalf("built config does not validate: %v\nproblems: %v", err, r.Problems)
	}
	if !slices.Equal(r.Hosted, []netip.Addr{netip.MustParseAddr("192.0.2.10")}) {
		t.Errorf("hosted %v", r.Hosted)
	}
	for _, want := range []string{
		`EgressIP "a" appears twice`, "bad: namespaceSelector",
		`status item "192.0.2.99" on node "g1" is not one of its`, `status item "not-an-ip" on node "g1":`,
		"10.0.0.21 is this gateway's VTEP", `status item "169.254.1.1" on node "g1":`,
		"EgressIP b: 192.0.2.10 is also placed for EgressIP a",
		"w1: annotation egret.io/tunnel-mac", "node w2: VTEP 10.0.0.11 is also node w1's",
		"node self-vtep: VTEP 10.0.0.21 is also node g1's",
		"pod default/b (EgressIP a): address 10.244.1.5 does not use the egress IPs: it is also pod default/a's",
		"pod default/a: address 0.0.0.0", "pod default/a (EgressIP a): address 192.0.2.10 does not use the egress IPs: it is an egress IP",
		"pod default/c (EgressIP a): node w2 has no VTEP of this gateway's families", "selected pod addresses run on this gateway node, whose local port is off",
		"node ghost is unknown",
	} {
		if !hasProblem(r, want) {
			t.Errorf("problem %q not reported; got:\n%v", want, r.Problems)
		}
	}
	got := podPolicies(r.Spec)
	if len(got) != 1 || got["w1/10.244.1.5"] != "a" {
		t.Errorf("pods %v", got)
	}
	if r.Spec.Nodes[0].InnerMAC != macOf("10.0.0.11") {
		t.Errorf("bad annotation should fall back to the default MAC: %v", r.Spec.Nodes[0])
	}
}

func TestFenced(t *testing.T) {
	c := base()
	c.InnerMAC = [6]byte{2, 0, 0, 0, 0, 1}
	c.Policies = []config.Policy{{Name: "a", EgressIPs: []netip.Addr{addr("192.0.2.1")}}, {Name: "b"}}
	c.Nodes = []config.Node{{Name: "w1", VTEP: addr("10.0.0.11"), InnerMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Pods: []config.Pod{{Addr: addr("10.244.1.1"), Policy: "a"}}}}
	// The node's annotations name the hosted IP's subnet (Build's
	// placedSubnets), as on every node whose subnets are published.
	c.EgressIPSubnets = map[netip.Addr]netip.Prefix{addr("192.0.2.1"): netip.MustParsePrefix("192.0.2.0/24")}
	if _, err := c.Settle(); err != nil {
		t.Fatal(err)
	}
	f := Fenced(c)
	if len(hostedOf(f)) != 0 || len(f.Policies) != 2 || f.Policies[0].Name != "a" || len(f.Nodes) != 1 {
		t.Fatalf("fenced %+v", f)
	}
	if len(c.Policies[0].EgressIPs) != 1 {
		t.Fatal("Fenced modified its input")
	}
	if _, err := f.Settle(); err != nil {
		t.Fatal(err)
	}
}

// randomInputs builds a cluster with overlapping selectors, matchExpressions,
// dual-stack pods and some duplicate addresses.
func randomInputs(rng *rand.Rand, dupAddrs bool) inputs {
	in := inputs{Node: "g1"}
	envs := []string{"prod", "dev", "test"}
	apps := []string{"web", "db", "cache"}
	for i := range 6 {
		in.Namespaces = append(in.Namespaces, ns(fmt.Sprintf("ns%d", i), map[string]string{"env": envs[rng.IntN(3)]}))
	}
	in.Nodes = append(in.Nodes, node("g1", "10.0.0.21", nil), node("g2", "10.0.0.22", nil))
	for i := range 5 {
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("w%d", i), fmt.Sprintf("10.0.0.%d", 100+i), nil))
	}
	for i := range 8 {
		e := eip(fmt.Sprintf("e%d", rng.IntN(20)), []string{fmt.Sprintf("192.0.2.%d", 2*i), fmt.Sprintf("192.0.2.%d", 2*i+1)}, nil, nil)
		switch rng.IntN(4) {
		case 0:
			e.Spec.NamespaceSelector.MatchLabels = map[string]string{"env": envs[rng.IntN(3)]}
		case 1:
			e.Spec.NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{envs[rng.IntN(3)]}}}
		case 2:
			e.Spec.NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: envs[:1+rng.IntN(2)]}}
		}
		if rng.IntN(2) == 0 {
			e.Spec.PodSelector.MatchLabels = map[string]string{"app": apps[rng.IntN(3)]}
		}
		for _, ip := range e.Spec.EgressIPs {
			e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: []string{"g1", "g2"}[rng.IntN(2)], EgressIP: ip})
		}
		in.EgressIPs = append(in.EgressIPs, e)
	}
	for i := range 60 {
		n := rng.IntN(256)
		if !dupAddrs {
			n = i
		}
		ips := []string{fmt.Sprintf("10.244.%d.%d", n/200, n%200+1)}
		if rng.IntN(3) == 0 {
			ips = append(ips, fmt.Sprintf("fd00:10::%x", n+1))
		}
		p := pod(fmt.Sprintf("ns%d", rng.IntN(7)), fmt.Sprintf("p%d", i), fmt.Sprintf("w%d", rng.IntN(5)), map[string]string{"app": apps[rng.IntN(3)]}, ips...)
		if rng.IntN(10) == 0 {
			p.Spec.HostNetwork = true
		}
		if rng.IntN(10) == 0 {
			p.Status.Phase = corev1.PodFailed
		}
		in.Pods = append(in.Pods, p)
	}
	return in
}

// TestBuildAlwaysValid: whatever the objects, the result validates.
func TestBuildAlwaysValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		in := randomInputs(rng, true)
		// Some nodes share VTEPs, some egress IPs are placed twice.
		if rng.IntN(2) == 0 {
			in.Nodes = append(in.Nodes, node("w9", "10.0.0.101", nil))
		}
		in.EgressIPs = append(in.EgressIPs, eip("zz", []string{"192.0.2.1"}, nil, nil, "g1", "192.0.2.1"))
		r := build(base(), in)
		if _, err := r.Spec.Settle(); err != nil {
			t.Fatalf("iteration %d: %v\nproblems %v", iter, err, r.Problems)
		}
		for _, h := range r.Hosted {
			if !h.IsValid() {
				t.Fatal("invalid hosted address")
			}
		}
	}
}

func TestAgree(t *testing.T) {
	e1 := eip("a", []string{"192.0.2.1", "192.0.2.2"}, nil, nil, "g1", "192.0.2.1", "g1", "192.0.2.2")
	e2 := eip("b", []string{"192.0.2.3"}, nil, nil, "g1", "192.0.2.3")
	fresh := cluster.Statuses{"a": {Items: []egressv1.EgressIPStatusItem{{Node: "g1", EgressIP: "192.0.2.1"}, {Node: "g2", EgressIP: "192.0.2.2"}}}}
	out := agree([]*egressv1.EgressIP{e1, nil, e2}, fresh)
	if len(out) != 2 || len(out[0].Status.Items) != 1 || out[0].Status.Items[0].EgressIP != "192.0.2.1" || len(out[1].Status.Items) != 0 {
		t.Fatalf("agree: %+v", out)
	}
	if len(e1.Status.Items) != 2 {
		t.Fatal("agree modified the cache's object")
	}
}

// BenchmarkBuild: 10k pods on 200 workers, 500 EgressIP objects, 50 hosted here.
func BenchmarkBuild(b *testing.B) {
	in := inputs{Node: "g1"}
	in.Nodes = append(in.Nodes, node("g1", "10.0.0.21", nil))
	for i := range 200 {
		in.Nodes = append(in.Nodes, node(fmt.Sprintf("w%d", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), nil))
	}
	for i := range 100 {
		in.Namespaces = append(in.Namespaces, ns(fmt.Sprintf("ns%d", i), map[string]string{"team": fmt.Sprintf("t%d", i%50)}))
	}
	for i := range 500 {
		ip := fmt.Sprintf("192.%d.%d.%d", 168+i/65536, i/256%256, i%256+1)
		st := []string{"g2", ip}
		if i%10 == 0 {
			st[0] = "g1"
		}
		in.EgressIPs = append(in.EgressIPs, eip(fmt.Sprintf("e%03d", i), []string{ip}, map[string]string{"team": fmt.Sprintf("t%d", i%50)},
			map[string]string{"app": fmt.Sprintf("a%d", i%10)}, st...))
	}
	for i := range 10000 {
		in.Pods = append(in.Pods, pod(fmt.Sprintf("ns%d", i%100), fmt.Sprintf("p%d", i), fmt.Sprintf("w%d", i%200),
			map[string]string{"app": fmt.Sprintf("a%d", i%10)}, fmt.Sprintf("10.%d.%d.%d", 128+i/65536, i/256%256, i%256)))
	}
	bs := base()
	b.ReportAllocs()
	for b.Loop() {
		r := build(bs, in)
		if len(r.Hosted) != 50 {
			b.Fatalf("hosted %d", len(r.Hosted))
		}
	}
}

// inputs is a gateway's name with the objects its configuration is built from.
type inputs struct {
	Node       string
	EgressIPs  []*egressv1.EgressIP
	Nodes      []*corev1.Node
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	Traffic    []*egressv1.EgressIPTraffic
}

func (in inputs) view() cluster.View {
	return cluster.View{EgressIPs: in.EgressIPs, Nodes: in.Nodes, Namespaces: in.Namespaces, Pods: in.Pods, Traffic: in.Traffic}
}

// build is Build for in.Node.
func build(base config.Spec, in inputs) Result { return Build(base, in.Node, in.view(), Options{}) }

// TestBuildNodeTrust: a worker cannot point the gateway at a VTEP that is
// not its own InternalIP through its node-writable annotation, nor have a
// pod address outside its spec.podCIDRs accepted.
func TestBuildNodeTrust(t *testing.T) {
	w1 := node("w1", "10.0.0.11", map[string]string{cluster.AnnotationVTEP: "10.0.0.12"})
	w1.Spec.PodCIDRs = []string{"10.244.1.0/24"}
	w2 := node("w2", "10.0.0.12", nil)
	in := inputs{
		Node:       "g1",
		EgressIPs:  []*egressv1.EgressIP{eip("blue", []string{"192.0.2.10"}, nil, nil, "g1", "192.0.2.10")},
		Nodes:      []*corev1.Node{node("g1", "10.0.0.21", nil), w1, w2},
		Namespaces: []*corev1.Namespace{ns("prod", nil)},
		Pods: []*corev1.Pod{
			pod("prod", "in", "w1", nil, "10.244.1.5", "fd00:10::5"), // no IPv6 pod network known: kept
			pod("prod", "out", "w1", nil, "10.244.2.5"),
			pod("prod", "w2pod", "w2", nil, "10.244.2.6"), // w2 has no pod CIDRs: unchecked
		},
	}
	r := build(base(), in)
	wantNodes := []config.Node{
		{Name: "w1", VTEP: addr("10.0.0.11"), InnerMAC: macOf("10.0.0.11"), Pods: []config.Pod{
			{Addr: addr("10.244.1.5"), Policy: "blue", Namespace: "prod", Name: "in"}, {Addr: addr("fd00:10::5"), Policy: "blue", Namespace: "prod", Name: "in"}}},
		{Name: "w2", VTEP: addr("10.0.0.12"), InnerMAC: macOf("10.0.0.12"), Pods: []config.Pod{{Addr: addr("10.244.2.6"), Policy: "blue", Namespace: "prod", Name: "w2pod"}}},
	}
	if fmt.Sprint(r.Spec.Nodes) != fmt.Sprint(wantNodes) {
		t.Errorf("nodes\n got %v\nwant %v", r.Spec.Nodes, wantNodes)
	}
	if !hasProblem(r, "node w1: annotation "+cluster.AnnotationVTEP) || !hasProblem(r, "10.0.0.12") {
		t.Errorf("refused VTEP annotation not reported: %v", r.Problems)
	}
	if !hasProblem(r, "pod prod/out (EgressIP blue): address 10.244.2.5 does not use the egress IPs: it is outside node w1's pod networks") {
		t.Errorf("pod outside the pod CIDRs not reported: %v", r.Problems)
	}
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatal(err)
	}

	// The admin's opt-out (--trust-pod-ips): the address is taken as the API gives it.
	r = Build(base(), in.Node, in.view(), Options{TrustPodIPs: true})
	wantNodes[0].Pods = []config.Pod{{Addr: addr("10.244.1.5"), Policy: "blue", Namespace: "prod", Name: "in"},
		{Addr: addr("10.244.2.5"), Policy: "blue", Namespace: "prod", Name: "out"}, {Addr: addr("fd00:10::5"), Policy: "blue", Namespace: "prod", Name: "in"}}
	if fmt.Sprint(r.Spec.Nodes) != fmt.Sprint(wantNodes) {
		t.Errorf("with TrustPodIPs, nodes\n got %v\nwant %v", r.Spec.Nodes, wantNodes)
	}
	if hasProblem(r, "outside node") {
		t.Errorf("with TrustPodIPs a pod address is still refused: %v", r.Problems)
	}
}

// TestBuildLocalPods: with the local port on, the selected pods of the
// gateway's own node are a local node of the engine's configuration (the
// local VTEP and the kernel side's MAC), not a problem; the other nodes
// are unchanged.
func TestBuildLocalPods(t *testing.T) {
	v := cluster.View{
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"env": "prod"}}}},
		Nodes: []*corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: "g1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.21"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}}}},
		},
		Pods: []*corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "here", UID: "uid-here"}, Spec: corev1.PodSpec{NodeName: "g1"},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.9.5"}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "there"}, Spec: corev1.PodSpec{NodeName: "w1"},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}},
		},
		EgressIPs: []*egressv1.EgressIP{{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
			Spec:   egressv1.EgressIPSpec{EgressIPs: []string{"10.0.0.100"}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
			Status: egressv1.EgressIPStatus{Items: []egressv1.EgressIPStatusItem{{Node: "g1", EgressIP: "10.0.0.100"}}}}},
	}
	base := config.Spec{Interfaces: []string{"eth0"}, LocalPort: true}
	r := Build(base, "g1", v, Options{})
	if len(r.Problems) != 0 {
		t.Fatalf("problems: %v", r.Problems)
	}
	var local, w1 *config.Node
	for i := range r.Spec.Nodes {
		switch n := &r.Spec.Nodes[i]; {
		case n.Local:
			local = n
		case n.Name == "w1":
			w1 = n
		}
	}
	if local == nil || local.Name != "g1" || local.VTEP != config.LocalVTEP4 || local.InnerMAC != config.LocalKernelMAC ||
		len(local.Pods) != 1 || local.Pods[0] != (config.Pod{Addr: netip.MustParseAddr("10.244.9.5"), Policy: "blue", Namespace: "shop", Name: "here", UID: "uid-here"}) {
		t.Fatalf("local node %+v, want g1 at %v with pod shop/here (uid-here) at 10.244.9.5 of blue", local, config.LocalVTEP4)
	}
	if w1 == nil || w1.VTEP != netip.MustParseAddr("10.0.0.11") || len(w1.Pods) != 1 || w1.Pods[0].Name != "there" || w1.Pods[0].Namespace != "shop" {
		t.Fatalf("worker w1 %+v", w1)
	}
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatalf("the built configuration does not settle: %v", err)
	}
	base.LocalPort = false
	if r := Build(base, "g1", v, Options{}); len(r.Problems) != 1 || !strings.Contains(r.Problems[0].Error(), "--local-port") {
		t.Fatalf("local port off: problems %v, want one naming --local-port", r.Problems)
	}
}

// TestBuildEgressIPSubnets: each hosted egress IP carries the subnet the
// controller's rule picks from this node's annotations (the primary's,
// else the longest host-cidrs prefix), which the engine claims it on; an
// IP no subnet holds is left out and reported.
func TestBuildEgressIPSubnets(t *testing.T) {
	p := netip.MustParsePrefix
	ann := map[string]string{
		cluster.AnnotationEgretPrimaryIfAddr: cluster.FormatPrimaryIfAddr(cluster.IfAddr{IPv4: p("10.0.0.21/24")}),
		cluster.AnnotationEgretHostCIDRs:     cluster.FormatHostCIDRs([]netip.Prefix{p("10.0.0.21/24"), p("10.81.0.3/24"), p("10.0.0.0/8"), p("fd81::3/64")}),
	}
	in := inputs{
		Node: "g1",
		EgressIPs: []*egressv1.EgressIP{eip("blue", []string{"10.0.0.100", "10.81.0.100", "10.82.0.1", "fd81::100", "192.0.2.1"}, nil, nil,
			"g1", "10.0.0.100", "g1", "10.81.0.100", "g1", "10.82.0.1", "g1", "fd81::100", "g1", "192.0.2.1")},
		Nodes: []*corev1.Node{node("g1", "10.0.0.21", ann)},
	}
	r := build(base(), in)
	want := map[netip.Addr]netip.Prefix{addr("10.0.0.100"): p("10.0.0.21/24"), addr("10.81.0.100"): p("10.81.0.3/24"),
		addr("10.82.0.1"): p("10.0.0.0/8"), addr("fd81::100"): p("fd81::3/64")}
	if fmt.Sprint(r.Spec.EgressIPSubnets) != fmt.Sprint(want) {
		t.Errorf("subnets %v, want %v", r.Spec.EgressIPSubnets, want)
	}
	if !hasProblem(r, "egress IP 192.0.2.1 is placed here, but none of this node's interface subnets holds it") {
		t.Errorf("the IP without a subnet is not reported: %v", r.Problems)
	}
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatalf("built config does not validate: %v", err)
	}
	// Without annotations nothing is picked: the engine's own choice.
	in.Nodes = []*corev1.Node{node("g1", "10.0.0.21", nil)}
	if r := build(base(), in); r.Spec.EgressIPSubnets != nil || len(r.Problems) != 0 {
		t.Errorf("unannotated node: subnets %v problems %v", r.Spec.EgressIPSubnets, r.Problems)
	}
}

// traffic is an EgressIPTraffic with labels l and networks nets, an
// exclusion if exclude.
func traffic(name string, l map[string]string, exclude bool, nets ...string) *egressv1.EgressIPTraffic {
	t := &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	if exclude {
		t.Annotations = map[string]string{egressv1.AnnotationExclude: "true"}
	}
	t.Spec.DestinationNetworks = nets
	return t
}

// destInputs: blue (no trafficSelector) and green (db networks less an
// exclusion) both select the prod pods; red (api networks) selects the
// dev pods only; orange nests a network in green's for the prod pods
// too. Pods selected by the same objects share one table.
func destInputs() inputs {
	sel := func(l string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"dest": l}}
	}
	green := eip("green", []string{"192.0.2.20"}, map[string]string{"env": "prod"}, nil, "g1", "192.0.2.20")
	green.Spec.TrafficSelector = sel("db")
	red := eip("red", []string{"192.0.2.30"}, map[string]string{"env": "dev"}, nil, "g2", "192.0.2.30")
	red.Spec.TrafficSelector = sel("api")
	orange := eip("orange", []string{"192.0.2.40"}, map[string]string{"env": "prod"}, nil, "g2", "192.0.2.40")
	orange.Spec.TrafficSelector = sel("db-primary")
	return inputs{
		Node: "g1",
		EgressIPs: []*egressv1.EgressIP{
			eip("blue", []string{"192.0.2.10"}, map[string]string{"env": "prod"}, nil, "g1", "192.0.2.10"),
			green, red, orange,
		},
		Traffic: []*egressv1.EgressIPTraffic{
			traffic("db", map[string]string{"dest": "db"}, false, "203.0.113.0/24", "2001:db8:db::/48"),
			traffic("db-test", map[string]string{"dest": "db"}, true, "203.0.113.128/25"),
			traffic("db-primary", map[string]string{"dest": "db-primary"}, false, "203.0.113.0/28"),
			traffic("api", map[string]string{"dest": "api"}, false, "198.51.100.0/24"),
		},
		Nodes:      []*corev1.Node{node("g1", "10.0.0.21", nil), node("g2", "10.0.0.22", nil), node("w1", "10.0.0.11", nil), node("w2", "10.0.0.12", nil)},
		Namespaces: []*corev1.Namespace{ns("prod", map[string]string{"env": "prod"}), ns("dev", map[string]string{"env": "dev"})},
		Pods: []*corev1.Pod{
			pod("prod", "web-1", "w1", nil, "10.244.1.5"),
			pod("prod", "web-2", "w2", nil, "10.244.2.5"),
			pod("dev", "web-3", "w1", nil, "10.244.1.6"),
		},
	}
}

// TestBuildDestTables: the plan's destination rules become one table per
// set of selecting objects, shared by its pods; the fallback stays the
// pod's policy; exclusions name no policy; the result settles; and the
// plan's conflicts come back for the agent's Events.
func TestBuildDestTables(t *testing.T) {
	r := build(base(), destInputs())
	c := r.Spec
	set, err := c.Settle()
	if err != nil {
		t.Fatalf("built config does not validate: %v", err)
	}
	prod := config.DestTable{Name: "blue,green,orange", Rules: []config.DestRule{
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Policy: "green"},
		{Prefix: netip.MustParsePrefix("203.0.113.0/28"), Policy: "orange"},
		{Prefix: netip.MustParsePrefix("203.0.113.128/25"), Exclude: true},
		{Prefix: netip.MustParsePrefix("2001:db8:db::/48"), Policy: "green"},
	}}
	dev := config.DestTable{Name: "red", Rules: []config.DestRule{{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Policy: "red"}}}
	if fmt.Sprint(set.DestTables) != fmt.Sprint([]config.DestTable{prod, dev}) {
		t.Errorf("tables\n got %v\nwant %v", set.DestTables, []config.DestTable{prod, dev})
	}
	want := map[string]string{
		"w1/10.244.1.5": "blue|blue,green,orange",
		"w2/10.244.2.5": "blue|blue,green,orange",
		"w1/10.244.1.6": "|red",
	}
	got := map[string]string{}
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			got[n.Name+"/"+p.Addr.String()] = p.Policy + "|" + p.Dest
			if p.Name == "" {
				t.Errorf("pod %v built without its name", p.Addr)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pods %v, want %v", got, want)
	}
	if len(r.Conflicts) != 1 || r.Conflicts[0].A != "green" || r.Conflicts[0].B != "orange" {
		t.Errorf("conflicts %v, want green's and orange's nested networks", r.Conflicts)
	}
}

// TestBuildDestTablesShared: ten thousand pods selected by the same
// objects share one table, whatever its size.
func TestBuildDestTablesShared(t *testing.T) {
	in := destInputs()
	in.Pods = nil
	for i := range 2000 {
		in.Pods = append(in.Pods, pod("prod", fmt.Sprintf("p%d", i), []string{"w1", "w2"}[i%2], nil, fmt.Sprintf("10.%d.%d.%d", 100+i%2, i/2/250, 1+i/2%250)))
	}
	var nets []string
	for i := range 1000 {
		nets = append(nets, fmt.Sprintf("100.%d.%d.0/24", 64+i/256, i%256))
	}
	in.Traffic[0].Spec.DestinationNetworks = nets
	r := build(base(), in)
	if len(r.Spec.DestTables) != 1 || len(r.Spec.DestTables[0].Rules) != 1002 {
		t.Fatalf("%d tables, want one of 1002 rules", len(r.Spec.DestTables))
	}
	n := 0
	for _, nd := range r.Spec.Nodes {
		for _, p := range nd.Pods {
			if p.Dest == r.Spec.DestTables[0].Name {
				n++
			}
		}
	}
	if n != 2000 {
		t.Errorf("%d pods name the table, want 2000", n)
	}
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatal(err)
	}
}
