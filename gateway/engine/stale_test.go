package engine_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway/claim"
)

// TestEngineRemovesStaleClaims is the restart after kill -9: a predecessor
// left its claimed egress IPs on d0. The new engine removes those its
// configuration does not host, keeps the hosted one, never touches an
// address someone else added, and removes every marked address on Close.
func TestEngineRemovesStaleClaims(t *testing.T) {
	tp := newTopo(t)
	stale := netip.MustParseAddr("10.77.0.101")
	staleV6 := netip.MustParseAddr("fd77::101")
	foreign := netip.MustParseAddr("10.77.0.102")
	dead, err := claim.NewClaimer(tp.gw.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	dead.Announcements = 1
	for _, a := range []netip.Addr{stale, staleV6, egressIP} {
		if err := dead.Claim("d0", a); err != nil {
			t.Fatal(err)
		}
	}
	dead.Close()
	d0, err := tp.gw.NL.LinkByName("d0")
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.gw.NL.AddrAdd(d0, &netlink.Addr{IPNet: &net.IPNet{IP: foreign.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}

	eng := startEngine(t, tp, tp.config(), defaultOptions())
	for a, want := range map[netip.Addr]bool{stale: false, staleV6: false, egressIP: true, foreign: true} {
		if got := tp.hasAddr(t, a); got != want {
			t.Errorf("after start: d0 has %v = %v, want %v", a, got, want)
		}
	}

	// Something marked that this run did not record goes on Close too.
	other, err := claim.NewClaimer(tp.gw.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	other.Announcements = 1
	if err := other.Claim("d0", stale); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	for a, want := range map[netip.Addr]bool{stale: false, egressIP: false, foreign: true} {
		if got := tp.hasAddr(t, a); got != want {
			t.Errorf("after Close: d0 has %v = %v, want %v", a, got, want)
		}
	}
}
