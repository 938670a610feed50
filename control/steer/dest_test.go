package steer

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/internal/nsenter"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// traffic is an EgressIPTraffic labelled app=<label>, an exclusion when
// exclude.
func traffic(name, label string, exclude bool, nets ...string) *egressv1.EgressIPTraffic {
	t := &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": label}}}
	if exclude {
		t.Annotations = map[string]string{egressv1.AnnotationExclude: "true"}
	}
	t.Spec.DestinationNetworks = nets
	return t
}

// destInputs: pod blue/p1 selected by a (203.0.113.0/24 and
// 2001:db8:100::/64, egress IPs on g1) and b (198.51.100.0/24 less
// 198.51.100.99/32, egress IP on g2), both with a trafficSelector.
func destInputs() Inputs {
	in := testInputs()
	in.NodeKnown = true
	a := eip("a", match("team", "blue"), metav1.LabelSelector{}, []string{"192.0.2.101", "2001:db8:f::101"},
		"g1", "192.0.2.101", "g1", "2001:db8:f::101")
	a.Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	b := eip("b", match("team", "blue"), metav1.LabelSelector{}, []string{"192.0.2.102"}, "g2", "192.0.2.102")
	b.Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}}
	in.EgressIPs = []*egressv1.EgressIP{a, b}
	in.Traffic = []*egressv1.EgressIPTraffic{
		traffic("ta", "a", false, "203.0.113.0/24", "2001:db8:100::/64"),
		traffic("tb", "b", false, "198.51.100.0/24"),
		traffic("tx", "b", true, "198.51.100.99/32"),
	}
	return in
}

// markOf is the mark st gives object name's table.
func markOf(t *testing.T, st State, name string) uint32 {
	t.Helper()
	for _, o := range st.Objects {
		if o.Name != name {
			continue
		}
		for _, m := range st.Marks {
			if m.Table == o.Table {
				return m.Mark
			}
		}
	}
	t.Fatalf("no mark for %s in %+v / %+v", name, st.Objects, st.Marks)
	return 0
}

