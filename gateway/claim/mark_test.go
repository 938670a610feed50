package claim_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/egret-gw/egret/internal/nstest"

	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway/claim"
)

// addrsOn lists the host addresses (/32, /128) on ifname.
func addrsOn(t *testing.T, h *netlink.Handle, ifname string) []netip.Addr {
	t.Helper()
	l, err := h.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	as, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range as {
		ones, bits := a.Mask.Size()
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ones == bits {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// A claim carries Egret's mark (IFA_PROTO); a later claimer (a restart
// after kill -9) finds what its predecessor left and removes what it does
// not host, while addresses someone else added stay.
func TestClaimMarksAndReleaseMarked(t *testing.T) {
	tp := nstest.NewRouted(t)
	first, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	first.Announcements, first.Interval = 1, 0
	stale4, kept4, stale6 := netip.MustParseAddr("10.66.0.50"), netip.MustParseAddr("10.66.0.51"), netip.MustParseAddr("fd66::50")
	other1 := netip.MustParseAddr("10.67.0.50")
	for _, c := range []struct {
		ifn string
		ip  netip.Addr
	}{{"gw0", stale4}, {"gw0", kept4}, {"gw0", stale6}, {"gw1", other1}} {
		if err := first.Claim(c.ifn, c.ip); err != nil {
			t.Fatal(err)
		}
	}
	// A foreign host address, and an address an admin added that Egret
	// then claims (a replace must mark it).
	foreign := netip.MustParseAddr("10.66.0.60")
	adopted := netip.MustParseAddr("10.66.0.61")
	gw0, _ := tp.GW.NL.LinkByName("gw0")
	for _, a := range []netip.Addr{foreign, adopted} {
		if err := tp.GW.NL.AddrAdd(gw0, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Claim("gw0", adopted); err != nil {
		t.Fatal(err)
	}
	first.Close() // no Release: the process was killed

	second, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	marked, err := second.Marked()
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for _, m := range marked {
		if m.Bits != m.Addr.BitLen() {
			t.Errorf("marked %v has prefix length %d", m.Addr, m.Bits)
		}
		got = append(got, m.Addr)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	want := []netip.Addr{stale4, kept4, adopted, other1, stale6}
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("marked addresses %v, want %v (the kernel must keep IFA_PROTO)", got, want)
	}

	gone, err := second.ReleaseMarked([]string{"gw0"}, func(a netip.Addr) bool { return a == kept4 })
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(gone, netip.Addr.Compare)
	if wantGone := []netip.Addr{stale4, adopted, stale6}; !slices.Equal(gone, wantGone) {
		t.Errorf("ReleaseMarked removed %v, want %v", gone, wantGone)
	}
	if have, want := addrsOn(t, tp.GW.NL, "gw0"), []netip.Addr{kept4, foreign}; !slices.Equal(have, want) {
		t.Errorf("gw0 holds %v after the sweep, want %v (kept claim + foreign address)", have, want)
	}
	if have := addrsOn(t, tp.GW.NL, "gw1"); !slices.Equal(have, []netip.Addr{other1}) {
		t.Errorf("gw1 holds %v; an interface not swept must keep its claim %v", have, other1)
	}
	// Clean stop: nothing kept.
	if _, err := second.ReleaseMarked([]string{"gw0", "gw1"}, nil); err != nil {
		t.Fatal(err)
	}
	if have := addrsOn(t, tp.GW.NL, "gw0"); !slices.Equal(have, []netip.Addr{foreign}) {
		t.Errorf("gw0 holds %v after releasing all, want only the foreign %v", have, foreign)
	}
	if _, err := second.ReleaseMarked([]string{"nope0"}, nil); err == nil {
		t.Error("ReleaseMarked on a missing interface gave no error")
	}
}
