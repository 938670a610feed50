package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/route"
)

// The local node (the gateway's own, reached through the local port).
var (
	localVTEP = netip.MustParseAddr("169.254.238.1")
	localMAC  = [6]byte{0x02, 0x65, 0x67, 0x72, 0x74, 0x01}
	podLocal  = netip.MustParseAddr("10.244.9.5")
	localHop  = route.Hop{Ifindex: 9, SrcMAC: [6]byte{0x02, 0x65, 0x67, 0x72, 0x74, 0x02}, DstMAC: localMAC, MTU: 1500}
)

func localConfig() Config {
	c := testConfig()
	c.Nodes = append(c.Nodes, Node{Name: "gw", VTEP: localVTEP, InnerMAC: localMAC, Local: true,
		Pods: []Pod{{Addr: podLocal, Policy: "web"}}})
	c.Routes = route.NewStatic(
		route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: outHop},
		route.Static{Prefix: netip.MustParsePrefix("::/0"), Hop: outHop},
		route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: underlayHop},
		route.Static{Prefix: netip.MustParsePrefix("fd00::/64"), Hop: underlayHop},
		route.Static{Prefix: netip.PrefixFrom(localVTEP, 32), Hop: localHop},
	)
	return c
}

// TestLocalNodeOnlyFromLocalPort: frames from the local node's VTEP are
// taken only through ProcessLocal; the same frame from any other port is
// dropped as from an unknown VTEP, and a worker's frame through the local
// port too. Replies go back encapsulated to the local VTEP, out of the
// local port's interface, with the kernel side's MAC inside.
func TestLocalNodeOnlyFromLocalPort(t *testing.T) {
	f := newFixture(t, 64, localConfig())
	lt := tun{outerSrc: localVTEP, outerDst: gwVTEP4, kind: TunnelVXLAN, vni: testVNI}
	syn := tunnelFrame(t, lt, pkt{src: podLocal, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "S"}.build(t))
	out := [][]byte{make([]byte, 2048)}
	res := make([]Result, 1)
	f.w.Process(testNow, [][]byte{syn}, out, res)
	if res[0].Verdict != VerdictDrop || res[0].Reason != DropUnknownVTEP {
		t.Fatalf("local node's frame from the wire: %v %v, want dropped as unknown VTEP", res[0].Verdict, res[0].Reason)
	}
	worker := tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40001, dport: 443, flags: "S"}.build(t))
	f.w.ProcessLocal(testNow, [][]byte{worker}, out, res)
	if res[0].Verdict != VerdictDrop || res[0].Reason != DropUnknownVTEP {
		t.Fatalf("worker's frame through the local port: %v %v, want dropped as unknown VTEP", res[0].Verdict, res[0].Reason)
	}
	if f.ct.Len() != 0 {
		t.Fatalf("%d flows after refused frames, want 0", f.ct.Len())
	}
	f.w.ProcessLocal(testNow, [][]byte{syn}, out, res)
	if res[0].Verdict != VerdictTx || res[0].Ifindex != outHop.Ifindex {
		t.Fatalf("local pod's SYN through the local port: %v %v, want sent outside", res[0].Verdict, res[0].Reason)
	}
	// The server's answer comes back to the local node.
	var fl conntrack.Flow
	found := false
	f.ct.Range(testNow, func(x *conntrack.Flow, _ time.Duration) { fl, found = *x, true })
	if !found {
		t.Fatal("no flow after the SYN")
	}
	synack := plainFrame(t, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: fl.NATPort, flags: "SA", ack: 1001}.build(t))
	f.w.Process(testNow, [][]byte{synack}, out, res)
	if res[0].Verdict != VerdictTx || res[0].Ifindex != localHop.Ifindex {
		t.Fatalf("reply to the local pod: %v %v ifindex %d, want sent to the local port (%d)", res[0].Verdict, res[0].Reason, res[0].Ifindex, localHop.Ifindex)
	}
	var pk Parsed
	pk.Decode(out[0][:res[0].Len])
	if pk.Kind != KindTunnel || netip.AddrFrom16(pk.OuterDst).Unmap() != localVTEP || netip.AddrFrom16(pk.Dst).Unmap() != podLocal {
		t.Fatalf("reply: kind %v outer dst %v inner dst %v, want tunnel to %v for %v", pk.Kind, netip.AddrFrom16(pk.OuterDst), netip.AddrFrom16(pk.Dst), localVTEP, podLocal)
	}
	if got := [6]byte(out[0][pk.InnerEth : pk.InnerEth+6]); got != localMAC {
		t.Fatalf("reply's inner destination MAC %x, want the kernel side's %x", got, localMAC)
	}
}