func TestDesiredByDestination(t *testing.T) {
	m := marks{DefaultMarkMask}
	st := desired(destInputs(), params)
	if len(st.Problems) != 0 {
		t.Fatalf("problems: %v", st.Problems)
	}
	if len(st.Rules) != 0 {
		t.Fatalf("rules %+v: a pod classified by destination needs no rule per address", st.Rules)
	}
	if !slices.Equal(st.Selected, []netip.Addr{podIP4, podIP6}) {
		t.Fatalf("Selected = %v: the filter must hold the classified pod in", st.Selected)
	}
	if len(st.Classes) != 1 || len(st.Classified) != 2 || st.Classified[0].Class != st.Classes[0].ID || st.Classified[1].Class != st.Classes[0].ID {
		t.Fatalf("classes %+v, classified %+v: want one class for both addresses", st.Classes, st.Classified)
	}
	if st.Classes[0].Key != "a,b" {
		t.Fatalf("class key %q, want a,b", st.Classes[0].Key)
	}
	if len(st.Marks) != 2 || len(st.Objects) != 2 {
		t.Fatalf("marks %+v objects %+v: want one mark and table per object", st.Marks, st.Objects)
	}
	ma, mb := markOf(t, st, "a"), markOf(t, st, "b")
	if ma == mb || ma&^m.mask != 0 || mb&^m.mask != 0 || ma == m.node() || ma == m.drop() {
		t.Fatalf("marks a %#x b %#x: want distinct object marks under %#x", ma, mb, m.mask)
	}
	iv := st.Classes[0].Intervals
	for _, c := range []struct {
		dst  string
		want uint32
	}{
		{"203.0.113.10", ma}, {"203.0.113.255", ma}, {"2001:db8:100::10", ma},
		{"198.51.100.10", mb}, {"198.51.100.98", mb}, {"198.51.100.100", mb},
		{"198.51.100.99", m.node()},                          // b's exclusion: the node, b says nothing
		{"8.8.8.8", m.node()}, {"2001:db8:200::1", m.node()}, // no rule, no fallback: the node
	} {
		if got := lookup(iv, addr(c.dst)); got != c.want {
			t.Errorf("%s: mark %#x, want %#x", c.dst, got, c.want)
		}
	}
	// Both families' default routes in both tables: a is dual-stack; b
	// has no IPv6 egress IP and blocks, so its table holds IPv6 in.
	if r := findRoute(t, st, st.Objects[1].Table, "::/0"); r.Type != RouteBlackhole {
		t.Fatalf("b's IPv6 route %+v, want blackhole", r)
	}

	t.Run("exclusion of a block-mode object", func(t *testing.T) {
		in := destInputs()
		in.EgressIPs[1].Annotations = map[string]string{egressv1.AnnotationNoEgressIP: NoEgressIPBlock}
		st := desired(in, params)
		iv := st.Classes[0].Intervals
		if got := lookup(iv, addr("198.51.100.99")); got != m.drop() {
			t.Fatalf("excluded destination: mark %#x, want drop %#x", got, m.drop())
		}
		// b has no IPv6 egress IP and leaves IPv6 to the node; there is
		// no IPv6 rule of b, so nothing changes for IPv6.
		if got := lookup(iv, addr("198.51.100.10")); got != markOf(t, st, "b") {
			t.Fatalf("b's destination: mark %#x", got)
		}
	})

	t.Run("fallback object", func(t *testing.T) {
		in := destInputs()
		in.EgressIPs = append(in.EgressIPs, eip("c", match("team", "blue"), metav1.LabelSelector{}, []string{"192.0.2.103"}, "g1", "192.0.2.103"))
		st := desired(in, params)
		mc := markOf(t, st, "c")
		iv := st.Classes[0].Intervals
		for dst, want := range map[string]uint32{"8.8.8.8": mc, "203.0.113.10": markOf(t, st, "a"), "198.51.100.99": m.node()} {
			if got := lookup(iv, addr(dst)); got != want {
				t.Errorf("%s: mark %#x, want %#x", dst, got, want)
			}
		}
		// c has no IPv6 egress IP and blocks: IPv6 to it goes to its
		// table, whose route is a blackhole.
		if got := lookup(iv, addr("2001:db8:200::1")); got != mc {
			t.Errorf("IPv6 fallback: mark %#x, want c's %#x", got, mc)
		}
		if len(st.Rules) != 0 {
			t.Fatalf("rules %+v: the fallback is a mark too", st.Rules)
		}
	})

	t.Run("pod without Dest unchanged", func(t *testing.T) {
		in := destInputs()
		in.EgressIPs[0].Spec.TrafficSelector = nil
		in.EgressIPs = in.EgressIPs[:1]
		st := desired(in, params)
		if len(st.Classes)+len(st.Classified)+len(st.Marks) != 0 || len(st.Rules) != 2 {
			t.Fatalf("classes %+v marks %+v rules %+v: want today's rule per address", st.Classes, st.Marks, st.Rules)
		}
	})

	t.Run("marks are stable", func(t *testing.T) {
		in := destInputs()
		in.EgressIPs = append(in.EgressIPs, eip("c", match("team", "red"), metav1.LabelSelector{}, []string{"192.0.2.103"}, "g1", "192.0.2.103"))
		in.EgressIPs[2].Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
		in.Namespaces["red"] = map[string]string{"team": "red"}
		in.Pods = append(in.Pods, Pod{Namespace: "red", Name: "p2", Node: "w1", IPs: []netip.Addr{addr("198.18.1.7")}})
		st2 := desired(in, params)
		if markOf(t, st2, "a") != ma || markOf(t, st2, "b") != mb || len(st2.Classes) != 2 {
			t.Fatalf("marks moved or classes %+v: a %#x→%#x", st2.Classes, ma, markOf(t, st2, "a"))
		}
	})
}

