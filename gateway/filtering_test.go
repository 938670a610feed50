package gateway

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
)

// TestRFC4787_REQ8_RFC5382_REQ3_AddressAndPortDependentFiltering: once a
// pod has opened a flow, only packets from that flow's remote endpoint (its
// address and port) to the flow's egress IP and port reach the pod. Every
// other inbound packet, from another port of the same server, another
// host, to another port, an unsolicited SYN (RFC 5382 REQ-4: never
// answered) or an echo request to the egress IP, is dropped and counted as
// no_flow. Endpoint-independent mapping (the nat option) changes how ports
// are chosen, not the filtering, so both mappings are checked.
func TestRFC4787_REQ8_RFC5382_REQ3_AddressAndPortDependentFiltering(t *testing.T) {
	other4 := netip.MustParseAddr("203.0.113.9")
	for _, eim := range []bool{false, true} {
		t.Run(fmt.Sprintf("eim=%v", eim), func(t *testing.T) {
			f := newFixtureNAT(t, 1024, testConfig(), func() nat.Config {
				c := nat.DefaultConfig()
				c.UDPEndpointIndependent, c.TCPEndpointIndependent = eim, eim
				return c
			}())
			out := make([]byte, 2048)
			// The pod's flows: UDP 5000 → server:53 and TCP 40000 → server:443,
			// both ports preserved on egress4.
			for _, p := range []pkt{
				{src: pod1v4, dst: server4, proto: "udp", sport: 5000, dport: 53, payload: []byte("q")},
				{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "S"},
			} {
				r := processOne(f.w, testNow, tunnelFrame(t, podTun(), p.build(t)), out)
				if r.Verdict != VerdictTx {
					t.Fatalf("pod flow %s: %v %v", p.proto, r.Verdict, r.Reason)
				}
				if got := netip.AddrFrom4([4]byte(out[header.EthernetLen+12 : header.EthernetLen+16])); got != egress4 {
					t.Fatalf("pod flow %s left from %v, want %v", p.proto, got, egress4)
				}
			}
			cases := []struct {
				name string
				p    pkt
				pass bool
			}{
				{"udp_from_the_flow's_remote_endpoint", pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 5000, payload: []byte("a")}, true},
				{"udp_from_another_port_of_the_server", pkt{src: server4, dst: egress4, proto: "udp", sport: 54, dport: 5000, payload: []byte("a")}, false},
				{"udp_from_another_host_same_port", pkt{src: other4, dst: egress4, proto: "udp", sport: 53, dport: 5000, payload: []byte("a")}, false},
				{"udp_from_another_host_and_port", pkt{src: other4, dst: egress4, proto: "udp", sport: 9999, dport: 5000, payload: []byte("a")}, false},
				{"udp_to_an_unmapped_port", pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 5001, payload: []byte("a")}, false},
				{"tcp_synack_from_the_flow's_remote_endpoint", pkt{src: server4, dst: egress4, proto: "tcp", sport: 443, dport: 40000, flags: "SA"}, true},
				{"tcp_from_another_port_of_the_server", pkt{src: server4, dst: egress4, proto: "tcp", sport: 444, dport: 40000, flags: "A"}, false},
				{"tcp_from_another_host", pkt{src: other4, dst: egress4, proto: "tcp", sport: 443, dport: 40000, flags: "A"}, false},
				{"RFC5382_REQ4_unsolicited_SYN_dropped_not_answered", pkt{src: other4, dst: egress4, proto: "tcp", sport: 12345, dport: 40001, flags: "S"}, false},
				{"RFC5382_REQ4_SYN_from_the_server_to_the_mapped_port", pkt{src: other4, dst: egress4, proto: "tcp", sport: 443, dport: 40000, flags: "S"}, false},
				{"echo_request_to_the_egress_IP", pkt{src: other4, dst: egress4, proto: "echo", sport: 7}, false},
			}
			for _, c := range cases {
				before := f.w.Stats().Drops[DropNoFlow]
				r := processOne(f.w, testNow, plainFrame(t, c.p.build(t)), out)
				after := f.w.Stats().Drops[DropNoFlow]
				switch {
				case c.pass && r.Verdict != VerdictTx:
					t.Errorf("%s: %v %v, want it forwarded to the pod", c.name, r.Verdict, r.Reason)
				case !c.pass && (r.Verdict != VerdictDrop || r.Reason != DropNoFlow):
					t.Errorf("%s: %v %v, want a no_flow drop", c.name, r.Verdict, r.Reason)
				case !c.pass && after != before+1:
					t.Errorf("%s: no_flow count went %d → %d", c.name, before, after)
				}
			}
		})
	}
}
