package engine_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/internal/nstest"
)

// TestEngineTwoInterfaces serves the tunnel on d0 and the outside on d1:
// one worker polls both sockets, frames cross interfaces from the shared
// UMEM, and the egress IP is claimed on d1, whose subnet holds it.
func TestEngineTwoInterfaces(t *testing.T) {
	tp := newTopo(t)
	out := nstest.New(t)
	nstest.VethPair(t, tp.gw, "d1", netip.MustParsePrefix("10.78.0.1/24"), out, "s0", netip.MustParsePrefix("10.78.0.50/24"))
	srvAddr := netip.MustParseAddrPort("10.78.0.50:7777")
	egress := netip.MustParseAddr("10.78.0.100")

	var c *net.UDPConn
	if err := out.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(srvAddr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	seen := make(chan netip.AddrPort, 16)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			select {
			case seen <- from:
			default:
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()

	cfg := tp.config()
	cfg.Interfaces = []string{"d0", "d1"}
	cfg.Mode = "afxdp"
	cfg.Policies[0].EgressIPs = []string{egress.String()}
	eng := startEngine(t, tp, cfg, defaultOptions())
	for name, m := range eng.Modes() {
		if m != "afxdp" {
			t.Fatalf("%s runs in %s mode", name, m)
		}
	}
	l, err := tp.gw.NL.LinkByName("d1")
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := tp.gw.NL.AddrList(l, netlink.FAMILY_V4)
	onD1 := false
	for _, a := range addrs {
		onD1 = onD1 || a.IP.Equal(egress.AsSlice())
	}
	if !onD1 || tp.hasAddr(t, egress) {
		t.Fatalf("egress IP %v should be claimed on d1 (its subnet), not d0", egress)
	}

	ip := innerIP(podIP, srvAddr.Addr(), layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: 43000, DstPort: layers.UDPPort(srvAddr.Port())}
	udp.SetNetworkLayerForChecksum(ip)
	frame := tp.tunnelFrame(t, nodeVTEP, ip, udp, gopacket.Payload("two interfaces"))
	var reply *decoded
	for try := 0; try < 20 && reply == nil; try++ {
		tp.raw.Send(frame)
		reply = tp.await(300*time.Millisecond, func(d *decoded) bool {
			return d.vxlan != nil && d.udp != nil && d.udp.DstPort == 43000
		})
	}
	if reply == nil {
		t.Fatalf("no reply back through the tunnel; stats %+v", eng.Stats())
	}
	if from := <-seen; from != netip.AddrPortFrom(egress, 43000) {
		t.Errorf("server on d1's side saw %v, want %v:43000", from, egress)
	}
	if string(reply.udp.Payload) != "two interfaces" || reply.inner.DstIP.String() != podIP.String() {
		t.Errorf("reply %q to %v", reply.udp.Payload, reply.inner.DstIP)
	}
	st := eng.Stats()
	var tx0, tx1 uint64
	for _, p := range st.Ports {
		switch p.Name {
		case "afxdp:d0/0":
			tx0 = p.TxFrames
		case "afxdp:d1/0":
			tx1 = p.TxFrames
		}
	}
	if tx0 == 0 || tx1 == 0 {
		t.Errorf("expected transmissions on both interfaces, got d0 %d d1 %d (ports %+v)", tx0, tx1, st.Ports)
	}
}
