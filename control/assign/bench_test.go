package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/egret-gw/egret/control/cluster"
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
// over 500 nodes (from nothing, and a resync where every status is already
// valid) and the incremental re-assignment of one changed object.
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
	b.Run("upsert-one-of-10000x500", func(b *testing.B) {
		a, err := NewAssigner(nodes, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Load(steady); err != nil {
			b.Fatal(err)
		}
		// Alternate one object between two specs: one IP replaced each time.
		v1 := objs[1234]
		v2 := v1
		v2.EgressIPs = []string{v1.EgressIPs[0], "10.2.200.77"}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			o := v1
			if i%2 == 0 {
				o = v2
			}
			i++
			if got := a.Upsert(o); len(got) != 1 {
				b.Fatalf("Upsert affected %v, want only %s", got, o.Name)
			}
		}
		if r, _ := a.ObjectResult(v1.Name); len(r.Status) != 2 {
			b.Fatalf("after the loop %s has %d IPs assigned, want 2", v1.Name, len(r.Status))
		}
	})
	b.Run("upsert-one-with-1000-unplaceable", func(b *testing.B) {
		// 1,000 more objects whose IPs are in no node subnet and 1,000
		// whose only node is at its cloud capacity: the latter are retried
		// on every change.
		withPending := slices.Clone(steady)
		cn := slices.Clone(nodes)
		cn = append(cn, nd("cloud-0", "10.8.0.5/16", cloud("eni-0", "10.8.0.0/16", "", cluster.Capacity{IPv4: 1})))
		for i := 0; i < 1000; i++ {
			withPending = append(withPending,
				Object{Name: fmt.Sprintf("nosubnet-%04d", i), EgressIPs: []string{fmt.Sprintf("10.9.%d.%d", i/250, i%250+1)}},
				Object{Name: fmt.Sprintf("capacity-%04d", i), EgressIPs: []string{fmt.Sprintf("10.8.%d.%d", 1+i/250, i%250+1)}})
		}
		a, err := NewAssigner(cn, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Load(withPending); err != nil {
			b.Fatal(err)
		}
		if n := len(a.Result().Events); n != 1999 {
			b.Fatalf("%d events, want 1999 unplaced IPs", n)
		}
		v1 := objs[1234]
		v2 := v1
		v2.EgressIPs = []string{v1.EgressIPs[0], "10.2.200.77"}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			o := v1
			if i%2 == 0 {
				o = v2
			}
			i++
			a.Upsert(o)
		}
	})
}
