package gateway

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
)

// TestFlowsMoveWhenEgressIPLeaves: a policy has two IPv4 egress IPs here
// and its pod has UDP, ICMP and TCP flows on both; then one IP leaves (it
// failed over to another gateway). The flows on the IP that stays keep
// their IP and port. Those on the IP that left are removed with their ports
// released and counted as flows_moved: UDP and ICMP continue from the
// remaining IP, TCP is tcp_no_flow and answered with an RST (its connection
// cannot survive a new source address; without port preservation nothing
// is picked up, TestPickUp has that). Every frame is sent twice in a row, so in the batched
// path the second copy meets the first one's work in the same batch; the
// batched and the one-frame paths must agree byte for byte.
func TestFlowsMoveWhenEgressIPLeaves(t *testing.T) {
	ip21 := netip.MustParseAddr("192.0.2.21")
	cfg := testConfig()
	cfg.Policies[0].EgressIPs = []netip.Addr{egress4, ip21, egress6}
	after := testConfig() // egress4 and egress6 only: ip21 left

	type flow struct {
		p   pkt
		ack pkt // what the pod sends on the flow later
	}
	var flows []flow
	for i := 0; i < 48; i++ {
		p := pkt{src: pod1v4, dst: server4, sport: uint16(7000 + i), dport: 53, proto: "udp", payload: []byte("q")}
		switch i % 3 {
		case 1:
			p.proto, p.sport, p.payload = "echo", uint16(100+i), nil
		case 2:
			p.proto, p.sport, p.dport, p.flags, p.payload = "tcp", uint16(30000+i), 443, "S", nil
		}
		ack := p
		if p.proto == "tcp" {
			ack.flags = "A"
		}
		flows = append(flows, flow{p, ack})
	}
	type sent struct {
		r    Result
		out  []byte
		addr netip.Addr
		port uint16
	}
	run := func(f *fixture, pkts func(flow) pkt) []sent {
		var in [][]byte
		for _, fl := range flows {
			fr := tunnelFrame(t, podTun(), pkts(fl).build(t))
			in = append(in, fr, fr)
		}
		out := make([][]byte, len(in))
		for i := range out {
			out[i] = make([]byte, 2048)
		}
		res := make([]Result, len(in))
		f.process(testNow, in, out, res)
		got := make([]sent, len(in))
		for i, r := range res {
			got[i] = sent{r: r}
			if r.Verdict == VerdictTx {
				got[i].out = out[i][:r.Len]
				got[i].addr = netip.AddrFrom4([4]byte(out[i][header.EthernetLen+12 : header.EthernetLen+16]))
				// The source port, or the ICMP echo identifier.
				l4 := header.EthernetLen + 20
				if pkts(flows[i/2]).proto == "echo" {
					l4 += 4
				}
				got[i].port = uint16(out[i][l4])<<8 | uint16(out[i][l4+1])
			}
		}
		return got
	}
	var results [2][]sent
	for mode, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			nc := nat.DefaultConfig()
			nc.PreservePort = false
			f := newFixtureNAT(t, 4096, cfg, nc)
			f.single = single
			before := run(f, func(fl flow) pkt { return fl.p })
			byIP := map[netip.Addr]int{}
			for i, s := range before {
				if s.r.Verdict != VerdictTx {
					t.Fatalf("flow %d: %v %v", i/2, s.r.Verdict, s.r.Reason)
				}
				byIP[s.addr]++
			}
			if byIP[egress4] == 0 || byIP[ip21] == 0 {
				t.Fatalf("flows per egress IP %v: both IPs must carry some", byIP)
			}
			s, err := NewSnapshot(after)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.p.Swap(s); err != nil {
				t.Fatal(err)
			}
			now := run(f, func(fl flow) pkt { return fl.ack })
			moved, tcpMoved := 0, 0
			for i := 0; i < len(now); i += 2 {
				fl, b, a := flows[i/2], before[i], now[i]
				for _, c := range now[i : i+2] {
					switch {
					case b.addr == egress4 && (c.r.Verdict != VerdictTx || c.addr != egress4 || c.port != b.port):
						t.Errorf("flow %d (%s) on the IP that stayed: %v %v from %v:%d, want %v:%d", i/2, fl.p.proto, c.r.Verdict, c.r.Reason, c.addr, c.port, egress4, b.port)
					case b.addr == ip21 && fl.p.proto == "tcp" && c.r.Verdict != VerdictTx:
						t.Errorf("tcp flow %d on the IP that left: %v %v, want an RST to the pod", i/2, c.r.Verdict, c.r.Reason)
					case b.addr == ip21 && fl.p.proto == "tcp":
						if d := decodeReset(t, c.out); !d.tcp.RST || d.src != server4 || d.dst != pod1v4 || uint16(d.tcp.DstPort) != fl.p.sport {
							t.Errorf("tcp flow %d on the IP that left: sent %v→%v:%d RST=%v, want an RST from the server to the pod", i/2, d.src, d.dst, d.tcp.DstPort, d.tcp.RST)
						}
					case b.addr == ip21 && fl.p.proto != "tcp" && (c.r.Verdict != VerdictTx || c.addr != egress4):
						t.Errorf("%s flow %d on the IP that left: %v %v from %v, want sent from %v", fl.p.proto, i/2, c.r.Verdict, c.r.Reason, c.addr, egress4)
					}
				}
				if now[i+1].port != a.port || !bytes.Equal(now[i+1].out, a.out) {
					t.Errorf("flow %d: the second copy left differently from the first", i/2)
				}
				if b.addr == ip21 {
					moved++
					if fl.p.proto == "tcp" {
						tcpMoved++
					}
				}
			}
			st := f.w.Stats()
			if got, resets := st.Drop(DropTCPNoFlow), st.Count(CounterTCPResetsSent); got != uint64(2*tcpMoved) || resets != got {
				t.Errorf("tcp_no_flow %d, tcp_resets_sent %d; want both %d (both copies of each TCP flow that moved)", got, resets, 2*tcpMoved)
			}
			if got := st.Count(CounterFlowsMoved); got != uint64(moved) {
				t.Errorf("flows_moved %d, want %d (the flows on the IP that left)", got, moved)
			}
			if f.ct.Len() != len(flows)-tcpMoved {
				t.Errorf("%d flows in the table, want %d", f.ct.Len(), len(flows)-tcpMoved)
			}
			for _, proto := range []uint8{1, 6, 17} {
				if n := f.p.NAT().PortsInUse(nat.Addr(ip21.As16()), proto); n != 0 {
					t.Errorf("%d ports of protocol %d still taken on the IP that left", n, proto)
				}
			}
			results[mode] = now
		})
	}
	if !slices.EqualFunc(results[0], results[1], func(a, b sent) bool { return a.r == b.r && bytes.Equal(a.out, b.out) }) {
		t.Error("the batched and the one-frame paths differ after the move")
	}
}

