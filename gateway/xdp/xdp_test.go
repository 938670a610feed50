package xdp_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/internal/nstest"
)

var (
	gwIP   = netip.MustParsePrefix("10.77.0.1/24")
	peerIP = netip.MustParsePrefix("10.77.0.2/24")
	gwIP6  = netip.MustParsePrefix("fd77::1/64")
	peer6  = netip.MustParsePrefix("fd77::2/64")
	egress = netip.MustParseAddr("10.77.0.100")
)

type lab struct {
	gw, peer    *nstest.NS
	gwEnd, pEnd *nstest.Veth
	umem        *nic.Pool
	sock        *nic.XSK
	rx          nic.Batch
	t           *testing.T
}

func newLab(t *testing.T) *lab {
	ge, pe := nstest.Pair(t, "gw0", gwIP, "pe0", peerIP)
	gw, peer := ge.NS, pe.NS
	gw.AddAddr(t, "gw0", gwIP6)
	peer.AddAddr(t, "pe0", peer6)
	gw.Enter(t)
	return &lab{gw: gw, peer: peer, gwEnd: ge, pEnd: pe, t: t}
}

func (l *lab) openSocket(p *xdp.Program) {
	t := l.t
	if l.umem == nil {
		u, err := nic.NewUmem(512, 2048, 0)
		if err != nil {
			t.Fatal(err)
		}
		l.umem = u
		t.Cleanup(func() { nic.FreeUmem(u) })
	}
	s, err := nic.OpenXSK(l.umem, "gw0", l.gwEnd.Index, 0, nic.XDPOptions{RingSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := p.Register(0, s.FD()); err != nil {
		t.Fatal(err)
	}
	l.sock = s
}

// sendUDP sends one datagram from the peer namespace.
func (l *lab) sendUDP(dst netip.AddrPort, payload []byte) {
	l.t.Helper()
	err := l.peer.Do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(payload)
		return err
	})
	if err != nil {
		l.t.Fatalf("send to %s: %v", dst, err)
	}
}

// sendRaw sends a whole Ethernet frame out of the peer's veth end.
func (l *lab) sendRaw(frame []byte) {
	l.t.Helper()
	err := l.peer.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: l.pEnd.Index})
	})
	if err != nil {
		l.t.Fatalf("raw send: %v", err)
	}
}

// expectOnSocket waits for a frame carrying payload on the AF_XDP socket.
func (l *lab) expectOnSocket(payload []byte) []byte {
	l.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := l.sock.Receive(&l.rx, 200*time.Millisecond); err != nil {
			l.t.Fatal(err)
		}
		for i := 0; i < l.rx.N; i++ {
			if f := l.rx.Frame(i); bytes.Contains(f, payload) {
				out := append([]byte(nil), f...)
				l.rx.Release()
				return out
			}
		}
		l.rx.Release()
	}
	l.t.Fatalf("frame with %q never reached the AF_XDP socket", payload)
	return nil
}

// expectNotOnSocket checks that nothing with payload shows up for a while.
func (l *lab) expectNotOnSocket(payload []byte) {
	l.t.Helper()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		l.sock.Receive(&l.rx, 50*time.Millisecond)
		for i := 0; i < l.rx.N; i++ {
			if bytes.Contains(l.rx.Frame(i), payload) {
				l.t.Fatalf("frame with %q went to the socket, want kernel", payload)
			}
		}
		l.rx.Release()
	}
}

func attached(t *testing.T, l *lab) (bool, uint32) {
	t.Helper()
	link, err := l.gw.NL.LinkByName("gw0")
	if err != nil {
		t.Fatal(err)
	}
	x := link.Attrs().Xdp
	if x == nil {
		return false, 0
	}
	return x.Attached, x.ProgId
}

