package gwagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/config"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
)

// Topology: the gateway namespace (d0, VTEP 10.78.0.1) and a peer namespace
// (p0) that plays worker node w1 (VTEP 10.78.0.2, crafted tunnel frames
// through a raw socket) and the outside server (10.78.0.50, a real UDP
// echo socket).
var (
	nsGwPrefix   = netip.MustParsePrefix("10.78.0.1/24")
	nsPeerPrefix = netip.MustParsePrefix("10.78.0.2/24")
	nsServer     = netip.MustParseAddr("10.78.0.50")
	nsEgressIP   = netip.MustParseAddr("10.78.0.100")
	nsPod        = netip.MustParseAddr("10.244.1.5")
	nsNodeMAC    = net.HardwareAddr{0x02, 0x65, 0x67, 0, 0, 0x11}
)

const (
	nsServerPort = 7777
	nsVNI        = 100
)

const manifests = `apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {env: prod}}
---
apiVersion: v1
kind: Node
metadata: {name: g1, annotations: {egret.io/vtep: "10.78.0.1"}}
status: {addresses: [{type: InternalIP, address: 10.78.0.1}]}
---
apiVersion: v1
kind: Node
metadata: {name: w1, annotations: {egret.io/vtep: "10.78.0.2", egret.io/tunnel-mac: "02:65:67:00:00:11"}}
status: {addresses: [{type: InternalIP, address: 10.78.0.2}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: w1, containers: [{name: c, image: x}]}
status: {phase: Running, podIPs: [{ip: 10.244.1.5}]}
---
apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: blue}
spec:
  egressIPs: [10.78.0.100]
  namespaceSelector: {matchLabels: {env: prod}}
  podSelector: {matchExpressions: [{key: app, operator: In, values: [web]}]}
`