// TestFlattenMatchesChoose: for random Dests and destinations, the
// flattened intervals give the mark of the rule Dest.Choose picks.
func TestFlattenMatchesChoose(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	owners := []string{"a", "b", "c"}
	mark := map[string]uint32{"a": 0x30000, "b": 0x40000, "c": 0x50000}
	const excluded, fallback = 0x20000, 0x60000
	randAddr := func(f int) netip.Addr {
		if f == 0 {
			// A small space so prefixes nest and touch often.
			return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}
		var b [16]byte
		b[0], b[1], b[2] = 0x20, 0x01, byte(rng.IntN(4))
		b[3] = byte(rng.IntN(256))
		return netip.AddrFrom16(b)
	}
	for round := range 500 {
		d := &plan.Dest{Key: fmt.Sprint(round)}
		if rng.IntN(2) == 0 {
			d.Fallback = "f"
		}
		seen := map[netip.Prefix]bool{}
		for range rng.IntN(40) {
			f := rng.IntN(2)
			bits := 6 + rng.IntN(27)
			if f == 1 {
				bits = 8 + rng.IntN(40)
			}
			if rng.IntN(10) == 0 {
				bits = 0
			}
			p := netip.PrefixFrom(randAddr(f), bits).Masked()
			if seen[p] {
				continue
			}
			seen[p] = true
			d.Rules = append(d.Rules, plan.DestRule{Prefix: p, Owner: owners[rng.IntN(3)], Exclude: rng.IntN(4) == 0})
		}
		slices.SortFunc(d.Rules, func(a, b plan.DestRule) int { return prefixCmp(a.Prefix, b.Prefix) })
		verdict := func(r plan.DestRule, ok bool) uint32 {
			switch {
			case !ok && d.Fallback != "":
				return fallback
			case !ok:
				return 0
			case r.Exclude:
				return excluded
			}
			return mark[r.Owner]
		}
		var ivs []Interval
		for f := range 2 {
			ivs = append(ivs, flatten(d, f, verdict)...)
		}
		for i := 1; i < len(ivs); i++ {
			if ivs[i-1].To.Compare(ivs[i].From) >= 0 || ivs[i].From.Compare(ivs[i].To) > 0 {
				t.Fatalf("round %d: intervals %v and %v overlap or are reversed", round, ivs[i-1], ivs[i])
			}
			if ivs[i-1].To.Next() == ivs[i].From && ivs[i-1].Mark == ivs[i].Mark {
				t.Fatalf("round %d: neighbours %v and %v not merged", round, ivs[i-1], ivs[i])
			}
		}
		// Every boundary and its neighbours, and random addresses.
		var probes []netip.Addr
		for _, r := range d.Rules {
			first, last := r.Prefix.Addr(), lastAddr(r.Prefix)
			probes = append(probes, first, first.Prev(), last, last.Next())
		}
		for range 200 {
			probes = append(probes, randAddr(rng.IntN(2)))
		}
		probes = append(probes, netip.IPv4Unspecified(), addr("255.255.255.255"), netip.IPv6Unspecified(), addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
		for _, a := range probes {
			if !a.IsValid() {
				continue
			}
			r, ok := d.Choose(a)
			if got, want := lookup(ivs, a), verdict(r, ok); got != want {
				t.Fatalf("round %d: %v gets %#x from the intervals, %#x from Choose (%+v %v)\nrules %+v\nintervals %v", round, a, got, want, r, ok, d.Rules, ivs)
			}
		}
	}
}

// TestClassElementsRoundTrip: what Apply writes to a class's maps reads
// back as the same intervals.
func TestClassElementsRoundTrip(t *testing.T) {
	m := marks{DefaultMarkMask}
	ivs := []Interval{
		{addr("0.0.0.0"), addr("9.255.255.255"), m.node()},
		{addr("10.0.0.0"), addr("10.0.0.255"), m.value(3)},
		{addr("10.0.2.0"), addr("10.0.2.0"), m.drop()},
		{addr("10.0.2.1"), addr("10.0.3.255"), m.value(4)},
		{addr("200.0.0.0"), addr("255.255.255.255"), m.value(3)},
		{addr("::"), addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), m.node()},
	}
	var got []Interval
	for f := range 2 {
		got = append(got, readIntervals(classElements(ivs, f), f)...)
	}
	if !slices.Equal(got, ivs) {
		t.Fatalf("read back %v\nwant %v", got, ivs)
	}
}

// destCount sorts the uplink's frames by (inner) destination port: tunnel
// frames by gateway VTEP, plain ones by whether the node masqueraded them.
type destCount struct{ g1, g2, node, other map[uint16]int }

