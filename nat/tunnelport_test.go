package nat

import (
	"fmt"
	"testing"
)

// Literal ports, not the allocator's constants: the test pins the numbers.
const tunVXLAN, tunGeneve = 4789, 6081

// The gateway takes every UDP packet to 4789 (VXLAN) or 6081 (Geneve) as
// tunnel traffic, so a UDP flow NATed to either would never see a reply.
func TestUDPNeverGetsTunnelPorts(t *testing.T) {
	for _, eim := range []bool{false, true} {
		for _, port := range []uint16{tunVXLAN, tunGeneve} {
			t.Run(fmt.Sprintf("eim=%v/%d", eim, port), func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.UDPEndpointIndependent = eim
				cfg.TCPEndpointIndependent = eim
				tab := newFlows()
				a := newAlloc(t, cfg, tab)
				nat := v4(192, 0, 2, 1)

				// Port preservation must not keep a tunnel port.
				f := flow{proto: 17, src: v4(10, 0, 0, 1), sport: port, dst: v4(198, 51, 100, 1), dport: 53, nat: nat}
				if p := mustOpen(t, a, tab, &f, 1); p == tunVXLAN || p == tunGeneve {
					t.Fatalf("UDP from sport %d got NAT port %d", port, p)
				}
				// An endpoint's second flow (EIM reuse) keeps the non-tunnel port.
				g := f
				g.dst = v4(198, 51, 100, 2)
				if p := mustOpen(t, a, tab, &g, 2); p == tunVXLAN || p == tunGeneve || eim && p != f.natPort {
					t.Fatalf("second UDP flow from sport %d got NAT port %d (first %d)", port, p, f.natPort)
				}
				// TCP has no such conflict: the port is preserved.
				tcp := flow{proto: 6, src: v4(10, 0, 0, 1), sport: port, dst: v4(198, 51, 100, 1), dport: 443, nat: nat}
				if p := mustOpen(t, a, tab, &tcp, 3); p != port {
					t.Fatalf("TCP from sport %d got NAT port %d, want it preserved", port, p)
				}

				// A range holding only the tunnel port is exhausted for UDP.
				cfg.PortMin, cfg.PortMax = port, port
				tab = newFlows()
				a = newAlloc(t, cfg, tab)
				for i, sport := range []uint16{port, 40000} {
					u := flow{proto: 17, src: v4(10, 0, 0, 2), sport: sport, dst: v4(198, 51, 100, 1), dport: 53, nat: nat}
					open(t, a, tab, &u, uint64(i))
					if !isExhausted(u.allocation) {
						t.Fatalf("range %d–%d, UDP sport %d: got port %d, err %v; want ErrExhausted", port, port, sport, u.natPort, u.allocation)
					}
				}
				tcp.nat = v4(192, 0, 2, 2)
				tcp.sport = 40000
				if p := mustOpen(t, a, tab, &tcp, 4); p != port {
					t.Fatalf("TCP in range %d–%d got %d", port, port, p)
				}

				// A small range around the tunnel port: every draw avoids it
				// until only it is left, then ErrExhausted.
				cfg.PortMin, cfg.PortMax = port-2, port+2
				tab = newFlows()
				a = newAlloc(t, cfg, tab)
				r := rng(port)
				for i := 0; i < 4; i++ {
					u := flow{proto: 17, src: v4(10, 0, 1, byte(i)), sport: port, dst: v4(198, 51, 100, 1), dport: 53, nat: nat}
					if p := mustOpen(t, a, tab, &u, r.next()); p == port {
						t.Fatalf("flow %d got tunnel port %d", i, p)
					}
				}
				u := flow{proto: 17, src: v4(10, 0, 2, 1), sport: port, dst: v4(198, 51, 100, 1), dport: 53, nat: nat}
				open(t, a, tab, &u, r.next())
				if !isExhausted(u.allocation) {
					t.Fatalf("only the tunnel port left: got port %d, err %v; want ErrExhausted", u.natPort, u.allocation)
				}
			})
		}
	}
}