// writeStatus writes the status a controller would, placing blue's IP on node.
func writeStatus(t *testing.T, dir, node string) {
	t.Helper()
	st := fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata: {name: blue}
spec:
  egressIPs: [10.78.0.100]
  namespaceSelector: {matchLabels: {env: prod}}
status:
  items:
  - {node: %s, egressIP: 10.78.0.100}
`, node)
	p := filepath.Join(dir, "status", "blue.yaml")
	if err := os.WriteFile(p+".tmp", []byte(st), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}

type nsTopo struct {
	gw, peer *nstest.NS
	d0, p0   *nstest.Veth
	raw      *nstest.Raw
}

func (tp *nsTopo) hasAddr(t *testing.T, a netip.Addr) bool {
	t.Helper()
	return tp.gw.HasAddr(t, "d0", a)
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// podUDP is a VXLAN frame from w1 carrying UDP from the pod to the server.
func (tp *nsTopo) podUDP(t *testing.T, sport uint16) []byte {
	ieth := &layers.Ethernet{SrcMAC: nsNodeMAC, DstMAC: net.HardwareAddr{2, 0x65, 10, 78, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
	iip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: nsPod.AsSlice(), DstIP: nsServer.AsSlice(), Flags: layers.IPv4DontFragment}
	iudp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: nsServerPort}
	iudp.SetNetworkLayerForChecksum(iip)
	inner := serialize(t, ieth, iip, iudp, gopacket.Payload("hello"))
	eth := &layers.Ethernet{SrcMAC: tp.p0.MAC, DstMAC: tp.d0.MAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: nsPeerPrefix.Addr().AsSlice(), DstIP: nsGwPrefix.Addr().AsSlice()}
	udp := &layers.UDP{SrcPort: 50123, DstPort: 4789}
	udp.SetNetworkLayerForChecksum(ip)
	return serialize(t, eth, ip, udp, &layers.VXLAN{ValidIDFlag: true, VNI: nsVNI}, gopacket.Payload(inner))
}

// echo serves UDP echo on srv and reports each datagram's source.
func echo(srv *net.UDPConn) <-chan netip.AddrPort {
	seen := make(chan netip.AddrPort, 64)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			select {
			case seen <- from:
			default:
			}
			srv.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return seen
}

// roundTrip sends pod UDP until the echo comes back through the tunnel; it
// returns what the server saw as source and the reply's inner Ethernet header.
func (tp *nsTopo) roundTrip(t *testing.T, seen <-chan netip.AddrPort, sport uint16) (netip.AddrPort, *layers.Ethernet) {
	t.Helper()
	for len(seen) > 0 {
		<-seen
	}
	var from netip.AddrPort
	for try := 0; try < 10; try++ {
		if err := tp.raw.Send(tp.podUDP(t, sport)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			select {
			case from = <-seen:
			default:
			}
			f := tp.raw.Next(50 * time.Millisecond)
			if f == nil {
				continue
			}
			p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
			vx, ok := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
			if !ok {
				continue
			}
			ip := gopacket.NewPacket(vx.LayerPayload(), layers.LayerTypeEthernet, gopacket.Default)
			u, ok := ip.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if ok && u.DstPort == layers.UDPPort(sport) {
				if !from.IsValid() {
					select {
					case from = <-seen:
					case <-time.After(time.Second):
					}
				}
				return from, ip.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			}
		}
	}
	return from, nil
}

// countGARPs counts gratuitous ARPs for ip from mac seen on p0 within d.
func (tp *nsTopo) countGARPs(ip netip.Addr, mac net.HardwareAddr, d time.Duration) int {
	n := 0
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return n
		}
		f := tp.raw.Next(left)
		if f == nil {
			return n
		}
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		if ok && net.HardwareAddr(a.SourceHwAddress).String() == mac.String() &&
			netip.AddrFrom4([4]byte(a.SourceProtAddress)) == ip && netip.AddrFrom4([4]byte(a.DstProtAddress)) == ip {
			n++
		}
	}
}

// healthOf asks the agent's health service (in the gateway namespace) from
// the peer namespace.
func healthOf(t *testing.T, tp *nsTopo, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	dial := func(ctx context.Context, a string) (net.Conn, error) {
		var c net.Conn
		err := tp.peer.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", a)
			return err
		})
		return c, err
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: health.Service})
	if err != nil {
		t.Fatalf("health check of %s: %v", addr, err)
	}
	return resp.GetStatus()
}

// newNsTopo builds the two namespaces, the veth pair and the echo server.
func newNsTopo(t *testing.T) (*nsTopo, <-chan netip.AddrPort) {
	// Named: binary_test runs the gateway in it through ip netns exec.
	d0, p0 := nstest.VethPair(t, nstest.Named(t), "d0", nsGwPrefix, nstest.New(t), "p0", nsPeerPrefix)
	peer := p0.NS
	peer.AddAddr(t, "p0", netip.PrefixFrom(nsServer, 24))
	tp := &nsTopo{gw: d0.NS, peer: peer, d0: d0, p0: p0, raw: peer.OpenRaw(t, "p0")}
	var srv *net.UDPConn
	if err := peer.Do(func() error {
		var err error
		srv, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(nsServer, nsServerPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return tp, echo(srv)
}

var nsHealthAddr = netip.AddrPortFrom(nsGwPrefix.Addr(), health.DefaultPort).String()

// startAgent runs an agent for node g1 on d0 with the real engine, in the
// gateway namespace, with its health service on nsHealthAddr. The returned
// function stops it (also called by t.Cleanup).
func startAgent(t *testing.T, tp *nsTopo, src cluster.Source, fence time.Duration) (*Agent, func()) {
	a := &Agent{Node: "g1", Source: src, FenceAfter: fence, Log: testLog(t),
		Base: config.Spec{Interfaces: []string{"d0"}, Mode: "afxdp", Tunnel: config.TunnelVXLAN, VNI: nsVNI, RouterV4: netip.MustParseAddr("169.254.78.1")},
		StartDataPlane: func(s *config.Settled) (DataPlane, error) {
			e, err := engine.New(s, engine.Options{Logger: testLog(t), Announcements: 3, AnnounceInterval: 50 * time.Millisecond})
			if err != nil {
				return nil, err
			}
			e.Start()
			return e, nil
		}}
	return a, runAgent(t, tp, a, nsHealthAddr)
}

// runAgent runs a in the gateway namespace, where the engine and (if
// healthAddr is set) the health listener are created. The returned
// function stops it (also called by t.Cleanup).
func runAgent(t *testing.T, tp *nsTopo, a *Agent, healthAddr string) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tp.gw.Do(func() error {
			if healthAddr != "" {
				hs, err := health.Listen(healthAddr)
				if err != nil {
					return err
				}
				defer hs.Stop()
				a.Health = hs
			}
			return a.Run(ctx)
		})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestAgentNetns runs the agent with the file source and the real engine
// in a throwaway namespace.
func TestAgentNetns(t *testing.T) {
	tp, seen := newNsTopo(t)
	dir := t.TempDir()
	objs := filepath.Join(dir, "objects")
	if err := os.MkdirAll(filepath.Join(objs, "status"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(objs, "cluster.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	writeStatus(t, objs, "g2") // hosted elsewhere at first

	const fence = time.Second
	src, err := cluster.NewDirReader(objs, 100*time.Millisecond, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	a, stop := startAgent(t, tp, src, fence)
	healthAddr, d0, gw := nsHealthAddr, tp.d0, tp.gw

	nstest.Eventually(t, "data plane running", 10*time.Second, func() bool { return a.State().Running })
	if got := healthOf(t, tp, healthAddr); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v with the data plane up", got)
	}
	if tp.hasAddr(t, nsEgressIP) {
		t.Fatal("egress IP claimed while the status places it on g2")
	}

	// The controller places the IP here: claimed, announced 3 times, SNAT to it.
	writeStatus(t, objs, "g1")
	el := nstest.Eventually(t, "egress IP claimed", 3*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })
	t.Logf("claimed %v after the status changed", el)
	if n := tp.countGARPs(nsEgressIP, d0.MAC, time.Second); n != 3 {
		t.Errorf("captured %d gratuitous ARPs for %v, want 3", n, nsEgressIP)
	}
	from, reply := tp.roundTrip(t, seen, 40001)
	if from.Addr() != nsEgressIP {
		t.Fatalf("server saw source %v, want the egress IP %v", from, nsEgressIP)
	}
	if reply == nil || reply.DstMAC.String() != nsNodeMAC.String() {
		t.Fatalf("reply inner Ethernet %+v; want destination %v (the node's tunnel-mac annotation)", reply, nsNodeMAC)
	}

	// The assignment moves to g2: released at once.
	writeStatus(t, objs, "g2")
	el = nstest.Eventually(t, "egress IP released", 3*time.Second, func() bool { return !tp.hasAddr(t, nsEgressIP) })
	t.Logf("released %v after the status changed", el)

	// Back here, then the source becomes unreachable: fenced.
	writeStatus(t, objs, "g1")
	nstest.Eventually(t, "egress IP claimed again", 3*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })
	hidden := filepath.Join(dir, "hidden")
	if err := os.Rename(objs, hidden); err != nil {
		t.Fatal(err)
	}
	el = nstest.Eventually(t, "fenced: egress IP released", fence+2*time.Second, func() bool { return !tp.hasAddr(t, nsEgressIP) })
	t.Logf("released %v after the directory became unreadable (fence-after %v)", el, fence)
	if el > fence+a.CheckEvery+500*time.Millisecond {
		t.Errorf("fencing took %v; fence-after is %v", el, fence)
	}
	if got := healthOf(t, tp, healthAddr); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health %v while fenced", got)
	}
	// Contact returns and the status still says g1: claimed again.
	if err := os.Rename(hidden, objs); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, "claimed after contact returned", 3*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })
	nstest.Eventually(t, "SERVING after contact returned", 2*time.Second, func() bool {
		return healthOf(t, tp, healthAddr) == healthpb.HealthCheckResponse_SERVING
	})
	if from, _ := tp.roundTrip(t, seen, 40002); from.Addr() != nsEgressIP {
		t.Fatalf("after fencing: server saw %v", from)
	}

	stop()
	if tp.hasAddr(t, nsEgressIP) {
		t.Error("egress IP left on d0 after the agent stopped")
	}
	if l, err := gw.NL.LinkByName("d0"); err != nil || (l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached) {
		t.Errorf("XDP still attached after the agent stopped (err %v)", err)
	}
}
