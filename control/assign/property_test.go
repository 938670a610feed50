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

// render prints a result line by line, so two results compare as text and
// a difference reads well.
func render(r Result) []string {
	var out []string
	for _, o := range r.Objects {
		out = append(out, "object "+o.Name)
		for _, a := range o.Status {
			out = append(out, fmt.Sprintf("  %s@%s %s %s %s standby %q", a.EgressIP, a.Node, a.Interface.Kind, a.Interface.Name, a.Interface.Subnet, a.Standby))
		}
	}
	for _, e := range r.Events {
		out = append(out, fmt.Sprintf("event %s %s %q: %s", e.Object, e.Reason, e.EgressIP, e.Message))
	}
	for _, e := range r.NodeProblems {
		out = append(out, fmt.Sprintf("node %s %s: %s", e.Object, e.Reason, e.Message))
	}
	for _, e := range r.NoStandby {
		out = append(out, fmt.Sprintf("nostandby %s %s %q: %s", e.Object, e.Reason, e.EgressIP, e.Message))
	}
	return out
}

func diffResults(want, got Result) string {
	w, g := render(want), render(got)
	if slices.Equal(w, g) {
		return ""
	}
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("first difference at line %d:\nwant %s\n got %s\nwant all:\n%s\ngot all:\n%s", i, wl, gl,
				strings.Join(w, "\n"), strings.Join(g, "\n"))
		}
	}
	return "differ"
}

// randomIP picks an address from a small pool so that IPs collide, land
// outside subnets, use both families, and are sometimes invalid.
func randomIP(rng *rand.Rand) string {
	switch rng.IntN(20) {
	case 0:
		return "not-an-ip"
	case 1:
		return "10.9.0." + fmt.Sprint(10+rng.IntN(5)) // in no subnet
	case 2, 3, 4:
		return fmt.Sprintf("fd0%d::%x", rng.IntN(3), 0x10+rng.IntN(12))
	}
	return fmt.Sprintf("10.%d.0.%d", rng.IntN(3), 10+rng.IntN(12))
}

