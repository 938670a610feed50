package gateway

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// forwarded decodes a frame the gateway sent to the outside and returns
// its source and TCP layer.
func forwarded(t *testing.T, frame []byte) (netip.Addr, *layers.TCP) {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	nl, tl := p.NetworkLayer(), p.Layer(layers.LayerTypeTCP)
	if nl == nil || tl == nil {
		t.Fatalf("not a TCP packet: %v", p.Layers())
	}
	src, _ := netip.AddrFromSlice(nl.NetworkFlow().Src().Raw())
	return src, tl.(*layers.TCP)
}

// flowStates lists the states of the table's flows (through Export).
func flowStates(t *testing.T, ct *conntrack.Table) []conntrack.State {
	t.Helper()
	var buf bytes.Buffer
	if _, err := ct.Export(&buf, testNow); err != nil {
		t.Fatal(err)
	}
	var out []conntrack.State
	for b := buf.Bytes()[4:]; len(b) > 0; {
		f, _, n, err := conntrack.DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.State)
		b = b[n:]
	}
	return out
}

// TestPickUp: a gateway that holds no flow for a pod's established
// connection (it restarted, or the egress IP moved here from a gateway
// that died) picks the connection up from the pod's next segment: the
// segment leaves from the egress IP with the pod's own source port, the
// 5-tuple the server knows with port preservation, the flow is made
// PICKED_UP (unanswered, early-droppable), the server's answers reach the
// pod and make it ESTABLISHED. Unsolicited segments
// from outside still open nothing; a taken port, a RST, or a policy with
// several egress IPs here (which IP the connection had is unknown) gets
// the pod an RST instead.
func TestPickUp(t *testing.T) {
	seg := func(src, dst netip.Addr, flags string) pkt {
		return pkt{src: src, dst: dst, proto: "tcp", sport: 40000, dport: 443, flags: flags, seq: 5000, ack: 777, payload: make([]byte, 10)}
	}
	out := make([]byte, 2048)

	t.Run("ack_v4", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), seg(pod1v4, server4, "A").build(t)), out)
		if r.Verdict != VerdictTx || r.Ifindex != outHop.Ifindex {
			t.Fatalf("pod's segment: %v %v to ifindex %d, want sent to the outside (%d)", r.Verdict, r.Reason, r.Ifindex, outHop.Ifindex)
		}
		src, tcp := forwarded(t, out[:r.Len])
		if src != egress4 || tcp.SrcPort != 40000 || tcp.RST {
			t.Fatalf("left from %v:%d (RST %v), want %v:40000, the pod's port", src, tcp.SrcPort, tcp.RST, egress4)
		}
		st := f.w.Stats()
		if st.Count(CounterFlowsPickedUp) != 1 || st.Count(CounterFlowsNew) != 1 || st.Drop(DropTCPNoFlow) != 0 || f.ct.Len() != 1 {
			t.Fatalf("picked up %d, created %d, tcp_no_flow %d, %d flows; want 1, 1, 0, 1",
				st.Count(CounterFlowsPickedUp), st.Count(CounterFlowsNew), st.Drop(DropTCPNoFlow), f.ct.Len())
		}
		if s := flowStates(t, f.ct); len(s) != 1 || s[0] != conntrack.StatePickedUp {
			t.Fatalf("flow states %v, want one PICKED_UP", s)
		}
		// The server's answer on the same 5-tuple reaches the pod.
		back := pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: 40000, flags: "A", seq: 777, ack: 5010, payload: make([]byte, 5)}
		if r := processOne(f.w, testNow, plainFrame(t, back.build(t)), out); r.Verdict != VerdictTx || r.Ifindex != underlayHop.Ifindex {
			t.Fatalf("server's answer: %v %v to ifindex %d, want encapsulated to the node", r.Verdict, r.Reason, r.Ifindex)
		}
		if s := flowStates(t, f.ct); len(s) != 1 || s[0] != conntrack.StateEstablished {
			t.Fatalf("flow states %v after the server's answer, want one ESTABLISHED", s)
		}
	})
	t.Run("data_v6_geneve", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		tu := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
		r := processOne(f.w, testNow, tunnelFrame(t, tu, seg(pod2v6, server6, "A").build(t)), out)
		if r.Verdict != VerdictTx || r.Ifindex != outHop.Ifindex {
			t.Fatalf("%v %v to ifindex %d, want sent to the outside", r.Verdict, r.Reason, r.Ifindex)
		}
		if src, tcp := forwarded(t, out[:r.Len]); src != egress6 || tcp.SrcPort != 40000 {
			t.Fatalf("left from %v:%d, want %v:40000", src, tcp.SrcPort, egress6)
		}
	})
	t.Run("fin_opens_nothing", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), seg(pod1v4, server4, "FA").build(t)), out)
		if r.Verdict != VerdictTx || r.Ifindex != underlayHop.Ifindex || !decodeReset(t, out[:r.Len]).tcp.RST || f.ct.Len() != 0 {
			t.Fatalf("pod's FIN: %v %v to ifindex %d, %d flows; want an RST to the pod and no flow", r.Verdict, r.Reason, r.Ifindex, f.ct.Len())
		}
	})
	t.Run("outside_opens_nothing", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		in := pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: 40000, flags: "A", seq: 777, ack: 5010}
		if r := processOne(f.w, testNow, plainFrame(t, in.build(t)), out); r.Verdict != VerdictDrop {
			t.Fatalf("unsolicited segment from outside: %v %v, want dropped", r.Verdict, r.Reason)
		}
		if st := f.w.Stats(); f.ct.Len() != 0 || st.Count(CounterFlowsPickedUp) != 0 {
			t.Fatalf("%d flows, %d picked up after an outside segment; want none", f.ct.Len(), st.Count(CounterFlowsPickedUp))
		}
	})
	t.Run("port_taken", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		// node2's pod holds egress4:40000 towards the server first.
		tu := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7}
		if r := processOne(f.w, testNow, tunnelFrame(t, tu, seg(pod2v4, server4, "S").build(t)), out); r.Verdict != VerdictTx {
			t.Fatalf("the other pod's SYN: %v %v", r.Verdict, r.Reason)
		}
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), seg(pod1v4, server4, "A").build(t)), out)
		if r.Verdict != VerdictTx || r.Ifindex != underlayHop.Ifindex || !decodeReset(t, out[:r.Len]).tcp.RST {
			t.Fatalf("segment whose port is taken: %v %v to ifindex %d, want an RST to the pod", r.Verdict, r.Reason, r.Ifindex)
		}
		if st := f.w.Stats(); st.Count(CounterFlowsPickedUp) != 0 || st.Drop(DropTCPNoFlow) != 1 || f.ct.Len() != 1 {
			t.Fatalf("picked up %d, tcp_no_flow %d, %d flows; want 0, 1, 1", st.Count(CounterFlowsPickedUp), st.Drop(DropTCPNoFlow), f.ct.Len())
		}
	})
	t.Run("rst_opens_nothing", func(t *testing.T) {
		f := newFixture(t, 64, testConfig())
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), seg(pod1v4, server4, "RA").build(t)), out)
		if r.Verdict != VerdictDrop || r.Reason != DropTCPNoFlow || f.ct.Len() != 0 {
			t.Fatalf("pod's RST: %v %v, %d flows; want tcp_no_flow and none", r.Verdict, r.Reason, f.ct.Len())
		}
	})
	t.Run("several_ips", func(t *testing.T) {
		cfg := testConfig()
		cfg.Policies[0].EgressIPs = append(cfg.Policies[0].EgressIPs, netip.MustParseAddr("192.0.2.21"))
		f := newFixture(t, 64, cfg)
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), seg(pod1v4, server4, "A").build(t)), out)
		if r.Verdict != VerdictTx || r.Ifindex != underlayHop.Ifindex || f.ct.Len() != 0 {
			t.Fatalf("%v %v to ifindex %d, %d flows; want an RST to the pod and no flow", r.Verdict, r.Reason, r.Ifindex, f.ct.Len())
		}
	})
}

