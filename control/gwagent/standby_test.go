package gwagent

import (
	"net/netip"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
)

// TestStandbys: the flow sync sends each hosted egress IP's flows to the
// InternalIP of the node the annotation names; IPs hosted elsewhere, with
// no standby, standing by on this very node, or whose standby has no
// address get no peer, and an unreadable annotation is reported.
func TestStandbys(t *testing.T) {
	a := eip("a", []string{"192.0.2.10", "192.0.2.11"}, nil, nil, "gw1", "192.0.2.10", "gw2", "192.0.2.11")
	a.Annotations = map[string]string{egressv1.AnnotationStandby: egressv1.FormatStandbys(map[netip.Addr]string{
		addr("192.0.2.10"): "gw2", addr("192.0.2.11"): "gw3"})}
	b := eip("b", []string{"192.0.2.20"}, nil, nil, "gw1", "192.0.2.20")
	b.Annotations = map[string]string{egressv1.AnnotationStandby: egressv1.FormatStandbys(map[netip.Addr]string{addr("192.0.2.20"): "gw9"})}
	c := eip("c", []string{"192.0.2.30"}, nil, nil, "gw1", "192.0.2.30")
	c.Annotations = map[string]string{egressv1.AnnotationStandby: "not json"}
	d := eip("d", []string{"192.0.2.40"}, nil, nil, "gw2", "192.0.2.40")
	d.Annotations = map[string]string{egressv1.AnnotationStandby: egressv1.FormatStandbys(map[netip.Addr]string{addr("192.0.2.40"): "gw1"})}
	v := cluster.View{EgressIPs: []*egressv1.EgressIP{a, b, c, d},
		Nodes: []*corev1.Node{node("gw1", "10.0.0.21", nil), node("gw2", "10.0.0.22", nil), node("gw3", "10.0.0.23", nil)}}
	hosted := []netip.Addr{addr("192.0.2.10"), addr("192.0.2.20"), addr("192.0.2.30")}
	got, errs := Standbys(v, "gw1", hosted)
	if len(got) != 1 || got[addr("192.0.2.10")] != addr("10.0.0.22") {
		t.Fatalf("standbys %v, want only 192.0.2.10 → 10.0.0.22", got)
	}
	if len(errs) != 2 {
		t.Fatalf("problems %v, want two (gw9 has no address, c's annotation is unreadable)", errs)
	}
}
