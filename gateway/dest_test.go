package gateway

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Destination rules of the tests: object "a" owns 203.0.113.0/24 and
// 2001:db8:a::/48, "b" owns 198.51.100.0/24 less 198.51.100.128/25 (an
// exclusion) and 2001:db8:b::/48. egressA and egressB are their egress
// IPs.
var (
	egressA  = netip.MustParseAddr("192.0.2.21")
	egressB  = netip.MustParseAddr("192.0.2.22")
	egressB6 = netip.MustParseAddr("2001:db8::22")
	egressF  = netip.MustParseAddr("192.0.2.23") // the fallback's

	dstA      = netip.MustParseAddr("203.0.113.9")
	dstB      = netip.MustParseAddr("198.51.100.9")
	dstB6     = netip.MustParseAddr("2001:db8:b::9")
	dstExcl   = netip.MustParseAddr("198.51.100.200")
	dstNoRule = netip.MustParseAddr("100.64.7.7")

	podDest   = netip.MustParseAddr("10.244.1.40") // node 1, rules "ab", no fallback
	podDestF  = netip.MustParseAddr("10.244.1.41") // node 1, rules "ab", fallback "f"
	podDest6  = netip.MustParseAddr("fd10:1::40")  // node 1, rules "ab", no fallback
	destRules = DestTable{Name: "a,b", Rules: []DestRule{
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Policy: "a"},
		{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Policy: "b"},
		{Prefix: netip.MustParsePrefix("198.51.100.128/25"), Exclude: true},
		{Prefix: netip.MustParsePrefix("2001:db8:a::/48"), Policy: "a"},
		{Prefix: netip.MustParsePrefix("2001:db8:b::/48"), Policy: "b"},
	}}
)

// destConfig is testConfig with the pods of destination rules "a,b" on
// node 1 and the policies a, b and f hosting the IPs given (nil: none
// here).
func destConfig(a, b, f []netip.Addr) Config {
	cfg := testConfig()
	cfg.Policies = append(cfg.Policies, Policy{Name: "a", EgressIPs: a}, Policy{Name: "b", EgressIPs: b}, Policy{Name: "f", EgressIPs: f})
	cfg.DestTables = []DestTable{destRules}
	cfg.Nodes[0].Pods = append(cfg.Nodes[0].Pods, Pod{Addr: podDest, Dest: "a,b"}, Pod{Addr: podDestF, Policy: "f", Dest: "a,b"},
		Pod{Addr: podDest6, Dest: "a,b"})
	return cfg
}

// sendBoth sends frame through f's processor on the batch path (with the
// new flows' prefetch) when batch, else on the one-frame path.
func sendBoth(t *testing.T, f *fixture, batch bool, frame []byte) (Result, []byte) {
	t.Helper()
	if !batch {
		return f.run(t, frame)
	}
	out := [][]byte{make([]byte, 2048)}
	res := make([]Result, 1)
	f.w.Process(testNow, [][]byte{frame}, out, res)
	if res[0].Verdict == VerdictTx {
		return res[0], out[0][:res[0].Len]
	}
	return res[0], nil
}

// snatSource is the source address of a frame the gateway sent out.
func snatSource(t *testing.T, out []byte) netip.Addr {
	t.Helper()
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ls := netLayers(p)
	if len(ls) != 1 {
		t.Fatalf("want one IP layer out, got %d", len(ls))
	}
	src, _, _ := ipOf(ls[0])
	return src
}

