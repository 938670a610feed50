package gateway

import (
	"net/netip"
	"testing"
)

// TestDeniedDestinations: a pod cannot open a flow to any default class of
// denied destination, to a node or the gateway itself, or to a configured
// node network; the allow list overrides; other destinations pass.
func TestDeniedDestinations(t *testing.T) {
	cfg := testConfig()
	cfg.DeniedDestinations = []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16"), netip.MustParsePrefix("fd20::/48")}
	cfg.AllowedDestinations = []netip.Prefix{netip.MustParsePrefix("10.10.5.0/24"), netip.MustParsePrefix("169.254.1.1/32")}
	cases := []struct {
		dst  string
		deny bool
	}{
		{"169.254.169.254", true}, // cloud metadata
		{"169.254.7.1", true},     // link-local
		{"fe80::1", true},
		{"127.0.0.1", true},
		{"::1", true},         // (already dropped at decode, as bad_address)
		{"224.0.0.251", true}, // multicast
		{"ff02::fb", true},
		{"255.255.255.255", true}, // broadcast
		{"240.1.2.3", true},       // reserved
		{"0.1.2.3", true},         // "this network"
		{"192.0.0.9", true},       // IETF protocol assignments
		{"::ffff:1.2.3.4", true},  // IPv4-mapped as an IPv6 destination (bad_address at decode too)
		{"100::1", true},          // discard-only
		{"fd00:ec2::254", true},   // AWS metadata over IPv6
		{"fd00:ec2::23", true},    // AWS DNS over IPv6 (the whole fd00:ec2::/32)
		{"fd00:ec2::123", true},   // AWS NTP over IPv6
		{"100.100.100.200", true}, // Alibaba Cloud metadata
		// NAT64 (RFC 6052): the embedded IPv4 address decides.
		{"64:ff9b::a9fe:a9fe", true},             // 169.254.169.254 via the well-known /96
		{"64:ff9b::7f00:1", true},                // 127.0.0.1
		{"64:ff9b::a00:2", true},                 // a node (10.0.0.2)
		{"64:ff9b::a0a:304", true},               // a configured node network (10.10.3.4)
		{"64:ff9b::6464:64c8", true},             // Alibaba metadata
		{"64:ff9b:1:a9fe:a9:fe00::", true},       // 169.254.169.254 via the local-use /48 (u-octet skipped)
		{"64:ff9b:1:a9fe:ffa9:fe01:203:0", true}, // same, whatever the u-octet and the suffix hold
		{"64:ff9b:1:a0a:4:600::", true},          // 10.10.4.6 via the /48
		{"64:ff9b::a0a:506", false},              // 10.10.5.6, allowed inside a node network
		{"64:ff9b::c633:6414", false},            // 198.51.100.20: NAT64 to an allowed address stays allowed
		{"64:ff9b:1:c633:64:1400::", false},      // the same via the /48
		{"64:ff9b:2::a9fe:a9fe", false},          // outside both NAT64 prefixes
		{"100.100.100.201", false},
		{"fd00:ec3::254", false},
		{"10.0.0.2", true},  // a node (its VTEP)
		{"10.0.0.1", true},  // the gateway itself
		{"10.10.3.4", true}, // a configured node network
		{"fd20::9", true},
		{"10.10.5.6", false},   // allowed inside a node network
		{"169.254.1.1", false}, // allowed inside the link-local range
		{"198.51.100.20", false},
		{"10.0.1.3", false},
		{"2001:db8:ffff::20", false},
		{"fd21::9", false},
		{"2001:db8:ffff::a9fe:a9fe", false}, // the metadata address's bits outside a NAT64 prefix
	}
	for _, c := range cases {
		t.Run(c.dst, func(t *testing.T) {
			f := newFixture(t, 64, cfg)
			dst := netip.MustParseAddr(c.dst)
			src := pod1v4
			if dst.Is6() {
				src = pod1v6
			}
			r, _ := f.run(t, tunnelFrame(t, podTun(), udpFrom(src, dst).build(t)))
			// egret trace's answer is the pipeline's.
			if v := CheckDestination(&cfg, dst); v.Denied != c.deny {
				t.Fatalf("CheckDestination says denied=%v (%+v), the pipeline's list %v", v.Denied, v, c.deny)
			}
			if c.deny {
				if r.Verdict == VerdictDrop && r.Reason == DropBadAddress && dst.Is6() && (dst.IsLoopback() || dst.Is4In6()) {
					return // decode refuses these before the deny-list sees them
				}
				if r.Verdict != VerdictDrop || r.Reason != DropDeniedDestination {
					t.Fatalf("verdict %v reason %v, want drop denied_destination", r.Verdict, r.Reason)
				}
				if st := f.p.Stats(); st.Drop(DropDeniedDestination) != 1 {
					t.Fatalf("denied_destination counted %d times, want 1", st.Drop(DropDeniedDestination))
				}
				if f.ct.Len() != 0 {
					t.Fatal("a flow was created")
				}
				return
			}
			mustTx(t, r, outHop.Ifindex)
		})
	}
}

