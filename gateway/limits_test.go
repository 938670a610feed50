package gateway

import (
	"testing"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
)

// limitsFixture is a 4096-flow table with the limits a gateway gets by
// default.
func limitsFixture(t *testing.T) *fixture {
	src, na := conntrack.DefaultLimits(4096)
	return newFixtureCT(t, conntrack.Config{MaxFlows: 4096, SourceLimit: src, NATLimit: na}, testConfig(), nat.DefaultConfig())
}

// fromNode2 is pod 2's frame (node 2 tunnels over IPv6).
func fromNode2(t *testing.T, p pkt) []byte {
	tu := podTun()
	tu.outerSrc, tu.outerDst = node2VTEP, gwVTEP6
	return tunnelFrame(t, tu, p.build(t))
}

// answer sends the server's reply to pod 1's UDP flow from sport (via
// egress4), which makes the flow answered.
func answer(t *testing.T, f *fixture, sport uint16) {
	t.Helper()
	rep := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: sport, payload: []byte("a")}
	if r, _ := f.run(t, plainFrame(t, rep.build(t))); r.Verdict != VerdictTx {
		t.Fatalf("reply to %d: %v %v", sport, r.Verdict, r.Reason)
	}
}

// The reported case: one pod opened answered flows until it could open no
// more, and a pod of another node then got conntrack_full. Now the first
// pod stops at its limit (pod_flow_limit) and the other gets its flow.
func TestOnePodCannotFillTheTable(t *testing.T) {
	f := limitsFixture(t)
	refused := false
	for i := 0; i < f.ct.Cap() && !refused; i++ {
		p := udpFrom(pod1v4, server4)
		p.sport = uint16(10000 + i)
		r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t)))
		switch {
		case r.Verdict == VerdictTx:
			answer(t, f, p.sport) // answered: early drop may not take it
		case r.Reason == DropPodFlowLimit:
			refused = true
		default:
			t.Fatalf("pod 1 flow %d: %v %v", i, r.Verdict, r.Reason)
		}
	}
	if r, _ := f.run(t, fromNode2(t, udpFrom(pod2v4, server4))); r.Verdict != VerdictTx {
		t.Fatalf("pod 2's first flow: %v %v", r.Verdict, r.Reason)
	}
	src, _ := conntrack.DefaultLimits(4096)
	if !refused || f.ct.Len() != src+1 {
		t.Fatalf("pod 1 holds %d flows of %d (refused %v), want its limit %d", f.ct.Len()-1, f.ct.Cap(), refused, src)
	}
	if got := f.p.NAT().PortsInUse(nat.Addr(addr16(egress4)), header.ProtoUDP); got != f.ct.Len() {
		t.Errorf("ports in use %d, flows %d: a refused flow kept its port", got, f.ct.Len())
	}
}

// A table full of flows nobody answered (a scan from many pods) takes a
// new flow: the worker early-drops one unanswered flow, releases its port
// and counts it; a table full of answered flows still refuses.
func TestFullTableEarlyDrops(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	for i := 0; f.ct.Len() < f.ct.Cap(); i++ {
		p := udpFrom(pod1v4, server4)
		p.sport = uint16(10000 + i)
		if r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t))); r.Verdict != VerdictTx {
			t.Fatalf("flow %d: %v %v", i, r.Verdict, r.Reason)
		}
	}
	if r, _ := f.run(t, fromNode2(t, udpFrom(pod2v4, server4))); r.Verdict != VerdictTx {
		t.Fatalf("new flow on a table full of unanswered flows: %v %v", r.Verdict, r.Reason)
	}
	if st := f.p.Stats(); st.Count(CounterFlowsEarlyDropped) != 1 {
		t.Fatalf("flows_early_dropped %d, want 1", st.Count(CounterFlowsEarlyDropped))
	}
	if got := f.p.NAT().PortsInUse(nat.Addr(addr16(egress4)), header.ProtoUDP); got != f.ct.Len() {
		t.Errorf("ports in use %d, flows %d: the dropped flow kept its port", got, f.ct.Len())
	}
}

