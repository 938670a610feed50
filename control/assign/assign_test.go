package assign

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
)

type wantEvent struct {
	obj      string
	reason   Reason
	ip       string
	contains string
}

type ruleCase struct {
	name   string
	nodes  []Node
	objs   []Object
	opts   Options
	want   []string    // every placement, "object ip@node"
	events []wantEvent // every event (exact count)
	check  func(t *testing.T, r Result)
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustAssign(t, c.objs, c.nodes, c.opts)
			got := placements(r)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("placements:\n got %q\nwant %q\nevents:\n%s", got, want, eventsText(r))
			}
			for _, w := range c.events {
				e, ok := findEvent(r, w.obj, w.reason, w.ip)
				if !ok {
					t.Errorf("no %s event for %s %s; events:\n%s", w.reason, w.obj, w.ip, eventsText(r))
					continue
				}
				if !strings.Contains(e.Message, w.contains) {
					t.Errorf("%s event for %s %s says %q, want it to mention %q", w.reason, w.obj, w.ip, e.Message, w.contains)
				}
			}
			if len(r.Events) != len(c.events) {
				t.Errorf("got %d events, want %d:\n%s", len(r.Events), len(c.events), eventsText(r))
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

func three() []Node {
	return []Node{nd("a", "10.0.0.1/24"), nd("b", "10.0.0.2/24"), nd("c", "10.0.0.3/24")}
}

func two(mod func(*Node)) []Node {
	a := nd("a", "10.0.0.1/24")
	mod(&a)
	return []Node{a, nd("b", "10.0.0.2/24")}
}

// Rule: only nodes labelled k8s.ovn.org/egress-assignable, Ready, reachable,
// not cordoned (with AvoidCordoned) and outside a hold-down are eligible.
func TestRuleEligibleNodes(t *testing.T) {
	x := ob("x", "10.0.0.10")
	runRules(t, []ruleCase{
		{name: "unlabelled node gets nothing", nodes: two(func(n *Node) { n.Assignable = false }),
			objs: []Object{x}, want: []string{"x 10.0.0.10@b"}},
		{name: "not ready node gets nothing", nodes: two(func(n *Node) { n.Ready = false }),
			objs: []Object{x}, want: []string{"x 10.0.0.10@b"}},
		{name: "unreachable node gets nothing", nodes: two(func(n *Node) { n.Reachable = false }),
			objs: []Object{x}, want: []string{"x 10.0.0.10@b"}},
		{name: "cordoned node gets nothing when draining", nodes: two(func(n *Node) { n.Cordoned = true }),
			opts: Options{AvoidCordoned: true}, objs: []Object{x}, want: []string{"x 10.0.0.10@b"}},
		{name: "cordoned node stays eligible without the drain option", nodes: two(func(n *Node) { n.Cordoned = true }),
			objs: []Object{x}, want: []string{"x 10.0.0.10@a"}},
		{name: "node in recovery hold-down gets nothing", nodes: two(func(n *Node) { n.HoldDownUntil = t0.Add(time.Minute) }),
			opts: Options{Now: t0}, objs: []Object{x}, want: []string{"x 10.0.0.10@b"}},
		{name: "node whose hold-down ended is eligible", nodes: two(func(n *Node) { n.HoldDownUntil = t0.Add(-time.Second) }),
			opts: Options{Now: t0}, objs: []Object{x}, want: []string{"x 10.0.0.10@a"}},
		{name: "node with a broken annotation gets nothing and is reported",
			nodes: two(func(n *Node) {
				n.AnnotationErr = errors.New("annotation k8s.ovn.org/host-cidrs is not the expected JSON")
			}),
			objs: []Object{x}, want: []string{"x 10.0.0.10@b"},
			check: func(t *testing.T, r Result) {
				if len(r.NodeProblems) != 1 || r.NodeProblems[0].Object != "a" || r.NodeProblems[0].Reason != ReasonInvalidNodeAnnotation ||
					!strings.Contains(r.NodeProblems[0].Message, "host-cidrs") {
					t.Errorf("node problems = %+v, want one InvalidNodeAnnotation for a naming host-cidrs", r.NodeProblems)
				}
			}},
		{name: "IP on a node that became unreachable moves", nodes: two(func(n *Node) { n.Reachable = false }),
			objs: []Object{st(x, "10.0.0.10@a")}, want: []string{"x 10.0.0.10@b"}},
		{name: "IP on a node that left the cluster moves", nodes: []Node{nd("b", "10.0.0.2/24")},
			objs: []Object{st(x, "10.0.0.10@gone")}, want: []string{"x 10.0.0.10@b"}},
		{name: "no labelled node explains the label", nodes: []Node{func() Node { n := nd("a", "10.0.0.1/24"); n.Assignable = false; return n }()},
			objs:   []Object{x},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "10.0.0.10", "no node is labelled k8s.ovn.org/egress-assignable"}}},
		{name: "labelled but ineligible nodes are named with the reason",
			nodes:  []Node{func() Node { n := nd("a", "10.0.0.1/24"); n.Ready = false; return n }()},
			objs:   []Object{x},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "10.0.0.10", "a is not Ready"}}},
	})
}