// TestDestPolicyNewFlows: a new flow of a pod with destination rules uses
// the egress IP of the policy owning its destination, its fallback where
// no rule decides, and is dropped as dest_not_owned where that policy has
// no egress IP here, the destination is excluded, or nothing decides it.
func TestDestPolicyNewFlows(t *testing.T) {
	cases := []struct {
		name    string
		a, b, f []netip.Addr
		pod     netip.Addr
		dst     netip.Addr
		want    netip.Addr // egress IP; invalid: dropped
		reason  DropReason // when dropped
	}{
		// The gateway hosts only b's IP: a worker pushing a's destination
		// here must not get b's IP.
		{"a_dest_on_b_gateway", nil, []netip.Addr{egressB}, nil, podDest, dstA, netip.Addr{}, DropDestNotOwned},
		{"a_dest_on_b_gateway_with_fallback", nil, []netip.Addr{egressB}, []netip.Addr{egressF}, podDestF, dstA, netip.Addr{}, DropDestNotOwned},
		{"b_dest_on_b_gateway", nil, []netip.Addr{egressB}, nil, podDest, dstB, egressB, 0},
		{"a_dest", []netip.Addr{egressA}, []netip.Addr{egressB}, nil, podDest, dstA, egressA, 0},
		{"excluded", []netip.Addr{egressA}, []netip.Addr{egressB}, []netip.Addr{egressF}, podDestF, dstExcl, netip.Addr{}, DropDestNotOwned},
		{"no_rule_no_fallback", []netip.Addr{egressA}, []netip.Addr{egressB}, []netip.Addr{egressF}, podDest, dstNoRule, netip.Addr{}, DropDestNotOwned},
		{"no_rule_fallback", []netip.Addr{egressA}, []netip.Addr{egressB}, []netip.Addr{egressF}, podDestF, dstNoRule, egressF, 0},
		{"no_rule_fallback_elsewhere", []netip.Addr{egressA}, []netip.Addr{egressB}, nil, podDestF, dstNoRule, netip.Addr{}, DropDestNotOwned},
		// b is hosted here, but with no IPv6 address: the family's usual drop.
		{"b_v6_dest_v4_only", nil, []netip.Addr{egressB}, nil, podDest6, dstB6, netip.Addr{}, DropNoEgressIP},
		{"b_v6_dest", nil, []netip.Addr{egressB, egressB6}, nil, podDest6, dstB6, egressB6, 0},
	}
	for _, c := range cases {
		for _, batch := range []bool{false, true} {
			name := c.name + map[bool]string{false: "/single", true: "/batch"}[batch]
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, 1024, destConfig(c.a, c.b, c.f))
				before := f.p.Stats()
				drops := func() uint64 { s := f.p.Stats(); return s.Drop(c.reason) - before.Drop(c.reason) }
				for _, proto := range []string{"udp", "tcp"} {
					p := pkt{src: c.pod, dst: c.dst, proto: proto, sport: 4000, dport: 443, flags: "S"}
					r, out := sendBoth(t, f, batch, tunnelFrame(t, podTun(), p.build(t)))
					if !c.want.IsValid() {
						if r.Verdict != VerdictDrop || r.Reason != c.reason {
							t.Fatalf("%s: got %v/%v, want drop/%v", proto, r.Verdict, r.Reason, c.reason)
						}
						continue
					}
					mustTx(t, r, outHop.Ifindex)
					if src := snatSource(t, out); src != c.want {
						t.Fatalf("%s: left as %v, want %v", proto, src, c.want)
					}
				}
				if !c.want.IsValid() {
					if n := f.ct.Len(); n != 0 {
						t.Errorf("%d flows after drops, want none", n)
					}
					if got := drops(); got != 2 {
						t.Errorf("%v counted %d times, want 2", c.reason, got)
					}
				}
			})
		}
	}
}