func TestSteering(t *testing.T) {
	l := newLab(t)
	p, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Detach() })
	t.Logf("attached in %s mode", p.Mode())
	l.openSocket(p)
	for _, a := range []netip.Addr{gwIP.Addr(), gwIP6.Addr()} {
		if err := p.AddVTEP(a); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddEgressIP(egress); err != nil {
		t.Fatal(err)
	}
	if err := p.SetTunnels([]xdp.TunnelKey{{Port: xdp.PortVXLAN, VNI: 100}, {Port: xdp.PortGeneve, VNI: 200}}); err != nil {
		t.Fatal(err)
	}

	// A kernel listener on another UDP port must keep getting its traffic.
	var kernelUDP *net.UDPConn
	if err := l.gw.Do(func() (err error) {
		kernelUDP, err = net.ListenUDP("udp", &net.UDPAddr{Port: 5555})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer kernelUDP.Close()

	// VXLAN to the VTEP (the peer's kernel ARPs first: ARP must pass).
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), 4789), tunnelPayload(100, "vxlan-to-vtep"))
	f := l.expectOnSocket([]byte("vxlan-to-vtep"))
	if got := binary.BigEndian.Uint16(f[14+20+2:]); got != 4789 {
		t.Fatalf("udp dst port %d, want 4789", got)
	}
	// Geneve over IPv6.
	l.sendUDP(netip.AddrPortFrom(gwIP6.Addr(), 6081), tunnelPayload(200, "geneve-v6"))
	l.expectOnSocket([]byte("geneve-v6"))
	// VXLAN over IPv6 (an IPv6-only cluster's underlay); another VNI over
	// IPv6 stays the kernel's.
	l.sendUDP(netip.AddrPortFrom(gwIP6.Addr(), 4789), tunnelPayload(100, "vxlan-v6"))
	if f := l.expectOnSocket([]byte("vxlan-v6")); binary.BigEndian.Uint16(f[12:]) != 0x86dd || binary.BigEndian.Uint16(f[14+40+2:]) != 4789 {
		t.Fatalf("VXLAN over IPv6 arrived as % x", f[:14+40+8])
	}
	l.sendUDP(netip.AddrPortFrom(gwIP6.Addr(), 4789), tunnelPayload(101, "vxlan-v6-other-vni"))
	l.expectNotOnSocket([]byte("vxlan-v6-other-vni"))

	// Other UDP to the same address reaches the kernel socket, not ours.
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), 5555), []byte("plain-udp"))
	kernelUDP.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 100)
	n, err := kernelUDP.Read(buf)
	if err != nil || string(buf[:n]) != "plain-udp" {
		t.Fatalf("kernel UDP socket got %q, %v; want plain-udp", buf[:n], err)
	}
	l.expectNotOnSocket([]byte("plain-udp"))

	// Ping reaches the kernel and is answered.
	ping(t, l.peer, gwIP.Addr())

	// Anything to a hosted egress IP goes to the socket (static neighbour:
	// the address is not on the interface in this test).
	l.peer.AddNeigh(t, "pe0", egress, l.gwEnd.MAC)
	l.sendUDP(netip.AddrPortFrom(egress, 33000), []byte("to-egress-ip"))
	l.expectOnSocket([]byte("to-egress-ip"))

	// VXLAN inside an 802.1Q tag.
	l.sendRaw(vxlanFrame(t, l.pEnd.MAC, l.gwEnd.MAC, 10, peerIP.Addr(), gwIP.Addr(), 4789, tunnelPayload(100, "vlan-tagged")))
	l.expectOnSocket([]byte("vlan-tagged"))
	// Tunnel port to an address that is not a VTEP: kernel.
	l.sendRaw(vxlanFrame(t, l.pEnd.MAC, l.gwEnd.MAC, 0, peerIP.Addr(), netip.MustParseAddr("10.77.0.9"), 4789, tunnelPayload(100, "not-a-vtep")))
	l.expectNotOnSocket([]byte("not-a-vtep"))

	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Tunnel < 4 || st.Egress < 1 || st.Pass < 3 {
		t.Fatalf("counters %+v: want tunnel ≥ 4, egress ≥ 1, pass ≥ 3", st)
	}

	// Removing the VTEP hands tunnel traffic back to the kernel.
	if err := p.RemoveVTEP(gwIP.Addr()); err != nil {
		t.Fatal(err)
	}
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), 4789), tunnelPayload(100, "vtep-removed"))
	l.expectNotOnSocket([]byte("vtep-removed"))
}