// Rule: an IP is on at most one node; no node hosts two IPs of one object.
func TestRuleOneNodePerIPOneIPPerNode(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "status listing an IP on two nodes keeps one",
			nodes: three(), objs: []Object{st(ob("x", "10.0.0.10"), "10.0.0.10@b", "10.0.0.10@a")},
			want: []string{"x 10.0.0.10@a"}},
		{name: "three IPs of one object go to three nodes",
			nodes: three(), objs: []Object{ob("x", "10.0.0.12", "10.0.0.10", "10.0.0.11")},
			want: []string{"x 10.0.0.10@a", "x 10.0.0.11@b", "x 10.0.0.12@c"}},
		{name: "more IPs than nodes leaves the extra unassigned with the reason",
			nodes: three()[:2], objs: []Object{ob("x", "10.0.0.10", "10.0.0.11", "10.0.0.12")},
			want:   []string{"x 10.0.0.10@a", "x 10.0.0.11@b"},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "10.0.0.12", "already host another egress IP of x"}}},
		{name: "status with two IPs of one object on one node moves one",
			nodes: three()[:2], objs: []Object{st(ob("x", "10.0.0.10", "10.0.0.11"), "10.0.0.10@a", "10.0.0.11@a")},
			want: []string{"x 10.0.0.10@a", "x 10.0.0.11@b"}},
	})
}