// TestLocalReturnPathPortable: a local pod's flow leaves this pipeline with
// the gateway's own VTEP as its return path (another gateway reaches the
// pod's node there), and a flow adopted with this gateway's own VTEP comes
// back to the local node.
func TestLocalReturnPathPortable(t *testing.T) {
	f := newFixture(t, 64, localConfig())
	fl := conntrack.Flow{Orig: conntrack.Tuple{Src: podLocal.As16(), Dst: server4.As16(), SrcPort: 40000, DstPort: 443, Proto: conntrack.ProtoTCP},
		NATAddr: egress4.As16(), NATPort: 55555, State: conntrack.StateEstablished}
	if err := f.p.Adopt(&fl, ReturnPath{VTEP: gwVTEP4, Tunnel: TunnelVNI{TunnelVXLAN, testVNI}}, time.Hour, testNow); err != nil {
		t.Fatal(err)
	}
	var held conntrack.Flow
	f.ct.Range(testNow, func(x *conntrack.Flow, _ time.Duration) { held = *x })
	rp, ok := f.p.ReturnPath(held.Aux)
	if !ok || rp.VTEP != gwVTEP4 {
		t.Fatalf("portable return path %v %v, want the gateway's own VTEP %v", rp, ok, gwVTEP4)
	}
	vi, _ := unpackAux(held.Aux)
	if got := netip.AddrFrom16(f.p.vteps[vi]).Unmap(); got != localVTEP {
		t.Fatalf("adopted flow returns to %v, want the local VTEP %v", got, localVTEP)
	}
	// Another node's VTEP is kept as it is.
	if err := f.p.Adopt(&conntrack.Flow{Orig: conntrack.Tuple{Src: pod1v4.As16(), Dst: server4.As16(), SrcPort: 40001, DstPort: 443, Proto: conntrack.ProtoTCP},
		NATAddr: egress4.As16(), NATPort: 55556, State: conntrack.StateEstablished},
		ReturnPath{VTEP: node1VTEP, Tunnel: TunnelVNI{TunnelVXLAN, testVNI}}, time.Hour, testNow); err != nil {
		t.Fatal(err)
	}
	n := 0
	f.ct.Range(testNow, func(x *conntrack.Flow, _ time.Duration) {
		if rp, _ := f.p.ReturnPath(x.Aux); rp.VTEP == node1VTEP {
			n++
		}
	})
	if n != 1 {
		t.Fatalf("%d flows return to node1, want 1", n)
	}
}

// TestSnapshotOneLocalNode: two local nodes are refused.
func TestSnapshotOneLocalNode(t *testing.T) {
	c := localConfig()
	c.Nodes[0].Local = true
	if _, err := NewSnapshot(c); err == nil {
		t.Fatal("two local nodes accepted")
	}
}

