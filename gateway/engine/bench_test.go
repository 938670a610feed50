package engine

import (
	"github.com/egret-gw/egret/gateway/config"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/internal/nictest"
	"github.com/egret-gw/egret/nat"
)

// staticRoutes sends everything out of ifindex 1.
func staticRoutes() *route.Cache {
	hop := route.Hop{Ifindex: 1, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, MTU: 1500}
	return route.NewStatic(route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: hop}, route.Static{Prefix: netip.MustParsePrefix("::/0"), Hop: hop})
}

func benchFrame(tb testing.TB, sport uint16) []byte {
	ser := func(ls ...gopacket.SerializableLayer) []byte {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			tb.Fatal(err)
		}
		return buf.Bytes()
	}
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	iip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 244, 1, 5}, DstIP: net.IP{198, 51, 100, 10}}
	iudp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 8081}
	iudp.SetNetworkLayerForChecksum(iip)
	inner := ser(&layers.Ethernet{SrcMAC: mac, DstMAC: mac, EthernetType: layers.EthernetTypeIPv4}, iip, iudp, gopacket.Payload(make([]byte, 64)))
	oip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 2}, DstIP: net.IP{10, 0, 0, 1}}
	oudp := &layers.UDP{SrcPort: 50000, DstPort: 4789}
	oudp.SetNetworkLayerForChecksum(oip)
	return ser(&layers.Ethernet{SrcMAC: mac, DstMAC: mac, EthernetType: layers.EthernetTypeIPv4}, oip, oudp,
		&layers.VXLAN{ValidIDFlag: true, VNI: 100}, gopacket.Payload(inner))
}

// newBenchLoop is a queue loop on one in-memory port (ifindex 1) and
// the peer port that feeds it and drains what it sends.
func newBenchLoop(tb testing.TB) (*queueLoop, *nictest.Mem) {
	ct, err := conntrack.New(conntrack.Config{MaxFlows: 1 << 16})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := gateway.NewPipeline(ct, nat.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	snap, err := gateway.NewSnapshot(gateway.Config{
		VTEPs:   []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		Tunnels: []gateway.TunnelVNI{{Tunnel: gateway.TunnelVXLAN, VNI: 100}},
		Nodes: []gateway.Node{{Name: "w1", VTEP: netip.MustParseAddr("10.0.0.2"),
			Pods: []gateway.Pod{{Addr: netip.MustParseAddr("10.244.1.5"), Policy: "blue"}}}},
		Policies: []gateway.Policy{{Name: "blue", EgressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.101")}}},
		Routes:   staticRoutes(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Swap(snap); err != nil {
		tb.Fatal(err)
	}
	a, b, err := nictest.NewMemPair(1024, 2048, 0, 256)
	if err != nil {
		tb.Fatal(err)
	}
	w := &queueLoop{gw: p.NewProcessor(1), pool: a.Pool(), ports: []nic.Queue{a}, ifindex: []int{1}, kernelRx: []bool{false},
		batch: config.DefaultBatch, wait: time.Millisecond, now: nanotime, expireEvery: int64(time.Second), expireBudget: 64,
		tx: make([]nic.Batch, 1)}
	return w, b
}

// feed puts a batch of frames on the peer side for the loop to receive.
func feed(b *nictest.Mem, frames [][]byte) {
	var bt nic.Batch
	b.Pool().Alloc(&bt, len(frames))
	for i, f := range frames {
		copy(bt.Buf[i][bt.Off[i]:], f)
		bt.SetFrame(i, bt.Off[i], len(f))
	}
	b.Transmit(&bt)
}

// TestQueueLoopForwards checks the loop's plumbing on in-memory ports: every
// tunnel frame comes out SNATed, and nothing is counted as lost.
func TestQueueLoopForwards(t *testing.T) {
	w, peer := newBenchLoop(t)
	frames := make([][]byte, nic.MaxBatch)
	for i := range frames {
		frames[i] = benchFrame(t, uint16(30000+i))
	}
	feed(peer, frames)
	if n := w.receive(0, time.Second); n != len(frames) {
		t.Fatalf("loop received %d frames, want %d", n, len(frames))
	}
	var got nic.Batch
	if err := peer.Receive(&got, time.Second); err != nil || got.N != len(frames) {
		t.Fatalf("peer got %d frames (%v), want %d; counters %+v", got.N, err, len(frames), w.pub.read())
	}
	for i := 0; i < got.N; i++ {
		f := got.Frame(i)
		if len(f) < 34 || netip.AddrFrom4([4]byte(f[26:30])) != netip.MustParseAddr("192.0.2.101") {
			t.Fatalf("frame %d does not leave from the egress IP: % x", i, f[:min(len(f), 34)])
		}
	}
	got.Release()
	if st := w.gw.Stats(); st.Count(gateway.CounterForwarded) != uint64(len(frames)) {
		t.Errorf("forwarded %d, want %d", st.Count(gateway.CounterForwarded), len(frames))
	}
	c := w.pub.read()
	if c.BusyNanos == 0 {
		t.Error("a loop that handled a batch counted no busy time")
	}
	if c.BusyNanos = 0; c != (Counters{}) {
		t.Errorf("engine counted losses: %+v", c)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		feed(peer, frames)
		w.receive(0, time.Second)
		peer.Receive(&got, time.Second)
		got.Release()
	}); allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
}

// BenchmarkQueueLoop measures the engine's per-frame cost around the pipeline
// (receive, output buffer allocation, Process, Take, Transmit) on in-memory
// ports; the peer's copies are included. One op is one frame.
func BenchmarkQueueLoop(b *testing.B) {
	w, peer := newBenchLoop(b)
	frames := make([][]byte, nic.MaxBatch)
	for i := range frames {
		frames[i] = benchFrame(b, uint16(30000+i))
	}
	var got nic.Batch
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(frames) {
		feed(peer, frames)
		w.receive(0, time.Second)
		peer.Receive(&got, time.Second)
		got.Release()
	}
}