func TestDetachAndRestart(t *testing.T) {
	l := newLab(t)
	p1, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	on, id1 := attached(t, l)
	if !on {
		t.Fatal("no program on gw0 after Attach")
	}
	// Simulated crash: no Detach, then a second start.
	p2, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatalf("second Attach after a simulated crash: %v", err)
	}
	p1.Close()
	if p2.Mode() != p1.Mode() {
		t.Fatalf("restarted program reports mode %v, first was %v", p2.Mode(), p1.Mode())
	}
	on, id2 := attached(t, l)
	if !on || id2 == id1 {
		t.Fatalf("after restart attached=%v id %d (was %d): want the new program", on, id2, id1)
	}
	// The restarted program steers with its fresh maps.
	l.openSocket(p2)
	if err := p2.AddVTEP(gwIP.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := p2.SetTunnels([]xdp.TunnelKey{{Port: xdp.PortVXLAN, VNI: 100}}); err != nil {
		t.Fatal(err)
	}
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), 4789), tunnelPayload(100, "after-restart"))
	l.expectOnSocket([]byte("after-restart"))

	if err := p2.Detach(); err != nil {
		t.Fatal(err)
	}
	if on, id := attached(t, l); on {
		t.Fatalf("program %d still attached after Detach", id)
	}
	// The interface still works for the kernel and a third start is clean.
	ping(t, l.peer, gwIP.Addr())
	p3, err := attach(l.gwEnd.Index, xdp.Options{Mode: xdp.ModeGeneric})
	if err != nil {
		t.Fatal(err)
	}
	if p3.Mode() != xdp.ModeGeneric {
		t.Fatalf("mode %v, want generic", p3.Mode())
	}
	if err := p3.Detach(); err != nil {
		t.Fatal(err)
	}
	if on, _ := attached(t, l); on {
		t.Fatal("program attached after second Detach")
	}
}

func TestBadAddress(t *testing.T) {
	l := newLab(t)
	p, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Detach()
	if err := p.AddVTEP(netip.Addr{}); err == nil {
		t.Fatal("AddVTEP accepted the zero address")
	}
	if err := p.RemoveEgressIP(netip.MustParseAddr("192.0.2.1")); err != nil {
		t.Fatalf("removing an absent address: %v", err)
	}
	if _, err := attach(0, xdp.Options{}); err == nil {
		t.Fatal("Attach to ifindex 0 succeeded")
	}
}

func ping(t *testing.T, from *nstest.NS, dst netip.Addr) {
	t.Helper()
	var c *icmp.PacketConn
	if err := from.Do(func() (err error) {
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0x4567, Seq: 1, Data: []byte("egret-ping")}}
	wb, _ := msg.Marshal(nil)
	for try := 0; try < 3; try++ {
		if _, err := c.WriteTo(wb, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		rb := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(rb)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(1, rb[:n])
			if err == nil && m.Type == ipv4.ICMPTypeEchoReply {
				if e, ok := m.Body.(*icmp.Echo); ok && e.ID == 0x4567 && bytes.Equal(e.Data, []byte("egret-ping")) {
					return
				}
			}
		}
	}
	t.Fatalf("no echo reply from %s: ping does not reach the kernel", dst)
}

