package trace

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/gateway/config"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func eip(name string, ips []string, nsSel map[string]string, status ...string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
	e.Spec.EgressIPs = ips
	e.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: nsSel}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
	}
	return e
}

func node(name string, podCIDRs []string, internal string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDRs = podCIDRs
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internal}}
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

// testView: blue (two IPs on g1 and g2) and blue2 select namespace prod;
// green (unassigned) selects qa; dual has only its IPv4 IP assigned.
func testView() cluster.View {
	host := pod("prod", "host", "w1", "10.0.0.11")
	host.Spec.HostNetwork = true
	return cluster.View{
		EgressIPs: []*egressv1.EgressIP{
			eip("blue", []string{"192.0.2.10", "192.0.2.11"}, map[string]string{"env": "prod"}, "g1", "192.0.2.10", "g2", "192.0.2.11"),
			eip("blue2", []string{"192.0.2.12"}, map[string]string{"env": "prod"}, "g1", "192.0.2.12"),
			eip("green", []string{"192.0.2.20"}, map[string]string{"env": "qa"}),
			eip("dual", []string{"192.0.2.30", "2001:db8::30"}, map[string]string{"env": "dual"}, "g2", "192.0.2.30"),
		},
		Nodes: []*corev1.Node{
			node("w1", []string{"10.128.1.0/24"}, "10.0.0.11"),
			node("w2", []string{"10.128.2.0/24", "fd00:2::/64"}, "10.0.0.12"),
			node("g1", nil, "10.0.0.21"),
			node("g2", nil, "10.0.0.22"),
		},
		Namespaces: []*corev1.Namespace{
			ns("prod", map[string]string{"env": "prod"}), ns("dev", nil), ns("qa", map[string]string{"env": "qa"}),
			ns("dual", map[string]string{"env": "dual"}),
		},
		Pods: []*corev1.Pod{
			pod("prod", "web", "w1", "10.128.1.2"),
			pod("prod", "stray", "w1", "10.99.0.5"),
			host,
			pod("dev", "app", "w1", "10.128.1.3"),
			pod("qa", "app", "w2", "10.128.2.4"),
			pod("dual", "app", "w2", "10.128.2.5", "fd00:2::5"),
		},
	}
}

// testInputs: the steer agents' networks and gateway specs as the gateway
// agent builds them (the plan's hosted IPs and node networks denied);
// allowed are the gateways' allowedDestinations, g1Limit g1's podFlowLimit.
func testInputs(v cluster.View, allowed map[string][]string, g1Limit int) Inputs {
	pl := plan.Build(v, plan.Options{})
	return Inputs{
		SteerRead: true, SteerConfig: "steer.yaml",
		Unsteered: []Network{
			{netip.MustParsePrefix("10.128.0.0/14"), "clusterCIDRs"},
			{netip.MustParsePrefix("10.96.0.0/12"), "serviceCIDRs"},
		},
		GatewayConfig: "gateway.yaml",
		Gateway: func(n string) config.Spec {
			s := config.Spec{DeniedDestinations: append([]netip.Prefix{netip.MustParsePrefix("172.30.0.0/16")}, pl.NodeNetworks...)}
			part := pl.Gateway(n, nil)
			for _, p := range part.Policies {
				s.Policies = append(s.Policies, config.Policy{Name: p.Name, EgressIPs: p.Hosted})
			}
			for _, a := range allowed[n] {
				s.AllowedDestinations = append(s.AllowedDestinations, netip.MustParsePrefix(a))
			}
			if n == "g1" {
				s.PodFlowLimit = g1Limit
			}
			return s
		},
	}
}

