package status

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func eip(name string, ips []string, nsSel map[string]string, status ...string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + "name"}}
	e.Spec.EgressIPs = ips
	e.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: nsSel}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
	}
	return e
}

func node(name string, podCIDRs []string, internal ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDRs = podCIDRs
	for _, a := range internal {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func pod(namespace, name, nodeName string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	p.Spec.NodeName = nodeName
	p.Status.Phase = corev1.PodRunning
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func ns(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// testView is a cluster with a pod in every state: two workers, a
// gateway node with pods of its own, a gateway reachable only over IPv6.
func testView() cluster.View {
	blue := eip("blue", []string{"192.0.2.10", "192.0.2.11"}, map[string]string{"env": "prod"}, "g1", "192.0.2.10", "g2", "192.0.2.11")
	egressv1.SetStandbyAnnotation(blue, egressv1.FormatStandbys(map[netip.Addr]string{
		netip.MustParseAddr("192.0.2.10"): "g2", netip.MustParseAddr("192.0.2.11"): "g1"}))
	dual := eip("dual", []string{"192.0.2.30", "2001:db8::30"}, map[string]string{"env": "dual"}, "g2", "192.0.2.30")
	host := pod("prod", "host", "w1", "10.0.0.11")
	host.Spec.HostNetwork = true
	done := pod("prod", "done", "w1", "10.128.1.9")
	done.Status.Phase = corev1.PodSucceeded
	return cluster.View{
		EgressIPs: []*egressv1.EgressIP{
			blue, dual,
			eip("green", []string{"192.0.2.20"}, map[string]string{"env": "qa"}),
			eip("far", []string{"192.0.2.40"}, map[string]string{"env": "far"}, "g6", "192.0.2.40"),
		},
		Nodes: []*corev1.Node{
			node("w1", []string{"10.128.1.0/24"}, "10.0.0.11"),
			node("w2", []string{"10.128.2.0/24", "fd00:2::/64"}, "10.0.0.12"),
			node("g1", []string{"10.128.3.0/24"}, "10.0.0.21"),
			node("g2", nil, "10.0.0.22"),
			node("g6", nil, "fd00::26"), // an IPv6 VTEP only: the IPv4 workers cannot tunnel to it
		},
		Namespaces: []*corev1.Namespace{
			ns("prod", map[string]string{"env": "prod"}), ns("dev", nil), ns("qa", map[string]string{"env": "qa"}),
			ns("dual", map[string]string{"env": "dual"}), ns("far", map[string]string{"env": "far"}),
		},
		Pods: []*corev1.Pod{
			pod("prod", "web", "w1", "10.128.1.2"),
			pod("prod", "local", "g1", "10.128.3.2"),
			pod("prod", "stray", "w1", "10.99.0.5"),
			pod("prod", "lost", "w9", "10.128.9.2"),
			pod("prod", "new", "w1"),
			host, done,
			pod("dev", "app", "w1", "10.128.1.3"),
			pod("qa", "app", "w2", "10.128.2.4"),
			pod("dual", "app", "w2", "10.128.2.5", "fd00:2::5"),
			pod("far", "app", "w1", "10.128.1.6"),
			pod("gone", "x", "w1", "10.128.1.7"),
		},
	}
}

func (p Pod) sources() string {
	var s []string
	for _, src := range p.Sources {
		s = append(s, fmt.Sprintf("%s %v %v", src.Family, src.IP, src.Gateways))
	}
	return strings.Join(s, "; ")
}

// TestPodStates: every state a pod can be in, with the sources and the
// problem that explains each address without one.
func TestPodStates(t *testing.T) {
	r := Build(testView(), Inputs{})
	byKey := map[string]Pod{}
	for _, p := range r.Pods {
		byKey[p.Namespace+"/"+p.Name] = p
	}
	if len(byKey) != len(testView().Pods) {
		t.Fatalf("%d pods in the report, %d in the view", len(byKey), len(testView().Pods))
	}
	for _, tc := range []struct {
		pod, state, owner, sources, problem string
	}{
		{"prod/web", StateEgress, "blue", "IPv4 192.0.2.10 [g1]; IPv4 192.0.2.11 [g2]", ""},
		// A pod on a gateway node: its own gateway is one of its gateways.
		{"prod/local", StateEgress, "blue", "IPv4 192.0.2.10 [g1]; IPv4 192.0.2.11 [g2]", ""},
		{"prod/host", StateHostNetwork, "", "", "EgressIP blue selects it, but it uses its node's network"},
		{"dev/app", StateNotSelected, "", "", ""},
		{"prod/stray", StateFailClosed, "blue", "", "address 10.99.0.5 does not use the egress IPs: it is outside node w1's pod networks"},
		{"qa/app", StateNoNode, "green", "", "address 10.128.2.4 leaves as no egress IP: EgressIP green has no IPv4 egress IP on a node; its traffic is blocked"},
		{"far/app", StateNoNode, "far", "", "192.0.2.40 (g6) is not used: node w1: EgressIP far: node \"g6\" hosting 192.0.2.40 has no VTEP of this node's underlay family"},
		{"prod/lost", StateNodeUnknown, "blue", "", "node w9 is not known (no Node object)"},
		{"dual/app", StatePartial, "dual", "IPv4 192.0.2.30 [g2]", "address fd00:2::5 leaves as no egress IP: EgressIP dual has no IPv6 egress IP on a node"},
		{"prod/new", StatePending, "", "", ""},
		{"prod/done", StateCompleted, "", "", ""},
		{"gone/x", StateNamespaceUnknown, "", "", "namespace gone is not known yet"},
	} {
		p, ok := byKey[tc.pod]
		if !ok {
			t.Errorf("%s: not in the report", tc.pod)
			continue
		}
		owner := ""
		if p.EgressIP != nil {
			owner = *p.EgressIP
		}
		if p.State != tc.state || owner != tc.owner || p.sources() != tc.sources {
			t.Errorf("%s: state %s, owner %q, sources %q; want %s, %q, %q (problems %q)", tc.pod, p.State, owner, p.sources(), tc.state, tc.owner, tc.sources, p.Problems)
		}
		if tc.problem == "" && (p.State == StateEgress || p.State == StateNotSelected) && len(p.Problems) > 0 {
			t.Errorf("%s: problems %q, want none", tc.pod, p.Problems)
		}
		if tc.problem != "" && !slices.ContainsFunc(p.Problems, func(s string) bool { return strings.Contains(s, tc.problem) }) {
			t.Errorf("%s: problems %q lack %q", tc.pod, p.Problems, tc.problem)
		}
	}
	if p := byKey["prod/web"]; !slices.Equal(p.PodIPs, []netip.Addr{netip.MustParseAddr("10.128.1.2")}) || p.Node != "w1" {
		t.Errorf("prod/web: node %s, podIPs %v", p.Node, p.PodIPs)
	}
}

// TestGatewayRefuses: a gateway whose agent does not take the pod's
// traffic is no source of the pod, though its steer agent routes there.
func TestGatewayRefuses(t *testing.T) {
	v := testView()
	// g2's VTEP is now the egress IP it hosts: w1's steer agent routes to
	// it, but g2's agent does not host the IP, so only g1 serves prod/web.
	v.Nodes[3] = node("g2", nil, "10.0.0.22", "192.0.2.11")
	v.Nodes[3].Annotations = map[string]string{cluster.AnnotationVTEP: "192.0.2.11"}
	r := Build(v, Inputs{})
	for _, p := range r.Pods {
		if p.Namespace+"/"+p.Name != "prod/web" {
			continue
		}
		if p.sources() != "IPv4 192.0.2.10 [g1]" || p.State != StateEgress {
			t.Errorf("prod/web: %s, sources %q, problems %q; want only g1's IP", p.State, p.sources(), p.Problems)
		}
		if !slices.Contains(p.Problems, "192.0.2.11 (g2) is not used: gateway g2: EgressIP blue: 192.0.2.11 is this gateway's VTEP; not hosted") {
			t.Errorf("prod/web: problems %q do not say why g2 is not used", p.Problems)
		}
		return
	}
	t.Fatal("prod/web is not in the report")
}

// TestObjects: each object's IPs with node and standby, the standby's
// state as Standby judges it, problems and Events.
func TestObjects(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(name, typ, reason, msg string, ago time.Duration) corev1.Event {
		return corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: egressv1.Kind, Name: name}, Type: typ, Reason: reason, Message: msg,
			Count: 1, LastTimestamp: metav1.NewTime(now.Add(-ago))}
	}
	events := []corev1.Event{
		ev("green", corev1.EventTypeWarning, "NoMatchingNodeFound", "no assignable node can host egress IP 192.0.2.20", time.Minute),
		ev("green", corev1.EventTypeWarning, "NoMatchingNodeFound", "no assignable node can host egress IP 192.0.2.2", 30*time.Second),
		ev("green", corev1.EventTypeNormal, "Other", "older", time.Hour),
		ev("blue", corev1.EventTypeNormal, "EgressIPMoved", "192.0.2.10 moved from g3 to g1", 2*time.Minute),
		{InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "green"}, Message: "not an EgressIP's"},
	}
	for i := range 12 {
		events = append(events, ev("dual", corev1.EventTypeNormal, "Tick", fmt.Sprint(i), time.Duration(i)*time.Second))
	}
	r := Build(testView(), Inputs{Events: events, Standby: func(ip netip.Addr, node, standby string) (string, string) {
		if ip.String() == "192.0.2.11" {
			return SyncBehind, "g1 lacks 3 of the 9 flows"
		}
		return SyncInStep, "all 4 flows held"
	}})
	byName := map[string]EgressIP{}
	for _, o := range r.EgressIPs {
		byName[o.Name] = o
	}
	blue := byName["blue"]
	if len(blue.IPs) != 2 || *blue.IPs[0].Node != "g1" || *blue.IPs[0].Standby != "g2" || blue.IPs[0].StandbyState != SyncInStep ||
		*blue.IPs[1].Node != "g2" || *blue.IPs[1].Standby != "g1" || blue.IPs[1].StandbyState != SyncBehind || blue.Pods != 4 {
		t.Errorf("blue: %+v", blue)
	}
	if !slices.Contains(blue.Problems, "the standby g1 of 192.0.2.11 is behind: g1 lacks 3 of the 9 flows") {
		t.Errorf("blue: problems %q", blue.Problems)
	}
	if len(blue.Events) != 1 || blue.Events[0].Reason != "EgressIPMoved" {
		t.Errorf("blue: events %+v", blue.Events)
	}
	green := byName["green"]
	if len(green.IPs) != 1 || green.IPs[0].Node != nil || green.IPs[0].StandbyState != SyncNone || len(green.Events) != 3 || green.Events[0].Message != "no assignable node can host egress IP 192.0.2.2" {
		t.Errorf("green: %+v", green)
	}
	// The Event about 192.0.2.2 does not explain 192.0.2.20.
	if want := "192.0.2.20 is not assigned to a node: no assignable node can host egress IP 192.0.2.20 (NoMatchingNodeFound)"; !slices.Contains(green.Problems, want) {
		t.Errorf("green: problems %q, want %q", green.Problems, want)
	}
	dual := byName["dual"]
	if len(dual.Events) != MaxEvents || dual.Events[0].Message != "0" || !slices.ContainsFunc(dual.Problems, func(s string) bool { return strings.HasPrefix(s, "192.0.2.30 on g2 has no standby") }) ||
		!slices.Contains(dual.Problems, "2001:db8::30 is not assigned to a node") {
		t.Errorf("dual: events %d (first %+v), problems %q", len(dual.Events), dual.Events[0], dual.Problems)
	}
	if far := byName["far"]; *far.IPs[0].Node != "g6" || far.Pods != 1 {
		t.Errorf("far: %+v", far)
	}

	// Without a way to read the gateways, every standby is unknown, and why.
	r = Build(testView(), Inputs{UnknownWhy: "not read"})
	if ip := r.EgressIPs[0].IPs[0]; r.EgressIPs[0].Name != "blue" || ip.StandbyState != SyncUnknown || ip.StandbyDetail != "not read" {
		t.Errorf("blue without Standby: %+v", r.EgressIPs[0])
	}
}

// TestInvalidObject: an object whose selector does not compile is listed
// with the plan's problem and no node; its pods are not selected.
func TestInvalidObject(t *testing.T) {
	v := testView()
	bad := eip("aaa", []string{"192.0.2.50", "not-an-ip"}, nil, "g1", "192.0.2.50")
	bad.Spec.NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}
	v.EgressIPs = append(v.EgressIPs, bad)
	r := Build(v, Inputs{})
	o := r.EgressIPs[0]
	if o.Name != "aaa" || len(o.IPs) != 2 || o.IPs[0].Node != nil ||
		!slices.ContainsFunc(o.Problems, func(s string) bool { return strings.HasPrefix(s, "EgressIP aaa: namespaceSelector") }) ||
		!slices.Contains(o.Problems, `egress IP "not-an-ip" is not an IP address`) {
		t.Errorf("aaa: %+v", o)
	}
}

