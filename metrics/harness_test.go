package metrics

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
)

// The harness is a real gateway.Pipeline driven by crafted frames: pods on
// two nodes send UDP through VXLAN to a server, the server answers, and a
// share of bad frames exercises drop reasons. It stands in for the engine's
// I/O loop (which is not in the tree yet): it counts frames and bytes per
// "interface" and busy time per worker the way the engine would.

var (
	hGWVTEP   = netip.MustParseAddr("10.0.0.1")
	hNodeVTEP = [2]netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	hPods     = [2]netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.5")}
	hEgress   = [2]netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")}
	hServer   = netip.MustParseAddr("198.51.100.20")
	hStranger = netip.MustParseAddr("10.0.0.99")
	hGWMAC    = [6]byte{2, 0, 0, 0, 0xee, 1}
	hNodeMAC  = [6]byte{2, 0, 0, 0, 1, 1}
)

const (
	ifUnderlay = 8 // tunnel side
	ifOutside  = 7
)

var ifName = map[int]string{ifUnderlay: "eth-underlay", ifOutside: "eth-outside"}

// hRoutes: 10.0.0.0/24 is the underlay, everything else outside.
func hRoutes() *route.Cache {
	under := route.Hop{Ifindex: ifUnderlay, SrcMAC: [6]byte{2, 0xaa, 0, 0, 0, 2}, DstMAC: [6]byte{2, 0xcc, 0, 0, 0, 2}, MTU: 1500}
	out := route.Hop{Ifindex: ifOutside, SrcMAC: [6]byte{2, 0xaa, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0xbb, 0, 0, 0, 1}, MTU: 1500}
	return route.NewStatic(
		route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: under},
		route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: out},
		route.Static{Prefix: netip.MustParsePrefix("::/0"), Hop: out})
}

func harnessConfig() gateway.Config {
	return gateway.Config{
		VTEPs:    []netip.Addr{hGWVTEP},
		InnerMAC: hGWMAC,
		Tunnels:  []gateway.TunnelVNI{{Tunnel: gateway.TunnelVXLAN, VNI: 0}},
		Nodes: []gateway.Node{
			{Name: "node1", VTEP: hNodeVTEP[0], InnerMAC: hNodeMAC, Pods: []gateway.Pod{{Addr: hPods[0], Policy: "web"}}},
			{Name: "node2", VTEP: hNodeVTEP[1], InnerMAC: hNodeMAC, Pods: []gateway.Pod{{Addr: hPods[1], Policy: "db"}}},
		},
		Policies: []gateway.Policy{
			{Name: "web", EgressIPs: []netip.Addr{hEgress[0]}},
			{Name: "db", EgressIPs: []netip.Addr{hEgress[1]}},
		},
		Routes: hRoutes(),
	}
}

func newHarnessPipeline(t testing.TB, maxFlows int) *gateway.Pipeline {
	return newHarnessPipelineUDP(t, maxFlows, 0)
}

// newHarnessPipelineUDP is newHarnessPipeline with a UDP flow timeout (0: the default).
func newHarnessPipelineUDP(t testing.TB, maxFlows int, udpTimeout time.Duration) *gateway.Pipeline {
	t.Helper()
	ct, err := conntrack.New(conntrack.Config{MaxFlows: maxFlows, Timeouts: conntrack.Timeouts{UDP: udpTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.Close)
	p, err := gateway.NewPipeline(ct, nat.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := gateway.NewSnapshot(harnessConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Swap(s); err != nil {
		t.Fatal(err)
	}
	return p
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// podFrame is a VXLAN frame from node n's pod to the server, UDP sport → 53.
func podFrame(t testing.TB, n int, sport uint16, payload int, outerSrc netip.Addr) []byte {
	t.Helper()
	inIP := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: hPods[n].AsSlice(), DstIP: hServer.AsSlice()}
	inUDP := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 53}
	inUDP.SetNetworkLayerForChecksum(inIP)
	outIP := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: outerSrc.AsSlice(), DstIP: hGWVTEP.AsSlice()}
	outUDP := &layers.UDP{SrcPort: 40000, DstPort: 4789}
	outUDP.SetNetworkLayerForChecksum(outIP)
	return serialize(t,
		&layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0xcc, 0, 0, 0, 2}, DstMAC: net.HardwareAddr{2, 0xaa, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4},
		outIP, outUDP, &layers.VXLAN{ValidIDFlag: true, VNI: 0},
		&layers.Ethernet{SrcMAC: net.HardwareAddr(hNodeMAC[:]), DstMAC: net.HardwareAddr(hGWMAC[:]), EthernetType: layers.EthernetTypeIPv4},
		inIP, inUDP, gopacket.Payload(make([]byte, payload)))
}

// replyTo turns a frame the gateway sent outside into the server's answer.
func replyTo(t testing.TB, sent []byte) []byte {
	t.Helper()
	p := gopacket.NewPacket(sent, layers.LayerTypeEthernet, gopacket.NoCopy)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip == nil || udp == nil {
		t.Fatalf("gateway sent a frame that is not IPv4/UDP: %v", p)
	}
	rip := &layers.IPv4{Version: 4, TTL: 60, Protocol: layers.IPProtocolUDP, SrcIP: ip.DstIP, DstIP: ip.SrcIP}
	rudp := &layers.UDP{SrcPort: udp.DstPort, DstPort: udp.SrcPort}
	rudp.SetNetworkLayerForChecksum(rip)
	return serialize(t, &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0xbb, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0xaa, 0, 0, 0, 1}, EthernetType: layers.EthernetTypeIPv4},
		rip, rudp, gopacket.Payload(udp.Payload))
}

