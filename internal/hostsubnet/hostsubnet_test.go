package hostsubnet

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestPick(t *testing.T) {
	p4, p6 := pfx("10.77.0.13/24"), pfx("fd77::13/64")
	host := []netip.Prefix{pfx("10.77.0.13/24"), pfx("10.81.0.13/24"), pfx("10.0.0.5/8"), pfx("10.81.0.0/16"),
		pfx("10.90.0.7/24"), pfx("10.90.0.3/24"), pfx("fd77::13/64"), pfx("fd81::3/64"), pfx("fd81:0:0:1::3/56")}
	for _, tc := range []struct {
		ip   string
		want string // "" for none
	}{
		{"10.77.0.100", "10.77.0.13/24"},        // the primary's
		{"10.81.0.100", "10.81.0.13/24"},        // longest of /24, /16 and /8
		{"10.81.1.100", "10.81.0.0/16"},         // outside the /24
		{"10.5.0.1", "10.0.0.5/8"},              // only the /8
		{"10.90.0.100", "10.90.0.3/24"},         // a tie: the lower address
		{"10.81.0.255", "10.81.0.0/16"},         // the /24's broadcast is not hostable there
		{"11.0.0.1", ""},                        // no subnet
		{"fd77::100", "fd77::13/64"},            // the primary's, IPv6
		{"fd81::100", "fd81::3/64"},             // the /64 inside the /56
		{"fd81:0:0:2::100", "fd81:0:0:1::3/56"}, // only the /56
		{"fd81::", ""},                          // the anycast address of both
		{"fd99::1", ""},
		{"::ffff:10.81.0.100", "10.81.0.13/24"}, // mapped: unmapped first
	} {
		got, ok := Pick(p4, p6, host, netip.MustParseAddr(tc.ip))
		if (tc.want == "") != !ok || (ok && got != pfx(tc.want)) {
			t.Errorf("Pick(%s) = %v, %v; want %q", tc.ip, got, ok, tc.want)
		}
	}
}

// TestPickPrimaryFirst: the primary subnet wins over a longer host prefix,
// as the spec orders them; without a primary of the family the longest wins.
func TestPickPrimaryFirst(t *testing.T) {
	host := []netip.Prefix{pfx("10.0.5.1/24"), pfx("10.0.0.1/16")}
	a := netip.MustParseAddr("10.0.5.9")
	if got, _ := Pick(pfx("10.0.0.1/16"), netip.Prefix{}, host, a); got != pfx("10.0.0.1/16") {
		t.Errorf("with the /16 primary got %v", got)
	}
	if got, _ := Pick(netip.Prefix{}, pfx("fd00::1/64"), host, a); got != pfx("10.0.5.1/24") {
		t.Errorf("without an IPv4 primary got %v", got)
	}
}

// TestPickOrderFree: the choice is the same for every order of host.
func TestPickOrderFree(t *testing.T) {
	host := []netip.Prefix{pfx("10.1.0.9/24"), pfx("10.1.0.2/24"), pfx("10.1.0.5/24"), pfx("10.0.0.1/8"), pfx("10.1.0.0/16")}
	r := rand.New(rand.NewPCG(1, 2))
	a := netip.MustParseAddr("10.1.0.77")
	for range 100 {
		h := slices.Clone(host)
		r.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
		if got, _ := Pick(netip.Prefix{}, netip.Prefix{}, h, a); got != pfx("10.1.0.2/24") {
			t.Fatalf("order %v picked %v", h, got)
		}
	}
}