// TestOnly keeps the named pods and their owners.
func TestOnly(t *testing.T) {
	r := Build(testView(), Inputs{})
	r.Only(func(p Pod) bool { return p.Namespace == "dual" || p.Namespace == "dev" })
	if len(r.Pods) != 2 || len(r.EgressIPs) != 1 || r.EgressIPs[0].Name != "dual" {
		t.Errorf("pods %v, objects %v", r.Pods, r.EgressIPs)
	}
}

func TestMentions(t *testing.T) {
	for _, tc := range []struct {
		text, token string
		want        bool
	}{
		{"EgressIP blue: status item", "EgressIP blue", true},
		{"EgressIP blue-2: status item", "EgressIP blue", false},
		{"used for EgressIP blue.", "EgressIP blue", true},
		{"EgressIP blue.x is bad", "EgressIP blue", false},
		{"host 192.0.2.10 moved", "192.0.2.1", false},
		{"host 192.0.2.1, moved", "192.0.2.1", true},
		{"host 10.192.0.2.1", "192.0.2.1", false},
		{"IP 2001:db8::10 moved", "2001:db8::1", false},
		{"IP 2001:db8::1: moved", "2001:db8::1", true},
		{"pod prod/web (EgressIP a)", "pod prod/web", true},
		{"pod prod/web-1 (EgressIP a)", "pod prod/web", false},
	} {
		if got := mentions(tc.text, tc.token); got != tc.want {
			t.Errorf("mentions(%q, %q) = %v", tc.text, tc.token, got)
		}
	}
}

