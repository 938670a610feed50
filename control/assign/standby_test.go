package assign

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
)

// standbyOf returns the standby of ip of obj in r ("" for none or not placed).
func standbyOf(r Result, obj, ip string) string {
	a, _ := assignment(r, obj, ip)
	return a.Standby
}

// withStandbys records standbys given as "ip~node" on o.
func withStandbys(o Object, items ...string) Object {
	o.Standbys = map[netip.Addr]string{}
	for _, it := range items {
		ip, node, _ := strings.Cut(it, "~")
		o.Standbys[netip.MustParseAddr(ip)] = node
	}
	return o
}

// standbyLoads counts, per node name, the IPs it stands by for.
func standbyLoads(r Result) map[string]int {
	m := map[string]int{}
	for _, o := range r.Objects {
		for _, a := range o.Status {
			if a.Standby != "" {
				m[a.Standby]++
			}
		}
	}
	return m
}

// refStandbyOK restates, independently of the implementation, whether n
// could stand by for ip of object obj in r (capacity aside): eligible, not
// the owner, a subnet holding ip, no IP of obj on it.
func refStandbyOK(n Node, r Result, obj string, a Assignment) bool {
	if !refEligible(n) || n.Name == a.Node || !refInSubnet(n, a.Addr) {
		return false
	}
	for _, o := range r.Objects {
		if o.Name != obj {
			continue
		}
		for _, b := range o.Status {
			if b.Node == n.Name {
				return false
			}
		}
	}
	return true
}

// checkStandbys verifies the standby rules on any result: a standby is
// another eligible node on the IP's subnet hosting no IP of the object,
// capacity holds counting hosted and stood-by IPs, and an IP without a
// standby is reported and has no node that could be one.
func checkStandbys(t *testing.T, nodes []Node, r Result) {
	t.Helper()
	byName := map[string]Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	v4, v6 := map[string]int{}, map[string]int{}
	count := func(node string, a netip.Addr) {
		if a.Is4() {
			v4[node]++
		} else {
			v6[node]++
		}
	}
	missing := 0
	for _, o := range r.Objects {
		for _, a := range o.Status {
			count(a.Node, a.Addr)
			if a.Standby == "" {
				missing++
				if !slices.ContainsFunc(r.NoStandby, func(e Event) bool {
					b, err := netip.ParseAddr(e.EgressIP)
					return e.Object == o.Name && e.Reason == ReasonNoStandbyNode && err == nil && b == a.Addr
				}) {
					t.Fatalf("%s of %s has no standby and no %s event:\n%v", a.Addr, o.Name, ReasonNoStandbyNode, r.NoStandby)
				}
				for _, n := range nodes {
					if n.Cloud == nil && refStandbyOK(n, r, o.Name, a) {
						t.Fatalf("%s of %s on %s has no standby, but %s could be one", a.Addr, o.Name, a.Node, n.Name)
					}
				}
				continue
			}
			n, ok := byName[a.Standby]
			if !ok || !refStandbyOK(n, r, o.Name, a) {
				t.Fatalf("%s of %s on %s has standby %s, which does not qualify (eligible, another node, its subnet, no IP of the object)", a.Addr, o.Name, a.Node, a.Standby)
			}
			count(a.Standby, a.Addr)
		}
	}
	if missing != len(r.NoStandby) {
		t.Fatalf("%d IPs without a standby, %d %s events", missing, len(r.NoStandby), ReasonNoStandbyNode)
	}
	for _, n := range nodes {
		if !refCapacityOK(n, v4[n.Name], v6[n.Name]) {
			t.Fatalf("node %s hosts and stands by for %d IPv4 and %d IPv6, over its capacity %+v", n.Name, v4[n.Name], v6[n.Name], n.Cloud.Capacity)
		}
	}
}