// Rule: an IP must lie in a node subnet: primary ifaddr first, else the
// host CIDR with the longest prefix match, else (cloud) the egress-ipconfig
// ifaddr; the wrong family is never assigned.
func TestRuleSubnetMatch(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "IP outside every node subnet is not assigned",
			nodes: three(), objs: []Object{ob("x", "10.9.9.9")},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "10.9.9.9", "10.0.0.0/24"}}},
		{name: "IP goes to the node whose subnet holds it",
			nodes: []Node{nd("a", "10.0.0.1/24"), nd("b", "10.0.1.1/24")}, objs: []Object{ob("x", "10.0.1.50")},
			want: []string{"x 10.0.1.50@b"}},
		{name: "longest prefix match over host-cidrs picks the secondary interface",
			nodes: []Node{nd("a", "192.168.1.5/24", hostCIDRs("192.168.1.5/24", "10.0.0.5/8", "10.1.0.5/16"))},
			objs:  []Object{ob("x", "10.1.2.3")}, want: []string{"x 10.1.2.3@a"},
			check: func(t *testing.T, r Result) {
				a, _ := assignment(r, "x", "10.1.2.3")
				if a.Interface.Kind != Secondary || a.Interface.Subnet != netip.MustParsePrefix("10.1.0.5/16") {
					t.Errorf("interface = %+v, want secondary 10.1.0.5/16", a.Interface)
				}
			}},
		{name: "primary interface wins when the IP is in the primary subnet",
			nodes: []Node{nd("a", "10.0.0.1/16", hostCIDRs("10.0.0.1/16", "10.0.5.1/24"))},
			objs:  []Object{ob("x", "10.0.5.7")}, want: []string{"x 10.0.5.7@a"},
			check: func(t *testing.T, r Result) {
				a, _ := assignment(r, "x", "10.0.5.7")
				if a.Interface.Kind != Primary || a.Interface.Subnet != netip.MustParsePrefix("10.0.0.1/16") {
					t.Errorf("interface = %+v, want primary 10.0.0.1/16", a.Interface)
				}
			}},
		{name: "cloud node uses only its egress-ipconfig subnet and interface",
			nodes: []Node{nd("a", "192.168.1.5/24", cloud("eni-078d", "10.0.128.0/18", "", cluster.Capacity{IPv4: 14, IPv6: 15}))},
			objs:  []Object{ob("x", "192.168.1.77"), ob("y", "10.0.130.1")}, want: []string{"y 10.0.130.1@a"},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "192.168.1.77", "10.0.128.0/18"}},
			check: func(t *testing.T, r Result) {
				a, _ := assignment(r, "y", "10.0.130.1")
				if a.Interface.Kind != Cloud || a.Interface.Name != "eni-078d" {
					t.Errorf("interface = %+v, want cloud eni-078d", a.Interface)
				}
			}},
		{name: "wrong family is never assigned",
			nodes: three(), objs: []Object{ob("x", "fd00::10")},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "fd00::10", "none of the 3 eligible nodes"}}},
		{name: "network, broadcast and subnet-router anycast addresses are not host addresses",
			nodes: []Node{nd("a", "10.0.0.1/24", v6("fd00::1/64"))}, objs: []Object{ob("x", "10.0.0.0"), ob("y", "10.0.0.255"), ob("z", "fd00::")},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "10.0.0.0", "subnet"}, {"y", ReasonNoMatchingNodeFound, "10.0.0.255", "subnet"}, {"z", ReasonNoMatchingNodeFound, "fd00::", "subnet"}}},
		{name: "status on a node whose subnet no longer holds the IP moves",
			nodes: []Node{nd("a", "10.0.0.1/24"), nd("b", "10.0.1.1/24")}, objs: []Object{st(ob("x", "10.0.1.50"), "10.0.1.50@a")},
			want: []string{"x 10.0.1.50@b"}},
	})
}

