package claim_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/internal/nstest"
)

// fifty returns 50 egress IPs in gw0's subnet.
func fifty() []netip.Addr {
	var out []netip.Addr
	for i := 0; i < 50; i++ {
		out = append(out, netip.MustParseAddr(fmt.Sprintf("10.66.0.%d", 100+i)))
	}
	return out
}

// TestClaimDoesNotWaitForAnnouncements is a mass failover: 50 IPs claimed
// while the announcements are an hour apart. Claim must not wait for them
// (it runs under the engine's lock), yet every IP's first announcement
// goes out on the wire, and Close does not wait for the rest.
func TestClaimDoesNotWaitForAnnouncements(t *testing.T) {
	tp := nstest.NewRouted(t)
	cap := tp.Peer.OpenRaw(t, "pe0")
	cl, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			cl.Close()
		}
	}()
	cl.Announcements, cl.Interval = 3, time.Hour
	ips := fifty()
	done := make(chan error, 1)
	go func() {
		for _, a := range ips {
			if err := cl.Claim("gw0", a); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // the old claimer would take 100 hours
		t.Fatal("claiming 50 IPs blocks on their announcements")
	}
	seen := map[netip.Addr]bool{}
	for len(seen) < len(ips) {
		f := cap.Next(5 * time.Second)
		if f == nil {
			break
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		if a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP); ok && a.Operation == layers.ARPRequest &&
			bytes.Equal(a.SourceProtAddress, a.DstProtAddress) && bytes.Equal(a.SourceHwAddress, tp.GW0.MAC) {
			seen[netip.AddrFrom4([4]byte(a.SourceProtAddress))] = true
		}
	}
	if len(seen) != len(ips) {
		t.Fatalf("saw the gratuitous ARPs of %d of the %d claimed IPs", len(seen), len(ips))
	}
	if st := cl.Stats(); st.Announced < uint64(len(ips)) || st.AnnounceFailures != 0 {
		t.Errorf("stats %+v: want at least %d announced, none failed", st, len(ips))
	}
	for _, a := range ips {
		if err := cl.Release("gw0", a); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close() // must not wait for the announcements an hour away
	closed = true
	for _, a := range ips {
		if tp.GW.HasAddr(t, "gw0", a) {
			t.Errorf("%v still on gw0 after its release", a)
		}
	}
}

// TestFencedIPv6 checks neighbour discovery for a claimed IPv6 address:
// the claimer answers a solicitation, and once it is closed without
// releasing (what kill -9 leaves) nothing answers, not the kernel either.
func TestFencedIPv6(t *testing.T) {
	tp := nstest.NewRouted(t)
	cap := tp.Peer.OpenRaw(t, "pe0")
	cl, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.Announcements = 1
	eip := netip.MustParseAddr("fd66::77")
	if err := cl.Claim("gw0", eip); err != nil {
		t.Fatal(err)
	}
	src := tp.PE0.MAC
	peer := netip.MustParseAddr("fd66::2")
	snm := netip.MustParseAddr("ff02::1:ff00:77")
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: peer.AsSlice(), DstIP: snm.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	icmp.SetNetworkLayerForChecksum(ip6)
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: eip.AsSlice(),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: src}}}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: src, DstMAC: []byte{0x33, 0x33, 0xff, 0, 0, 0x77}, EthernetType: layers.EthernetTypeIPv6},
		ip6, icmp, ns); err != nil {
		t.Fatal(err)
	}
	solicit := buf.Bytes()
	// answers counts the advertisements for eip that come back, by who
	// sent them.
	answers := func() (solicited int) {
		if err := cap.Send(solicit); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			f := cap.Next(time.Until(deadline))
			if f == nil {
				break
			}
			p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
			na, ok := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
			if ok && na.TargetAddress.Equal(eip.AsSlice()) && na.Solicited() {
				ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
				if !ip.DstIP.Equal(peer.AsSlice()) || len(na.Options) != 1 || !bytes.Equal(na.Options[0].Data, tp.GW0.MAC) {
					t.Errorf("bad advertisement: %+v %+v", ip, na)
				}
				solicited++
			}
		}
		return solicited
	}
	if n := answers(); n != 1 {
		t.Fatalf("%d advertisements for a claimed IP, want exactly 1 (the claimer's; the kernel is fenced)", n)
	}
	cl.Close() // no Release: the process died
	if !tp.GW.HasAddr(t, "gw0", eip) {
		t.Fatal("closing the claimer removed the address")
	}
	if n := answers(); n != 0 {
		t.Errorf("%d advertisements for the IP of a dead claimer, want none", n)
	}
	// The next claimer sweeps it, fence included.
	next, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if gone, err := next.ReleaseMarked([]string{"gw0"}, nil); err != nil || len(gone) != 1 {
		t.Fatalf("ReleaseMarked: %v, %v; want the one stale IP", gone, err)
	}
}

// BenchmarkClaim50 claims and releases 50 IPs with the default
// announcements (3, 100ms apart): the time a mass failover holds the
// engine's lock.
func BenchmarkClaim50(b *testing.B) {
	tp := nstest.NewRouted(b)
	cl, err := claim.NewClaimer(tp.GW.Handle, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ips := fifty()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, a := range ips {
			if err := cl.Claim("gw0", a); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		for _, a := range ips {
			if err := cl.Release("gw0", a); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
}