// TestDestEstablishedFlowKeepsEgressIP: when the rules give an established
// flow's destination to another object, or exclude it, the flow keeps its
// egress IP (the conntrack entry wins); a new flow to that destination
// follows the new rules.
func TestDestEstablishedFlowKeepsEgressIP(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "batch"}[batch], func(t *testing.T) {
			cfg := destConfig([]netip.Addr{egressA}, []netip.Addr{egressB}, nil)
			f := newFixture(t, 1024, cfg)
			send := func(sport uint16, flags string) (Result, []byte) {
				p := pkt{src: podDest, dst: dstA, proto: "tcp", sport: sport, dport: 443, flags: flags}
				return sendBoth(t, f, batch, tunnelFrame(t, podTun(), p.build(t)))
			}
			r, out := send(4000, "S")
			mustTx(t, r, outHop.Ifindex)
			if src := snatSource(t, out); src != egressA {
				t.Fatalf("SYN left as %v, want %v", src, egressA)
			}
			udp := func(sport uint16) (Result, []byte) {
				p := pkt{src: podDest, dst: dstA, proto: "udp", sport: sport, dport: 53}
				return sendBoth(t, f, batch, tunnelFrame(t, podTun(), p.build(t)))
			}
			if r, out := udp(5000); r.Verdict != VerdictTx || snatSource(t, out) != egressA {
				t.Fatalf("UDP flow: %v/%v", r.Verdict, r.Reason)
			}

			for i, change := range []struct {
				name    string
				rule    DestRule
				newFlow netip.Addr // invalid: dropped as dest_not_owned
			}{
				{"moved_to_b", DestRule{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Policy: "b"}, egressB},
				{"excluded", DestRule{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Exclude: true}, netip.Addr{}},
			} {
				c := cfg
				c.DestTables = []DestTable{{Name: "a,b", Rules: append([]DestRule{change.rule}, destRules.Rules[1:]...)}}
				s, err := NewSnapshot(c)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.p.Swap(s); err != nil {
					t.Fatal(err)
				}
				moved := movedOf(f)
				r, out := send(4000, "A")
				mustTx(t, r, outHop.Ifindex)
				if src := snatSource(t, out); src != egressA {
					t.Errorf("%s: established TCP flow left as %v, want its own %v", change.name, src, egressA)
				}
				if r, out := udp(5000); r.Verdict != VerdictTx || snatSource(t, out) != egressA {
					t.Errorf("%s: established UDP flow: %v/%v, want tx as %v", change.name, r.Verdict, r.Reason, egressA)
				}
				if got := movedOf(f); got != moved {
					t.Errorf("%s: %d flows moved, want none", change.name, got-moved)
				}
				r, out = send(4001+uint16(i), "S")
				switch {
				case !change.newFlow.IsValid():
					if r.Verdict != VerdictDrop || r.Reason != DropDestNotOwned {
						t.Errorf("%s: new flow %v/%v, want drop/dest_not_owned", change.name, r.Verdict, r.Reason)
					}
				case r.Verdict != VerdictTx:
					t.Errorf("%s: new flow %v/%v, want tx", change.name, r.Verdict, r.Reason)
				case snatSource(t, out) != change.newFlow:
					t.Errorf("%s: new flow left as %v, want %v", change.name, snatSource(t, out), change.newFlow)
				}
			}
		})
	}
}

