package gateway

import (
	"testing"

	"github.com/egret-gw/egret/conntrack"
)

// TestForgedRSTKeepsFlow: a RST from outside whose sequence number is not
// the one the pod acknowledged last leaves the flow ESTABLISHED (it used
// to move it to CLOSE whatever its sequence number); the real one, at the
// pod's RCV.NXT, closes it.
func TestForgedRSTKeepsFlow(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	const podISN, srvISN = 7000, 90000
	toSrv := func(flags string, seq, ack uint32) []byte {
		return tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: flags, seq: seq, ack: ack}.build(t))
	}
	r, _ := f.run(t, toSrv("S", podISN, 0))
	mustTx(t, r, outHop.Ifindex)
	// The server answers the egress IP at the port the pod's flow got.
	var fl conntrack.Flow
	k := conntrack.Tuple{Src: conntrack.Addr(addr16(pod1v4)), Dst: conntrack.Addr(addr16(server4)), SrcPort: 40000, DstPort: 443, Proto: 6}
	if !f.ct.Track(conntrack.Original, &k, 0, testNow, &fl) {
		t.Fatal("no flow after the SYN")
	}
	fromSrv := func(flags string, seq, ack uint32) Result {
		r, _ := f.run(t, plainFrame(t, pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: fl.NATPort, flags: flags, seq: seq, ack: ack}.build(t)))
		return r
	}
	state := func() conntrack.State {
		var g conntrack.Flow
		if !f.ct.Track(conntrack.Original, &k, 0, testNow, &g) {
			t.Fatal("flow gone")
		}
		return g.State
	}
	mustTx(t, fromSrv("SA", srvISN, podISN+1), underlayHop.Ifindex)
	r, _ = f.run(t, toSrv("A", podISN+1, srvISN+1))
	mustTx(t, r, outHop.Ifindex)
	if s := state(); s != conntrack.StateEstablished {
		t.Fatalf("after the handshake: %v", s)
	}
	for _, seq := range []uint32{0x12345678, srvISN + 2, srvISN} {
		fromSrv("R", seq, 0)
		if s := state(); s != conntrack.StateEstablished {
			t.Fatalf("after a forged RST with seq %d: %v, want ESTABLISHED", seq, s)
		}
	}
	fromSrv("R", srvISN+1, 0)
	if s := state(); s != conntrack.StateClose {
		t.Fatalf("after the RST at the pod's RCV.NXT: %v, want CLOSE", s)
	}
}
