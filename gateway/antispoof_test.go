package gateway

import (
	"net/netip"
	"testing"
)

// TestAntiSpoofOrder pins the outcome of every combination of outer source
// (known VTEP or not) and inner source (pod of that node, of another node,
// unselected, unknown): the one-lookup shortcut for a pod sent from its own
// node's VTEP must give the same reasons as checking VTEP, then pod, then
// policy.
func TestAntiSpoofOrder(t *testing.T) {
	stranger := netip.MustParseAddr("10.0.0.99")
	unknownPod := netip.MustParseAddr("10.244.9.9")
	tun2 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelVXLAN, vni: testVNI}
	strangerTun := podTun()
	strangerTun.outerSrc = stranger
	cases := []struct {
		name string
		tu   tun
		src  netip.Addr
		want DropReason // DropNone: sent
	}{
		{"own pod", podTun(), pod1v4, DropNone},
		{"own pod over IPv6 underlay", tun2, pod2v4, DropNone},
		{"unknown VTEP, known pod", strangerTun, pod1v4, DropUnknownVTEP},
		{"unknown VTEP, unknown source", strangerTun, unknownPod, DropUnknownVTEP},
		{"other node's pod", podTun(), pod2v4, DropSpoofedSource},
		{"other node's pod, IPv6 underlay", tun2, pod1v4, DropSpoofedSource},
		{"unknown source", podTun(), unknownPod, DropSpoofedSource},
		{"unselected pod", podTun(), pod1Unsel, DropNotSelected},
	}
	f := newFixture(t, 1024, testConfig())
	out := make([]byte, 2048)
	for _, c := range cases {
		r := processOne(f.w, testNow, tunnelFrame(t, c.tu, udpFrom(c.src, server4).build(t)), out)
		switch {
		case c.want == DropNone && r.Verdict != VerdictTx:
			t.Errorf("%s: %v/%v, want sent", c.name, r.Verdict, r.Reason)
		case c.want != DropNone && (r.Verdict != VerdictDrop || r.Reason != c.want):
			t.Errorf("%s: %v/%v, want drop/%v", c.name, r.Verdict, r.Reason, c.want)
		}
	}
}

// TestSwapStopsEstablished: an established flow is checked against the
// snapshot installed now, per packet. Deselecting its pod, moving the pod to
// another node or removing it stops the flow at its next packet, and
// restoring the configuration lets it through again (the flow is kept).
func TestSwapStopsEstablished(t *testing.T) {
	f := newFixture(t, 1024, testConfig())
	out := make([]byte, 2048)
	fr := tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
	send := func(what string, want DropReason) {
		t.Helper()
		for _, batch := range []bool{false, true} {
			var r Result
			if batch {
				res := make([]Result, 1)
				f.process(testNow, [][]byte{fr}, [][]byte{out}, res)
				r = res[0]
			} else {
				r = processOne(f.w, testNow, fr, out)
			}
			if want == DropNone && r.Verdict != VerdictTx {
				t.Fatalf("%s (batch %v): %v/%v, want sent", what, batch, r.Verdict, r.Reason)
			}
			if want != DropNone && (r.Verdict != VerdictDrop || r.Reason != want) {
				t.Fatalf("%s (batch %v): %v/%v, want drop/%v", what, batch, r.Verdict, r.Reason, want)
			}
		}
	}
	swap := func(edit func(c *Config)) {
		t.Helper()
		cfg := testConfig()
		edit(&cfg)
		s, err := NewSnapshot(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.p.Swap(s); err != nil {
			t.Fatal(err)
		}
	}
	send("new flow", DropNone)
	flows := f.ct.Len()
	swap(func(c *Config) { c.Nodes[0].Pods[0].Policy = "" })
	send("deselected", DropNotSelected)
	swap(func(c *Config) {
		c.Nodes[0].Pods = c.Nodes[0].Pods[1:]
		c.Nodes[1].Pods = append(c.Nodes[1].Pods, Pod{Addr: pod1v4, Policy: "web"})
	})
	send("moved to node 2", DropSpoofedSource)
	swap(func(c *Config) { c.Nodes[0].Pods = c.Nodes[0].Pods[1:] })
	send("removed", DropSpoofedSource)
	swap(func(c *Config) {})
	send("restored", DropNone)
	if f.ct.Len() != flows {
		t.Errorf("flows %d → %d: the swaps must keep the flow and create none", flows, f.ct.Len())
	}
}
