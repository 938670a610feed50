package engine_test

import (
	"github.com/egret-gw/egret/gateway/config"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/internal/nstest"
)

// Test topology: the gateway namespace (interface d0) and a peer namespace
// (p0) joined by a veth pair. The peer plays the worker node (its VTEP is
// p0's address; pod frames are crafted and sent through a raw socket) and
// the outside server (a real UDP socket on a second address of p0).
var (
	gwPrefix   = netip.MustParsePrefix("10.77.0.1/24")
	peerPrefix = netip.MustParsePrefix("10.77.0.2/24")
	gwVTEP     = gwPrefix.Addr()
	nodeVTEP   = peerPrefix.Addr()
	strangerIP = netip.MustParseAddr("10.77.0.3") // a VTEP no node has
	serverIP   = netip.MustParseAddr("10.77.0.50")
	egressIP   = netip.MustParseAddr("10.77.0.100")
	podIP      = netip.MustParseAddr("10.244.1.5")
	podUnsel   = netip.MustParseAddr("10.244.1.6")
	gwInnerMAC = net.HardwareAddr{0x02, 0x65, 0x67, 0, 0, 0x01}
	nodeMAC    = net.HardwareAddr{0x02, 0x65, 0x67, 0, 0, 0x11}
	testVNI    = uint32(100)
)

const serverPort = 7777

type topo struct {
	gw, peer *nstest.NS
	d0, p0   *nstest.Veth
	raw      *nstest.Raw
}

func newTopo(t *testing.T) *topo {
	t.Helper()
	d0, p0 := nstest.Pair(t, "d0", gwPrefix, "p0", peerPrefix)
	p0.NS.AddAddr(t, "p0", netip.PrefixFrom(serverIP, 24))
	return &topo{gw: d0.NS, peer: p0.NS, d0: d0, p0: p0, raw: p0.NS.OpenRaw(t, "p0")}
}

// config is the gateway's configuration in the lab's format.
func (tp *topo) config() *config.Config {
	return &config.Config{
		Node:       "gw-test",
		Interfaces: []string{"d0"},
		VTEPs:      []string{gwVTEP.String()},
		InnerMAC:   gwInnerMAC.String(),
		RouterV4:   "169.254.77.1",
		Tunnel:     "vxlan", VNI: int(testVNI), Port: 4789,
		Nodes: []config.NodeEntry{{Name: "w1", VTEP: nodeVTEP.String(), InnerMAC: nodeMAC.String(),
			Pods: []config.PodEntry{{Addr: podIP.String(), Policy: "blue"}, {Addr: podUnsel.String()}}}},
		Policies: []config.PolicyEntry{{Name: "blue", EgressIPs: []string{egressIP.String()}}},
	}
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tunnelFrame wraps an inner IPv4 packet (ip + l4 + payload) in
// Ethernet/IPv4/UDP/VXLAN from outerSrc on the peer to the gateway VTEP.
func (tp *topo) tunnelFrame(t testing.TB, outerSrc netip.Addr, inner ...gopacket.SerializableLayer) []byte {
	t.Helper()
	ieth := &layers.Ethernet{SrcMAC: nodeMAC, DstMAC: gwInnerMAC, EthernetType: layers.EthernetTypeIPv4}
	innerBytes := serialize(t, append([]gopacket.SerializableLayer{ieth}, inner...)...)
	eth := &layers.Ethernet{SrcMAC: tp.p0.MAC, DstMAC: tp.d0.MAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: outerSrc.AsSlice(), DstIP: gwVTEP.AsSlice(), Flags: layers.IPv4DontFragment}
	udp := &layers.UDP{SrcPort: 50123, DstPort: 4789}
	udp.SetNetworkLayerForChecksum(ip)
	vx := &layers.VXLAN{ValidIDFlag: true, VNI: testVNI}
	return serialize(t, eth, ip, udp, vx, gopacket.Payload(innerBytes))
}

func innerIP(src, dst netip.Addr, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment, Id: 7}
}

// podUDP is a tunnel frame carrying UDP from a pod to the server.
func (tp *topo) podUDP(t testing.TB, outerSrc, pod netip.Addr, sport uint16, payload string) []byte {
	ip := innerIP(pod, serverIP, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: serverPort}
	udp.SetNetworkLayerForChecksum(ip)
	return tp.tunnelFrame(t, outerSrc, ip, udp, gopacket.Payload(payload))
}

// decoded is a frame the peer received, split into its layers.
type decoded struct {
	outer  *layers.IPv4
	vxlan  *layers.VXLAN
	inner  *layers.IPv4 // the packet inside the tunnel, or nil
	ieth   *layers.Ethernet
	udp    *layers.UDP // of the innermost packet
	tcp    *layers.TCP
	icmp   *layers.ICMPv4
	packet gopacket.Packet
}

func decode(frame []byte) *decoded {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	d := &decoded{packet: p}
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		d.outer = ip
	}
	if vx, ok := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN); ok {
		d.vxlan = vx
		ip := gopacket.NewPacket(vx.LayerPayload(), layers.LayerTypeEthernet, gopacket.Default)
		d.ieth, _ = ip.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		d.inner, _ = ip.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		p = ip
	}
	d.udp, _ = p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	d.tcp, _ = p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	d.icmp, _ = p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if d.vxlan == nil && d.udp != nil && d.udp.DstPort == 4789 {
		d.udp = nil
	}
	return d
}

// await returns the first frame the peer receives within timeout that match
// accepts, or nil.
func (tp *topo) await(timeout time.Duration, match func(*decoded) bool) *decoded {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		f := tp.raw.Next(left)
		if f == nil {
			return nil
		}
		if d := decode(f); match(d) {
			return d
		}
	}
}

// xdpAttached reports whether an XDP program is attached to d0.
func (tp *topo) xdpAttached(t testing.TB) bool {
	t.Helper()
	l, err := tp.gw.NL.LinkByName("d0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
}

// hasAddr reports whether d0 carries a.
func (tp *topo) hasAddr(t testing.TB, a netip.Addr) bool {
	t.Helper()
	return tp.gw.HasAddr(t, "d0", a)
}

// server is a UDP echo server in the peer namespace that reports the source
// of every datagram it gets.
type server struct {
	conn *net.UDPConn
	seen chan netip.AddrPort
}

func (tp *topo) startServer(t *testing.T) *server {
	t.Helper()
	var c *net.UDPConn
	err := tp.peer.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(serverIP, serverPort)))
		return err
	})
	if err != nil {
		t.Fatalf("server socket: %v", err)
	}
	s := &server{conn: c, seen: make(chan netip.AddrPort, 64)}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			select {
			case s.seen <- from:
			default:
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return s
}

// udpRoundTrip sends UDP from the pod (source port sport) until the echo
// comes back encapsulated, at most tries times; it returns the SNATed frame
// seen on the wire and the reply, nil if they never came.
func (tp *topo) udpRoundTrip(t testing.TB, sport uint16, payload string, tries int) (snat, reply *decoded) {
	t.Helper()
	for try := 0; try < tries && reply == nil; try++ {
		if err := tp.raw.Send(tp.podUDP(t, nodeVTEP, podIP, sport, payload)); err != nil {
			t.Fatal(err)
		}
		reply = tp.await(300*time.Millisecond, func(d *decoded) bool {
			if d.vxlan == nil && d.outer != nil && d.udp != nil && d.udp.DstPort == serverPort && d.udp.SrcPort == layers.UDPPort(sport) {
				snat = d
			}
			return d.vxlan != nil && d.inner != nil && d.udp != nil && d.udp.DstPort == layers.UDPPort(sport)
		})
	}
	return snat, reply
}