// ifCounters are one interface's counters in the harness's I/O layer.
type ifCounters struct {
	rxP, rxB, txP, txB atomic.Uint64
}

// harness runs workers over a pipeline. Each worker owns a set of frames it
// sends again and again; the counters mimic the engine's publication.
type harness struct {
	p       *gateway.Pipeline
	workers []*hWorker
	ifs     map[int]*ifCounters
	// speed makes the pipeline's clock run faster than real time, so flows
	// expire within a short test (0 or 1: real time).
	speed int64
}

type hWorker struct {
	gw     *gateway.Processor
	sport  uint16
	frames [][]byte // input frames, batch-sized
	rxIf   []int    // interface each frame arrives on
	out    [][]byte
	res    []gateway.Result
	busy   atomic.Uint64
	rounds atomic.Uint64
}

// newHarness builds nw workers; worker i gets a batch of frames: new pod
// flows, the replies to them, and bad frames (unknown VTEP, malformed,
// unsolicited).
func newHarness(t testing.TB, p *gateway.Pipeline, nw int) *harness {
	t.Helper()
	h := &harness{p: p, ifs: map[int]*ifCounters{ifUnderlay: {}, ifOutside: {}}}
	for i := 0; i < nw; i++ {
		w := &hWorker{gw: p.NewProcessor(uint64(i + 1))}
		// Open flows: 24 per worker, spread over both nodes.
		var sent [][]byte
		for k := 0; k < 24; k++ {
			f := podFrame(t, k%2, uint16(20000+i*100+k), 64, hNodeVTEP[k%2])
			out := make([]byte, 2048)
			r := processOne(w.gw, 0, f, out)
			if r.Verdict != gateway.VerdictTx {
				t.Fatalf("worker %d flow %d: verdict %v reason %v, want tx", i, k, r.Verdict, r.Reason)
			}
			sent = append(sent, out[:r.Len])
			w.frames = append(w.frames, f)
			w.rxIf = append(w.rxIf, ifUnderlay)
		}
		for _, s := range sent[:20] {
			w.frames = append(w.frames, replyTo(t, s))
			w.rxIf = append(w.rxIf, ifOutside)
		}
		bad := [][]byte{
			podFrame(t, 0, 999, 64, hStranger),    // unknown_vtep
			podFrame(t, 1, 998, 64, hNodeVTEP[0]), // spoofed_source
			sent[0][:30],                          // a truncated frame: malformed or pass
		}
		for _, b := range bad {
			w.frames = append(w.frames, b)
			w.rxIf = append(w.rxIf, ifUnderlay)
		}
		w.out = make([][]byte, len(w.frames))
		for k := range w.out {
			w.out[k] = make([]byte, 2048)
		}
		w.res = make([]gateway.Result, len(w.frames))
		h.workers = append(h.workers, w)
	}
	return h
}

// round runs one batch on worker w and updates the I/O counters.
func (h *harness) round(w *hWorker) {
	start := time.Now()
	w.gw.Process(h.now(), w.frames, w.out[:len(w.frames)], w.res[:len(w.frames)])
	var rxUB, rxOB, txUB, txOB, txU, txO, rxU, rxO uint64
	for k, f := range w.frames {
		if w.rxIf[k] == ifUnderlay {
			rxU++
			rxUB += uint64(len(f))
		} else {
			rxO++
			rxOB += uint64(len(f))
		}
		if r := &w.res[k]; r.Verdict == gateway.VerdictTx {
			if r.Ifindex == ifUnderlay {
				txU++
				txUB += uint64(r.Len)
			} else {
				txO++
				txOB += uint64(r.Len)
			}
		}
	}
	u, o := h.ifs[ifUnderlay], h.ifs[ifOutside]
	u.rxP.Add(rxU)
	o.rxP.Add(rxO)
	u.rxB.Add(rxUB)
	o.rxB.Add(rxOB)
	u.txP.Add(txU)
	u.txB.Add(txUB)
	o.txP.Add(txO)
	o.txB.Add(txOB)
	w.busy.Add(uint64(time.Since(start)))
	w.rounds.Add(1)
}

var epochH = time.Now()

func (h *harness) now() int64 {
	return int64(time.Since(epochH)) * max(h.speed, 1)
}

// source is the GatewaySource the engine would give.
func (h *harness) source() GatewaySource {
	return GatewaySource{
		Pipeline: h.p,
		Workers: func(dst []WorkerStats) []WorkerStats {
			for _, w := range h.workers {
				dst = append(dst, WorkerStats{Pipeline: w.gw.Stats(), BusyNanos: w.busy.Load()})
			}
			return dst
		},
		Interfaces: func(dst []InterfaceStats) []InterfaceStats {
			for _, idx := range []int{ifUnderlay, ifOutside} {
				c := h.ifs[idx]
				dst = append(dst, InterfaceStats{Name: ifName[idx], RxPackets: c.rxP.Load(), RxBytes: c.rxB.Load(),
					TxPackets: c.txP.Load(), TxBytes: c.txB.Load(), HasBytes: true})
			}
			return dst
		},
		EgressIPs:   func(dst []netip.Addr) []netip.Addr { return append(dst, hEgress[:]...) },
		TunnelPeers: func() int { return len(hNodeVTEP) },
	}
}

// processOne hands w a batch of one frame.
func processOne(w *gateway.Processor, now int64, in, out []byte) gateway.Result {
	res := make([]gateway.Result, 1)
	w.Process(now, [][]byte{in}, [][]byte{out}, res)
	return res[0]
}