// The deny-list lookup allocates nothing.
func TestDeniedZeroAllocs(t *testing.T) {
	cfg := testConfig()
	cfg.DeniedDestinations = []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16")}
	s, err := NewSnapshot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("169.254.169.254").As16(), netip.MustParseAddr("2001:db8::1").As16()
	c, d := netip.MustParseAddr("64:ff9b::a9fe:a9fe").As16(), netip.MustParseAddr("64:ff9b:1:c633:64:1400::").As16()
	if n := testing.AllocsPerRun(100, func() {
		if !s.denied(&a, 0) || s.denied(&b, 1) || !s.denied(&c, 1) || s.denied(&d, 1) {
			t.Fatal("wrong answer")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}

func TestDeniedDestinationBadPrefix(t *testing.T) {
	cfg := testConfig()
	cfg.AllowedDestinations = []netip.Prefix{{}}
	if _, err := NewSnapshot(cfg); err == nil {
		t.Fatal("an invalid prefix was accepted")
	}
}

// TestCheckDestinationEntry: CheckDestination names the entry that
// decides, the longest matching, and says where it comes from.
func TestCheckDestinationEntry(t *testing.T) {
	cfg := testConfig()
	cfg.DeniedDestinations = []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16"), netip.MustParsePrefix("10.10.3.0/24")}
	cfg.AllowedDestinations = []netip.Prefix{netip.MustParsePrefix("10.10.5.0/24"), netip.MustParsePrefix("169.254.1.1/32")}
	p := netip.MustParsePrefix
	cases := []struct {
		dst  string
		want DestinationVerdict
	}{
		{"169.254.169.254", DestinationVerdict{Denied: true, Entry: p("169.254.0.0/16")}},
		{"10.10.3.4", DestinationVerdict{Denied: true, Entry: p("10.10.3.0/24")}},
		{"10.10.4.4", DestinationVerdict{Denied: true, Entry: p("10.10.0.0/16")}},
		{"10.0.0.2", DestinationVerdict{Denied: true, Entry: p("10.0.0.2/32"), VTEP: true}},
		{"10.10.5.6", DestinationVerdict{Entry: p("10.10.5.0/24"), Allowed: true}},
		{"169.254.1.1", DestinationVerdict{Entry: p("169.254.1.1/32"), Allowed: true}},
		{"64:ff9b::a9fe:a9fe", DestinationVerdict{Denied: true, Entry: p("169.254.0.0/16"), Via: netip.MustParseAddr("169.254.169.254")}},
		{"64:ff9b::a0a:506", DestinationVerdict{Entry: p("10.10.5.0/24"), Allowed: true, Via: netip.MustParseAddr("10.10.5.6")}},
		{"198.51.100.20", DestinationVerdict{}},
		{"2001:db8:ffff::20", DestinationVerdict{}},
	}
	for _, c := range cases {
		if got := CheckDestination(&cfg, netip.MustParseAddr(c.dst)); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.dst, got, c.want)
		}
	}
}