// randomCluster builds nodes on three IPv4 and three IPv6 subnets, with
// random eligibility, secondary interfaces and cloud capacity, and objects
// with random (sometimes conflicting or invalid) IPs and, if withStatus,
// random current statuses.
func randomCluster(rng *rand.Rand, withStatus bool) ([]Node, []Object) {
	nn := 1 + rng.IntN(8)
	nodes := make([]Node, nn)
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		s := rng.IntN(3)
		n := nd(name, fmt.Sprintf("10.%d.0.%d/24", s, 1+i))
		if rng.IntN(2) == 0 {
			n.PrimaryIfAddr.IPv6 = netip.MustParsePrefix(fmt.Sprintf("fd0%d::%d/64", rng.IntN(3), 1+i))
		}
		if rng.IntN(3) == 0 {
			n.HostCIDRs = append(n.HostCIDRs, n.PrimaryIfAddr.IPv4,
				netip.MustParsePrefix(fmt.Sprintf("10.%d.0.%d/24", rng.IntN(3), 200+i)),
				netip.MustParsePrefix(fmt.Sprintf("10.%d.0.%d/16", rng.IntN(3), 100+i)))
		}
		if rng.IntN(4) == 0 {
			c := cluster.Capacity{IPv4: rng.IntN(4), IPv6: rng.IntN(3)}
			if rng.IntN(2) == 0 {
				c = cluster.Capacity{Total: true, IP: rng.IntN(5)}
			}
			cc := &cluster.CloudConfig{Interface: "eni-" + name, Capacity: c, IfAddr: cluster.IfAddr{IPv4: netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/24", s))}}
			if rng.IntN(2) == 0 {
				cc.IfAddr.IPv6 = netip.MustParsePrefix(fmt.Sprintf("fd0%d::/64", rng.IntN(3)))
			}
			n.Cloud = cc
		}
		switch rng.IntN(12) {
		case 0:
			n.Assignable = false
		case 1:
			n.Ready = false
		case 2:
			n.Reachable = false
		case 3:
			n.AnnotationErr = fmt.Errorf("annotation %s is not the expected JSON", cluster.AnnotationHostCIDRs)
		}
		nodes[i] = n
	}
	no := rng.IntN(16)
	objs := make([]Object, no)
	for i := range objs {
		o := Object{Name: fmt.Sprintf("eip-%02d", i), Created: t0.Add(time.Duration(rng.IntN(3)) * time.Second)}
		k := rng.IntN(5)
		for j := 0; j < k; j++ {
			o.EgressIPs = append(o.EgressIPs, randomIP(rng))
		}
		if withStatus {
			for j := rng.IntN(4); j > 0; j-- {
				ip := randomIP(rng)
				if len(o.EgressIPs) > 0 && rng.IntN(3) > 0 {
					ip = o.EgressIPs[rng.IntN(len(o.EgressIPs))]
				}
				node := "gone"
				if rng.IntN(5) > 0 {
					node = nodes[rng.IntN(nn)].Name
				}
				o.Status = append(o.Status, StatusItem{Node: node, EgressIP: ip})
			}
		}
		objs[i] = o
	}
	return nodes, objs
}

// refEligible and refMatch restate the rules independently of the
// implementation, for the invariant checks.
func refEligible(n Node) bool {
	return n.Assignable && n.Ready && n.Reachable && n.AnnotationErr == nil
}

func refInSubnet(n Node, a netip.Addr) bool {
	var ps []netip.Prefix
	if n.Cloud != nil {
		ps = []netip.Prefix{n.Cloud.IfAddr.IPv4, n.Cloud.IfAddr.IPv6}
	} else {
		ps = append([]netip.Prefix{n.PrimaryIfAddr.IPv4, n.PrimaryIfAddr.IPv6}, n.HostCIDRs...)
	}
	for _, p := range ps {
		if p.IsValid() && p.Contains(a) && a != p.Masked().Addr() && !(a.Is4() && p.Bits() <= 30 && isBroadcast(p, a)) {
			return true
		}
	}
	return false
}

func isBroadcast(p netip.Prefix, a netip.Addr) bool {
	b := a.As4()
	host := 32 - p.Bits()
	for bit := 0; bit < host; bit++ {
		if b[3-bit/8]&(1<<(bit%8)) == 0 {
			return false
		}
	}
	return true
}

func refCapacityOK(n Node, v4, v6 int) bool {
	if n.Cloud == nil {
		return true
	}
	c := n.Cloud.Capacity
	if c.Total {
		return v4+v6 <= c.IP
	}
	return v4 <= c.IPv4 && v6 <= c.IPv6
}

// checkInvariants verifies the rules that must hold for any input.
func checkInvariants(t *testing.T, nodes []Node, objs []Object, r Result) {
	t.Helper()
	byName := map[string]Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	spec := map[string]map[netip.Addr]bool{}
	claimants := map[netip.Addr]int{}
	for _, o := range objs {
		spec[o.Name] = map[netip.Addr]bool{}
		for _, s := range o.EgressIPs {
			if a, err := netip.ParseAddr(s); err == nil && !spec[o.Name][a] {
				spec[o.Name][a] = true
				claimants[a]++
			}
		}
	}
	ipNode := map[netip.Addr]string{}
	v4, v6 := map[string]int{}, map[string]int{}
	for _, o := range r.Objects {
		seen := map[string]bool{}
		for _, a := range o.Status {
			if prev, dup := ipNode[a.Addr]; dup {
				t.Fatalf("%s is on %s and on %s", a.Addr, prev, a.Node)
			}
			ipNode[a.Addr] = a.Node
			if seen[a.Node] {
				t.Fatalf("node %s hosts two IPs of %s", a.Node, o.Name)
			}
			seen[a.Node] = true
			if !spec[o.Name][a.Addr] {
				t.Fatalf("%s got %s, which is not in its spec", o.Name, a.Addr)
			}
			n, ok := byName[a.Node]
			if !ok || !refEligible(n) {
				t.Fatalf("%s of %s is on %s, which is not eligible", a.Addr, o.Name, a.Node)
			}
			if !refInSubnet(n, a.Addr) || !a.Interface.Subnet.Contains(a.Addr) {
				t.Fatalf("%s of %s is on %s (interface %+v) outside the node's subnets", a.Addr, o.Name, a.Node, a.Interface)
			}
			if a.Addr.Is4() {
				v4[a.Node]++
			} else {
				v6[a.Node]++
			}
		}
	}
	for _, n := range nodes {
		if !refCapacityOK(n, v4[n.Name], v6[n.Name]) {
			t.Fatalf("node %s holds %d IPv4 and %d IPv6 over its capacity %+v", n.Name, v4[n.Name], v6[n.Name], n.Cloud.Capacity)
		}
	}
	// Every valid IP of every object is placed or explained.
	for _, o := range objs {
		for a := range spec[o.Name] {
			if ipNode[a] != "" {
				continue
			}
			raw := false
			for _, e := range r.Events {
				if e.Object == o.Name && (e.Reason == ReasonNoMatchingNodeFound || e.Reason == ReasonEgressIPConflict || e.Reason == ReasonInvalidEgressIP) {
					if b, err := netip.ParseAddr(e.EgressIP); err == nil && b == a {
						raw = true
					}
				}
			}
			if !raw {
				t.Fatalf("%s of %s is neither assigned nor explained:\n%s", a, o.Name, eventsText(r))
			}
		}
	}
	// A status item that is plainly valid (eligible non-cloud node, subnet
	// match, uncontested IP, the object's only item on that node and for
	// that IP) is kept in place.
	for _, o := range objs {
		for _, it := range o.Status {
			a, err := netip.ParseAddr(it.EgressIP)
			n, ok := byName[it.Node]
			if err != nil || !ok || !refEligible(n) || n.Cloud != nil || !spec[o.Name][a] || claimants[a] != 1 || !refInSubnet(n, a) {
				continue
			}
			if isNodeAddr(nodes, a) {
				continue
			}
			clean := true
			for _, other := range o.Status {
				if other != it && (other.Node == it.Node || other.EgressIP == it.EgressIP) {
					clean = false
				}
			}
			for _, p := range objs {
				for _, other := range p.Status {
					if p.Name != o.Name && other.EgressIP == it.EgressIP {
						clean = false
					}
				}
			}
			if clean && nodeOf(r, o.Name, a.String()) != it.Node {
				t.Fatalf("valid assignment %s of %s on %s moved to %q", a, o.Name, it.Node, nodeOf(r, o.Name, a.String()))
			}
		}
	}
}

func isNodeAddr(nodes []Node, a netip.Addr) bool {
	for _, n := range nodes {
		for _, p := range append([]netip.Prefix{n.PrimaryIfAddr.IPv4, n.PrimaryIfAddr.IPv6}, n.HostCIDRs...) {
			if p.IsValid() && p.Addr() == a {
				return true
			}
		}
	}
	return false
}

// resultAsInput feeds a result back as the objects' statuses and recorded
// standbys, as the controller does.
func resultAsInput(objs []Object, r Result) []Object {
	status := map[string][]StatusItem{}
	standbys := map[string]map[netip.Addr]string{}
	for _, o := range r.Objects {
		status[o.Name] = statusItems(o)
		for _, a := range o.Status {
			if a.Standby == "" {
				continue
			}
			if standbys[o.Name] == nil {
				standbys[o.Name] = map[netip.Addr]string{}
			}
			standbys[o.Name][a.Addr] = a.Standby
		}
	}
	out := make([]Object, len(objs))
	for i, o := range objs {
		o.Status = status[o.Name]
		o.Standbys = standbys[o.Name]
		out[i] = o
	}
	return out
}

// Property: on random clusters every invariant holds, and feeding the
// result back moves nothing (a valid assignment never moves).
func TestPropertyRandomClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 3000; iter++ {
		nodes, objs := randomCluster(rng, iter%2 == 0)
		r := mustAssign(t, objs, nodes, Options{})
		checkInvariants(t, nodes, objs, r)
		checkStandbys(t, nodes, r)
		again := mustAssign(t, resultAsInput(objs, r), nodes, Options{})
		checkInvariants(t, nodes, objs, again)
		checkStandbys(t, nodes, again)
		for _, o := range r.Objects {
			for _, a := range o.Status {
				b, _ := assignment(again, o.Name, a.EgressIP)
				if b.Node != a.Node || b.Standby != a.Standby {
					t.Fatalf("iteration %d: re-assigning moved %s of %s from %s (standby %q) to %q (standby %q)", iter, a.EgressIP, o.Name, a.Node, a.Standby, b.Node, b.Standby)
				}
			}
		}
	}
}