// TestWrapLocal: a plain frame of the local port, wrapped, is the frame the
// local node's tunnel would carry (the gopacket oracle reads it), and goes
// through ProcessLocal; a reply to the local node unwraps to the inner
// Ethernet frame addressed to the kernel side.
func TestWrapLocal(t *testing.T) {
	f := newFixture(t, 64, localConfig())
	for _, tc := range []struct {
		name string
		off  int
	}{{"no headroom", 0}, {"headroom", 128}} {
		ip := pkt{src: podLocal, dst: server4, proto: "udp", sport: 5000, dport: 53, payload: []byte("q")}.build(t)
		fr := plainFrame(t, ip)
		buf := make([]byte, 2048)
		copy(buf[tc.off:], fr)
		off, n, ok := f.p.WrapLocal(buf, tc.off, len(fr))
		if !ok {
			t.Fatalf("%s: not wrapped", tc.name)
		}
		var pk Parsed
		pk.Decode(buf[off : off+n])
		if pk.Kind != KindTunnel || netip.AddrFrom16(pk.OuterSrc).Unmap() != localVTEP || netip.AddrFrom16(pk.OuterDst).Unmap() != gwVTEP4 || pk.VNI != testVNI {
			t.Fatalf("%s: wrapped frame: kind %v outer %v → %v VNI %d, want a tunnel frame %v → %v VNI %d", tc.name, pk.Kind,
				netip.AddrFrom16(pk.OuterSrc), netip.AddrFrom16(pk.OuterDst), pk.VNI, localVTEP, gwVTEP4, testVNI)
		}
		checkIPChecksums(t, tc.name+" outer", buf[off+14:off+n])
		if in := buf[off+64 : off+n]; len(in) < len(ip) || string(in[:len(ip)]) != string(ip) {
			t.Fatalf("%s: the inner packet changed", tc.name)
		}
		out := [][]byte{make([]byte, 2048)}
		res := make([]Result, 1)
		f.w.ProcessLocal(testNow, [][]byte{buf[off : off+n]}, out, res)
		if res[0].Verdict != VerdictTx || res[0].Ifindex != outHop.Ifindex {
			t.Fatalf("%s: wrapped frame through ProcessLocal: %v %v, want sent outside", tc.name, res[0].Verdict, res[0].Reason)
		}
	}
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	if _, _, ok := f.p.WrapLocal(arp, 0, len(arp)); ok {
		t.Fatal("an ARP frame was wrapped")
	}

	// A reply to the local pod, built by the pipeline, unwraps to a frame
	// for the kernel side.
	var fl conntrack.Flow
	f.ct.Range(testNow, func(x *conntrack.Flow, _ time.Duration) { fl = *x })
	reply := plainFrame(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: fl.NATPort, payload: []byte("a")}.build(t))
	out := [][]byte{make([]byte, 2048)}
	res := make([]Result, 1)
	f.w.Process(testNow, [][]byte{reply}, out, res)
	if res[0].Verdict != VerdictTx {
		t.Fatalf("reply: %v %v", res[0].Verdict, res[0].Reason)
	}
	frame := out[0][:res[0].Len]
	in, ok := f.p.UnwrapLocal(frame)
	if !ok {
		t.Fatal("reply to the local node not unwrapped")
	}
	inner := frame[in:]
	if [6]byte(inner[:6]) != localMAC || netip.AddrFrom4([4]byte(inner[14+16:14+20])) != podLocal {
		t.Fatalf("unwrapped reply: dst MAC %x, IP dst %v; want %x, %v", inner[:6], netip.AddrFrom4([4]byte(inner[30:34])), localMAC, podLocal)
	}
	// A tunnel frame to another VTEP is not the local port's; one to the
	// gateway's own VTEP (for the node's kernel) goes through whole.
	if _, ok := f.p.UnwrapLocal(tunnelFrame(t, tun{outerSrc: gwVTEP4, outerDst: node1VTEP, kind: TunnelVXLAN, vni: testVNI}, reply[14:])); ok {
		t.Fatal("a tunnel frame to another VTEP was unwrapped")
	}
	if off, ok := f.p.UnwrapLocal(tunnelFrame(t, podTun(), reply[14:])); !ok || off != 0 {
		t.Fatalf("a tunnel frame to the gateway's own VTEP: %d %v, want sent whole", off, ok)
	}
}

// TestRemoteReplyToLocalPod: another gateway's reply to a pod of this
// gateway's node (a tunnel frame from a known node to the node's VTEP,
// which the XDP program takes) goes to the node's kernel through the local
// port, unchanged but for its Ethernet addresses, and counts as passed;
// the same frame for a pod of another node is still dropped as spoofed.
func TestRemoteReplyToLocalPod(t *testing.T) {
	f := newFixture(t, 64, localConfig())
	in := tunnelFrame(t, podTun(), pkt{src: server4, dst: podLocal, proto: "udp", sport: 53, dport: 5000, payload: []byte("a")}.build(t))
	out := [][]byte{make([]byte, 2048)}
	res := make([]Result, 1)
	f.w.Process(testNow, [][]byte{in}, out, res)
	if res[0].Verdict != VerdictTx || res[0].Ifindex != localHop.Ifindex || res[0].Len != len(in) {
		t.Fatalf("reply to the local pod from another gateway: %+v, want sent whole to the local port", res[0])
	}
	got := out[0][:res[0].Len]
	if [6]byte(got[:6]) != localHop.DstMAC || [6]byte(got[6:12]) != localHop.SrcMAC || string(got[12:]) != string(in[12:]) {
		t.Fatal("the frame changed beyond its Ethernet addresses")
	}
	if st := f.w.Stats(); st.Count(CounterPass) != 1 || f.ct.Len() != 0 {
		t.Fatalf("passed %d, flows %d; want 1 passed, no flow", st.Count(CounterPass), f.ct.Len())
	}
	other := tunnelFrame(t, podTun(), pkt{src: server4, dst: pod2v4, proto: "udp", sport: 53, dport: 5000, payload: []byte("a")}.build(t))
	f.w.Process(testNow, [][]byte{other}, out, res)
	if res[0].Verdict != VerdictDrop || res[0].Reason != DropSpoofedSource {
		t.Fatalf("the same for another node's pod: %v %v, want spoofed_source", res[0].Verdict, res[0].Reason)
	}
}
