package gwagent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestAgentReleasesStaleClaims is the start after kill -9: the egress IP a
// predecessor claimed on d0 is gone before the agent starts its data
// plane (engine.ReleaseStaleClaims through Agent.ReleaseStale, in a real
// namespace), while an address nobody claimed stays.
func TestAgentReleasesStaleClaims(t *testing.T) {
	d0, _ := nstest.Pair(t, "d0", netip.MustParsePrefix("10.79.0.1/24"), "p0", netip.MustParsePrefix("10.79.0.2/24"))
	stale := netip.MustParseAddr("10.79.0.100")
	dead, err := claim.NewClaimer(d0.NS.Handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	dead.Announcements = 1
	if err := dead.Claim("d0", stale); err != nil {
		t.Fatal(err)
	}
	dead.Close()
	if !d0.NS.HasAddr(t, "d0", stale) {
		t.Fatal("the predecessor's claim is not on d0")
	}

	b := base()
	b.Interfaces = []string{"d0"}
	type seen struct{ stale, own bool }
	started := make(chan seen, 1)
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{Node: "g1", Base: b, Source: placedOnG1(), Log: testLog(t), ReleaseStale: engine.ReleaseStaleClaims,
		StartDataPlane: func(*config.Settled) (DataPlane, error) {
			started <- seen{stale: d0.NS.HasAddr(t, "d0", stale), own: d0.NS.HasAddr(t, "d0", netip.MustParseAddr("10.79.0.1"))}
			cancel()
			return &fakeDP{}, nil
		}}
	if err := d0.NS.Do(func() error { return a.Run(ctx) }); err != nil {
		t.Fatal(err)
	}
	switch s := <-started; {
	case s.stale:
		t.Error("the predecessor's egress IP was still on d0 when the data plane started")
	case !s.own:
		t.Error("the interface's own address went with the stale claim")
	}
}
