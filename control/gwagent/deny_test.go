package gwagent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
)

// TestBuildDeniesNodeNetworks: Build adds to the configured deny-list every
// node's InternalIPs (the gateway's own too, IPv4-mapped ones unmapped)
// and the subnets each node publishes in k8s.ovn.org/host-cidrs (masked),
// so a pod cannot reach kubelets or node services through the gateway as
// the gateway node; ExternalIPs are not node networks, a malformed
// host-cidrs annotation adds nothing, and the base spec's list is not
// changed.
func TestBuildDeniesNodeNetworks(t *testing.T) {
	b := base()
	configured := netip.MustParsePrefix("203.0.113.0/24")
	b.DeniedDestinations = append(make([]netip.Prefix, 0, 8), configured) // spare capacity: an append in place would show
	w1 := node("w1", "10.0.0.11,fd00::11", map[string]string{cluster.AnnotationHostCIDRs: `["10.0.0.11/24","fd00::11/64","172.16.5.9/16"]`})
	w1.Status.Addresses = append(w1.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.7"})
	w2 := node("w2", "::ffff:10.0.0.12", map[string]string{cluster.AnnotationHostCIDRs: `not json`})
	in := inputs{Node: "g1", Nodes: []*corev1.Node{node("g1", "10.0.0.21", nil), w1, w2, nil}}
	r := build(b, in)
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatalf("built config does not validate: %v", err)
	}
	want := []string{"203.0.113.0/24", "10.0.0.21/32", "10.0.0.11/32", "fd00::11/128", "10.0.0.0/24", "fd00::/64", "172.16.0.0/16", "10.0.0.12/32"}
	got := make([]string, 0, len(r.Spec.DeniedDestinations))
	for _, p := range r.Spec.DeniedDestinations {
		got = append(got, p.String())
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("denied destinations\n got %v\nwant %v", got, want)
	}
	if len(b.DeniedDestinations) != 1 || b.DeniedDestinations[0] != configured || b.DeniedDestinations[:2][1].IsValid() {
		t.Errorf("the base spec's deny-list changed: %v", b.DeniedDestinations[:2])
	}
}
