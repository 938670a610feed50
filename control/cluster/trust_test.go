package cluster

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func trustNode(vtep string, internal ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	if vtep != "" {
		n.Annotations = map[string]string{AnnotationVTEP: vtep}
	}
	for _, a := range internal {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.9"})
	return n
}

// TestNodeVTEPsTrust: the node-writable annotation only picks among the
// node's InternalIP addresses; anything else is refused and reported.
func TestNodeVTEPsTrust(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name    string
		n       *corev1.Node
		want    []netip.Addr
		refused string
	}{
		{"internal", trustNode("", "10.0.0.11", "fd00::11"), []netip.Addr{a("10.0.0.11"), a("fd00::11")}, ""},
		{"annotation picks", trustNode("fd00::11", "10.0.0.11", "fd00::11"), []netip.Addr{a("fd00::11")}, ""},
		{"foreign", trustNode("10.0.0.12", "10.0.0.11"), []netip.Addr{a("10.0.0.11")}, "10.0.0.12"},
		{"external", trustNode("203.0.113.9", "10.0.0.11"), []netip.Addr{a("10.0.0.11")}, "203.0.113.9"},
		{"mixed", trustNode("10.0.0.12, ::ffff:10.0.0.11, junk", "10.0.0.11"), []netip.Addr{a("10.0.0.11")}, "10.0.0.12"},
		{"no internal", trustNode("10.0.0.12"), nil, "10.0.0.12"},
	} {
		got, err := NodeVTEPs(tc.n)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: VTEPs %v, want %v", tc.name, got, tc.want)
		}
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "w1")):
			t.Errorf("%s: error %v, want one naming w1 and %s", tc.name, err, tc.refused)
		}
	}
}

func TestInPodCIDRs(t *testing.T) {
	n := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24"}}
	v4 := NodePodCIDRs(n)
	if len(v4) != 1 {
		t.Fatalf("podCIDR fallback: %v", v4)
	}
	n.Spec.PodCIDRs = []string{"10.244.1.7/24", "fd00:10:1::/64", "bogus"}
	dual := NodePodCIDRs(n)
	if want := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:1::/64")}; !slices.Equal(dual, want) {
		t.Fatalf("pod CIDRs %v, want %v", dual, want)
	}
	for _, tc := range []struct {
		nets []netip.Prefix
		ip   string
		want bool
	}{
		{dual, "10.244.1.5", true},
		{dual, "::ffff:10.244.1.5", true},
		{dual, "10.244.2.5", false},
		{dual, "fd00:10:2::5", false},
		{dual, "fd00:10:1::5", true},
		{v4, "fd00:10:2::5", true}, // no IPv6 pod network known
		{nil, "10.244.2.5", true},
	} {
		if got := InPodCIDRs(tc.nets, netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("InPodCIDRs(%v, %s) = %v, want %v", tc.nets, tc.ip, got, tc.want)
		}
	}
}
