package assign

import (
	"slices"
	"testing"
)

func mustAssigner(t *testing.T, nodes []Node, objs []Object) *Assigner {
	t.Helper()
	a, err := NewAssigner(nodes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Load(objs); err != nil {
		t.Fatal(err)
	}
	return a
}

// Rule (conflict, incremental): deleting the object that holds a contested
// IP hands the IP to the other claimant and clears both conflict Events.
func TestUpsertDeleteHandsContestedIPOver(t *testing.T) {
	a := mustAssigner(t, three(), []Object{ob("alpha", "10.0.0.10"), ob("zulu", "10.0.0.10", "10.0.0.20")})
	if got := placements(a.Result()); !slices.Equal(got, []string{"alpha 10.0.0.10@a", "zulu 10.0.0.20@b"}) {
		t.Fatalf("before: %q", got)
	}
	affected := a.Delete("alpha")
	if !slices.Equal(affected, []string{"alpha", "zulu"}) {
		t.Errorf("Delete affected %q, want alpha and zulu", affected)
	}
	r := a.Result()
	if got := placements(r); !slices.Equal(got, []string{"zulu 10.0.0.10@a", "zulu 10.0.0.20@b"}) {
		t.Errorf("after delete: %q", got)
	}
	if len(r.Events) != 0 {
		t.Errorf("events after the conflict ended:\n%s", eventsText(r))
	}
	if _, ok := a.ObjectResult("alpha"); ok {
		t.Error("deleted object still has a result")
	}
	if a.Delete("alpha") != nil {
		t.Error("deleting an unknown object reported changes")
	}
}

// Rule (minimal churn, incremental): adding an IP to an object places only
// that IP; the object's other IP and every other object stay put.
func TestUpsertKeepsExistingPlacements(t *testing.T) {
	a := mustAssigner(t, three(), []Object{
		st(ob("x", "10.0.0.10"), "10.0.0.10@c"),
		st(ob("y", "10.0.0.11"), "10.0.0.11@c"),
	})
	affected := a.Upsert(ob("x", "10.0.0.10", "10.0.0.12"))
	if !slices.Equal(affected, []string{"x"}) {
		t.Errorf("affected %q, want only x", affected)
	}
	want := []string{"x 10.0.0.10@c", "x 10.0.0.12@a", "y 10.0.0.11@c"}
	if got := placements(a.Result()); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Rule (incremental): an object the Assigner has never seen keeps a valid
// status it brings along (a controller restart); a known object's status
// comes from the Assigner, not from the possibly stale copy passed in.
func TestUpsertStatusSource(t *testing.T) {
	a := mustAssigner(t, three(), nil)
	a.Upsert(st(ob("x", "10.0.0.10"), "10.0.0.10@c"))
	if got := placements(a.Result()); !slices.Equal(got, []string{"x 10.0.0.10@c"}) {
		t.Fatalf("new object with status: %q", got)
	}
	a.Upsert(st(ob("x", "10.0.0.10"), "10.0.0.10@b"))
	if got := placements(a.Result()); !slices.Equal(got, []string{"x 10.0.0.10@c"}) {
		t.Errorf("stale status moved the IP: %q", got)
	}
}

// Rule (failover): a node that fails loses its IPs to the others; when it
// returns it gets new work, and nothing moves back.
func TestSetNodesFailoverAndReturn(t *testing.T) {
	nodes := three()
	a := mustAssigner(t, nodes, []Object{ob("x", "10.0.0.10"), ob("y", "10.0.0.11"), ob("z", "10.0.0.12")})
	if got := placements(a.Result()); !slices.Equal(got, []string{"x 10.0.0.10@a", "y 10.0.0.11@b", "z 10.0.0.12@c"}) {
		t.Fatalf("before: %q", got)
	}
	nodes[0].Reachable = false
	if err := a.SetNodes(nodes, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := placements(a.Result()); !slices.Equal(got, []string{"x 10.0.0.10@b", "y 10.0.0.11@b", "z 10.0.0.12@c"}) {
		t.Errorf("after a failed: %q", got)
	}
	nodes[0].Reachable = true
	if err := a.SetNodes(nodes, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := placements(a.Result()); !slices.Equal(got, []string{"x 10.0.0.10@b", "y 10.0.0.11@b", "z 10.0.0.12@c"}) {
		t.Errorf("after a returned, something moved: %q", got)
	}
	a.Upsert(ob("w", "10.0.0.13"))
	if n := nodeOf(a.Result(), "w", "10.0.0.13"); n != "a" {
		t.Errorf("new IP went to %q, want the returned node a", n)
	}
	if err := a.SetNodes([]Node{nd("a", ""), nd("a", "")}, Options{}); err == nil {
		t.Error("SetNodes accepted two nodes named a")
	}
	if nodeOf(a.Result(), "w", "10.0.0.13") != "a" {
		t.Error("a failed SetNodes changed the state")
	}
}

func TestLoadDuplicateLeavesAssignerEmpty(t *testing.T) {
	a := mustAssigner(t, three(), []Object{ob("x", "10.0.0.10")})
	if err := a.Load([]Object{ob("y", "10.0.0.11"), ob("y", "10.0.0.12")}); err == nil {
		t.Fatal("Load accepted two objects named y")
	}
	if r := a.Result(); len(r.Objects) != 0 {
		t.Errorf("after a failed Load the Assigner holds %v", placements(r))
	}
}
