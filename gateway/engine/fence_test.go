package engine_test

import (
	"bytes"
	"net"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/nftables"

	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/internal/nstest"
)

// probe is what the peer sends to an egress IP, and what would betray a
// kernel that still serves it.
type probe struct {
	name   string
	frame  []byte
	answer func(*decoded) bool
}

// probes asks about egressIP the three ways a dead gateway's kernel would
// answer: an ARP request, a TCP SYN to a listening port, an ICMP echo.
func (tp *topo) probes(t *testing.T, port uint16) []probe {
	from := nodeVTEP
	arp := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: tp.p0.MAC, SourceProtAddress: from.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: egressIP.AsSlice()}
	arpFrame := serialize(t, &layers.Ethernet{SrcMAC: tp.p0.MAC, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP}, arp)
	eth := &layers.Ethernet{SrcMAC: tp.p0.MAC, DstMAC: tp.d0.MAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: from.AsSlice(), DstIP: egressIP.AsSlice()}
	syn := &layers.TCP{SrcPort: 41000, DstPort: layers.TCPPort(port), SYN: true, Seq: 1000, Window: 65535}
	syn.SetNetworkLayerForChecksum(ip)
	synFrame := serialize(t, eth, ip, syn)
	ip2 := *ip
	ip2.Protocol = layers.IPProtocolICMPv4
	echo := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 7, Seq: 1}
	echoFrame := serialize(t, eth, &ip2, echo, gopacket.Payload("fence"))
	fromEgress := func(d *decoded) bool {
		return d.outer != nil && netip.AddrFrom4([4]byte(d.outer.SrcIP.To4())) == egressIP
	}
	return []probe{
		{"ARP request", arpFrame, func(d *decoded) bool {
			a, ok := d.packet.Layer(layers.LayerTypeARP).(*layers.ARP)
			return ok && a.Operation == layers.ARPReply && bytes.Equal(a.SourceProtAddress, egressIP.AsSlice())
		}},
		{"TCP SYN", synFrame, func(d *decoded) bool { return fromEgress(d) && d.tcp != nil && d.vxlan == nil }},
		{"ICMP echo", echoFrame, func(d *decoded) bool {
			return fromEgress(d) && d.icmp != nil && d.icmp.TypeCode.Type() == layers.ICMPv4TypeEchoReply
		}},
	}
}

// answered sends p and reports whether anything answers within wait.
func (tp *topo) answered(t *testing.T, p probe, wait time.Duration) bool {
	t.Helper()
	if err := tp.raw.Send(p.frame); err != nil {
		t.Fatalf("send %s: %v", p.name, err)
	}
	return tp.await(wait, p.answer) != nil
}

// fenceTables lists the fence tables in the gateway namespace.
func (tp *topo) fenceTables(t *testing.T) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(tp.gw.Handle)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tb := range ts {
		if tb.Name == claim.FenceTable {
			out = append(out, tb.Name)
		}
	}
	return out
}

// TestKilledGatewayLeavesIPsMute is kill -9 of the real binary, in both
// modes: the egress IP stays on d0, but the dead gateway's kernel must not
// answer ARP for it, take a TCP connection to a node service on it, or
// answer a ping; a new gateway then serves it again, and a clean stop
// leaves nothing behind.
func TestKilledGatewayLeavesIPsMute(t *testing.T) {
	bin := egretBinary(t)
	for _, mode := range []string{"afxdp", "afpacket"} {
		t.Run(mode, func(t *testing.T) {
			tp := newTopo(t)
			tp.startServer(t)
			// A node service listening on every address, as sshd does.
			var ln net.Listener
			if err := tp.gw.Do(func() (err error) { ln, err = net.Listen("tcp4", ":2222"); return err }); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
			writeConfig(t, cfgPath, tp.config())
			args := []string{"--config", cfgPath, "--mode", mode, "--log-format", "json"}
			probes := tp.probes(t, 2222)

			g := tp.startGateway(t, bin, args...)
			tp.waitRunning(t, g)
			if !tp.answered(t, probes[0], 2*time.Second) {
				t.Fatalf("the live gateway does not answer ARP for %v\n%s", egressIP, g.output())
			}
			g.stop(t, syscall.SIGKILL)
			if !tp.hasAddr(t, egressIP) {
				t.Fatal("expected kill -9 to leave the egress IP on d0 (nothing ran to remove it)")
			}
			for _, p := range probes {
				if tp.answered(t, p, time.Second) {
					t.Errorf("after kill -9 the kernel answers a %s to %v", p.name, egressIP)
				}
			}

			g = tp.startGateway(t, bin, args...)
			tp.waitRunning(t, g)
			if !tp.answered(t, probes[0], 2*time.Second) {
				t.Errorf("the new gateway does not answer ARP for %v\n%s", egressIP, g.output())
			}
			if _, reply := tp.udpRoundTrip(t, 42010, "after the kill", 20); reply == nil {
				t.Errorf("no round trip through the new gateway\n%s", g.output())
			}
			if err := g.stop(t, syscall.SIGTERM); err != nil {
				t.Fatalf("exit after SIGTERM: %v\n%s", err, g.output())
			}
			if tp.hasAddr(t, egressIP) {
				t.Error("egress IP left on d0 after release")
			}
			if ts := tp.fenceTables(t); len(ts) > 0 {
				t.Errorf("fence tables %v left after every IP was released", ts)
			}
		})
	}
}

// waitRunning waits until the gateway claimed the egress IP and runs, in
// whatever mode (waitReady also wants XDP).
func (tp *topo) waitRunning(t *testing.T, g *gatewayProc) {
	t.Helper()
	if !nstest.Soon(15*time.Second, func() bool {
		select {
		case err := <-g.done:
			g.done <- err
			t.Fatalf("egret gateway exited during start: %v\n%s", err, g.output())
		default:
		}
		return tp.hasAddr(t, egressIP) && bytes.Contains([]byte(g.output()), []byte("gateway: running"))
	}) {
		t.Fatalf("egret gateway not running after 15s:\n%s", g.output())
	}
}
