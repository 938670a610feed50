package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Property: on random sequences of changes, as a controller sees them (its
// status writes landing all at once or a few at a time, one object edited,
// added or deleted, a user's status edit, a node turning NotReady),
// Incremental.Assign returns exactly what Assign returns: the same
// placements, standbys, Events and node problems.
func TestIncrementalMatchesFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var full, partial, unchanged int
	for iter := 0; iter < 400; iter++ {
		nodes, objs := randomCluster(rng, iter%2 == 0)
		ip := func() string { return randomIP(rng) }
		if iter%4 != 0 {
			// Cloud capacity always takes the full path; most runs go without.
			for i := range nodes {
				nodes[i].Cloud = nil
			}
		}
		if iter%4 == 1 {
			// A roomy cluster without conflicts, as at scale: mostly partial.
			nodes, objs, ip = roomyCluster(rng)
		}
		var inc Incremental
		next := len(objs)
		for step := 0; step < 40; step++ {
			want := mustAssign(t, objs, nodes, Options{})
			got, d, err := inc.Assign(objs, nodes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := diffResults(want, got); diff != "" {
				t.Fatalf("iteration %d step %d (delta %+v): incremental differs from Assign: %s", iter, step, d, diff)
			}
			switch {
			case d.Full:
				full++
			case len(d.Objects) == 0:
				unchanged++
			default:
				partial++
			}
			objs = mutate(rng, objs, nodes, want, &next, ip)
		}
	}
	t.Logf("full %d, partial %d, unchanged %d", full, partial, unchanged)
	// The shortcuts must actually be taken, or this test proves nothing.
	if partial < 500 || unchanged < 1000 {
		t.Fatalf("shortcuts taken too rarely: full %d, partial %d, unchanged %d", full, partial, unchanged)
	}
}

// mutate applies one random change to objs (a copy) after result r.
func mutate(rng *rand.Rand, objs []Object, nodes []Node, r Result, next *int, randomIP func() string) []Object {
	objs = slices.Clone(objs)
	fed := resultAsInput(objs, r)
	pick := func() int { return rng.IntN(len(objs)) }
	switch op := rng.IntN(10); {
	case op < 3: // every status write lands
		return fed
	case op < 5 && len(objs) > 0: // some land
		for k := rng.IntN(3); k >= 0; k-- {
			i := pick()
			objs[i] = fed[i]
		}
	case op == 5 && len(objs) > 0: // an edit of the spec
		i := pick()
		o := objs[i]
		o.EgressIPs = slices.Clone(o.EgressIPs)
		if len(o.EgressIPs) > 0 && rng.IntN(2) == 0 {
			o.EgressIPs = slices.Delete(o.EgressIPs, 0, 1)
		} else {
			o.EgressIPs = append(o.EgressIPs, randomIP())
		}
		objs[i] = o
	case op == 6: // a new object, sometimes with a status of its own
		o := Object{Name: fmt.Sprintf("eip-%02d", *next), Created: t0}
		*next++
		for k := rng.IntN(3); k > 0; k-- {
			o.EgressIPs = append(o.EgressIPs, randomIP())
		}
		if len(o.EgressIPs) > 0 && rng.IntN(4) == 0 {
			o.Status = []StatusItem{{Node: nodes[rng.IntN(len(nodes))].Name, EgressIP: o.EgressIPs[0]}}
		}
		objs = append(objs, o)
	case op == 7 && len(objs) > 0: // a deletion
		i := pick()
		objs = slices.Delete(objs, i, i+1)
	case op == 8 && len(objs) > 0: // someone edits a status
		i := pick()
		o := fed[i]
		o.Status = slices.Clone(o.Status)
		if len(o.Status) > 0 && rng.IntN(2) == 0 {
			o.Status = o.Status[1:]
		} else {
			o.Status = append(o.Status, StatusItem{Node: nodes[rng.IntN(len(nodes))].Name, EgressIP: randomIP()})
		}
		objs[i] = o
	case op == 9: // a node changes
		i := rng.IntN(len(nodes))
		nodes[i].Ready = !nodes[i].Ready
	}
	if rng.IntN(3) == 0 {
		rng.Shuffle(len(objs), func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })
	}
	return objs
}

// roomyCluster is 2 to 9 eligible nodes on one subnet and up to 20 objects
// of one or two IPs, all different; its ip function hands out new ones.
func roomyCluster(rng *rand.Rand) ([]Node, []Object, func() string) {
	var nodes []Node
	for i := range 2 + rng.IntN(8) {
		nodes = append(nodes, nd(fmt.Sprintf("node-%d", i), fmt.Sprintf("10.0.0.%d/16", 1+i)))
	}
	n := 0
	ip := func() string {
		n++
		return fmt.Sprintf("10.0.%d.%d", 1+n/200, n%200)
	}
	var objs []Object
	for i := range rng.IntN(20) {
		o := Object{Name: fmt.Sprintf("eip-%02d", i), Created: t0}
		for k := 1 + rng.IntN(2); k > 0; k-- {
			o.EgressIPs = append(o.EgressIPs, ip())
		}
		objs = append(objs, o)
	}
	return nodes, objs, ip
}