func countDest(frames []frame) destCount {
	c := destCount{map[uint16]int{}, map[uint16]int{}, map[uint16]int{}, map[uint16]int{}}
	for _, f := range frames {
		switch {
		case f.vxlan && f.dst == g1VTEP:
			c.g1[f.inDport]++
		case f.vxlan && f.dst == g2VTEP:
			c.g2[f.inDport]++
		case f.vxlan || f.dport < 6000 || f.dport >= 7000:
			// Not a probe of this test.
		case f.src == nodeVTEP || f.src == nodeIP6:
			c.node[f.dport]++
		default:
			c.other[f.dport]++
		}
	}
	return c
}

// waitDest collects the uplink's frames until done says they are all
// there, or a few seconds passed (IPv6 waits for neighbour discovery).
func waitDest(up *capturer, done func(destCount) bool) destCount {
	total := destCount{map[uint16]int{}, map[uint16]int{}, map[uint16]int{}, map[uint16]int{}}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		c := countDest(up.take())
		for _, m := range [][2]map[uint16]int{{c.g1, total.g1}, {c.g2, total.g2}, {c.node, total.node}, {c.other, total.other}} {
			for k, v := range m[0] {
				m[1][k] += v
			}
		}
		if done(total) {
			break
		}
	}
	return total
}

