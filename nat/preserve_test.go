package nat

import "testing"

// TestPreserve: a flow picked up mid-stream takes exactly the pod's source
// port, only when port preservation is on, the port lies in its range and
// its reply tuple is free; Release gives it back; with endpoint-independent
// mapping an endpoint mapped to another port cannot have it.
func TestPreserve(t *testing.T) {
	src, src2, dst, nat := v4(10, 244, 1, 5), v4(10, 244, 2, 7), v4(198, 51, 100, 20), v4(192, 0, 2, 10)
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	if !a.Preserve(6, src, 40000, dst, 443, nat) {
		t.Fatal("a free port was refused")
	}
	tab.insert(replyKey{6, dst, 443, nat, 40000})
	if a.Preserve(6, src2, 40000, dst, 443, nat) {
		t.Fatal("a port whose reply tuple is taken was given again")
	}
	if !a.Preserve(6, src2, 40000, dst, 8443, nat) {
		t.Fatal("the same port towards another destination port was refused (5-tuple uniqueness)")
	}
	tab.remove(replyKey{6, dst, 443, nat, 40000})
	a.Release(6, src, 40000, dst, 443, nat, 40000)
	if !a.Preserve(6, src2, 40000, dst, 443, nat) {
		t.Fatal("a released port was refused")
	}
	cfg := DefaultConfig()
	cfg.PortMin, cfg.PortMax = 20000, 30000
	if newAlloc(t, cfg, newFlows()).Preserve(6, src, 40000, dst, 443, nat) {
		t.Fatal("a port outside the range ports come from was given")
	}
	cfg = DefaultConfig()
	cfg.PreservePort = false
	if newAlloc(t, cfg, newFlows()).Preserve(6, src, 40000, dst, 443, nat) {
		t.Fatal("a port was preserved with port preservation off")
	}
	if a.Preserve(47, src, 40000, dst, 443, nat) {
		t.Fatal("a protocol without ports was given one")
	}
}

// TestClaim: a flow that arrives with its binding (replicated, or resumed
// after a restart) takes exactly its port, in or out of the range and with
// preservation off, unless its reply tuple is taken; with
// endpoint-independent mapping an endpoint keeps one port and a port one
// endpoint; Release gives it back.
func TestClaim(t *testing.T) {
	src, src2, dst, nat := v4(10, 244, 1, 5), v4(10, 244, 2, 7), v4(198, 51, 100, 20), v4(192, 0, 2, 10)
	cfg := DefaultConfig()
	cfg.PreservePort = false
	cfg.PortMin, cfg.PortMax = 20000, 30000
	tab := newFlows()
	a := newAlloc(t, cfg, tab)
	if !a.Claim(6, src, 40000, dst, 443, nat, 50001) {
		t.Fatal("a free port outside the range was refused")
	}
	if a.PortsInUse(nat, 6) != 1 {
		t.Fatalf("ports in use %d, want 1", a.PortsInUse(nat, 6))
	}
	tab.insert(replyKey{6, dst, 443, nat, 50001})
	if a.Claim(6, src2, 40001, dst, 443, nat, 50001) {
		t.Fatal("a port whose reply tuple is taken was claimed")
	}
	if a.Claim(47, src, 40000, dst, 443, nat, 1) || a.Claim(6, src, 40000, dst, 443, nat, 0) {
		t.Fatal("a protocol without ports, or port 0, was claimed")
	}
	tab.remove(replyKey{6, dst, 443, nat, 50001})
	a.Release(6, src, 40000, dst, 443, nat, 50001)
	if a.PortsInUse(nat, 6) != 0 || a.StrayReleases() != 0 {
		t.Fatalf("after release: ports in use %d, stray %d", a.PortsInUse(nat, 6), a.StrayReleases())
	}

	cfg = DefaultConfig()
	cfg.TCPEndpointIndependent = true
	e := newAlloc(t, cfg, newFlows())
	if !e.Claim(6, src, 40000, dst, 443, nat, 33333) {
		t.Fatal("EIM: a free port was refused")
	}
	if e.Claim(6, src, 40000, dst, 8443, nat, 33334) {
		t.Fatal("EIM: an endpoint mapped to one port claimed another")
	}
	if e.Claim(6, src2, 40000, dst, 8443, nat, 33333) {
		t.Fatal("EIM: another endpoint claimed a mapped port")
	}
	if !e.Claim(6, src, 40000, dst, 8443, nat, 33333) {
		t.Fatal("EIM: the endpoint's own port towards another destination was refused")
	}
}