// Rule: cloud capacity, per family on AWS and total on GCP/Azure, counting
// the IPs already assigned (IP capacity = cloud capacity − current assignments).
func TestRuleCloudCapacity(t *testing.T) {
	aws := func(name string, v4, v6 int) Node {
		return nd(name, "10.0.128.5/18", cloud("eni-"+name, "10.0.128.0/18", "fd00::/64", cluster.Capacity{IPv4: v4, IPv6: v6}))
	}
	gcp := func(name string, total int) Node {
		return nd(name, "10.0.128.5/18", cloud("nic0", "10.0.128.0/18", "fd00::/64", cluster.Capacity{Total: true, IP: total}))
	}
	runRules(t, []ruleCase{
		{name: "AWS ipv4 capacity bounds IPv4 per node",
			nodes:  []Node{aws("a", 1, 5), aws("b", 1, 5)},
			objs:   []Object{ob("x", "10.0.128.10"), ob("y", "10.0.128.11"), ob("z", "10.0.128.12")},
			want:   []string{"x 10.0.128.10@a", "y 10.0.128.11@b"},
			events: []wantEvent{{"z", ReasonNoMatchingNodeFound, "10.0.128.12", "cloud IP capacity"}}},
		{name: "AWS ipv6 capacity is separate from ipv4",
			nodes:  []Node{aws("a", 1, 1)},
			objs:   []Object{ob("x", "10.0.128.10"), ob("y", "fd00::10"), ob("z", "fd00::11")},
			want:   []string{"x 10.0.128.10@a", "y fd00::10@a"},
			events: []wantEvent{{"z", ReasonNoMatchingNodeFound, "fd00::11", "cloud IP capacity"}}},
		{name: "AWS family missing from capacity has none",
			nodes: []Node{aws("a", 3, 0)}, objs: []Object{ob("y", "fd00::10")},
			events: []wantEvent{{"y", ReasonNoMatchingNodeFound, "fd00::10", "cloud IP capacity"}}},
		{name: "GCP and Azure total capacity counts both families",
			nodes: []Node{gcp("a", 1)}, objs: []Object{ob("x", "10.0.128.10"), ob("y", "fd00::10")},
			want:   []string{"x 10.0.128.10@a"},
			events: []wantEvent{{"y", ReasonNoMatchingNodeFound, "fd00::10", "cloud IP capacity"}}},
		{name: "current assignments use up capacity",
			nodes: []Node{aws("a", 1, 0), aws("b", 3, 0)},
			objs: []Object{st(ob("k1", "10.0.128.11"), "10.0.128.11@a"), st(ob("k2", "10.0.128.12"), "10.0.128.12@b"),
				st(ob("k3", "10.0.128.13"), "10.0.128.13@b"), ob("x", "10.0.128.10")},
			// a has the fewest IPs but no capacity left.
			want: []string{"k1 10.0.128.11@a", "k2 10.0.128.12@b", "k3 10.0.128.13@b", "x 10.0.128.10@b"}},
		{name: "status over a lowered capacity keeps the first objects by name",
			nodes:  []Node{aws("a", 1, 0)},
			objs:   []Object{st(ob("y", "10.0.128.11"), "10.0.128.11@a"), st(ob("x", "10.0.128.10"), "10.0.128.10@a")},
			want:   []string{"x 10.0.128.10@a"},
			events: []wantEvent{{"y", ReasonNoMatchingNodeFound, "10.0.128.11", "cloud IP capacity"}}},
		{name: "mixed reasons are both counted",
			nodes: []Node{aws("a", 0, 0), aws("b", 5, 5)}, objs: []Object{ob("x", "10.0.128.10", "10.0.128.11")},
			want:   []string{"x 10.0.128.10@b"},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "10.0.128.11", "1 already host another egress IP of x (a node hosts at most one IP of an EgressIP) and 1 are at their cloud IP capacity"}}},
	})
}

// Rule: each new IP goes to the eligible node with the fewest IPs, ties by name.
func TestRuleBalance(t *testing.T) {
	runRules(t, []ruleCase{
		{name: "single-IP objects round-robin over nodes",
			nodes: three(),
			objs: []Object{ob("o1", "10.0.0.11"), ob("o2", "10.0.0.12"), ob("o3", "10.0.0.13"),
				ob("o4", "10.0.0.14"), ob("o5", "10.0.0.15"), ob("o6", "10.0.0.16")},
			want: []string{"o1 10.0.0.11@a", "o2 10.0.0.12@b", "o3 10.0.0.13@c", "o4 10.0.0.14@a", "o5 10.0.0.15@b", "o6 10.0.0.16@c"}},
		{name: "multi-IP objects fill the least loaded nodes first",
			nodes: three(), objs: []Object{ob("x", "10.0.0.10", "10.0.0.11"), ob("y", "10.0.0.12", "10.0.0.13")},
			want: []string{"x 10.0.0.10@a", "x 10.0.0.11@b", "y 10.0.0.12@c", "y 10.0.0.13@a"}},
	})
}