// TestByDestinationInNetns: a pod selected by a (203.0.113.0/24, IPv6
// 2001:db8:100::/64, on g1) and b (198.51.100.0/24 less 198.51.100.99, on
// g2) sends each destination to its object's gateway, the exclusion is
// dropped and counted (b's annotation says block) or leaves as the node
// (b says nothing: an exclusion's default), and a destination nobody claims leaves as the node. When the
// destinations change, a flow already established keeps its gateway (its
// conntrack mark) while a new flow to the same destination follows the
// change.
func TestByDestinationInNetns(t *testing.T) {
	requirePrivileged(t)
	l := fcLab(t)
	cfg := testConfig()
	cfg.PodCIDRs = fcPodNets
	k := setupKernel(t, cfg, l.nodeH)
	uplink := capture(t, l.nodeH, "eth0")
	apply := func(in Inputs) Changes {
		t.Helper()
		st := desired(in, k.Params())
		if len(st.Problems) != 0 {
			t.Fatalf("problems: %v", st.Problems)
		}
		ch, err := k.Apply(st)
		if err != nil {
			t.Fatal(err)
		}
		// Read back, the kernel matches: a second Apply changes nothing.
		if ch, err := k.Apply(st); err != nil || !ch.Zero() {
			t.Fatalf("second Apply: %v, %v; want no change", ch, err)
		}
		return ch
	}
	a4, b4, x4, none4 := addr("203.0.113.10"), addr("198.51.100.10"), addr("198.51.100.99"), addr("100.64.0.1")
	a6 := addr("2001:db8:100::10")

	t.Run("by destination", func(t *testing.T) {
		in := destInputs()
		in.EgressIPs[1].Annotations = map[string]string{egressv1.AnnotationNoEgressIP: NoEgressIPBlock}
		apply(in)
		before, _ := k.Drops()
		sendUDPPort(t, l.podH, podIP4, a4, ports(41000, 2), 6000)
		sendUDPPort(t, l.podH, podIP4, b4, ports(41000, 2), 6001)
		sendUDPPort(t, l.podH, podIP4, x4, ports(41000, 2), 6002)
		sendUDPPort(t, l.podH, podIP4, none4, ports(41000, 2), 6003)
		sendUDPPort(t, l.podH, podIP6, a6, ports(41000, 2), 6004)
		c := waitDest(uplink, func(c destCount) bool { return c.g1[6004] >= 2 && c.node[6003] >= 2 })
		if c.g1[6000] != 2 || c.g2[6000]+c.node[6000]+c.other[6000] != 0 {
			t.Errorf("to %v: %+v, want 2 frames to g1", a4, c)
		}
		if c.g2[6001] != 2 || c.g1[6001]+c.node[6001]+c.other[6001] != 0 {
			t.Errorf("to %v: %+v, want 2 frames to g2", b4, c)
		}
		if c.g1[6002]+c.g2[6002]+c.node[6002]+c.other[6002] != 0 {
			t.Errorf("to the excluded %v: %+v, want nothing (b blocks)", x4, c)
		}
		if c.node[6003] != 2 || c.g1[6003]+c.g2[6003]+c.other[6003] != 0 {
			t.Errorf("to %v, claimed by nobody: %+v, want 2 frames as the node", none4, c)
		}
		if c.g1[6004] != 2 {
			t.Errorf("to %v: %+v, want 2 frames to g1", a6, c)
		}
		if after, _ := k.Drops(); after < before+2 {
			t.Errorf("drops rose by %d, want ≥ 2 for the excluded destination", after-before)
		}
	})

	t.Run("one more pod is two elements", func(t *testing.T) {
		apply(destInputs()) // b without the block annotation of the step before
		in := destInputs()
		in.Pods = append(in.Pods, Pod{Namespace: "blue", Name: "p2", Node: "w1", IPs: []netip.Addr{addr("198.18.1.5")}})
		if ch := apply(in); ch != (Changes{Added: 2}) {
			t.Fatalf("one more pod: %v, want 2 added (sel and class4)", ch)
		}
		if ch := apply(destInputs()); ch != (Changes{Removed: 2}) {
			t.Fatalf("one pod less: %v, want 2 removed", ch)
		}
	})

	t.Run("reply from a gateway reaches the pod", func(t *testing.T) {
		// Strict reverse-path filtering: the pod has no rule whose
		// reverse lookup would find the tunnel; the reply's restored
		// mark leads it there.
		sh(t, "ip", "netns", "exec", l.node, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.default.rp_filter=1",
			"net.ipv4.conf."+cfg.Device+".rp_filter=1")
		apply(destInputs())
		sendUDPPort(t, l.podH, podIP4, a4, []uint16{45000}, 9999)
		if c := waitDest(uplink, func(c destCount) bool { return c.g1[9999] >= 1 }); c.g1[9999] != 1 {
			t.Fatalf("request: %+v, want it to g1", c)
		}
		pc, err := listenUDP(l.podH, netip.AddrPortFrom(podIP4, 45000))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		frame := vxlanReply(cfg.VNI, k.TunnelMAC(), cluster.VTEPMAC(g1VTEP), a4, podIP4, 9999, 45000, []byte("reply"))
		if err := nsenter.Do(l.g1H, func() error {
			return writeUDP(netip.AddrPort{}, netip.AddrPortFrom(nodeVTEP, DefaultPort), frame, 1)
		}); err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 100)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("pod got no reply through the tunnel: %v", err)
		}
		if string(buf[:n]) != "reply" || from.(*net.UDPAddr).AddrPort() != netip.AddrPortFrom(a4, 9999) {
			t.Fatalf("pod got %q from %v", buf[:n], from)
		}
	})

	t.Run("exclusion leaves as the node", func(t *testing.T) {
		apply(destInputs())
		sendUDPPort(t, l.podH, podIP4, x4, ports(41100, 2), 6102)
		sendUDPPort(t, l.podH, podIP4, b4, ports(41100, 2), 6101)
		// The flows dropped before, retried with the same ports: a
		// dropped first packet leaves no conntrack entry (never
		// confirmed), so they are decided again and leave now too.
		sendUDPPort(t, l.podH, podIP4, x4, ports(41000, 2), 6002)
		c := waitDest(uplink, func(c destCount) bool { return c.node[6102] >= 2 && c.g2[6101] >= 2 && c.node[6002] >= 2 })
		if c.node[6002] != 2 {
			t.Errorf("the dropped flows retried: %+v, want 2 frames as the node", c)
		}
		if c.node[6102] != 2 || c.g1[6102]+c.g2[6102]+c.other[6102] != 0 {
			t.Errorf("to the excluded %v: %+v, want 2 frames as the node", x4, c)
		}
		if c.g2[6101] != 2 {
			t.Errorf("to %v: %+v, want 2 frames to g2", b4, c)
		}
	})

	t.Run("established flows keep their gateway", func(t *testing.T) {
		apply(destInputs())
		old := ports(42000, 1)
		sendUDPPort(t, l.podH, podIP4, a4, old, 6200)
		if c := waitDest(uplink, func(c destCount) bool { return c.g1[6200] >= 1 }); c.g1[6200] != 1 {
			t.Fatalf("first packet: %+v, want it to g1", c)
		}
		// b now claims 203.0.113.0/25: longer than a's /24, it decides
		// 203.0.113.10.
		in := destInputs()
		in.Traffic = append(in.Traffic, traffic("tb2", "b", false, "203.0.113.0/25"))
		// Incremental: one class's IPv4 map, nothing else.
		if ch := apply(in); ch != (Changes{Updated: 1}) {
			t.Fatalf("one more network: %v, want the class updated and nothing else", ch)
		}
		sendUDPPort(t, l.podH, podIP4, a4, old, 6200)             // the same flow
		sendUDPPort(t, l.podH, podIP4, a4, ports(42001, 1), 6200) // a new one
		c := waitDest(uplink, func(c destCount) bool { return c.g1[6200] >= 1 && c.g2[6200] >= 1 })
		if c.g1[6200] != 1 || c.g2[6200] != 1 || c.node[6200]+c.other[6200] != 0 {
			t.Fatalf("after the change: %+v, want the old flow on g1 and the new one on g2", c)
		}
	})

	t.Run("a new markMask replaces the marks", func(t *testing.T) {
		k.cfg.MarkMask, k.nft.mask = 0x00ff0000, 0x00ff0000 // as a restart with the new setting
		if err := k.Setup(); err != nil {
			t.Fatal(err)
		}
		apply(destInputs())
		m, stale, err := k.markRules()
		if err != nil || len(stale) != 0 || len(m[0]) != 2 || len(m[1]) != 2 {
			t.Fatalf("rules %+v, stale %+v, %v: want two per family under the new mask", m, stale, err)
		}
		for _, r := range m[0] {
			if r.Mark&^0x00ff0000 != 0 {
				t.Fatalf("mark %#x outside the new mask", r.Mark)
			}
		}
		sendUDPPort(t, l.podH, podIP4, b4, ports(43000, 2), 6300)
		if c := waitDest(uplink, func(c destCount) bool { return c.g2[6300] >= 2 }); c.g2[6300] != 2 {
			t.Fatalf("to %v under the new mask: %+v, want 2 frames to g2", b4, c)
		}
	})

	t.Run("a restarted agent finds its classification", func(t *testing.T) {
		k2 := setupKernel(t, k.cfg, l.nodeH)
		if ch, err := k2.Apply(desired(destInputs(), k2.Params())); err != nil || !ch.Zero() {
			t.Fatalf("first Apply after a restart: %v, %v; want no change", ch, err)
		}
	})

	t.Run("cleanup removes the mark rules", func(t *testing.T) {
		if err := k.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if m, _, err := k.markRules(); err != nil || len(m[0])+len(m[1]) != 0 {
			t.Fatalf("after cleanup: %+v, %v", m, err)
		}
	})
}

