package engine_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
)

// A second network: the gateway's d1 (10.78.0.1/24) to an outside
// namespace whose s0 holds the server 10.78.0.50, reachable only there.
var (
	d1Prefix   = netip.MustParsePrefix("10.78.0.1/24")
	s0Prefix   = netip.MustParsePrefix("10.78.0.50/24")
	secondSrv  = netip.MustParseAddrPort("10.78.0.50:7777")
	secondEgIP = netip.MustParseAddr("10.78.0.100")
)

// secondNet is the outside namespace of the second network, with its UDP
// echo server and a raw socket on s0.
type secondNet struct {
	out  *nstest.NS
	s0   *nstest.Veth
	d1   *nstest.Veth
	raw  *nstest.Raw
	seen chan netip.AddrPort
}

// addSecondNet joins the gateway namespace to a new outside namespace by
// d1/s0 and starts the echo server there.
func addSecondNet(t *testing.T, tp *topo) *secondNet {
	t.Helper()
	out := nstest.New(t)
	d1, s0 := nstest.VethPair(t, tp.gw, "d1", d1Prefix, out, "s0", s0Prefix)
	sn := &secondNet{out: out, s0: s0, d1: d1, raw: out.OpenRaw(t, "s0"), seen: make(chan netip.AddrPort, 16)}
	var c *net.UDPConn
	if err := out.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(secondSrv))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			select {
			case sn.seen <- from:
			default:
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return sn
}

// arpRequest asks from (mac, ip) who has target.
func arpRequest(t testing.TB, mac net.HardwareAddr, ip, target netip.Addr) []byte {
	arp := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: mac, SourceProtAddress: ip.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: target.AsSlice()}
	return serialize(t, &layers.Ethernet{SrcMAC: mac, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP}, arp)
}

// arpAnswer waits up to wait on raw for an ARP reply for target and
// returns the MAC it gives, nil if none came.
func arpAnswer(raw *nstest.Raw, target netip.Addr, wait time.Duration) net.HardwareAddr {
	deadline := time.Now().Add(wait)
	for left := wait; left > 0; left = time.Until(deadline) {
		f := raw.Next(left)
		if f == nil {
			return nil
		}
		a, ok := decode(f).packet.Layer(layers.LayerTypeARP).(*layers.ARP)
		if ok && a.Operation == layers.ARPReply && bytes.Equal(a.SourceProtAddress, target.AsSlice()) {
			return net.HardwareAddr(a.SourceHwAddress)
		}
	}
	return nil
}