// TestBackupFlowKeptUntilHosted: a pod's segment that reaches a gateway
// holding its flow (a backup from the flow sync) while the pod's policy has
// no egress IP here yet (the workers steered here before the configuration
// that hosts the IP arrived) is dropped as no_egress_ip: no RST, the flow
// kept. Once the IP is hosted the next segment leaves on the flow's binding.
func TestBackupFlowKeptUntilHosted(t *testing.T) {
	before := testConfig()
	before.Policies[0].EgressIPs = nil // web has no IP here yet
	f := newFixture(t, 64, before)
	fl := conntrack.Flow{Orig: conntrack.Tuple{Src: pod1v4.As16(), Dst: server4.As16(), SrcPort: 40000, DstPort: 443, Proto: conntrack.ProtoTCP},
		NATAddr: egress4.As16(), NATPort: 55555, State: conntrack.StateEstablished}
	if err := f.p.Adopt(&fl, ReturnPath{VTEP: node1VTEP, Tunnel: TunnelVNI{TunnelVXLAN, testVNI}}, time.Hour, testNow); err != nil {
		t.Fatal(err)
	}
	ack := tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, sport: 40000, dport: 443, proto: "tcp", flags: "A"}.build(t))
	for _, single := range []bool{false, true} {
		f.single = single
		out := [][]byte{make([]byte, 2048)}
		res := make([]Result, 1)
		f.process(testNow, [][]byte{ack}, out, res)
		if res[0].Verdict != VerdictDrop || res[0].Reason != DropNoEgressIP {
			t.Fatalf("single=%v: the pod's segment before the IP is hosted: %v %v, want dropped as no_egress_ip (no RST)", single, res[0].Verdict, res[0].Reason)
		}
		if f.ct.Len() != 1 {
			t.Fatalf("single=%v: %d flows after the early segment, want the backup flow kept", single, f.ct.Len())
		}
	}
	s, err := NewSnapshot(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Swap(s); err != nil {
		t.Fatal(err)
	}
	out := [][]byte{make([]byte, 2048)}
	res := make([]Result, 1)
	f.process(testNow, [][]byte{ack}, out, res)
	if res[0].Verdict != VerdictTx {
		t.Fatalf("once the IP is hosted: %v %v, want the segment forwarded on the backup flow", res[0].Verdict, res[0].Reason)
	}
	o := out[0][header.EthernetLen:]
	if src, port := netip.AddrFrom4([4]byte(o[12:16])), uint16(o[20])<<8|uint16(o[21]); src != egress4 || port != 55555 {
		t.Errorf("forwarded from %v:%d, want the backup flow's %v:55555", src, port, egress4)
	}
	if st := f.w.Stats(); st.Count(CounterFlowsMoved) != 0 {
		n := st.Count(CounterFlowsMoved)
		t.Errorf("flows_moved %d, want 0: the backup flow was to be kept", n)
	}
}
