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

func TestClaimAnnouncesAndRelease(t *testing.T) {
	tp := nstest.NewRouted(t)
	cap := tp.Peer.OpenRaw(t, "pe0")
	cl, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	eip := netip.MustParseAddr("10.66.0.50")
	start := time.Now()
	if err := cl.Claim("gw0", eip); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tp.GW.Addrs(t, "gw0"), netip.PrefixFrom(eip, 32)) {
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
		if !bytes.Equal(eth.DstMAC, layers.EthernetBroadcast) || !bytes.Equal(eth.SrcMAC, tp.GW0.MAC) ||
			arp.Operation != layers.ARPRequest || !bytes.Equal(arp.SourceHwAddress, tp.GW0.MAC) ||
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
	neighs, _ := tp.Peer.NL.NeighList(tp.PE0.Index, netlink.FAMILY_V4)
	learnt := false
	for _, n := range neighs {
		learnt = learnt || (n.IP.Equal(eip.AsSlice()) && bytes.Equal(n.HardwareAddr, tp.GW0.MAC))
	}
	t.Logf("peer neighbour table learnt the claim from GARP: %v", learnt)

	if err := cl.Release("gw0", eip); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(tp.GW.Addrs(t, "gw0"), netip.PrefixFrom(eip, 32)) {
		t.Fatal("released address still on gw0")
	}
	if err := cl.Release("gw0", eip); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

func TestClaimIPv6SendsUnsolicitedNA(t *testing.T) {
	tp := nstest.NewRouted(t)
	cap := tp.Peer.OpenRaw(t, "pe0")
	cl, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Announcements, cl.Interval = 2, 10*time.Millisecond
	eip := netip.MustParseAddr("fd66::50")
	if err := cl.Claim("gw0", eip); err != nil {
		t.Fatal(err)
	}
	l, _ := tp.GW.NL.LinkByName("gw0")
	addrs, _ := tp.GW.NL.AddrList(l, netlink.FAMILY_V6)
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
			len(na.Options) != 1 || na.Options[0].Type != layers.ICMPv6OptTargetAddress || !bytes.Equal(na.Options[0].Data, tp.GW0.MAC) {
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
	tp := nstest.NewRouted(t)
	cl, err := claim.NewClaimer(tp.GW.Handle, nil)
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
