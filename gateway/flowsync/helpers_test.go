package flowsync

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var (
	gwVTEP   = netip.MustParseAddr("10.0.0.1")
	nodeVTEP = netip.MustParseAddr("10.0.0.2")
	pod      = netip.MustParseAddr("10.244.1.5")
	pod6     = netip.MustParseAddr("fd10:1::5")
	egress   = netip.MustParseAddr("192.0.2.10")
	egress6  = netip.MustParseAddr("2001:db8::10")
	other    = netip.MustParseAddr("192.0.2.99") // an egress IP of the standby's own
	server   = netip.MustParseAddr("198.51.100.20")
	server6  = netip.MustParseAddr("2001:db8:ffff::20")
	tunnel   = gateway.TunnelVNI{Tunnel: gateway.TunnelVXLAN, VNI: 4096}
	path     = gateway.ReturnPath{VTEP: nodeVTEP, Tunnel: tunnel}

	testKey  = []byte("0123456789abcdef0123456789abcdef-test")
	otherKey = []byte("fedcba9876543210fedcba9876543210-evil")
)

var epoch = time.Now()

func clock() int64 { return int64(time.Since(epoch)) }

func config(hosted ...netip.Addr) gateway.Config {
	ips := hosted
	if len(ips) == 0 {
		ips = []netip.Addr{other}
	}
	return gateway.Config{
		VTEPs:    []netip.Addr{gwVTEP},
		InnerMAC: [6]byte{2, 0, 0, 0, 0xee, 1},
		Tunnels:  []gateway.TunnelVNI{tunnel},
		Nodes: []gateway.Node{{Name: "node1", VTEP: nodeVTEP, InnerMAC: [6]byte{2, 0, 0, 0, 1, 1},
			Pods: []gateway.Pod{{Addr: pod, Policy: "web"}, {Addr: pod6, Policy: "web"}}}},
		Policies: []gateway.Policy{{Name: "web", EgressIPs: ips}},
		Routes: route.NewStatic(
			route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: route.Hop{Ifindex: 7, MTU: 1500}},
			route.Static{Prefix: netip.MustParsePrefix("::/0"), Hop: route.Hop{Ifindex: 7, MTU: 1500}},
			route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: route.Hop{Ifindex: 8, MTU: 9000}}),
	}
}

// newPipeline is a gateway's data plane hosting the given egress IPs.
func newPipeline(t testing.TB, maxFlows int, hosted ...netip.Addr) *gateway.Pipeline {
	t.Helper()
	ct, err := conntrack.New(conntrack.Config{MaxFlows: maxFlows})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.Close)
	p, err := gateway.NewPipeline(ct, nat.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	host(t, p, hosted...)
	return p
}

func host(t testing.TB, p *gateway.Pipeline, hosted ...netip.Addr) {
	t.Helper()
	s, err := gateway.NewSnapshot(config(hosted...))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Swap(s); err != nil {
		t.Fatal(err)
	}
}