// The cps benchmark's case: one pod opening UDP flows nobody answers
// reaches its limit and still opens new flows, each taking the place of the
// pod's own oldest unanswered one (flows_early_dropped, its port released);
// never another pod's (pod 2's, older and just as unanswered), never one of
// its answered flows.
func TestPodAtItsLimitEarlyDropsItsOwn(t *testing.T) {
	f := limitsFixture(t)
	limit, _ := conntrack.DefaultLimits(4096)
	const others = 10
	for i := 0; i < others; i++ {
		p := udpFrom(pod2v4, server4)
		p.sport = uint16(30000 + i)
		if r, _ := f.run(t, fromNode2(t, p)); r.Verdict != VerdictTx {
			t.Fatalf("pod 2 flow %d: %v %v", i, r.Verdict, r.Reason)
		}
	}
	send := func(i int) Result {
		p := udpFrom(pod1v4, server4)
		p.sport = uint16(10000 + i)
		r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t)))
		return r
	}
	// Pod 1 fills its limit; every other flow is answered.
	for i := 0; i < limit; i++ {
		if r := send(i); r.Verdict != VerdictTx {
			t.Fatalf("pod 1 flow %d: %v %v", i, r.Verdict, r.Reason)
		}
		if i%2 == 0 {
			answer(t, f, uint16(10000+i))
		}
	}
	// More new flows than it has unanswered ones: the new ones take each
	// other's places too.
	const more = 300
	for i := limit; i < limit+more; i++ {
		if r := send(i); r.Verdict != VerdictTx {
			t.Fatalf("pod 1 at its limit, new flow %d: %v %v", i-limit, r.Verdict, r.Reason)
		}
	}
	st := f.p.Stats()
	if st.Count(CounterFlowsEarlyDropped) != more || st.Drop(DropPodFlowLimit) != 0 {
		t.Fatalf("flows_early_dropped %d, pod_flow_limit %d; want %d and 0",
			st.Count(CounterFlowsEarlyDropped), st.Drop(DropPodFlowLimit), more)
	}
	if f.ct.Len() != limit+others {
		t.Fatalf("%d flows, want pod 1's limit %d and pod 2's %d", f.ct.Len(), limit, others)
	}
	if got := f.p.NAT().PortsInUse(nat.Addr(addr16(egress4)), header.ProtoUDP); got != f.ct.Len() {
		t.Errorf("ports in use %d, flows %d: an early-dropped flow kept its port", got, f.ct.Len())
	}
	// Pod 1's answered flows and all of pod 2's are still there: the
	// server's replies reach them (a reply without a flow is dropped).
	for i := 0; i < limit; i += 2 {
		answer(t, f, uint16(10000+i))
	}
	for i := 0; i < others; i++ {
		answer(t, f, uint16(30000+i))
	}
	// Once all its flows are answered, the pod is refused: nothing of its
	// own may go.
	held := 0
	for i := limit; i < limit+more; i++ {
		rep := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: uint16(10000 + i), payload: []byte("a")}
		if r, _ := f.run(t, plainFrame(t, rep.build(t))); r.Verdict == VerdictTx {
			held++
		}
	}
	if held != limit/2 {
		t.Fatalf("pod 1 holds %d of its new flows, want the %d places of its unanswered ones", held, limit/2)
	}
	if r := send(limit + more); r.Verdict != VerdictDrop || r.Reason != DropPodFlowLimit {
		t.Fatalf("pod 1 with only answered flows: %v %v, want pod_flow_limit", r.Verdict, r.Reason)
	}
	if f.ct.Len() != limit+others {
		t.Fatalf("%d flows after the refusal, want %d", f.ct.Len(), limit+others)
	}
}