// Rule: a dual-stack object puts v4 on a node with a v4 subnet and v6 on
// one with a v6 subnet, never both on one node.
func TestRuleDualStack(t *testing.T) {
	// Augmenting path: greedy would put r on a, s on c, p on b and find no
	// node for q; moving r, p and s frees a for q.
	aug := []Node{
		nd("a", "10.1.0.1/24", hostCIDRs("10.1.0.1/24", "10.3.0.1/24")),
		nd("b", "10.1.0.2/24", hostCIDRs("10.3.0.2/24")),
		nd("c", "10.2.0.3/24", hostCIDRs("10.3.0.3/24")),
		nd("d", "10.2.0.4/24", hostCIDRs("10.4.0.4/24")),
	}
	runRules(t, []ruleCase{
		{name: "v6 goes to the only v6 node and v4 elsewhere",
			nodes: []Node{nd("a", "10.0.0.1/24", v6("fd00::1/64")), nd("b", "10.0.0.2/24")},
			objs:  []Object{ob("x", "10.0.0.10", "fd00::10")},
			want:  []string{"x 10.0.0.10@b", "x fd00::10@a"},
			check: func(t *testing.T, r Result) {
				a, _ := assignment(r, "x", "fd00::10")
				if a.Interface.Subnet != netip.MustParsePrefix("fd00::1/64") {
					t.Errorf("v6 interface = %+v, want fd00::1/64", a.Interface)
				}
			}},
		{name: "v4 and v6 of one object never share a node",
			nodes: []Node{nd("a", "10.0.0.1/24", v6("fd00::1/64"))}, objs: []Object{ob("x", "10.0.0.10", "fd00::10")},
			want:   []string{"x 10.0.0.10@a"},
			events: []wantEvent{{"x", ReasonNoMatchingNodeFound, "fd00::10", "already host another egress IP of x"}}},
		{name: "v4-only and v6-only nodes share a dual-stack object",
			nodes: []Node{nd("a", "fd00::1/64"), nd("b", "10.0.0.2/24")}, objs: []Object{ob("x", "fd00::10", "10.0.0.10")},
			want: []string{"x 10.0.0.10@b", "x fd00::10@a"}},
		{name: "an augmenting path places every IP when a matching exists",
			nodes: aug,
			objs:  []Object{ob("k1", "10.4.0.10"), ob("k2", "10.4.0.11"), ob("x", "10.3.0.10", "10.3.0.11", "10.1.0.10", "10.2.0.10")},
			want: []string{"k1 10.4.0.10@d", "k2 10.4.0.11@d",
				"x 10.3.0.11@a", "x 10.1.0.10@b", "x 10.3.0.10@c", "x 10.2.0.10@d"}},
	})
}

// Rule: minimal churn: a valid assignment never moves; new work goes to
// nodes labelled later.
func TestRuleMinimalChurn(t *testing.T) {
	pinned := []Object{st(ob("x", "10.0.0.10"), "10.0.0.10@a"), st(ob("y", "10.0.0.11"), "10.0.0.11@a"), st(ob("z", "10.0.0.12"), "10.0.0.12@a")}
	runRules(t, []ruleCase{
		{name: "valid assignments stay even when unbalanced",
			nodes: three(), objs: pinned,
			want: []string{"x 10.0.0.10@a", "y 10.0.0.11@a", "z 10.0.0.12@a"}},
		{name: "nodes labelled after the objects get the new work",
			nodes: three(), objs: append(slices.Clone(pinned), ob("w1", "10.0.0.21"), ob("w2", "10.0.0.22"), ob("w3", "10.0.0.23"), ob("w4", "10.0.0.24")),
			want: []string{"x 10.0.0.10@a", "y 10.0.0.11@a", "z 10.0.0.12@a",
				"w1 10.0.0.21@b", "w2 10.0.0.22@c", "w3 10.0.0.23@b", "w4 10.0.0.24@c"}},
		{name: "an IP removed from the spec leaves the status",
			nodes: three(), objs: []Object{st(ob("x", "10.0.0.10"), "10.0.0.10@c", "10.0.0.11@b")},
			want: []string{"x 10.0.0.10@c"}},
	})
}