func TestTrace(t *testing.T) {
	v := testView()
	for _, tc := range []struct {
		pod, dest string
		allowed   map[string][]string
		verdict   string
		decides   string // the deciding check, "" for egress
		seenAs    string // a substring
		reason    string // a substring
		setting   string // a substring
		gateways  []string
	}{
		{pod: "prod/web", dest: "198.51.100.7:443/tcp", verdict: VerdictEgress, seenAs: "192.0.2.10 or 192.0.2.11:", reason: "EgressIP blue owns the pod", gateways: []string{"g1 192.0.2.10", "g2 192.0.2.11"}},
		{pod: "prod/web", dest: "169.254.169.254:80", verdict: VerdictDropped, decides: "deny-list", reason: "entry 169.254.0.0/16 (built in: link-local", setting: "allowedDestinations: [169.254.0.0/16]"},
		{pod: "prod/web", dest: "169.254.169.254:80", allowed: map[string][]string{"g1": {"169.254.169.254/32"}, "g2": {"169.254.169.254/32"}}, verdict: VerdictEgress},
		{pod: "prod/web", dest: "10.0.0.12/udp", verdict: VerdictDropped, decides: "deny-list", reason: "the nodes' own networks"},
		{pod: "prod/web", dest: "172.30.4.4", verdict: VerdictDropped, decides: "deny-list", reason: "entry 172.30.0.0/16 (deniedDestinations in the gateways' configuration (gateway.yaml))", setting: "allowedDestinations: [172.30.0.0/16]"},
		{pod: "prod/web", dest: "64:ff9b::a9fe:a9fe", verdict: VerdictNone, decides: "pod", reason: "no IPv6 address"},
		{pod: "prod/web", dest: "10.96.0.1:53/udp", verdict: VerdictDirect, decides: "unsteered-networks", setting: "serviceCIDRs in the steer agents' configuration (steer.yaml)"},
		{pod: "prod/web", dest: "192.0.2.11/icmp", verdict: VerdictDropped, decides: "hairpin", reason: "gateway g2 hosts"},
		{pod: "dev/app", dest: "198.51.100.7", verdict: VerdictNode, decides: "selection", seenAs: "node w1's address (10.0.0.11", setting: "namespaceSelector and podSelector"},
		{pod: "prod/host", dest: "198.51.100.7", verdict: VerdictNode, decides: "pod", setting: "hostNetwork"},
		{pod: "prod/stray", dest: "198.51.100.7", verdict: VerdictBlocked, decides: "egress-ips", reason: "outside node w1's pod networks", setting: "spec.podCIDRs"},
		{pod: "qa/app", dest: "198.51.100.7", verdict: VerdictBlocked, decides: "egress-ips", reason: "EgressIP green has no IPv4 egress IP on a node", setting: "egret.io/no-egress-ip: node"},
		{pod: "dual/app", dest: "[2001:db8:1::7]:443", verdict: VerdictBlocked, decides: "egress-ips", reason: "address fd00:2::5 leaves as no egress IP"},
		{pod: "dual/app", dest: "198.51.100.7:443", verdict: VerdictEgress, gateways: []string{"g2 192.0.2.30"}},
	} {
		t.Run(tc.pod+" "+tc.dest, func(t *testing.T) {
			q, err := ParseQuery(tc.pod, tc.dest)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := Build(v, testInputs(v, tc.allowed, 1000), q)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := tr.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			var decides string
			for _, c := range tr.Checks {
				if c.Decides {
					if decides != "" {
						t.Errorf("checks %s and %s both decide", decides, c.Name)
					}
					decides = c.Name
				}
			}
			var gws []string
			for _, g := range tr.Gateways {
				gws = append(gws, g.Node+" "+g.EgressIP.String())
			}
			switch {
			case tr.Verdict != tc.verdict || decides != tc.decides:
				t.Errorf("verdict %s decided by %q, want %s by %q", tr.Verdict, decides, tc.verdict, tc.decides)
			case !strings.Contains(tr.SeenAs, tc.seenAs), !strings.Contains(tr.Reason, tc.reason), !strings.Contains(tr.Setting, tc.setting):
				t.Errorf("seen as %q, reason %q, setting %q; want them to hold %q, %q, %q", tr.SeenAs, tr.Reason, tr.Setting, tc.seenAs, tc.reason, tc.setting)
			case tc.gateways != nil && !slices.Equal(gws, tc.gateways):
				t.Errorf("gateways %v, want %v", gws, tc.gateways)
			case tc.verdict == VerdictEgress && tr.Setting != "":
				t.Errorf("an egress verdict with a setting %q", tr.Setting)
			}
			if t.Failed() {
				t.Log(b.String())
			}
		})
	}
}