// Rule: each assigned IP gets a standby under every assignment rule,
// balanced; a recorded one that still qualifies is kept; the failover of
// an owner lands on its standby.
func TestRuleStandby(t *testing.T) {
	x := ob("x", "10.0.0.10")
	standbys := func(want ...string) func(t *testing.T, r Result) {
		return func(t *testing.T, r Result) {
			var got []string
			for _, o := range r.Objects {
				for _, a := range o.Status {
					got = append(got, fmt.Sprintf("%s %s~%s", o.Name, a.EgressIP, a.Standby))
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("standbys:\n got %q\nwant %q\nno-standby events: %v", got, want, r.NoStandby)
			}
		}
	}
	runRules(t, []ruleCase{
		{name: "standby is another eligible node", nodes: three(), objs: []Object{x},
			want: []string{"x 10.0.0.10@a"}, check: standbys("x 10.0.0.10~b")},
		{name: "ineligible nodes are never standby", nodes: []Node{nd("a", "10.0.0.1/24"), func() Node { n := nd("b", "10.0.0.2/24"); n.Reachable = false; return n }(), nd("c", "10.0.0.3/24")},
			objs: []Object{x}, want: []string{"x 10.0.0.10@a"}, check: standbys("x 10.0.0.10~c")},
		{name: "standby only on the IP's subnet", nodes: []Node{nd("a", "10.0.0.1/24"), nd("b", "10.0.1.2/24"), nd("c", "10.0.0.3/24")},
			objs: []Object{x}, want: []string{"x 10.0.0.10@a"}, check: standbys("x 10.0.0.10~c")},
		{name: "never a node hosting another IP of the object", nodes: three(), objs: []Object{ob("y", "10.0.0.10", "10.0.0.11")},
			want: []string{"y 10.0.0.10@a", "y 10.0.0.11@b"}, check: standbys("y 10.0.0.10~c", "y 10.0.0.11~c")},
		{name: "balanced over nodes, standby load apart from hosted load", nodes: three(),
			objs:  []Object{ob("p", "10.0.0.10"), ob("q", "10.0.0.11"), ob("r", "10.0.0.12")},
			want:  []string{"p 10.0.0.10@a", "q 10.0.0.11@b", "r 10.0.0.12@c"},
			check: standbys("p 10.0.0.10~b", "q 10.0.0.11~c", "r 10.0.0.12~a")},
		{name: "recorded standby kept even if unbalanced", nodes: three(),
			objs: []Object{withStandbys(st(ob("p", "10.0.0.10"), "10.0.0.10@a"), "10.0.0.10~c"), withStandbys(st(ob("q", "10.0.0.11"), "10.0.0.11@b"), "10.0.0.11~c")},
			want: []string{"p 10.0.0.10@a", "q 10.0.0.11@b"}, check: standbys("p 10.0.0.10~c", "q 10.0.0.11~c")},
		{name: "recorded standby that now hosts another IP of the object is replaced", nodes: three(),
			objs: []Object{withStandbys(st(ob("y", "10.0.0.10", "10.0.0.11"), "10.0.0.10@a", "10.0.0.11@b"), "10.0.0.10~b")},
			want: []string{"y 10.0.0.10@a", "y 10.0.0.11@b"}, check: standbys("y 10.0.0.10~c", "y 10.0.0.11~c")},
		{name: "recorded standby on a gone node is replaced", nodes: three(),
			objs: []Object{withStandbys(st(x, "10.0.0.10@a"), "10.0.0.10~gone")},
			want: []string{"x 10.0.0.10@a"}, check: standbys("x 10.0.0.10~b")},
		{name: "failover lands on the standby, not the least loaded node",
			nodes: []Node{func() Node { n := nd("a", "10.0.0.1/24"); n.Ready = false; return n }(), nd("b", "10.0.0.2/24"), nd("c", "10.0.0.3/24")},
			objs:  []Object{withStandbys(st(x, "10.0.0.10@a"), "10.0.0.10~c"), withStandbys(st(ob("z", "10.0.0.20"), "10.0.0.20@c"), "10.0.0.20~b")},
			want:  []string{"x 10.0.0.10@c", "z 10.0.0.20@c"}, check: standbys("x 10.0.0.10~b", "z 10.0.0.20~b")},
		{name: "failover to an ineligible standby goes by the rules",
			nodes: []Node{func() Node { n := nd("a", "10.0.0.1/24"); n.Ready = false; return n }(), nd("b", "10.0.0.2/24"), func() Node { n := nd("c", "10.0.0.3/24"); n.Reachable = false; return n }()},
			objs:  []Object{withStandbys(st(x, "10.0.0.10@a"), "10.0.0.10~c")},
			want:  []string{"x 10.0.0.10@b"}, check: standbys("x 10.0.0.10~")},
		{name: "failover never puts two IPs of one object on the standby",
			nodes: []Node{func() Node { n := nd("a", "10.0.0.1/24"); n.Ready = false; return n }(), nd("b", "10.0.0.2/24"), nd("c", "10.0.0.3/24")},
			objs:  []Object{withStandbys(st(ob("y", "10.0.0.10", "10.0.0.11"), "10.0.0.10@a", "10.0.0.11@b"), "10.0.0.10~b")},
			want:  []string{"y 10.0.0.10@c", "y 10.0.0.11@b"}, check: standbys("y 10.0.0.10~", "y 10.0.0.11~")},
		{name: "a standby needs cloud capacity for the IPs it would take over",
			nodes: []Node{
				nd("a", "", cloud("eni-a", "10.0.0.0/24", "", cluster.Capacity{IPv4: 1})),
				nd("b", "", cloud("eni-b", "10.0.0.0/24", "", cluster.Capacity{IPv4: 2})),
				nd("c", "", cloud("eni-c", "10.0.0.0/24", "", cluster.Capacity{IPv4: 2}))},
			objs:  []Object{st(ob("p", "10.0.0.10"), "10.0.0.10@a"), st(ob("q", "10.0.0.11"), "10.0.0.11@b"), st(ob("r", "10.0.0.12"), "10.0.0.12@c")},
			want:  []string{"p 10.0.0.10@a", "q 10.0.0.11@b", "r 10.0.0.12@c"},
			check: standbys("p 10.0.0.10~b", "q 10.0.0.11~c", "r 10.0.0.12~")},
		{name: "single node: no standby, said once per IP", nodes: []Node{nd("a", "10.0.0.1/24")}, objs: []Object{x},
			want: []string{"x 10.0.0.10@a"}, check: func(t *testing.T, r Result) {
				standbys("x 10.0.0.10~")(t, r)
				if len(r.NoStandby) != 1 || r.NoStandby[0].Object != "x" || r.NoStandby[0].EgressIP != "10.0.0.10" ||
					!strings.Contains(r.NoStandby[0].Message, "no other eligible node has an interface subnet containing it") {
					t.Errorf("no-standby events = %+v, want one for x 10.0.0.10 saying no other node is on its subnet", r.NoStandby)
				}
			}},
		{name: "every other node hosts an IP of the object: the reason says so", nodes: []Node{nd("a", "10.0.0.1/24"), nd("b", "10.0.0.2/24")},
			objs: []Object{ob("y", "10.0.0.10", "10.0.0.11")},
			want: []string{"y 10.0.0.10@a", "y 10.0.0.11@b"}, check: func(t *testing.T, r Result) {
				if len(r.NoStandby) != 2 || !strings.Contains(r.NoStandby[0].Message, "host another egress IP of y") {
					t.Errorf("no-standby events = %+v, want two naming the one-IP-per-node rule", r.NoStandby)
				}
			}},
	})
}

// Property: on random clusters (no status) every new standby is balanced:
// no node that could stand by for an IP has two standbys fewer than the
// one chosen.
func TestPropertyStandbyBalanced(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 500; iter++ {
		nodes, objs := randomCluster(rng, false)
		for i := range nodes {
			nodes[i].Cloud = nil // capacity would make balance depend on order
		}
		r := mustAssign(t, objs, nodes, Options{})
		checkStandbys(t, nodes, r)
		sl := standbyLoads(r)
		for _, o := range r.Objects {
			for _, a := range o.Status {
				if a.Standby == "" {
					continue
				}
				for _, n := range nodes {
					if refStandbyOK(n, r, o.Name, a) && sl[n.Name]+2 <= sl[a.Standby] {
						t.Fatalf("iteration %d: %s of %s stands by on %s (%d standbys) although %s (%d) could: %v",
							iter, a.Addr, o.Name, a.Standby, sl[a.Standby], n.Name, sl[n.Name], sl)
					}
				}
			}
		}
	}
}

// Property: standbys are stable across unrelated changes: a new node and
// a new object leave every recorded standby where it was.
func TestPropertyStandbyStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for iter := 0; iter < 1000; iter++ {
		nodes, objs := randomCluster(rng, iter%2 == 0)
		r := mustAssign(t, objs, nodes, Options{})
		more := append(slices.Clone(nodes), nd("node-new", "10.1.0.250/24", v6("fd01::250/64")))
		in := append(resultAsInput(objs, r), Object{Name: "eip-new", Created: t0.Add(time.Hour), EgressIPs: []string{randomIP(rng), randomIP(rng)}})
		again := mustAssign(t, in, more, Options{})
		checkStandbys(t, more, again)
		for _, o := range r.Objects {
			for _, a := range o.Status {
				if a.Standby == "" {
					continue
				}
				if b, _ := assignment(again, o.Name, a.EgressIP); b.Node != a.Node || (b.Standby != a.Standby && !isCloud(nodes, a.Standby)) {
					t.Fatalf("iteration %d: %s of %s moved from %s~%s to %s~%s after an unrelated change", iter, a.EgressIP, o.Name, a.Node, a.Standby, b.Node, b.Standby)
				}
			}
		}
	}
}

