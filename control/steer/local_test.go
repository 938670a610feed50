package steer

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	gwconfig "github.com/egret-gw/egret/gateway/config"
)

// TestDesiredLocalGateway: on a gateway node, a selected pod's connections
// hashed to the node's own gateway go to its local port (no tunnel to
// itself, no FDB entry for its own VTEP); those hashed to another gateway
// are tunnelled as from any worker. Without the local port the own
// gateway is left out, with a problem naming the port.
func TestDesiredLocalGateway(t *testing.T) {
	in := baseInputs()
	in.Node, in.NodeKnown = "g1", true
	for i := range in.Pods {
		if in.Pods[i].Node == "w1" {
			in.Pods[i].Node = "g1"
		}
	}
	in.EgressIPs = []*egressv1.EgressIP{
		eip("web", match("env", "prod"), match("app", "web"), []string{"192.0.2.101", "192.0.2.102"},
			"g1", "192.0.2.101", "g2", "192.0.2.102"),
	}
	p := params
	p.LocalVTEP = addr("192.0.2.21") // g1's
	p.LocalPort = true
	st := desired(in, p)
	tbl := st.Rules[0].Table
	def4 := findRoute(t, st, tbl, "0.0.0.0/0")
	want := []NextHop{
		{Addr: gwconfig.LocalNextHop4, MAC: gwconfig.LocalPortMAC, VTEP: addr("192.0.2.21"), Local: true},
		{Addr: addr("192.0.2.22"), MAC: cluster.VTEPMAC(addr("192.0.2.22")), VTEP: addr("192.0.2.22")},
	}
	if def4.Type != RouteUnicast || !slices.Equal(def4.NextHops, want) {
		t.Fatalf("IPv4 default = %+v, want the local port and g2 (problems %v)", def4, st.Problems)
	}
	if len(st.FDB) != 1 || st.FDB[0].VTEP != addr("192.0.2.22") {
		t.Fatalf("FDB %+v: want g2's only (no tunnel to this node itself)", st.FDB)
	}
	if slices.Contains(st.TunnelPeers, addr("192.0.2.21")) {
		t.Fatalf("tunnel peers %v list this node's own VTEP", st.TunnelPeers)
	}
	if len(st.Objects) != 1 || !slices.Equal(st.Objects[0].Gateways, []string{"g1", "g2"}) {
		t.Fatalf("Objects = %+v", st.Objects)
	}

	p.LocalPort = false
	st = desired(in, p)
	def4 = findRoute(t, st, st.Rules[0].Table, "0.0.0.0/0")
	if len(def4.NextHops) != 1 || def4.NextHops[0].VTEP != addr("192.0.2.22") {
		t.Fatalf("without the local port: IPv4 default = %+v, want g2 only", def4)
	}
	if !slices.ContainsFunc(st.Problems, func(err error) bool { return strings.Contains(err.Error(), gwconfig.LocalKernelLink) }) {
		t.Fatalf("problems %v do not name the missing local port", st.Problems)
	}
}

// TestLocalHopInNetns: on a node that hosts one of the pod's egress IPs
// (its own gateway has created the local port), Apply routes the pod's
// connections over the local port for the node's share and over the tunnel
// to g1 for the rest: the filter lets both out, the local port's frames are
// the pod's plain packets (no tunnel to itself), and nothing leaks by the
// uplink. A second Apply changes nothing.
func TestLocalHopInNetns(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	// What the gateway engine creates on its node (gateway/engine local.go).
	ipb(t, l.node, "link add "+gwconfig.LocalKernelLink+" type veth peer name "+gwconfig.LocalPortLink,
		"link set "+gwconfig.LocalKernelLink+" up", "link set "+gwconfig.LocalPortLink+" up")
	k := setupKernel(t, testConfig(), l.nodeH)
	uplink := capture(t, l.nodeH, "eth0")
	local := capture(t, l.nodeH, gwconfig.LocalPortLink)
	gw1 := capture(t, l.g1H, "eth0")

	in := testInputs("g1", "192.0.2.101", "w1", "192.0.2.102")
	in.VTEPs["w1"] = []netip.Addr{nodeVTEP}
	in.NodeKnown = true
	p := k.Params()
	if !p.LocalPort {
		t.Fatal("Params: the local port is not seen")
	}
	st := desired(in, p)
	if _, err := k.Apply(st); err != nil {
		t.Fatal(err)
	}
	if ch, err := k.Apply(st); err != nil || !ch.Zero() {
		t.Fatalf("second Apply: %v %v, want no change", ch, err)
	}
	routes := sh(t, "ip", "-n", l.node, "route", "show", "table", fmt.Sprint(st.Objects[0].Table))
	if !strings.Contains(routes, "via "+gwconfig.LocalNextHop4.String()+" dev "+gwconfig.LocalKernelLink) {
		t.Fatalf("table %d:\n%s\nwant a next hop via %v on %s", st.Objects[0].Table, routes, gwconfig.LocalNextHop4, gwconfig.LocalKernelLink)
	}
	sendUDP(t, l.podH, podIP4, outside4, ports(36000, 64))
	var toLocal, toG1 int
	for deadline := time.Now().Add(5 * time.Second); toLocal+toG1 < 64 && time.Now().Before(deadline); {
		for _, f := range local.take() {
			if !f.vxlan && f.src == podIP4 && f.dst == outside4 {
				toLocal++
			}
		}
		toG1 += countVXLAN(gw1.take())
	}
	if toLocal == 0 || toG1 == 0 || toLocal+toG1 < 64 {
		t.Fatalf("of 64 connections %d reached the local port and %d g1 through the tunnel; want all, spread over both", toLocal, toG1)
	}
	if got := leaks(uplink.take()); len(got) != 0 {
		t.Fatalf("%d frames leaked by the uplink", len(got))
	}
}
