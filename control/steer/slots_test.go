package steer

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func units(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		if a != "" {
			out[i] = netip.MustParseAddr(a)
		}
	}
	return out
}

func TestPlaceHops(t *testing.T) {
	const a, b, c, d = "192.0.2.21", "192.0.2.22", "192.0.2.23", "192.0.2.24"
	for _, tc := range []struct {
		name       string
		prev, want []netip.Addr
		units      []netip.Addr
		runs       []weighted
	}{
		{"fresh", nil, units(a, b), units(a, b), []weighted{{units(a)[0], 1}, {units(b)[0], 1}}},
		{"first leaves: its unit stays vacant, served by the next", units(a, b, c), units(b, c), units("", b, c), []weighted{{units(b)[0], 2}, {units(c)[0], 1}}},
		{"middle leaves: served by the one before", units(a, b, c), units(a, c), units(a, "", c), []weighted{{units(a)[0], 2}, {units(c)[0], 1}}},
		{"replaced in place", units(a, b), units(b, c), units(c, b), []weighted{{units(c)[0], 1}, {units(b)[0], 1}}},
		{"returns to its vacancy", units("", b, c), units(a, b, c), units(a, b, c), nil},
		{"a newcomer takes the vacancy", units(a, "", c), units(a, c, d), units(a, d, c), nil},
		{"after a restart: takes the last unit of a merged hop", units(b, b, c), units(a, b, c), units(b, a, c), nil},
		{"growth appends", units(a, b), units(a, b, c), units(a, b, c), nil},
		{"nothing kept starts afresh", units(a, b), units(c, d), units(c, d), nil},
		{"all gone", units(a, b), nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := placeHops(tc.prev, tc.want)
			if !slices.Equal(got, tc.units) {
				t.Fatalf("placeHops(%v, %v) = %v, want %v", tc.prev, tc.want, got, tc.units)
			}
			if tc.runs != nil {
				if r := runs(got); !slices.Equal(r, tc.runs) {
					t.Fatalf("runs(%v) = %v, want %v", got, r, tc.runs)
				}
			}
		})
	}
}

// TestPlaceHopsKeepsSurvivors: over random sequences of gateway sets, every
// gateway present before and after a change keeps every unit it served (so
// the kernel's hash-threshold shares of the survivors only grow), every
// wanted gateway serves, no other does, and weights fit the kernel's field.
func TestPlaceHopsKeepsSurvivors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := units("192.0.2.21", "192.0.2.22", "192.0.2.23", "192.0.2.24", "192.0.2.25", "192.0.2.26")
	for seq := range 500 {
		var prev []netip.Addr
		for step := range 20 {
			var want []netip.Addr
			for _, a := range pool {
				if rng.IntN(2) == 0 {
					want = append(want, a)
				}
			}
			got := placeHops(prev, want)
			served := runs(got)
			// Survivors keep their units.
			filledPrev := expand(runs(prev))
			filledGot := expand(served)
			for i, a := range filledPrev {
				if slices.Contains(want, a) && i < len(prev) && prev[i] == a && (i >= len(filledGot) || filledGot[i] != a) {
					t.Fatalf("seq %d step %d: %v lost unit %d: %v → %v", seq, step, a, i, prev, got)
				}
			}
			var hops []netip.Addr
			for _, w := range served {
				if w.weight < 1 || w.weight > 256 {
					t.Fatalf("weight %d out of range: %v", w.weight, served)
				}
				if slices.Contains(hops, w.addr) {
					// The kernel refuses an IPv6 route naming one gateway twice.
					t.Fatalf("seq %d step %d: %v twice in %v", seq, step, w.addr, served)
				}
				hops = append(hops, w.addr)
			}
			slices.SortFunc(hops, netip.Addr.Compare)
			if !slices.Equal(hops, want) {
				t.Fatalf("seq %d step %d: serving %v, want %v (units %v)", seq, step, hops, want, got)
			}
			if len(got) > maxSlots {
				t.Fatalf("%d units", len(got))
			}
			prev = got
		}
	}
}

func expand(ws []weighted) []netip.Addr {
	var out []netip.Addr
	for _, w := range ws {
		for range w.weight {
			out = append(out, w.addr)
		}
	}
	return out
}