// isCloud reports whether node name has a cloud capacity, which a new
// object's IPs may use up, ending a standby there.
func isCloud(nodes []Node, name string) bool {
	i := slices.IndexFunc(nodes, func(n Node) bool { return n.Name == name })
	return i >= 0 && nodes[i].Cloud != nil
}

// Property: when a node fails, each of its IPs lands on its recorded
// standby (which was eligible and had the capacity reserved).
func TestPropertyFailoverLandsOnStandby(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	checked := 0
	for iter := 0; iter < 2000; iter++ {
		nodes, objs := randomCluster(rng, iter%2 == 0)
		r := mustAssign(t, objs, nodes, Options{})
		l := loads(r)
		if len(l) == 0 {
			continue
		}
		failed := sortedKeys(l)[rng.IntN(len(l))]
		after := slices.Clone(nodes)
		for i := range after {
			if after[i].Name == failed {
				after[i].Ready = false
			}
		}
		again := mustAssign(t, resultAsInput(objs, r), after, Options{})
		checkInvariants(t, after, objs, again)
		checkStandbys(t, after, again)
		for _, o := range r.Objects {
			for _, a := range o.Status {
				if a.Node != failed || a.Standby == "" {
					continue
				}
				checked++
				if got := nodeOf(again, o.Name, a.EgressIP); got != a.Standby {
					t.Fatalf("iteration %d: %s of %s left the failed %s for %q, not its standby %s", iter, a.EgressIP, o.Name, failed, got, a.Standby)
				}
				if b := standbyOf(again, o.Name, a.EgressIP); b == a.Standby {
					t.Fatalf("iteration %d: %s of %s is on its own standby %s", iter, a.EgressIP, o.Name, b)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d failovers to a standby checked; the random clusters are too small", checked)
	}
}