func TestConfigMarkMask(t *testing.T) {
	p := t.TempDir() + "/steer.yaml"
	if err := os.WriteFile(p, []byte("underlay: eth0\nmarkMask: 0x00ff0000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.MarkMask != 0x00ff0000 {
		t.Fatalf("markMask %#x, want 0x00ff0000 from hex YAML", c.MarkMask)
	}
	if got := (Config{Underlay: "eth0"}).WithDefaults().MarkMask; got != DefaultMarkMask {
		t.Fatalf("default markMask %#x", got)
	}
	for mask, ok := range map[uint32]bool{DefaultMarkMask: true, 0x3: true, 0xffffffff: true, 0x0f0f0000: false, 0x10000: false, 0x30000: true, 0x70000: true} {
		c := Config{Underlay: "eth0", MarkMask: mask}.WithDefaults()
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("markMask %#x: %v, want valid %v", mask, err, ok)
		}
	}
}

// lookup is the mark intervals give a (0 when none covers it).
func lookup(intervals []Interval, a netip.Addr) uint32 {
	i, found := slices.BinarySearchFunc(intervals, a, func(iv Interval, a netip.Addr) int {
		if iv.To.Compare(a) < 0 {
			return -1
		}
		if iv.From.Compare(a) > 0 {
			return 1
		}
		return 0
	})
	if !found {
		return 0
	}
	return intervals[i].Mark
}