// startSpec is startEngine for a configuration the test completes in its
// typed form (as the gateway agent builds it).
func startSpec(t *testing.T, tp *topo, cfg *config.Config, edit func(*config.Spec)) *engine.Engine {
	t.Helper()
	spec, err := cfg.Spec()
	if err != nil {
		t.Fatal(err)
	}
	edit(spec)
	set, err := spec.Settle()
	if err != nil {
		t.Fatal(err)
	}
	tp.gw.Enter(t)
	eng, err := engine.New(set, engine.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	eng.Start()
	return eng
}

// secondNICConfig serves d0 (tunnel) and d1 (the second network) in
// AF_XDP mode, with egress as policy blue's egress IP.
func secondNICConfig(tp *topo, egress netip.Addr) *config.Config {
	cfg := tp.config()
	cfg.Interfaces = []string{"d0", "d1"}
	cfg.Mode = "afxdp"
	cfg.Policies[0].EgressIPs = []string{egress.String()}
	return cfg
}

// leavesThroughSecondNIC sends UDP from the pod to the second network's
// server through the tunnel until the echo comes back, and checks that the
// server saw egress and that d1 carried it.
func (sn *secondNet) leavesThroughSecondNIC(t *testing.T, tp *topo, eng *engine.Engine, egress netip.Addr, sport uint16) {
	t.Helper()
	ip := innerIP(podIP, secondSrv.Addr(), layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(secondSrv.Port())}
	udp.SetNetworkLayerForChecksum(ip)
	frame := tp.tunnelFrame(t, nodeVTEP, ip, udp, gopacket.Payload("second nic"))
	var reply *decoded
	for try := 0; try < 20 && reply == nil; try++ {
		tp.raw.Send(frame)
		reply = tp.await(300*time.Millisecond, func(d *decoded) bool {
			return d.vxlan != nil && d.udp != nil && d.udp.DstPort == layers.UDPPort(sport)
		})
	}
	if reply == nil {
		t.Fatalf("no reply back through the tunnel; stats %+v", eng.Stats())
	}
	if from := <-sn.seen; from != netip.AddrPortFrom(egress, sport) {
		t.Errorf("server on d1's side saw %v, want %v:%d", from, egress, sport)
	}
	if string(reply.udp.Payload) != "second nic" || reply.inner.DstIP.String() != podIP.String() {
		t.Errorf("reply %q to %v", reply.udp.Payload, reply.inner.DstIP)
	}
	var tx0, tx1 uint64
	for _, p := range eng.Stats().Ports {
		switch p.Name {
		case "afxdp:d0/0":
			tx0 = p.TxFrames
		case "afxdp:d1/0":
			tx1 = p.TxFrames
		}
	}
	if tx0 == 0 || tx1 == 0 {
		t.Errorf("expected transmissions on both interfaces, got d0 %d d1 %d", tx0, tx1)
	}
}

// claimedOnD1Only checks that egress sits on d1 and not d0, that an ARP
// request for it is answered with d1's MAC on the second network, and
// that one on d0's network is not answered.
func (sn *secondNet) claimedOnD1Only(t *testing.T, tp *topo, egress netip.Addr) {
	t.Helper()
	if !tp.gw.HasAddr(t, "d1", egress) || tp.hasAddr(t, egress) {
		t.Fatalf("egress IP %v should be claimed on d1 (its subnet), not d0", egress)
	}
	if err := tp.raw.Send(arpRequest(t, tp.p0.MAC, nodeVTEP, egress)); err != nil {
		t.Fatal(err)
	}
	if err := sn.raw.Send(arpRequest(t, sn.s0.MAC, sn.s0.Addr.Addr(), egress)); err != nil {
		t.Fatal(err)
	}
	if mac := arpAnswer(sn.raw, egress, 2*time.Second); mac.String() != sn.d1.MAC.String() {
		t.Fatalf("ARP for %v on the second network answered with %v, want d1's %v", egress, mac, sn.d1.MAC)
	}
	// The d0 request went first; its answer, if any, would be here by now.
	if mac := arpAnswer(tp.raw, egress, 300*time.Millisecond); mac != nil {
		t.Errorf("ARP for %v answered on d0's network with %v (d0 %v, d1 %v): claimed on the wrong NIC", egress, mac, tp.d0.MAC, sn.d1.MAC)
	}
}

// TestEngineTwoInterfaces serves the tunnel on d0 and the outside on d1:
// one worker polls both sockets, frames cross interfaces from the shared
// UMEM, and the egress IP is claimed on d1, whose subnet holds it (the
// engine's own pick: no subnet given), answering ARP there and not on d0.
func TestEngineTwoInterfaces(t *testing.T) {
	tp := newTopo(t)
	sn := addSecondNet(t, tp)
	eng := startEngine(t, tp, secondNICConfig(tp, secondEgIP), defaultOptions())
	for name, m := range eng.Modes() {
		if m != "afxdp" {
			t.Fatalf("%s runs in %s mode", name, m)
		}
	}
	sn.claimedOnD1Only(t, tp, secondEgIP)
	sn.leavesThroughSecondNIC(t, tp, eng, secondEgIP, 43000)
}

// TestEngineClaimsOnPlacedSubnet: given the subnet the controller placed
// an egress IP by (config.EgressIPSubnets), the engine claims it on the
// interface holding that subnet, even where its own longest-prefix pick
// would differ (d0 also carries 10.78.0.2/16, which holds the IP too).
func TestEngineClaimsOnPlacedSubnet(t *testing.T) {
	tp := newTopo(t)
	sn := addSecondNet(t, tp)
	tp.gw.AddAddr(t, "d0", netip.MustParsePrefix("10.78.0.2/16"))
	onD0 := netip.MustParseAddr("10.78.0.101")
	cfg := secondNICConfig(tp, secondEgIP)
	cfg.Policies = append(cfg.Policies, config.PolicyEntry{Name: "green", EgressIPs: []string{onD0.String()}})
	eng := startSpec(t, tp, cfg, func(s *config.Spec) {
		s.EgressIPSubnets = map[netip.Addr]netip.Prefix{secondEgIP: d1Prefix, onD0: netip.MustParsePrefix("10.78.0.2/16")}
	})
	sn.claimedOnD1Only(t, tp, secondEgIP)
	if !tp.hasAddr(t, onD0) || tp.gw.HasAddr(t, "d1", onD0) {
		t.Errorf("%v should be claimed on d0, where the controller placed it, not d1 (the longest prefix)", onD0)
	}
	sn.leavesThroughSecondNIC(t, tp, eng, secondEgIP, 43001)
}

// TestEngineServesPlacedInterface: the controller placed an egress IP by
// the subnet of d1, which the configuration does not name (OVN-Kubernetes'
// host-cidrs list every interface): the engine serves d1 as well (XDP,
// sockets), claims the IP there and its traffic leaves there.
func TestEngineServesPlacedInterface(t *testing.T) {
	tp := newTopo(t)
	sn := addSecondNet(t, tp)
	cfg := secondNICConfig(tp, secondEgIP)
	cfg.Interfaces = []string{"d0"}
	eng := startSpec(t, tp, cfg, func(s *config.Spec) {
		s.EgressIPSubnets = map[netip.Addr]netip.Prefix{secondEgIP: d1Prefix}
	})
	if m := eng.Modes(); m["d1"] != "afxdp" {
		t.Fatalf("modes %v: d1, holding the placed subnet, is not served in AF_XDP mode", m)
	}
	sn.claimedOnD1Only(t, tp, secondEgIP)
	sn.leavesThroughSecondNIC(t, tp, eng, secondEgIP, 43003)
}

// TestEngineRefusesUnplacedIP: an egress IP no served interface's subnet
// holds is claimed nowhere (the engine used to put it on the first
// interface), not on the unserved interface that has its subnet either,
// and left out of Hosted; the log names that interface. Once an address of
// its subnet appears on d1 it is claimed there.
func TestEngineRefusesUnplacedIP(t *testing.T) {
	tp := newTopo(t)
	addSecondNet(t, tp)
	nstest.VethPair(t, tp.gw, "d9", netip.MustParsePrefix("10.99.0.9/24"), nstest.New(t), "x9", netip.Prefix{})
	lost := netip.MustParseAddr("10.99.0.100")
	var log syncBuffer
	opt := defaultOptions()
	opt.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, &log), nil))
	eng := startEngine(t, tp, secondNICConfig(tp, lost), opt)
	if tp.hasAddr(t, lost) || tp.gw.HasAddr(t, "d1", lost) || tp.gw.HasAddr(t, "d9", lost) {
		t.Fatalf("%v is claimed although no served interface holds its subnet", lost)
	}
	if want := "its subnet 10.99.0.0/24 is on interface d9, which the gateway does not serve"; !strings.Contains(log.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, log.String())
	}
	if h := eng.Hosted(nil); len(h) != 0 {
		t.Errorf("Hosted = %v, want none: the refused IP is not answered for", h)
	}
	tp.gw.AddAddr(t, "d1", netip.MustParsePrefix("10.99.0.1/24"))
	nstest.Eventually(t, "claim on d1 once it holds the subnet", 5*time.Second, func() bool { return tp.gw.HasAddr(t, "d1", lost) })
	if tp.hasAddr(t, lost) {
		t.Errorf("%v also claimed on d0", lost)
	}
	if h := eng.Hosted(nil); len(h) != 1 || h[0] != lost {
		t.Errorf("Hosted = %v, want [%v]", h, lost)
	}
}

// TestEngineSecondNICAppears: a configured interface that does not exist
// at start is served once it appears, without a restart: XDP and sockets
// on it, the egress IP of its subnet claimed there, traffic through it.
func TestEngineSecondNICAppears(t *testing.T) {
	tp := newTopo(t)
	eng := startEngine(t, tp, secondNICConfig(tp, secondEgIP), defaultOptions())
	if m := eng.Modes(); len(m) != 1 {
		t.Fatalf("serving %v before d1 exists", m)
	}
	sn := addSecondNet(t, tp)
	nstest.Eventually(t, "d1 served in AF_XDP mode", 5*time.Second, func() bool { return eng.Modes()["d1"] == "afxdp" })
	nstest.Eventually(t, "egress IP claimed on d1", 5*time.Second, func() bool { return tp.gw.HasAddr(t, "d1", secondEgIP) })
	sn.claimedOnD1Only(t, tp, secondEgIP)
	sn.leavesThroughSecondNIC(t, tp, eng, secondEgIP, 43002)
}

// syncBuffer is a bytes.Buffer safe for the engine's goroutines to log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