// Property: with no capacity, subnet, conflict or status constraint, the
// number of IPs per eligible node differs by at most one.
func TestPropertyBalanced(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 500; iter++ {
		nn := 1 + rng.IntN(10)
		var nodes []Node
		for i := 0; i < nn; i++ {
			n := nd(fmt.Sprintf("n%02d", i), fmt.Sprintf("10.0.%d.%d/16", i, 1))
			if rng.IntN(5) == 0 {
				n.Ready = false // ineligible nodes must not count
			}
			nodes = append(nodes, n)
		}
		eligible := 0
		for _, n := range nodes {
			if n.Ready {
				eligible++
			}
		}
		var objs []Object
		next := 0
		for i := rng.IntN(40); i > 0; i-- {
			o := Object{Name: fmt.Sprintf("o%03d", i)}
			for k := 1 + rng.IntN(max(eligible, 1)); k > 0; k-- {
				next++
				o.EgressIPs = append(o.EgressIPs, fmt.Sprintf("10.0.%d.%d", 100+next/200, 10+next%200))
			}
			objs = append(objs, o)
		}
		r := mustAssign(t, objs, nodes, Options{})
		if eligible == 0 {
			continue
		}
		l := loads(r)
		lo, hi := 1<<30, 0
		for _, n := range nodes {
			if !n.Ready {
				if l[n.Name] != 0 {
					t.Fatalf("ineligible %s got %d IPs", n.Name, l[n.Name])
				}
				continue
			}
			lo, hi = min(lo, l[n.Name]), max(hi, l[n.Name])
		}
		if hi-lo > 1 {
			t.Fatalf("iteration %d: loads %v differ by %d", iter, l, hi-lo)
		}
		if len(r.Events) != 0 {
			t.Fatalf("iteration %d: unexpected events:\n%s", iter, eventsText(r))
		}
	}
}

// statusItems is what an object result writes into status.items.
func statusItems(r ObjectResult) []StatusItem {
	items := make([]StatusItem, len(r.Status))
	for i, a := range r.Status {
		items[i] = StatusItem{Node: a.Node, EgressIP: a.EgressIP}
	}
	return items
}