// vxlanFrame builds Ethernet(/802.1Q)/IPv4/UDP to port with payload.
func vxlanFrame(t *testing.T, src, dst net.HardwareAddr, vlan uint16, sip, dip netip.Addr, dport uint16, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: sip.AsSlice(), DstIP: dip.AsSlice()}
	udp := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(dport)}
	udp.SetNetworkLayerForChecksum(ip)
	ls := []gopacket.SerializableLayer{eth}
	if vlan != 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: vlan, Type: layers.EthernetTypeIPv4})
	}
	ls = append(ls, ip, udp, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestEgressIPv6NeighbourDiscovery: neighbour discovery addressed to a hosted
// IPv6 egress IP is the kernel's (as ARP is for IPv4), while every other
// packet to that address still goes to the socket. Without it, a router's
// unicast reachability probe of the egress IP would go unanswered.
func TestEgressIPv6NeighbourDiscovery(t *testing.T) {
	l := newLab(t)
	egress6 := netip.MustParseAddr("fd77::100")
	l.gw.AddAddr(t, "gw0", netip.PrefixFrom(egress6, 128))
	p, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Detach() })
	l.openSocket(p)
	if err := p.AddEgressIP(egress6); err != nil {
		t.Fatal(err)
	}
	raw := l.peer.OpenRaw(t, "pe0")

	// A unicast neighbour solicitation for the egress IP, as a router
	// sends to confirm reachability: the kernel must answer it.
	ns := ndFrame(t, l.pEnd.MAC, l.gwEnd.MAC, peer6.Addr(), egress6, egress6)
	if err := raw.Send(ns); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	answered := false
	for !answered && time.Now().Before(deadline) {
		f := raw.Next(500 * time.Millisecond)
		if f == nil {
			continue
		}
		pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		if na, ok := pkt.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement); ok &&
			netip.AddrFrom16([16]byte(na.TargetAddress.To16())) == egress6 {
			answered = true
		}
	}
	if !answered {
		t.Fatal("no neighbour advertisement for the egress IP: the solicitation did not reach the kernel")
	}
	l.expectNotOnSocket(egress6.AsSlice())

	// Any other packet to the egress IP still goes to the data plane.
	l.peer.AddNeigh(t, "pe0", egress6, l.gwEnd.MAC)
	l.sendUDP(netip.AddrPortFrom(egress6, 33000), []byte("to-egress-ip6"))
	l.expectOnSocket([]byte("to-egress-ip6"))
}

// ndFrame builds a neighbour solicitation from src for target, sent to dst.
func ndFrame(t *testing.T, smac, dmac net.HardwareAddr, src, dst, target netip.Addr) []byte {
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv6}
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	icmp.SetNetworkLayerForChecksum(ip)
	sol := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice(),
		Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: smac}}}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, icmp, sol); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tunnelPayload is an 8-byte VXLAN/Geneve header with VNI vni, then marker.
func tunnelPayload(vni uint32, marker string) []byte {
	h := []byte{0x08, 0, 0, 0, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}
	return append(h, marker...)
}

// TestTunnelTypeAndVNI: once SetTunnels names the tunnels, only those types
// with those VNIs reach the socket; the other type and other VNIs go to the
// kernel, counted. Before SetTunnels no tunnel packet is taken.
func TestTunnelTypeAndVNI(t *testing.T) {
	l := newLab(t)
	p := l.attachSteering(t)
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortVXLAN), tunnelPayload(100, "before-set"))
	l.expectNotOnSocket([]byte("before-set"))

	if err := p.SetTunnels([]xdp.TunnelKey{{Port: xdp.PortVXLAN, VNI: 100}, {Port: xdp.PortGeneve, VNI: 200}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]xdp.TunnelKey{{{Port: 4790, VNI: 100}}, {{Port: xdp.PortVXLAN, VNI: 1 << 24}}, make([]xdp.TunnelKey, xdp.MaxTunnels+1)} {
		if err := p.SetTunnels(bad); err == nil {
			t.Errorf("SetTunnels accepted %v", bad[0])
		}
	}
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortGeneve), tunnelPayload(200, "second-pair"))
	l.expectOnSocket([]byte("second-pair"))
	// Replacing the set removes the pairs not named again.
	if err := p.SetTunnels([]xdp.TunnelKey{{Port: xdp.PortVXLAN, VNI: 100}}); err != nil {
		t.Fatal(err)
	}

	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortVXLAN), tunnelPayload(100, "right-vni"))
	l.expectOnSocket([]byte("right-vni"))
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortVXLAN), tunnelPayload(101, "wrong-vni"))
	l.expectNotOnSocket([]byte("wrong-vni"))
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortGeneve), tunnelPayload(100, "wrong-type"))
	l.expectNotOnSocket([]byte("wrong-type"))
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortGeneve), tunnelPayload(200, "removed-pair"))
	l.expectNotOnSocket([]byte("removed-pair"))

	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// before-set, wrong-vni, wrong-type, removed-pair.
	if st.TunnelOther != 4 || st.Tunnel < 2 {
		t.Fatalf("counters %+v: want tunnel_other 4, tunnel ≥ 2", st)
	}
}