// Rule: an IP listed by two objects is a conflict explained on both; it
// stays with the object that has it in status, else the oldest, else the
// first name.
func TestRuleConflict(t *testing.T) {
	both := func(keeper, loser string) []wantEvent {
		return []wantEvent{
			{keeper, ReasonEgressIPConflict, "10.0.0.10", "it stays with this object"},
			{loser, ReasonEgressIPConflict, "10.0.0.10", "which keeps it"},
		}
	}
	runRules(t, []ruleCase{
		{name: "object with the IP in status keeps it",
			nodes: three(), objs: []Object{ob("alpha", "10.0.0.10"), st(ob("zulu", "10.0.0.10"), "10.0.0.10@b")},
			want: []string{"zulu 10.0.0.10@b"}, events: both("zulu", "alpha")},
		{name: "older object keeps it",
			nodes: three(), objs: []Object{{Name: "alpha", Created: t0.Add(time.Second), EgressIPs: []string{"10.0.0.10"}},
				{Name: "zulu", Created: t0, EgressIPs: []string{"10.0.0.10"}}},
			want: []string{"zulu 10.0.0.10@a"}, events: both("zulu", "alpha")},
		{name: "same age: first name keeps it",
			nodes: three(), objs: []Object{{Name: "zulu", Created: t0, EgressIPs: []string{"10.0.0.10"}},
				{Name: "alpha", Created: t0, EgressIPs: []string{"10.0.0.10"}}},
			want: []string{"alpha 10.0.0.10@a"}, events: both("alpha", "zulu")},
		{name: "the loser's other IPs are still assigned",
			nodes: three(), objs: []Object{ob("alpha", "10.0.0.10"), ob("zulu", "10.0.0.10", "10.0.0.20")},
			want: []string{"alpha 10.0.0.10@a", "zulu 10.0.0.20@b"}, events: both("alpha", "zulu")},
		{name: "a node's own address is a conflict",
			nodes: three(), objs: []Object{ob("x", "10.0.0.2", "10.0.0.10")},
			want:   []string{"x 10.0.0.10@a"},
			events: []wantEvent{{"x", ReasonEgressIPConflict, "10.0.0.2", "address of node b"}}},
	})
}

// Rule: invalid IP strings give InvalidEgressIP; the valid IPs are still assigned.
func TestRuleInvalidEgressIP(t *testing.T) {
	bad := []string{"foo", "10.0.0.300", "", " 10.0.0.11", "fe80::1", "::ffff:10.0.0.9", "127.0.0.1", "224.0.0.1",
		"0.0.0.0", "fd00::1%eth0", "255.255.255.255", "10.0.0.0/24", "010.0.0.1"}
	var evs []wantEvent
	for _, b := range bad {
		evs = append(evs, wantEvent{"x", ReasonInvalidEgressIP, b, "not usable"})
	}
	runRules(t, []ruleCase{
		{name: "bad strings are reported and the valid IP assigned",
			nodes: three(), objs: []Object{ob("x", append(slices.Clone(bad), "10.0.0.10")...)},
			want: []string{"x 10.0.0.10@a"}, events: evs},
		{name: "a duplicate entry is reported once and assigned once",
			nodes: three(), objs: []Object{ob("x", "10.0.0.10", "10.0.0.10")},
			want:   []string{"x 10.0.0.10@a"},
			events: []wantEvent{{"x", ReasonInvalidEgressIP, "10.0.0.10", "more than once"}}},
		{name: "IPv6 is written in canonical form in status",
			nodes: []Node{nd("a", "fd00::1/64")}, objs: []Object{ob("x", "FD00:0::10")},
			want: []string{"x fd00::10@a"}},
	})
}

func TestDuplicateNamesAreErrors(t *testing.T) {
	if _, err := Assign(nil, []Node{nd("a", ""), nd("a", "")}, Options{}); err == nil || !strings.Contains(err.Error(), `node "a" is listed twice`) {
		t.Errorf("duplicate node: err = %v", err)
	}
	if _, err := Assign([]Object{ob("x"), ob("x")}, nil, Options{}); err == nil || !strings.Contains(err.Error(), `EgressIP "x" is listed twice`) {
		t.Errorf("duplicate object: err = %v", err)
	}
}

