package nat

import (
	"fmt"
	"testing"
)

func randomFlowHashes(n int, seed uint64) []uint64 {
	r := rng(seed)
	hs := make([]uint64, n)
	for i := range hs {
		x, y := r.next(), r.next()
		hs[i] = FlowHash(6, v4(10, byte(x), byte(x>>8), byte(x>>16)), uint16(x>>24), v4(198, 51, byte(y), byte(y>>8)), uint16(y>>16))
	}
	return hs
}

func egressSet(n int) []Addr {
	ips := make([]Addr, n)
	for i := range ips {
		ips[i] = v4(192, 0, 2, byte(10+i))
	}
	return ips
}

func TestPickEmptyAndSingle(t *testing.T) {
	if got := Pick(nil, 42); got != -1 {
		t.Fatalf("Pick(nil) = %d, want -1", got)
	}
	for _, h := range []uint64{0, 1, ^uint64(0)} {
		if got := Pick([]Addr{egress}, h); got != 0 {
			t.Fatalf("Pick(one IP, %d) = %d", h, got)
		}
	}
}

// New flows spread evenly: chi-square of 100k random flows over n IPs below
// the 0.1% critical value, and max/min below 1.06.
func TestPickSpreadsEvenly(t *testing.T) {
	crit := map[int]float64{2: 10.83, 3: 13.82, 4: 16.27, 5: 18.47, 8: 24.32, 16: 37.70}
	hs := randomFlowHashes(100_000, 1)
	for _, n := range []int{2, 3, 4, 5, 8, 16} {
		t.Run(fmt.Sprintf("%d IPs", n), func(t *testing.T) {
			ips := egressSet(n)
			count := make([]int, n)
			for _, h := range hs {
				count[Pick(ips, h)]++
			}
			exp := float64(len(hs)) / float64(n)
			chi, lo, hi := 0.0, count[0], count[0]
			for _, c := range count {
				d := float64(c) - exp
				chi += d * d / exp
				lo, hi = min(lo, c), max(hi, c)
			}
			if chi > crit[n] || float64(hi)/float64(lo) > 1.06 {
				t.Fatalf("counts %v: chi-square %.2f (limit %.2f), max/min %.3f", count, chi, crit[n], float64(hi)/float64(lo))
			}
			t.Logf("chi-square %.2f (0.1%% limit %.2f), max/min %.3f", chi, crit[n], float64(hi)/float64(lo))
		})
	}
}

// Removing an IP moves exactly the flows that had it; every other flow
// keeps its IP. Adding one takes flows only onto the new IP.
func TestPickMovesOnlyFlowsOfChangedIP(t *testing.T) {
	hs := randomFlowHashes(100_000, 2)
	for _, n := range []int{2, 4, 7} {
		ips := egressSet(n)
		for gone := 0; gone < n; gone++ {
			t.Run(fmt.Sprintf("remove %d of %d", gone, n), func(t *testing.T) {
				rest := append(append([]Addr{}, ips[:gone]...), ips[gone+1:]...)
				moved := 0
				for _, h := range hs {
					before := ips[Pick(ips, h)]
					after := rest[Pick(rest, h)]
					if before != ips[gone] && after != before {
						t.Fatalf("flow %x moved from %v to %v though its IP stayed", h, before, after)
					}
					if before == ips[gone] {
						moved++
					}
				}
				// The moved share is the removed IP's share: about 1/n.
				if exp := len(hs) / n; moved < exp*9/10 || moved > exp*11/10 {
					t.Fatalf("%d flows moved, expected about %d", moved, exp)
				}
			})
		}
		t.Run(fmt.Sprintf("add to %d", n), func(t *testing.T) {
			more := append(append([]Addr{}, ips...), v4(192, 0, 2, 200))
			moved := 0
			for _, h := range hs {
				before, after := ips[Pick(ips, h)], more[Pick(more, h)]
				if after != before {
					if after != more[n] {
						t.Fatalf("flow %x moved from %v to %v, not to the new IP", h, before, after)
					}
					moved++
				}
			}
			if exp := len(hs) / (n + 1); moved < exp*9/10 || moved > exp*11/10 {
				t.Fatalf("%d flows moved to the new IP, expected about %d", moved, exp)
			}
		})
	}
}

// Every gateway must pick alike whatever order its snapshot lists the IPs in.
func TestPickIgnoresOrder(t *testing.T) {
	ips := egressSet(5)
	rev := make([]Addr, len(ips))
	for i := range ips {
		rev[len(ips)-1-i] = ips[i]
	}
	for _, h := range randomFlowHashes(10_000, 3) {
		if ips[Pick(ips, h)] != rev[Pick(rev, h)] {
			t.Fatalf("hash %x: order changes the pick", h)
		}
	}
}

// FlowHash is part of the wire-level behaviour between gateways: pinned
// values catch any change of seed, constants or byte order. (If these ever
// change on purpose, flows move between egress IPs during a rolling update.)
func TestFlowHashStable(t *testing.T) {
	cases := []struct {
		proto uint8
		src   Addr
		sport uint16
		dst   Addr
		dport uint16
		want  uint64
	}{
		{6, v4(10, 128, 0, 5), 40000, v4(198, 51, 100, 1), 443, 0x41171819e3ed4016},
		{17, v6(0x10, 5), 5353, v6(0x55, 1), 53, 0xb5f3a9b83c7587ff},
	}
	for _, tc := range cases {
		got := FlowHash(tc.proto, tc.src, tc.sport, tc.dst, tc.dport)
		if got != tc.want {
			t.Errorf("FlowHash(%d, %v:%d → %v:%d) = %#x, want %#x", tc.proto, tc.src, tc.sport, tc.dst, tc.dport, got, tc.want)
		}
	}
}

// Every field of the 5-tuple changes the hash, and so can change the pick.
func TestFlowHashUsesEveryField(t *testing.T) {
	base := func() (uint8, Addr, uint16, Addr, uint16) { return 6, pod1, 40000, server1, 443 }
	p, s, sp, d, dp := base()
	h := FlowHash(p, s, sp, d, dp)
	variants := map[string]uint64{
		"proto":    FlowHash(17, s, sp, d, dp),
		"src":      FlowHash(p, pod2, sp, d, dp),
		"src high": FlowHash(p, Addr{0: 1, 10: 0xff, 11: 0xff, 12: 10, 13: 128, 15: 5}, sp, d, dp),
		"sport":    FlowHash(p, s, sp+1, d, dp),
		"dst":      FlowHash(p, s, sp, server2, dp),
		"dport":    FlowHash(p, s, sp, d, dp+1),
		"swapped":  FlowHash(p, d, dp, s, sp),
	}
	for name, v := range variants {
		if v == h {
			t.Errorf("changing %s does not change FlowHash", name)
		}
	}
	if EndpointHash(6, pod1, 40000) == EndpointHash(6, pod1, 40001) {
		t.Error("EndpointHash ignores its fields")
	}
}

// Pick allocates nothing (it runs once per new flow on the fast path).
func TestPickNoAllocs(t *testing.T) {
	ips := egressSet(4)
	h := uint64(0)
	if n := testing.AllocsPerRun(1000, func() { h++; _ = Pick(ips, FlowHash(6, pod1, uint16(h), server1, 443)) }); n != 0 {
		t.Fatalf("%v allocations per Pick", n)
	}
}