func newSync(t testing.TB, node string, key []byte, p *gateway.Pipeline, mod func(*Config)) *Sync {
	t.Helper()
	cfg := Config{Node: node, Key: key, Pipeline: p, Clock: clock, Interval: 10 * time.Millisecond,
		Admission: func() *Admission { return testAdmission() }}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testAdmission is the cluster the tests' gateways see: "primary"
// (connecting from 127.0.0.1) hosts egress and egress6, this node stands
// by for them, and node1 (VTEP nodeVTEP) has the pods' ranges.
func testAdmission() *Admission {
	return NewAdmission(map[netip.Addr]string{egress: "primary", egress6: "primary"}, map[string]AdmitNode{
		"primary": {Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		"node1": {VTEPs: []netip.Addr{nodeVTEP},
			Pods: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd10:1::/64")}},
	})
}

// standby is a receiving gateway listening on loopback.
func standby(t testing.TB, p *gateway.Pipeline) (*Sync, string) {
	t.Helper()
	s := newSync(t, "standby", testKey, p, nil)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s, s.Addr().String()
}

// flow is TCP flow i from the pod (IPv4 or IPv6 by i's parity) on egress IP.
func flow(i int, st conntrack.State) conntrack.Flow {
	src, dst, ip := pod, server, egress
	if i%2 == 1 {
		src, dst, ip = pod6, server6, egress6
	}
	return conntrack.Flow{
		Orig:    conntrack.Tuple{Src: src.As16(), Dst: dst.As16(), SrcPort: uint16(10000 + i), DstPort: 443, Proto: conntrack.ProtoTCP},
		NATAddr: ip.As16(), NATPort: uint16(40000 + i%20000), State: st,
	}
}

func adopt(t testing.TB, p *gateway.Pipeline, f conntrack.Flow) {
	t.Helper()
	if err := p.Adopt(&f, path, time.Hour, clock()); err != nil {
		t.Fatalf("adopt %v: %v", f.Orig, err)
	}
}

// held is what a table holds for the given egress IPs: binding and state by
// original tuple.
type binding struct {
	nat   conntrack.Addr
	port  uint16
	state conntrack.State
}

func table(p *gateway.Pipeline, ips ...netip.Addr) map[conntrack.Tuple]binding {
	want := map[conntrack.Addr]bool{}
	for _, ip := range ips {
		want[ip.As16()] = true
	}
	m := map[conntrack.Tuple]binding{}
	p.Conntrack().Range(clock(), func(f *conntrack.Flow, _ time.Duration) {
		if want[f.NATAddr] {
			m[f.Orig] = binding{f.NATAddr, f.NATPort, f.State}
		}
	})
	return m
}

func equal(a, b map[conntrack.Tuple]binding) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// syncWait bounds a wait for the sync's sessions over loopback: generous,
// since only a failure waits that long on a busy machine.
const syncWait = 20 * time.Second

// waitMatch waits until b holds exactly a's flows of the egress IPs.
func waitMatch(t testing.TB, a, b *gateway.Pipeline) {
	t.Helper()
	nstest.Eventually(t, "standby matches", syncWait, func() bool { return equal(table(a, egress, egress6), table(b, egress, egress6)) })
}

// proxy forwards TCP connections to target and can cut them or stop
// forwarding (a peer that is slow or gone).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	paused bool
	resume chan struct{}
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, resume: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go p.pipe(d, c)
			go p.pipe(c, d)
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		p.mu.Lock()
		paused, resume := p.paused, p.resume
		p.mu.Unlock()
		if paused {
			<-resume
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// pause stops forwarding: once the socket buffers fill the sender blocks.
func (p *proxy) pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

func (p *proxy) unpause() {
	p.mu.Lock()
	p.paused = false
	close(p.resume)
	p.resume = make(chan struct{})
	p.mu.Unlock()
}

// cut closes every forwarded connection (a lost session).
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func peers(addr string) map[netip.Addr]string {
	return map[netip.Addr]string{egress: addr, egress6: addr}
}

// tcpFrame is an ACK segment src:sport → dst:dport in an Ethernet frame, as
// the server sends it to the egress IP.
func tcpFrame(t testing.TB, src, dst netip.Addr, sport, dport uint16) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0xbb, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0xaa, 0, 0, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), ACK: true, PSH: true, Seq: 1000, Ack: 2000, Window: 512}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// process runs one frame through w.
func process(w *gateway.Processor, frame []byte) gateway.Result {
	out := make([]byte, 2048)
	res := make([]gateway.Result, 1)
	w.Process(clock(), [][]byte{frame}, [][]byte{out}, res)
	return res[0]
}

// churn changes 150 of the 200 flows flow(0..199) the primary a holds: 50
// gone, 50 new (SYN_SENT), 50 moved to FIN_WAIT.
func churn(t testing.TB, a *gateway.Pipeline) {
	t.Helper()
	for i := range 50 {
		f := flow(i, conntrack.StateEstablished)
		if !a.Abandon(&f) {
			t.Fatalf("flow %d not held by the primary", i)
		}
		adopt(t, a, flow(1000+i, conntrack.StateSynSent))
		g := flow(100+i, conntrack.StateEstablished)
		a.Abandon(&g)
		adopt(t, a, flow(100+i, conntrack.StateFinWait))
	}
}