// TestSurvivingGatewaysKeepTheirFlows programs a real multipath route for an
// object with three egress IPs on g1 g2 g3, maps 256 UDP flows of a pod to
// the gateway each reaches, then changes the assignment as failovers do
// (one IP replaced by a spare gateway in one step, one IP lost with no
// replacement, then placed again): after each change every flow of a
// gateway that stayed still reaches that gateway, and the flows of the lost
// gateway go to the one that takes its place. It also needs the agent's
// 5-tuple hash (sysctls): with the kernel's "L4" policy the pod's packets
// carry their socket's random hash, and a flow's gateway changes with it.
func TestSurvivingGatewaysKeepTheirFlows(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	var extra []netns.NsHandle
	for i, ip := range []string{"192.0.2.23", "192.0.2.24"} {
		name, h := newNS(t, fmt.Sprintf("g%d", i+3))
		port := fmt.Sprintf("p%d", i+3)
		ipb(t, l.fabric, "link add "+port+" type veth peer name eth0 netns "+name, "link set "+port+" master br0 up")
		ipb(t, name, "addr add "+ip+"/24 dev eth0", "link set eth0 up")
		extra = append(extra, h)
	}
	k := setupKernel(t, testConfig(), l.nodeH)
	caps := map[string]*capturer{
		"g1": capture(t, l.g1H, "eth0"), "g2": capture(t, l.g2H, "eth0"),
		"g3": capture(t, extra[0], "eth0"), "g4": capture(t, extra[1], "eth0"),
	}
	in := testInputs()
	in.VTEPs["g3"], in.VTEPs["g4"] = []netip.Addr{addr("192.0.2.23")}, []netip.Addr{addr("192.0.2.24")}
	apply := func(status ...string) {
		t.Helper()
		in.EgressIPs = []*egressv1.EgressIP{eip("blue", match("team", "blue"), metav1.LabelSelector{},
			[]string{"192.0.2.101", "192.0.2.102", "192.0.2.103"}, status...)}
		if _, err := k.Apply(desired(in, k.Params())); err != nil {
			t.Fatal(err)
		}
	}
	// where sends two datagrams on each of 256 flows and says which gateway
	// each flow reached.
	where := func() map[uint16]string {
		t.Helper()
		for _, c := range caps {
			c.take()
		}
		sendUDP(t, l.podH, podIP4, outside4, ports(41000, 256))
		got := map[uint16]string{}
		for g, c := range caps {
			for _, f := range c.take() {
				if !f.vxlan || f.innerSrc != podIP4 || f.inDst != outside4 {
					continue
				}
				if o, ok := got[f.inSport]; ok && o != g {
					t.Fatalf("flow %d reached both %s and %s", f.inSport, o, g)
				}
				got[f.inSport] = g
			}
		}
		if len(got) != 256 {
			t.Fatalf("%d of 256 flows reached a gateway", len(got))
		}
		return got
	}
	kept := func(step string, before, after map[uint16]string, stayed ...string) {
		t.Helper()
		share := map[string]int{}
		for p, g := range after {
			share[g]++
			if slices.Contains(stayed, before[p]) && after[p] != before[p] {
				t.Errorf("%s: flow %d moved from %s, which stayed, to %s", step, p, before[p], after[p])
			}
		}
		t.Logf("%s: flows per gateway %v", step, share)
	}

	apply("g1", "192.0.2.101", "g2", "192.0.2.102", "g3", "192.0.2.103")
	m0 := where()
	apply("g4", "192.0.2.101", "g2", "192.0.2.102", "g3", "192.0.2.103")
	m1 := where()
	kept("g1 replaced by g4", m0, m1, "g2", "g3")
	apply("g4", "192.0.2.101", "g3", "192.0.2.103")
	m2 := where()
	kept("g2 lost", m1, m2, "g3", "g4")
	apply("g4", "192.0.2.101", "g1", "192.0.2.102", "g3", "192.0.2.103")
	m3 := where()
	// The flows g4 served for g2's vacancy in between go to g1; those of
	// g3 and g4 are where they were before g2 left.
	kept("g1 takes g2's place", m1, m3, "g3", "g4")
	for p, g := range m3 {
		if m1[p] == "g2" && g != "g1" {
			t.Errorf("flow %d of g2's old share went to %s, want g1, which took g2's place", p, g)
		}
	}
}