// TestTraceSelection: with two objects selecting the pod, both are named
// and the first by name, the plan's owner, wins; the flow limits are each
// gateway's, defaults applied.
func TestTraceSelection(t *testing.T) {
	v := testView()
	q, _ := ParseQuery("prod/web", "198.51.100.7:443")
	tr, err := Build(v, testInputs(v, nil, 1000), q)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tr.SelectedBy, []string{"blue", "blue2"}) || tr.EgressIP == nil || *tr.EgressIP != "blue" {
		t.Fatalf("selected by %v, owner %v; want blue, blue2 and blue", tr.SelectedBy, tr.EgressIP)
	}
	if c := tr.Checks[1]; c.Name != "selection" || !strings.Contains(c.Detail, "blue owns it (the first by name)") {
		t.Errorf("selection check %+v", c)
	}
	if tr.Spread == "" {
		t.Error("two candidate gateways and no word on the spread")
	}
	want := []Gateway{
		{Node: "g1", EgressIP: netip.MustParseAddr("192.0.2.10"), ConntrackMax: 1 << 20, PodFlowLimit: 1000, EgressIPFlowLimit: 1 << 19},
		{Node: "g2", EgressIP: netip.MustParseAddr("192.0.2.11"), ConntrackMax: 1 << 20, PodFlowLimit: 1 << 16, EgressIPFlowLimit: 1 << 19},
	}
	if !slices.Equal(tr.Gateways, want) {
		t.Errorf("gateways %+v, want %+v", tr.Gateways, want)
	}
	if _, err := Build(v, testInputs(v, nil, 0), Query{Namespace: "prod", Pod: "nope", Dst: netip.MustParseAddr("198.51.100.7"), Proto: "tcp"}); err == nil {
		t.Error("a pod that does not exist was traced")
	}
}

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		pod, dest, want, err string
	}{
		{pod: "a/b", dest: "198.51.100.7", want: "198.51.100.7/tcp"},
		{pod: "a/b", dest: "198.51.100.7:53/UDP", want: "198.51.100.7:53/udp"},
		{pod: "a/b", dest: "[2001:db8::1]:443", want: "[2001:db8::1]:443/tcp"},
		{pod: "a/b", dest: "2001:db8::1/icmp", want: "2001:db8::1/icmp"},
		{pod: "a/b", dest: "::ffff:198.51.100.7", want: "198.51.100.7/tcp"},
		{pod: "b", dest: "198.51.100.7", err: "NAMESPACE/NAME"},
		{pod: "a/b/c", dest: "198.51.100.7", err: "NAMESPACE/NAME"},
		{pod: "a/b", dest: "example.com:80", err: "give an IP address"},
		{pod: "a/b", dest: "198.51.100.7:80/sctp", err: "use tcp, udp or icmp"},
		{pod: "a/b", dest: "198.51.100.7:80/icmp", err: "icmp has no port"},
		{pod: "a/b", dest: "198.51.100.7:0", err: "port 0"},
		{pod: "a/b", dest: "fe80::1%eth0", err: "zone"},
	} {
		q, err := ParseQuery(tc.pod, tc.dest)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s %s: error %v, want one saying %q", tc.pod, tc.dest, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s %s: %v", tc.pod, tc.dest, err)
		case tc.err == "" && destString(q) != tc.want:
			t.Errorf("%s %s: read as %s, want %s", tc.pod, tc.dest, destString(q), tc.want)
		}
	}
}

// TestTraceNoEgressIP: a selected address without an egress IP of its
// family leaves as its node when the steer agents' noEgressIP says node,
// unless its object's annotation says block; a fail-closed one stays held.
func TestTraceNoEgressIP(t *testing.T) {
	v := testView()
	for _, tc := range []struct {
		pod, annotation, verdict string
	}{
		{"qa/app", "", VerdictNode},
		{"qa/app", "block", VerdictBlocked},
		{"prod/stray", "", VerdictBlocked},
	} {
		for _, e := range v.EgressIPs {
			e.Annotations = nil
			if tc.annotation != "" {
				e.Annotations = map[string]string{egressv1.AnnotationNoEgressIP: tc.annotation}
			}
		}
		in := testInputs(v, nil, 0)
		in.NoEgressIP = "node"
		q, _ := ParseQuery(tc.pod, "198.51.100.7")
		tr, err := Build(v, in, q)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Verdict != tc.verdict {
			t.Errorf("%s, annotation %q, noEgressIP node: %s (%s), want %s", tc.pod, tc.annotation, tr.Verdict, tr.Reason, tc.verdict)
		}
		if tr.Verdict == VerdictNode && strings.Contains(tr.Reason, "blocked") {
			t.Errorf("%s leaves as its node, and the reason says %q", tc.pod, tr.Reason)
		}
	}
}