// TestBackupFlowWaitsForItsIP: a pod's segment that reaches a gateway
// holding its flow for an egress IP not hosted here, while no IP of the
// pod's policy is (a standby the pod's node switched to before the
// standby hosts the IP; seen on the cluster), is dropped: the flow is
// neither retired nor answered with an RST, and once the IP is hosted the
// pod's retransmission leaves on the flow's own port.
func TestBackupFlowWaitsForItsIP(t *testing.T) {
	out := make([]byte, 2048)
	standby := testConfig()
	standby.Policies[0].EgressIPs = nil
	f := newFixture(t, 64, standby)
	backup := conntrack.Flow{
		Orig:    conntrack.Tuple{Src: pod1v4.As16(), Dst: server4.As16(), SrcPort: 40000, DstPort: 443, Proto: conntrack.ProtoTCP},
		NATAddr: egress4.As16(), NATPort: 55555, State: conntrack.StateEstablished,
	}
	rp := ReturnPath{VTEP: node1VTEP, Tunnel: TunnelVNI{Tunnel: TunnelVXLAN, VNI: testVNI}}
	if err := f.p.Adopt(&backup, rp, time.Hour, testNow); err != nil {
		t.Fatal(err)
	}
	seg := pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "A", seq: 5000, ack: 777, payload: make([]byte, 10)}
	frame := tunnelFrame(t, podTun(), seg.build(t))
	r := processOne(f.w, testNow, frame, out)
	st := f.w.Stats()
	if r.Verdict != VerdictDrop || r.Reason != DropNoEgressIP || st.Count(CounterTCPResetsSent) != 0 || st.Count(CounterFlowsMoved) != 0 || f.ct.Len() != 1 {
		t.Fatalf("segment before the IP is hosted: %v %v, %d resets, %d moved, %d flows; want dropped no_egress_ip, no reset, the backup flow kept",
			r.Verdict, r.Reason, st.Count(CounterTCPResetsSent), st.Count(CounterFlowsMoved), f.ct.Len())
	}
	s, err := NewSnapshot(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Swap(s); err != nil {
		t.Fatal(err)
	}
	if r = processOne(f.w, testNow, frame, out); r.Verdict != VerdictTx || r.Ifindex != outHop.Ifindex {
		t.Fatalf("retransmission once the IP is hosted: %v %v, want sent to the outside", r.Verdict, r.Reason)
	}
	if src, tcp := forwarded(t, out[:r.Len]); src != egress4 || tcp.SrcPort != 55555 {
		t.Fatalf("left from %v:%d, want the backup flow's %v:55555", src, tcp.SrcPort, egress4)
	}
}