// TestOtherVNIReachesKernel: a CNI tunnelling on the gateway's port to the
// node's address (Calico VXLAN, Antrea, flannel on 4789) must keep its
// traffic. The program used to take (and drop) every VXLAN packet to the
// VTEP; now one of another VNI reaches the kernel's VXLAN device of that VNI,
// while the gateway's own VNI still goes to the AF_XDP socket.
func TestOtherVNIReachesKernel(t *testing.T) {
	l := newLab(t)
	p := l.attachSteering(t)
	if err := p.SetTunnels([]xdp.TunnelKey{{Port: xdp.PortVXLAN, VNI: 100}}); err != nil {
		t.Fatal(err)
	}
	// The "CNI's" device: VNI 101 on the same port and address.
	cni := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "cnivx", MTU: 1450}, VxlanId: 101, Port: xdp.PortVXLAN,
		SrcAddr: gwIP.Addr().AsSlice(), Learning: false}
	if err := l.gw.NL.LinkAdd(cni); err != nil {
		t.Fatalf("create the kernel VXLAN device: %v", err)
	}
	dev, err := l.gw.NL.LinkByName("cnivx")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.gw.NL.LinkSetUp(dev); err != nil {
		t.Fatal(err)
	}
	rx := func() uint64 {
		d, err := l.gw.NL.LinkByName("cnivx")
		if err != nil {
			t.Fatal(err)
		}
		return d.Attrs().Statistics.RxPackets
	}
	before := rx()
	// An inner Ethernet frame from a MAC that is not the device's, of the
	// local experimental EtherType (no inner IP header for it to check).
	inner := []byte{0x02, 0, 0, 0, 0x77, 1, 0x02, 0, 0, 0, 0x77, 2, 0x88, 0xb5}
	inner = append(inner, "cni-traffic"...)
	// Sent again on each poll: the first may meet the device still coming up.
	if !nstest.Soon(3*time.Second, func() bool {
		l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortVXLAN), tunnelPayload(101, string(inner)))
		return rx() != before
	}) {
		st, _ := p.Stats()
		d, _ := l.gw.NL.LinkByName("cnivx")
		t.Fatalf("the kernel's VXLAN device of VNI 101 received nothing (device counters %+v); XDP counters %+v", *d.Attrs().Statistics, st)
	}
	l.expectNotOnSocket([]byte("cni-traffic"))
	l.sendUDP(netip.AddrPortFrom(gwIP.Addr(), xdp.PortVXLAN), tunnelPayload(100, "ours"))
	l.expectOnSocket([]byte("ours"))
	if st, err := p.Stats(); err != nil || st.TunnelOther == 0 {
		t.Fatalf("counters %+v (%v): want the other VNI's packets in tunnel_other", st, err)
	}
}

// attachSteering attaches the program to gw0 (detached when the test ends),
// opens the AF_XDP socket and makes gwIP a VTEP.
func (l *lab) attachSteering(t *testing.T) *xdp.Program {
	t.Helper()
	p, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Detach() })
	l.openSocket(p)
	if err := p.AddVTEP(gwIP.Addr()); err != nil {
		t.Fatal(err)
	}
	return p
}