// TestDestFlowMovesWhenIPLeaves: an established flow whose egress IP is no
// longer hosted here for any of the pod's policies is retired as any
// other, and a UDP packet of it opens a flow on the policy the rules now
// give its destination; a policy with no IP here keeps the flow (in
// transit) and drops the packet as dest_not_owned.
func TestDestFlowMovesWhenIPLeaves(t *testing.T) {
	cfg := destConfig([]netip.Addr{egressA}, []netip.Addr{egressB}, nil)
	f := newFixture(t, 1024, cfg)
	udp := func() (Result, []byte) {
		p := pkt{src: podDest, dst: dstA, proto: "udp", sport: 5000, dport: 53}
		return f.run(t, tunnelFrame(t, podTun(), p.build(t)))
	}
	if r, out := udp(); r.Verdict != VerdictTx || snatSource(t, out) != egressA {
		t.Fatalf("first packet: %v/%v", r.Verdict, r.Reason)
	}
	swap := func(c Config) {
		s, err := NewSnapshot(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.p.Swap(s); err != nil {
			t.Fatal(err)
		}
	}
	// a's IP leaves this gateway: the flow is kept for its new owner.
	swap(destConfig(nil, []netip.Addr{egressB}, nil))
	if r, _ := udp(); r.Verdict != VerdictDrop || r.Reason != DropDestNotOwned {
		t.Fatalf("a's IP gone: %v/%v, want drop/dest_not_owned", r.Verdict, r.Reason)
	}
	if f.ct.Len() != 1 {
		t.Fatalf("%d flows, want the in-transit flow kept", f.ct.Len())
	}
	// The rules now give the destination to b: the flow moves to b's IP.
	c := destConfig(nil, []netip.Addr{egressB}, nil)
	c.DestTables = []DestTable{{Name: "a,b", Rules: append([]DestRule{{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Policy: "b"}}, destRules.Rules[1:]...)}}
	swap(c)
	moved := movedOf(f)
	if r, out := udp(); r.Verdict != VerdictTx || snatSource(t, out) != egressB {
		t.Fatalf("after the move: %v/%v, want tx as %v", r.Verdict, r.Reason, egressB)
	}
	if got := movedOf(f) - moved; got != 1 {
		t.Errorf("%d flows moved, want 1", got)
	}
}

// TestDestTableChoose checks the compiled tables against a plain
// longest-prefix match over the rules, on random rules and addresses from
// a fixed seed, both families.
func TestDestTableChoose(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 1))
	policyIdx := map[string]int32{"p0": 0, "p1": 1, "p2": 2}
	for round := range 200 {
		var rules []DestRule
		seen := map[netip.Prefix]bool{}
		n := rng.IntN(40)
		// Addresses from a few small neighbourhoods, so that rules nest,
		// touch and share edges.
		base4 := [4]byte{byte(rng.IntN(3)) * 127, 0, 0, 0}
		for range n {
			var p netip.Prefix
			if rng.IntN(2) == 0 {
				b := base4
				b[1], b[2], b[3] = byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))
				p = netip.PrefixFrom(netip.AddrFrom4(b), rng.IntN(33)).Masked()
			} else {
				var b [16]byte
				b[0], b[1], b[15] = 0x20, byte(rng.IntN(4)), byte(rng.IntN(256))
				if rng.IntN(4) == 0 {
					b = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, byte(rng.IntN(256))}
				}
				p = netip.PrefixFrom(netip.AddrFrom16(b), rng.IntN(129)).Masked()
			}
			if seen[p] {
				continue
			}
			seen[p] = true
			r := DestRule{Prefix: p, Policy: []string{"p0", "p1", "p2"}[rng.IntN(3)]}
			if rng.IntN(4) == 0 {
				r = DestRule{Prefix: p, Exclude: true}
			}
			rules = append(rules, r)
		}
		d, err := newSnapDest(DestTable{Name: "t", Rules: rules}, policyIdx)
		if err != nil {
			t.Fatal(err)
		}
		want := func(a netip.Addr) int32 {
			best, v := -1, destNoRule
			for _, r := range rules {
				if r.Prefix.Contains(a) && r.Prefix.Bits() > best {
					best, v = r.Prefix.Bits(), destExcluded
					if !r.Exclude {
						v = policyIdx[r.Policy]
					}
				}
			}
			return v
		}
		probe := func(a netip.Addr) {
			k := a.As16()
			if got, w := d.choose(&k, a.Is4()), want(a); got != w {
				t.Fatalf("round %d: %v → %d, want %d (rules %v)", round, a, got, w, rules)
			}
		}
		// Every rule's edges and their neighbours, and random addresses.
		for _, r := range rules {
			lo := r.Prefix.Addr()
			hi := lastAddr(r.Prefix)
			for _, a := range []netip.Addr{lo, lo.Prev(), hi, hi.Next()} {
				if a.IsValid() && a.Is4() == lo.Is4() {
					probe(a)
				}
			}
		}
		for range 200 {
			b := base4
			b[1], b[2], b[3] = byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))
			probe(netip.AddrFrom4(b))
			var b6 [16]byte
			b6[0], b6[1], b6[15] = 0x20, byte(rng.IntN(4)), byte(rng.IntN(256))
			probe(netip.AddrFrom16(b6))
		}
		probe(netip.MustParseAddr("0.0.0.0"))
		probe(netip.MustParseAddr("255.255.255.255"))
		probe(netip.MustParseAddr("::"))
		probe(netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
	}
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestDestTableErrors: a snapshot refuses bad destination tables, with a
// message naming the table.
func TestDestTableErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
	}{
		{"unmasked", func(c *Config) { c.DestTables[0].Rules[0].Prefix = netip.MustParsePrefix("203.0.113.1/24") }},
		{"twice", func(c *Config) { c.DestTables[0].Rules[1].Prefix = c.DestTables[0].Rules[0].Prefix }},
		{"unknown_policy", func(c *Config) { c.DestTables[0].Rules[0].Policy = "nope" }},
		{"exclude_with_policy", func(c *Config) { c.DestTables[0].Rules[2].Policy = "a" }},
		{"no_name", func(c *Config) { c.DestTables[0].Name = "" }},
		{"table_twice", func(c *Config) { c.DestTables = append(c.DestTables, c.DestTables[0]) }},
		{"unknown_table", func(c *Config) { c.Nodes[0].Pods[len(c.Nodes[0].Pods)-1].Dest = "x" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := destConfig(nil, []netip.Addr{egressB}, nil)
			cfg.DestTables = []DestTable{{Name: destRules.Name, Rules: append([]DestRule(nil), destRules.Rules...)}}
			c.mod(&cfg)
			if _, err := NewSnapshot(cfg); err == nil {
				t.Fatal("accepted")
			} else {
				t.Log(err)
			}
		})
	}
}

func movedOf(f *fixture) uint64 {
	s := f.p.Stats()
	return s.Count(CounterFlowsMoved)
}
