package nat

import (
	"errors"
	"testing"
)

// FuzzAllocator drives an allocator with arbitrary operations — any
// protocol number, source port, destination, unspecified egress addresses,
// stray releases — and checks it never panics, never hands out port 0, a
// port outside its range or a reply tuple in use, and that counts return to
// zero when every flow has ended.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 6, 0x9c, 0x40, 1, 0, 0, 7})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 17, 0, 22, 2, 1, 1, 9, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 1, 0, 0, 3, 3, 0, 0, 0x80, 58, 0xff, 0xff, 0, 0, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		cfg := DefaultConfig()
		cfg.PortMin, cfg.PortMax = 60000, 60000+uint16(data[0]&0x0f) // tiny: exhaustion happens
		cfg.UDPEndpointIndependent = data[0]&0x10 != 0
		cfg.TCPEndpointIndependent = data[0]&0x20 != 0
		cfg.PreservePort = data[0]&0x40 == 0
		cfg.PreserveParity = data[0]&0x80 == 0
		tab := newFlows()
		a := newAlloc(t, cfg, tab)
		nats := []Addr{egress, egress6, {}, v4(0, 0, 0, 0)}
		protos := []uint8{tcp, udp, icmp, icmpv6, 47, 0}
		var live []flow
		stray := false
		for data = data[1:]; len(data) >= 8; data = data[8:] {
			op := data[0] % 4
			switch {
			case op < 2: // open
				fl := flow{
					proto: protos[int(data[1])%len(protos)], src: v4(10, 0, 0, data[4]&3),
					sport: uint16(data[2])<<8 | uint16(data[3]), dst: v4(198, 51, 100, data[5]&1),
					dport: uint16(data[6] & 1), nat: nats[int(data[7])%len(nats)],
				}
				open(t, a, tab, &fl, uint64(data[7])<<8|uint64(data[1]))
				switch err := fl.allocation; {
				case err == nil:
					lo, hi := a.portRange(classOfMust(fl.proto), fl.sport)
					if fl.natPort < lo || fl.natPort > hi {
						t.Fatalf("port %d outside %d–%d for %+v", fl.natPort, lo, hi, fl)
					}
					live = append(live, fl)
				case errors.Is(err, ErrExhausted), errors.Is(err, ErrProto), errors.Is(err, ErrAddr):
				default:
					t.Fatalf("unexpected error %v", err)
				}
			case op == 2 && len(live) > 0: // close
				i := int(data[1]) % len(live)
				closeFlow(a, tab, &live[i])
				live = append(live[:i], live[i+1:]...)
			default: // stray release with arbitrary fields
				a.Release(data[1], v4(10, 0, 0, data[4]&3), uint16(data[2]), v4(198, 51, 100, data[5]&1), uint16(data[6]), nats[int(data[7])%len(nats)], uint16(data[3]))
				stray = true
			}
		}
		for i := range live {
			closeFlow(a, tab, &live[i])
		}
		if stray { // a stray release may have taken a live flow's count
			return
		}
		for _, n := range nats[:2] {
			for _, p := range protos[:4] {
				if got := a.PortsInUse(n, p); got != 0 {
					t.Fatalf("PortsInUse(%v, %d) = %d after all flows ended", n, p, got)
				}
			}
		}
		if a.StrayReleases() != 0 {
			t.Fatalf("StrayReleases = %d without stray releases", a.StrayReleases())
		}
	})
}

func classOfMust(proto uint8) int {
	c, _ := classOf(proto)
	return c
}
