package steer

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
)

// TestDesiredNoEgressIP: a selected dual-stack pod whose EgressIP has an
// IPv4 gateway only (or none) is blocked for the other family by default;
// with noEgressIP node (agent setting or annotation) that family's
// address is released as unselected and the other stays steered.
func TestDesiredNoEgressIP(t *testing.T) {
	v4only := func(annotation string, status ...string) Inputs {
		in := testInputs(status...)
		in.NodeKnown = true
		in.NodePodCIDRs = fcPodNets
		if annotation != "" {
			in.EgressIPs[0].Annotations = map[string]string{egressv1.AnnotationNoEgressIP: annotation}
		}
		return in
	}
	p := params
	p.LocalVTEP = nodeVTEP
	hasBlackhole6 := func(st State) bool {
		return slices.ContainsFunc(st.Routes, func(r Route) bool { return r.Type == RouteBlackhole && r.Dst.Addr().Is6() })
	}

	st := desired(v4only("", "g1", "192.0.2.101"), p)
	if !slices.Equal(st.Selected, []netip.Addr{podIP4, podIP6}) || len(st.Allowed) != 0 || !hasBlackhole6(st) {
		t.Fatalf("block (default): selected %v allowed %v routes %v", st.Selected, st.Allowed, st.Routes)
	}

	for name, c := range map[string]struct {
		in Inputs
		p  Params
	}{
		"annotation": {v4only(NoEgressIPNode, "g1", "192.0.2.101"), p},
		"setting":    {v4only("", "g1", "192.0.2.101"), func() Params { q := p; q.NoEgressIP = NoEgressIPNode; return q }()},
	} {
		st := desired(c.in, c.p)
		if !slices.Equal(st.Selected, []netip.Addr{podIP4}) || !slices.Equal(st.Allowed, []netip.Addr{podIP6}) ||
			hasBlackhole6(st) || !slices.Equal(st.Rules, []Rule{{Src: podIP4, Table: st.Rules[0].Table}}) {
			t.Errorf("%s: selected %v allowed %v rules %v routes %v", name, st.Selected, st.Allowed, st.Rules, st.Routes)
		}
	}

	// The annotation blocks even where the agent lets traffic out.
	q := p
	q.NoEgressIP = NoEgressIPNode
	if st := desired(v4only(NoEgressIPBlock, "g1", "192.0.2.101"), q); !hasBlackhole6(st) || len(st.Allowed) != 0 {
		t.Errorf("annotation block under setting node: allowed %v", st.Allowed)
	}
	// Nothing assigned: both families leave through the node.
	if st := desired(v4only(NoEgressIPNode), p); len(st.Selected)+len(st.Rules)+len(st.Objects) != 0 || len(st.Allowed) != 2 {
		t.Errorf("none assigned: %+v", st)
	}
	// A bad annotation blocks and says why.
	st = desired(v4only("fallback", "g1", "192.0.2.101"), q)
	if !hasBlackhole6(st) || !slices.ContainsFunc(st.Problems, func(e error) bool { return strings.Contains(e.Error(), `"fallback"`) }) {
		t.Errorf("bad annotation: routes %v problems %v", st.Routes, st.Problems)
	}
}

func TestConfigNoEgressIP(t *testing.T) {
	if c := (Config{Underlay: "eth0"}).WithDefaults(); c.NoEgressIP != NoEgressIPBlock || c.Validate() != nil {
		t.Fatalf("default noEgressIP %q (%v)", c.NoEgressIP, c.Validate())
	}
	if err := (Config{Underlay: "eth0", NoEgressIP: NoEgressIPNode}).WithDefaults().Validate(); err != nil {
		t.Fatalf("noEgressIP node refused: %v", err)
	}
	err := (Config{Underlay: "eth0", NoEgressIP: "fallback"}).WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), `noEgressIP "fallback": use block or node`) {
		t.Fatalf("bad noEgressIP: %v", err)
	}
}

// TestNoEgressIPInNetns: the same in the kernel, with real traffic. The
// pod's EgressIP has an IPv4 egress IP on g1 and no IPv6 one. By default
// the IPv6 traffic is dropped; with the annotation "node" it leaves with
// the node's address (masqueraded) while the IPv4 traffic still goes
// through the tunnel; with nothing assigned both leave with the node's.
func TestNoEgressIPInNetns(t *testing.T) {
	requirePrivileged(t)
	l := fcLab(t)
	cfg := testConfig()
	cfg.PodCIDRs = fcPodNets
	k := setupKernel(t, cfg, l.nodeH)
	uplink := capture(t, l.nodeH, "eth0")
	in := func(annotation string, status ...string) Inputs {
		in := fcInputs(true, status...)
		if annotation != "" {
			in.EgressIPs[0].Annotations = map[string]string{egressv1.AnnotationNoEgressIP: annotation}
		}
		return in
	}
	send := func(port uint16) {
		sendUDPPort(t, l.podH, podIP4, outside4, ports(int(port)*4, 4), port)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(int(port)*4, 4), port+1)
	}

	t.Run("block", func(t *testing.T) {
		if _, err := k.Apply(desired(in("", "g1", "192.0.2.101"), k.Params())); err != nil {
			t.Fatal(err)
		}
		send(7000)
		c := waitPlain(uplink, 7001, 1) // waits out the deadline: nothing should come
		if c.tunnel[7000] != 4 || c.node[7000]+c.other[7000] != 0 {
			t.Fatalf("IPv4: %+v, want 4 tunnel frames", c)
		}
		if c.tunnel[7001]+c.node[7001]+c.other[7001] != 0 {
			t.Fatalf("IPv6 without an IPv6 egress IP left the node: %+v", c)
		}
	})

	t.Run("node by annotation", func(t *testing.T) {
		if _, err := k.Apply(desired(in(NoEgressIPNode, "g1", "192.0.2.101"), k.Params())); err != nil {
			t.Fatal(err)
		}
		send(7100)
		c := waitPlain(uplink, 7101, 4)
		if c.tunnel[7100] != 4 || c.node[7100]+c.other[7100] != 0 {
			t.Fatalf("IPv4: %+v, want 4 tunnel frames still", c)
		}
		if c.node[7101] != 4 || c.other[7101]+c.tunnel[7101] != 0 {
			t.Fatalf("IPv6: %+v, want 4 frames with the node's address", c)
		}
	})

	t.Run("node by setting, nothing assigned", func(t *testing.T) {
		if k.Params().NoEgressIP != NoEgressIPBlock {
			t.Fatalf("default setting %q, want block", k.Params().NoEgressIP)
		}
		k.cfg.NoEgressIP = NoEgressIPNode // as the agent's config file would set it
		defer func() { k.cfg.NoEgressIP = NoEgressIPBlock }()
		if _, err := k.Apply(desired(in(""), k.Params())); err != nil {
			t.Fatal(err)
		}
		send(7200)
		c := waitPlain(uplink, 7201, 4)
		if c.node[7200] != 4 || c.node[7201] != 4 || len(c.tunnel)+len(c.other) != 0 {
			t.Fatalf("%+v, want 4 frames per family with the node's address", c)
		}
	})
}
