package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
)

// TestICMPErrorsConfirmNothing: ICMP errors about a flow, from any host on
// the path, are translated back to the pod (RFC 5508) but are no answer
// from the server: a UDP flow that only gets errors back stays UNREPLIED
// and expires on its timeout from the pod's last packet, a TCP flow stays
// SYN_SENT (and expires on the transitory timeout from the SYN), a picked-
// up one stays PICKED_UP. As Linux conntrack: RELATED packets do not
// confirm a connection.
func TestICMPErrorsConfirmNothing(t *testing.T) {
	router := netip.MustParseAddr("203.0.113.7")
	to := conntrack.DefaultTimeouts()
	cases := []struct {
		name    string
		pod     pkt // what the pod sends, once
		quote   pkt // the forwarded packet, as the error quotes it
		icmp    uint8
		state   conntrack.State
		timeout time.Duration
	}{
		{"udp", udpFrom(pod1v4, server4), udpFrom(egress4, server4), 3, conntrack.StateUDPUnreplied, to.UDP},
		{"udp v6", udpFrom(pod1v6, server6), udpFrom(egress6, server6), 1, conntrack.StateUDPUnreplied, to.UDP},
		{"tcp syn", pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "S"},
			pkt{src: egress4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "S"}, 3, conntrack.StateSynSent, to.TCPTransitory},
		{"tcp picked up", pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40001, dport: 443, flags: "A", seq: 5000, ack: 9000},
			pkt{src: egress4, dst: server4, proto: "tcp", sport: 40001, dport: 443, flags: "A", seq: 5000, ack: 9000}, 11, conntrack.StatePickedUp, to.TCPTransitory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 64, testConfig())
			out := make([]byte, 2048)
			if r := processOne(f.w, testNow, tunnelFrame(t, podTun(), c.pod.build(t)), out); r.Verdict != VerdictTx {
				t.Fatalf("pod packet: %v %v", r.Verdict, r.Reason)
			}
			src := router
			if c.pod.src.Is6() {
				src = netip.MustParseAddr("2001:db8:7::1")
			}
			quoted := c.quote.build(t)
			errPkt := pkt{src: src, dst: c.quote.src, proto: "icmperr", icmpType: c.icmp, quote: quoted}
			step := c.timeout / 5
			var sent uint64
			for i := 1; i <= 4; i++ {
				now := testNow + int64(i)*int64(step)
				r := processOne(f.w, now, plainFrame(t, errPkt.build(t)), out)
				mustTx(t, r, underlayHop.Ifindex) // translated back to the pod
				sent++
				if got := flowState(t, f, now); got != c.state {
					t.Fatalf("after ICMP error %d the flow is %v, want %v", i, got, c.state)
				}
			}
			if st := f.p.Stats(); st.Count(CounterICMPXlated) != sent {
				t.Fatalf("%d errors translated, want %d", st.Count(CounterICMPXlated), sent)
			}
			// The timeout runs from the pod's packet: the errors moved
			// nothing (a flow expires at most refreshSlack, 250 ms, late).
			end := testNow + int64(c.timeout) + int64(time.Second)
			if n := f.w.Expire(end, 1<<16); n != 1 || f.ct.Len() != 0 {
				t.Fatalf("%v after the pod's packet: %d flows expired, %d left; want the flow gone", c.timeout+time.Second, n, f.ct.Len())
			}
		})
	}
}

// flowState returns the state of f's only flow.
func flowState(t *testing.T, f *fixture, now int64) conntrack.State {
	t.Helper()
	var st conntrack.State
	n := 0
	f.ct.Range(now, func(fl *conntrack.Flow, _ time.Duration) {
		st = fl.State
		n++
	})
	if n != 1 {
		t.Fatalf("%d flows, want 1", n)
	}
	return st
}
