package gateway

import (
	"testing"
)

// TestPodFromTunnelPortGetsAnotherPort: a pod flow from UDP source port 4789
// or 6081 must not keep it on the egress IP. The reply to such a port would
// decode as tunnel traffic and never reach the pod.
func TestPodFromTunnelPortGetsAnotherPort(t *testing.T) {
	for _, sport := range []uint16{4789, 6081} {
		f := newFixture(t, 1024, testConfig())
		p := udpFrom(pod1v4, server4)
		p.sport = sport
		r, out := f.run(t, tunnelFrame(t, podTun(), p.build(t)))
		if r.Verdict != VerdictTx {
			t.Fatalf("sport %d: %v %v", sport, r.Verdict, r.Reason)
		}
		var pk Parsed
		pk.Decode(out)
		if pk.Kind != KindIP || !pk.HasL4 {
			t.Fatalf("sport %d: sent frame decodes as kind %v", sport, pk.Kind)
		}
		nport := pk.SrcPort
		if nport == 4789 || nport == 6081 {
			t.Fatalf("pod UDP sport %d left with NAT port %d", sport, nport)
		}
		rep := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: nport, payload: []byte("a")}
		if r, _ := f.run(t, plainFrame(t, rep.build(t))); r.Verdict != VerdictTx {
			t.Fatalf("reply to NAT port %d: %v %v", nport, r.Verdict, r.Reason)
		}
	}
}