// TestTraceByDestination: a pod two objects select by destination is
// traced to the object its destination picks; an excluded destination and
// one no object claims leave as the node (or are blocked).
func TestTraceByDestination(t *testing.T) {
	v := testView()
	// blue serves the bank's network but not its card host; blue2 the
	// partner's. prod/web is selected by both.
	v.EgressIPs[0].Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"to": "bank"}}
	v.EgressIPs[1].Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"to": "partner"}}
	card := &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: "card", Labels: map[string]string{"to": "bank"},
		Annotations: map[string]string{egressv1.AnnotationExclude: "true"}}}
	card.Spec.DestinationNetworks = []string{"203.0.113.64/26"}
	v.Traffic = []*egressv1.EgressIPTraffic{
		{ObjectMeta: metav1.ObjectMeta{Name: "bank", Labels: map[string]string{"to": "bank"}}, Spec: egressv1.EgressIPTrafficSpec{DestinationNetworks: []string{"203.0.113.0/24"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "partner", Labels: map[string]string{"to": "partner"}}, Spec: egressv1.EgressIPTrafficSpec{DestinationNetworks: []string{"198.51.100.0/24"}}},
		card,
	}
	for _, tc := range []struct {
		dst, noEgressIP, verdict, seen, check string
	}{
		{"203.0.113.10", "block", VerdictEgress, "192.0.2.10", "203.0.113.0/24, which EgressIP blue's"},
		{"198.51.100.7", "block", VerdictEgress, "192.0.2.12", "198.51.100.0/24, which EgressIP blue2's"},
		// The cluster's noEgressIP does not decide an exclusion: blue's
		// own annotation does (below).
		{"203.0.113.70", "node", VerdictNode, "node w1's address", "an exclusion of EgressIP blue"},
		{"203.0.113.70", "block", VerdictNode, "node w1's address", "an exclusion of EgressIP blue"},
		{"8.8.8.8", "block", VerdictNode, "node w1's address", "in no network"},
	} {
		in := testInputs(v, nil, 0)
		in.NoEgressIP = tc.noEgressIP
		q, _ := ParseQuery("prod/web", tc.dst)
		tr, err := Build(v, in, q)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(tr.Checks, func(c Check) bool { return c.Name == "destination" })
		if tr.Verdict != tc.verdict || !strings.Contains(tr.SeenAs, tc.seen) || i < 0 || !strings.Contains(tr.Checks[i].Detail, tc.check) {
			t.Errorf("to %s (noEgressIP %s): %s as %q (%s), checks %+v; want %s as %q with a destination check saying %q",
				tc.dst, tc.noEgressIP, tr.Verdict, tr.SeenAs, tr.Reason, tr.Checks, tc.verdict, tc.seen, tc.check)
		}
	}
}

// TestTraceExclusionBlocked: an exclusion of an object annotated
// egret.io/no-egress-ip: block is blocked.
func TestTraceExclusionBlocked(t *testing.T) {
	v := testView()
	v.EgressIPs[0].Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"to": "bank"}}
	v.EgressIPs[0].Annotations = map[string]string{egressv1.AnnotationNoEgressIP: "block"}
	v.Traffic = []*egressv1.EgressIPTraffic{
		{ObjectMeta: metav1.ObjectMeta{Name: "bank", Labels: map[string]string{"to": "bank"}, Annotations: map[string]string{egressv1.AnnotationExclude: "true"}},
			Spec: egressv1.EgressIPTrafficSpec{DestinationNetworks: []string{"203.0.113.64/26"}}},
	}
	in := testInputs(v, nil, 0)
	in.NoEgressIP = "node"
	q, _ := ParseQuery("prod/web", "203.0.113.70")
	tr, err := Build(v, in, q)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Verdict != VerdictBlocked || !strings.Contains(tr.Reason, "no-egress-ip: block on EgressIP blue") {
		t.Errorf("%s (%s), want blocked by blue's annotation", tr.Verdict, tr.Reason)
	}
}