// TestTable: one row per egress IP and pod, their problems below them.
func TestTable(t *testing.T) {
	r := Build(testView(), Inputs{})
	r.Only(func(p Pod) bool { return p.Namespace == "dual" })
	var b strings.Builder
	if err := r.WriteTable(&b, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := `EGRESSIP  IP            NODE  STANDBY  STANDBY STATE  PODS
dual      192.0.2.30    g2    -        none           1
          2001:db8::30  -     -        none
    problem: 192.0.2.30 on g2 has no standby: its connections are lost if g2 fails
    problem: 2001:db8::30 is not assigned to a node

NAMESPACE  POD  NODE  EGRESSIP  STATE    SOURCES (GATEWAYS)
dual       app  w2    dual      partial  192.0.2.30 (g2)
    problem: address fd00:2::5 leaves as no egress IP: EgressIP dual has no IPv6 egress IP on a node; its traffic is blocked
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant\n%s", b.String(), want)
	}
}

// TestNoEgressIPNode: an object that lets its pods leave as their node
// when it has no egress IP of their family says so in their problems.
func TestNoEgressIPNode(t *testing.T) {
	v := testView()
	v.EgressIPs[2].Annotations = map[string]string{egressv1.AnnotationNoEgressIP: "node"}
	for _, p := range Build(v, Inputs{}).Pods {
		if p.Namespace == "qa" {
			if p.State != StateNoNode || !slices.ContainsFunc(p.Problems, func(s string) bool {
				return strings.HasSuffix(s, "; it leaves as its node's address (egret.io/no-egress-ip: node)")
			}) {
				t.Errorf("qa/app: %s, problems %q", p.State, p.Problems)
			}
			return
		}
	}
	t.Fatal("qa/app is not in the report")
}

// TestByDestination: a pod two objects select by destination lists both
// objects' networks and leaves as both objects' egress IPs.
func TestByDestination(t *testing.T) {
	v := testView()
	green := eip("green", []string{"192.0.2.20"}, map[string]string{"env": "prod"}, "g2", "192.0.2.20")
	green.Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"to": "bank"}}
	v.EgressIPs[2] = green
	v.Traffic = []*egressv1.EgressIPTraffic{{ObjectMeta: metav1.ObjectMeta{Name: "bank", Labels: map[string]string{"to": "bank"}},
		Spec: egressv1.EgressIPTrafficSpec{DestinationNetworks: []string{"203.0.113.0/24"}}}}
	r := Build(v, Inputs{})
	r.Only(func(p Pod) bool { return p.Namespace == "prod" && p.Name == "web" })
	var b strings.Builder
	if err := r.WriteTable(&b, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := `NAMESPACE  POD  NODE  EGRESSIP              STATE   SOURCES (GATEWAYS)
prod       web  w1    blue +by destination  egress  192.0.2.10 (g1), 192.0.2.11 (g2), 192.0.2.20 (g2)
    to 203.0.113.0/24: EgressIP green
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant\n%s", b.String(), want)
	}
	if s := r.Pods[0].Sources; len(s) != 3 || s[2].Object != "green" || s[0].Object != "blue" {
		t.Errorf("sources %+v", s)
	}
}
