package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// benchCluster is 500 nodes on four /16 subnets (every other one dual
// stack) and 10,000 objects with two IPs each (every fourth with an IPv6).
func benchCluster(nNodes, nObjs int) ([]Node, []Object) {
	nodes := make([]Node, nNodes)
	for i := range nodes {
		s := i % 4
		n := nd(fmt.Sprintf("node-%03d", i), fmt.Sprintf("10.%d.0.%d/16", s, 1+i/4))
		if s%2 == 0 {
			n.PrimaryIfAddr.IPv6 = netip.MustParsePrefix(fmt.Sprintf("fd0%d::%x/64", s, 1+i))
		}
		nodes[i] = n
	}
	objs := make([]Object, nObjs)
	for i := range objs {
		s := i % 4
		o := Object{Name: fmt.Sprintf("eip-%05d", i)}
		o.EgressIPs = append(o.EgressIPs, fmt.Sprintf("10.%d.%d.%d", s, 10+i/250, i%250+1))
		if i%4 == 0 {
			o.EgressIPs = append(o.EgressIPs, fmt.Sprintf("fd0%d::1:%x", s, i))
		} else {
			o.EgressIPs = append(o.EgressIPs, fmt.Sprintf("10.%d.%d.%d", s, 100+i/250, i%250+1))
		}
		objs[i] = o
	}
	return nodes, objs
}

// BenchmarkAssign measures the full assignment of 10,000 EgressIP objects
// over 500 nodes: from nothing, and a resync where every status is already
// valid (what the controller runs on every EgressIP or Node change).
func BenchmarkAssign(b *testing.B) {
	nodes, objs := benchCluster(500, 10000)
	b.Run("full-10000x500-new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Assign(objs, nodes, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	first, err := Assign(objs, nodes, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if len(first.Events) != 0 {
		b.Fatalf("benchmark cluster does not fit: %s", first.Events[0].Message)
	}
	steady := resultAsInput(objs, first)
	b.Run("full-10000x500-resync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Assign(steady, nodes, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("incremental-10000x500-one", func(b *testing.B) {
		// One object's egress IP changes, then its status is written back:
		// what the controller's two cycles per change compute.
		var inc Incremental
		objs := slices.Clone(steady)
		if _, _, err := inc.Assign(objs, nodes, Options{}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			k++
			o := objs[0]
			o.EgressIPs = []string{fmt.Sprintf("10.0.200.%d", 1+k%2)}
			objs[0] = o
			r, d, err := inc.Assign(objs, nodes, Options{})
			if err != nil || d.Full {
				b.Fatalf("delta %+v, err %v", d, err)
			}
			objs[0] = resultAsInput(objs[:1], Result{Objects: r.Objects[:1]})[0]
			if _, d, err := inc.Assign(objs, nodes, Options{}); err != nil || d.Full || len(d.Objects) != 0 {
				b.Fatalf("delta %+v, err %v", d, err)
			}
		}
	})
}