// Rule: determinism: the same input in any order gives the same output.
func TestRuleDeterministicUnderShuffle(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for iter := 0; iter < 50; iter++ {
		nodes, objs := randomCluster(rng, true)
		want := mustAssign(t, objs, nodes, Options{})
		for s := 0; s < 5; s++ {
			n2 := slices.Clone(nodes)
			o2 := make([]Object, len(objs))
			for i, o := range objs {
				o.EgressIPs = slices.Clone(o.EgressIPs)
				o.Status = slices.Clone(o.Status)
				rng.Shuffle(len(o.EgressIPs), func(i, j int) { o.EgressIPs[i], o.EgressIPs[j] = o.EgressIPs[j], o.EgressIPs[i] })
				rng.Shuffle(len(o.Status), func(i, j int) { o.Status[i], o.Status[j] = o.Status[j], o.Status[i] })
				o2[i] = o
			}
			for i := range n2 {
				n2[i].HostCIDRs = slices.Clone(n2[i].HostCIDRs)
				rng.Shuffle(len(n2[i].HostCIDRs), func(a, b int) {
					n2[i].HostCIDRs[a], n2[i].HostCIDRs[b] = n2[i].HostCIDRs[b], n2[i].HostCIDRs[a]
				})
			}
			rng.Shuffle(len(n2), func(i, j int) { n2[i], n2[j] = n2[j], n2[i] })
			rng.Shuffle(len(o2), func(i, j int) { o2[i], o2[j] = o2[j], o2[i] })
			got := mustAssign(t, o2, n2, Options{})
			if d := diffResults(want, got); d != "" {
				t.Fatalf("iteration %d shuffle %d: results differ: %s", iter, s, d)
			}
		}
	}
}

// Rule (failover): a node that fails loses its IPs to the others; when it
// returns it gets new work, and nothing moves back. Each step re-assigns
// from the previous result, as the controller does.
func TestRuleFailoverAndReturn(t *testing.T) {
	nodes := three()
	r := mustAssign(t, []Object{ob("x", "10.0.0.10"), ob("y", "10.0.0.11"), ob("z", "10.0.0.12")}, nodes, Options{})
	if got := placements(r); !slices.Equal(got, []string{"x 10.0.0.10@a", "y 10.0.0.11@b", "z 10.0.0.12@c"}) {
		t.Fatalf("before: %q", got)
	}
	objs := []Object{ob("x", "10.0.0.10"), ob("y", "10.0.0.11"), ob("z", "10.0.0.12")}
	nodes[0].Reachable = false
	r = mustAssign(t, resultAsInput(objs, r), nodes, Options{})
	if got := placements(r); !slices.Equal(got, []string{"x 10.0.0.10@b", "y 10.0.0.11@b", "z 10.0.0.12@c"}) {
		t.Errorf("after a failed: %q", got)
	}
	nodes[0].Reachable = true
	r = mustAssign(t, resultAsInput(objs, r), nodes, Options{})
	if got := placements(r); !slices.Equal(got, []string{"x 10.0.0.10@b", "y 10.0.0.11@b", "z 10.0.0.12@c"}) {
		t.Errorf("after a returned, something moved: %q", got)
	}
	objs = append(resultAsInput(objs, r), ob("w", "10.0.0.13"))
	if n := nodeOf(mustAssign(t, objs, nodes, Options{}), "w", "10.0.0.13"); n != "a" {
		t.Errorf("new IP went to %q, want the returned node a", n)
	}
}

// Rule (conflict): when the object holding a contested IP is deleted, the
// other claimant gets it and both conflict Events end.
func TestRuleConflictEndsWithTheHolder(t *testing.T) {
	objs := []Object{ob("alpha", "10.0.0.10"), ob("zulu", "10.0.0.10", "10.0.0.20")}
	r := mustAssign(t, objs, three(), Options{})
	if got := placements(r); !slices.Equal(got, []string{"alpha 10.0.0.10@a", "zulu 10.0.0.20@b"}) {
		t.Fatalf("before: %q", got)
	}
	r = mustAssign(t, resultAsInput(objs, r)[1:], three(), Options{})
	if got := placements(r); !slices.Equal(got, []string{"zulu 10.0.0.10@a", "zulu 10.0.0.20@b"}) {
		t.Errorf("after deleting alpha: %q", got)
	}
	if len(r.Events) != 0 {
		t.Errorf("events after the conflict ended:\n%s", eventsText(r))
	}
}
