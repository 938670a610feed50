package claim_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/internal/nstest"
)

var (
	gw0   = netip.MustParsePrefix("10.66.0.1/24")
	pe0   = netip.MustParsePrefix("10.66.0.2/24")
	gw06  = netip.MustParsePrefix("fd66::1/64")
	pe06  = netip.MustParsePrefix("fd66::2/64")
	gw1   = netip.MustParsePrefix("10.67.0.1/24")
	r0    = netip.MustParsePrefix("10.67.0.2/24")
	far   = netip.MustParsePrefix("192.0.2.0/24")
	later = netip.MustParsePrefix("198.51.100.0/24")
)

type topo struct {
	gw, peer, router  *nstest.NS
	gw0, pe0, gw1, r0 *nstest.Veth
}

// gw ─gw0──pe0─ peer ; gw ─gw1──r0─ router, and 192.0.2.0/24 via the router.
func newTopo(t *testing.T) *topo {
	tp := &topo{gw: nstest.New(t), peer: nstest.New(t), router: nstest.New(t)}
	tp.gw0, tp.pe0 = nstest.VethPair(t, tp.gw, "gw0", gw0, tp.peer, "pe0", pe0)
	tp.gw1, tp.r0 = nstest.VethPair(t, tp.gw, "gw1", gw1, tp.router, "r0", r0)
	tp.gw.AddAddr(t, "gw0", gw06)
	tp.peer.AddAddr(t, "pe0", pe06)
	tp.addRoute(t, far, r0.Addr(), tp.gw1.Index)
	return tp
}

func (tp *topo) addRoute(t *testing.T, dst netip.Prefix, via netip.Addr, ifindex int) *netlink.Route {
	t.Helper()
	r := &netlink.Route{LinkIndex: ifindex, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}, Gw: via.AsSlice()}
	if err := tp.gw.NL.RouteAdd(r); err != nil {
		t.Fatalf("route %s via %s: %v", dst, via, err)
	}
	return r
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func mac6(m net.HardwareAddr) (a [6]byte) { copy(a[:], m); return }

func TestClaimAnnouncesAndRelease(t *testing.T) {
	tp := newTopo(t)
	cap := tp.peer.OpenRaw(t, "pe0")
	cl, err := claim.NewClaimer(tp.gw.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	eip := netip.MustParseAddr("10.66.0.50")
	start := time.Now()
	if err := cl.Claim("gw0", eip); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tp.gw.Addrs(t, "gw0"), netip.PrefixFrom(eip, 32)) {
		t.Fatal("claimed /32 not on gw0")
	}
	var times []time.Time
	for len(times) < 3 {
		f := cap.Next(time.Second)
		if f == nil {
			break
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		arp, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		if !ok {
			continue
		}
		eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if !bytes.Equal(eth.DstMAC, layers.EthernetBroadcast) || !bytes.Equal(eth.SrcMAC, tp.gw0.MAC) ||
			arp.Operation != layers.ARPRequest || !bytes.Equal(arp.SourceHwAddress, tp.gw0.MAC) ||
			!bytes.Equal(arp.SourceProtAddress, eip.AsSlice()) || !bytes.Equal(arp.DstProtAddress, eip.AsSlice()) ||
			!bytes.Equal(arp.DstHwAddress, make([]byte, 6)) {
			if bytes.Equal(arp.SourceProtAddress, eip.AsSlice()) {
				t.Fatalf("malformed gratuitous ARP: %+v", arp)
			}
			continue
		}
		times = append(times, time.Now())
	}
	if len(times) != 3 {
		t.Fatalf("captured %d gratuitous ARPs, want 3", len(times))
	}
	if gap := times[2].Sub(start); gap < 150*time.Millisecond {
		t.Fatalf("3 announcements within %v; want them ~100ms apart", gap)
	}
	// The peer learnt the new owner.
	neighs, _ := tp.peer.NL.NeighList(tp.pe0.Index, netlink.FAMILY_V4)
	learnt := false
	for _, n := range neighs {
		learnt = learnt || (n.IP.Equal(eip.AsSlice()) && bytes.Equal(n.HardwareAddr, tp.gw0.MAC))
	}
	t.Logf("peer neighbour table learnt the claim from GARP: %v", learnt)

	if err := cl.Release("gw0", eip); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(tp.gw.Addrs(t, "gw0"), netip.PrefixFrom(eip, 32)) {
		t.Fatal("released address still on gw0")
	}
	if err := cl.Release("gw0", eip); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

func TestClaimIPv6SendsUnsolicitedNA(t *testing.T) {
	tp := newTopo(t)
	cap := tp.peer.OpenRaw(t, "pe0")
	cl, err := claim.NewClaimer(tp.gw.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Announcements, cl.Interval = 2, 10*time.Millisecond
	eip := netip.MustParseAddr("fd66::50")
	if err := cl.Claim("gw0", eip); err != nil {
		t.Fatal(err)
	}
	l, _ := tp.gw.NL.LinkByName("gw0")
	addrs, _ := tp.gw.NL.AddrList(l, netlink.FAMILY_V6)
	found := false
	for _, a := range addrs {
		if a.IP.Equal(eip.AsSlice()) {
			ones, _ := a.Mask.Size()
			found = ones == 128 && a.Flags&0x02 != 0 // IFA_F_NODAD
		}
	}
	if !found {
		t.Fatalf("fd66::50/128 nodad not on gw0: %v", addrs)
	}
	got := 0
	for got < 2 {
		f := cap.Next(time.Second)
		if f == nil {
			break
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		na, ok := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
		if !ok || !na.TargetAddress.Equal(eip.AsSlice()) {
			continue
		}
		ip6 := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		if ip6.HopLimit != 255 || !ip6.DstIP.Equal(net.ParseIP("ff02::1")) || na.Solicited() || !na.Override() ||
			len(na.Options) != 1 || na.Options[0].Type != layers.ICMPv6OptTargetAddress || !bytes.Equal(na.Options[0].Data, tp.gw0.MAC) {
			t.Fatalf("bad unsolicited NA: %+v %+v", ip6, na)
		}
		// Verify the checksum independently.
		icmp.SetNetworkLayerForChecksum(ip6)
		buf := gopacket.NewSerializeBuffer()
		want := icmp.Checksum
		gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, icmp, gopacket.Payload(icmp.Payload))
		if binary.BigEndian.Uint16(buf.Bytes()[2:]) != want {
			t.Fatalf("NA checksum %#x, want %#x", want, binary.BigEndian.Uint16(buf.Bytes()[2:]))
		}
		got++
	}
	if got != 2 {
		t.Fatalf("captured %d unsolicited NAs, want 2", got)
	}
	if err := cl.Release("gw0", eip); err != nil {
		t.Fatal(err)
	}
}

func TestClaimBadInput(t *testing.T) {
	tp := newTopo(t)
	cl, err := claim.NewClaimer(tp.gw.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("224.0.0.1")} {
		if err := cl.Claim("gw0", a); err == nil {
			t.Errorf("Claim(%v) accepted", a)
		}
	}
	if err := cl.Claim("nope0", netip.MustParseAddr("10.66.0.9")); err == nil {
		t.Error("Claim on a missing interface accepted")
	}
}
