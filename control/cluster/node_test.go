package cluster

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParsePrimaryIfAddr(t *testing.T) {
	cases := []struct {
		in       string
		v4, v6   string
		errsWith string
	}{
		{in: `{"ipv4":"192.168.111.23/24"}`, v4: "192.168.111.23/24"},
		{in: `{"ipv4":"192.168.111.23/24","ipv6":"fd00::23/64"}`, v4: "192.168.111.23/24", v6: "fd00::23/64"},
		{in: `{"ipv6":"fd00::23/64"}`, v6: "fd00::23/64"},
		{in: `{}`, errsWith: "neither an ipv4 nor an ipv6"},
		{in: `{"ipv4":"192.168.111.23"}`, errsWith: "not an IPv4 address with a prefix length"},
		{in: `{"ipv4":"fd00::1/64"}`, errsWith: "not an IPv4 address"},
		{in: `{"ipv6":"10.0.0.1/24"}`, errsWith: "not an IPv6 address"},
		{in: `{"ipv6":"::ffff:10.0.0.1/120"}`, errsWith: "not an IPv6 address"},
		{in: `{"ipv4":5}`, errsWith: "not the expected JSON"},
		{in: `not json`, errsWith: "annotation k8s.ovn.org/node-primary-ifaddr is not the expected JSON"},
		{in: ``, errsWith: "not the expected JSON"},
	}
	for _, c := range cases {
		got, err := parsePrimaryIfAddr(AnnotationPrimaryIfAddr, c.in)
		if c.errsWith != "" {
			if err == nil || !strings.Contains(err.Error(), c.errsWith) {
				t.Errorf("parsePrimaryIfAddr(%q) error = %v, want one containing %q", c.in, err, c.errsWith)
			}
			continue
		}
		if err != nil {
			t.Errorf("parsePrimaryIfAddr(%q): %v", c.in, err)
			continue
		}
		if got.IPv4.String() != prefixOrInvalid(c.v4) || got.IPv6.String() != prefixOrInvalid(c.v6) {
			t.Errorf("parsePrimaryIfAddr(%q) = %v %v, want %q %q", c.in, got.IPv4, got.IPv6, c.v4, c.v6)
		}
	}
}

func prefixOrInvalid(s string) string {
	if s == "" {
		return netip.Prefix{}.String()
	}
	return s
}

func TestParseHostCIDRs(t *testing.T) {
	got, err := parseHostCIDRs(AnnotationHostCIDRs, `["192.168.111.23/24","10.20.0.5/16","fd00::5/64"]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1] != netip.MustParsePrefix("10.20.0.5/16") || got[2] != netip.MustParsePrefix("fd00::5/64") {
		t.Errorf("got %v", got)
	}
	if got, err := parseHostCIDRs(AnnotationHostCIDRs, `[]`); err != nil || len(got) != 0 {
		t.Errorf("empty list: %v %v", got, err)
	}
	for in, want := range map[string]string{
		`["10.0.0.1"]`:        `entry 0 ("10.0.0.1") is not an address with a prefix length`,
		`["10.0.0.1/24", 7]`:  "not the expected JSON",
		`{"a":"10.0.0.1/24"}`: "not the expected JSON",
		`["10.0.0.1/33"]`:     "entry 0",
		"[" + strings.Repeat(`"10.0.0.1/24",`, 30000) + `"10.0.0.1/24"]`: "more than the",
	} {
		if _, err := parseHostCIDRs(AnnotationHostCIDRs, in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseHostCIDRs(%.40q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func TestParseEgressIPConfig(t *testing.T) {
	aws, err := ParseEgressIPConfig(`[{"interface":"eni-078d267045138e436","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":14,"ipv6":15}}]`)
	if err != nil {
		t.Fatal(err)
	}
	if aws.Interface != "eni-078d267045138e436" || aws.IfAddr.IPv4 != netip.MustParsePrefix("10.0.128.0/18") ||
		aws.Capacity != (Capacity{IPv4: 14, IPv6: 15}) {
		t.Errorf("AWS = %+v", aws)
	}
	gcp, err := ParseEgressIPConfig(`[{"interface":"nic0","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ip":14}}]`)
	if err != nil {
		t.Fatal(err)
	}
	if gcp.Interface != "nic0" || gcp.Capacity != (Capacity{Total: true, IP: 14}) {
		t.Errorf("GCP = %+v", gcp)
	}
	partial, err := ParseEgressIPConfig(`[{"interface":"eni-1","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":3}}]`)
	if err != nil || partial.Capacity != (Capacity{IPv4: 3}) {
		t.Errorf("AWS with only ipv4 capacity = %+v, %v; want IPv6 capacity 0", partial, err)
	}
	for in, want := range map[string]string{
		`[]`: "holds 0 entries",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ip":1}},{"interface":"b","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ip":1}}]`: "holds 2 entries",
		`[{"ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ip":1}}]`:                          "has no interface",
		`[{"interface":"a","capacity":{"ip":1}}]`:                                         "has no ifaddr",
		`[{"interface":"a","ifaddr":{},"capacity":{"ip":1}}]`:                             "neither an ipv4 nor an ipv6",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0"},"capacity":{"ip":1}}]`:            "not an IPv4 address with a prefix length",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"}}]`:                              "has no capacity",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{}}]`:                "neither ip nor ipv4/ipv6",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ip":1,"ipv4":1}}]`: "both a total",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ip":-1}}]`:         "negative",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ipv4":1.5}}]`:      "not the expected JSON",
		`[{"interface":"a","ifaddr":{"ipv4":"10.0.0.0/8"},"capacity":{"ipv4":"lots"}}]`:   "not the expected JSON",
		`{"interface":"a"}`: "not the expected JSON",
	} {
		if _, err := ParseEgressIPConfig(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEgressIPConfig(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

// A node with a broken annotation is built, marked, never assignable, and
// the problem reported; good annotations fill the model.
func FuzzParsePrimaryIfAddr(f *testing.F) {
	f.Add(`{"ipv4":"192.168.111.23/24","ipv6":"fd00::23/64"}`)
	f.Add(`{"ipv4":"1.2.3.4/33"}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parsePrimaryIfAddr(AnnotationPrimaryIfAddr, s)
		if err == nil && !a.IPv4.IsValid() && !a.IPv6.IsValid() {
			t.Fatalf("accepted %q with no address", s)
		}
		if err == nil && a.IPv4.IsValid() && !a.IPv4.Addr().Is4() {
			t.Fatalf("accepted %q with a non-IPv4 ipv4", s)
		}
	})
}

func FuzzParseHostCIDRs(f *testing.F) {
	f.Add(`["192.168.111.23/24","10.20.0.5/16"]`)
	f.Add(`[""]`)
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseHostCIDRs(AnnotationHostCIDRs, s)
		for _, p := range l {
			if err == nil && !p.IsValid() {
				t.Fatalf("accepted %q with invalid prefix", s)
			}
		}
	})
}

func FuzzParseEgressIPConfig(f *testing.F) {
	f.Add(`[{"interface":"eni-078d267045138e436","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":14,"ipv6":15}}]`)
	f.Add(`[{"interface":"nic0","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ip":14}}]`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseEgressIPConfig(s)
		if err != nil {
			return
		}
		if c.Interface == "" || c.Capacity.IP < 0 || c.Capacity.IPv4 < 0 || c.Capacity.IPv6 < 0 {
			t.Fatalf("accepted %q as %+v", s, c)
		}
	})
}

// FuzzAssign feeds arbitrary strings as egress IPs, status items and node
// names: the assignment must never panic and its invariants must hold.

// TestNodeInterfaces: OVN-Kubernetes' annotations win whenever one is
// present; Egret's are read otherwise; what FormatPrimaryIfAddr and
// FormatHostCIDRs write reads back the same.
func TestNodeInterfaces(t *testing.T) {
	ifa := IfAddr{IPv4: netip.MustParsePrefix("192.0.2.11/24"), IPv6: netip.MustParsePrefix("2001:db8::11/64")}
	host := []netip.Prefix{netip.MustParsePrefix("192.0.2.11/24"), netip.MustParsePrefix("198.51.100.5/26")}
	egret := map[string]string{AnnotationEgretPrimaryIfAddr: FormatPrimaryIfAddr(ifa), AnnotationEgretHostCIDRs: FormatHostCIDRs(host)}
	p, h, found, err := NodeInterfaces(egret)
	if err != nil || !found || p != ifa || !slices.Equal(h, host) {
		t.Fatalf("Egret's annotations read back as %v %v %v %v; want %v %v", p, h, found, err, ifa, host)
	}
	withOVN := maps.Clone(egret)
	withOVN[AnnotationHostCIDRs] = `["10.0.0.5/16"]`
	p, h, found, err = NodeInterfaces(withOVN)
	if err != nil || !found || p.IPv4.IsValid() || len(h) != 1 || h[0] != netip.MustParsePrefix("10.0.0.5/16") {
		t.Fatalf("with an OVN-Kubernetes annotation: %v %v %v %v; want only OVN's host-cidrs", p, h, found, err)
	}
	if !OVNPublishesInterfaces(withOVN) || OVNPublishesInterfaces(egret) {
		t.Error("OVNPublishesInterfaces does not follow the OVN-Kubernetes keys")
	}
	if _, _, found, err := NodeInterfaces(map[string]string{"other": "x"}); found || err != nil {
		t.Errorf("an unannotated node: found %v, err %v", found, err)
	}
	bad := map[string]string{AnnotationEgretHostCIDRs: `["nope"]`}
	if _, _, _, err := NodeInterfaces(bad); err == nil || !strings.Contains(err.Error(), AnnotationEgretHostCIDRs) {
		t.Errorf("a broken Egret annotation: %v; want an error naming %s", err, AnnotationEgretHostCIDRs)
	}
}

func TestOnAWSAndControlPlane(t *testing.T) {
	node := func(providerID, cloud string, labels ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		n.Spec.ProviderID = providerID
		if cloud != "" {
			n.Annotations[AnnotationEgressIPConfig] = cloud
		}
		for _, l := range labels {
			n.Labels[l] = ""
		}
		return n
	}
	// The specification's annotations, as written there.
	const aws = `[{"interface":"eni-078d267045138e436","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":14,"ipv6":15}}]`
	const gcp = `[{"interface":"nic0","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ip":14}}]`
	for _, c := range []struct {
		n    *corev1.Node
		want bool
	}{
		{node("aws:///us-east-1a/i-0123456789abcdef0", ""), true},
		{node("", aws), true},
		{node("gce://project/us-central1-a/node-1", gcp), false},
		{node("azure:///subscriptions/x/resourceGroups/y/providers/Microsoft.Compute/virtualMachines/z", ""), false},
		{node("", ""), false},
		{node("", "not json"), false},
	} {
		if got := OnAWS(c.n); got != c.want {
			t.Errorf("OnAWS(providerID %q, egress-ipconfig %q) = %v, want %v", c.n.Spec.ProviderID, c.n.Annotations[AnnotationEgressIPConfig], got, c.want)
		}
	}
	if !ControlPlane(node("", "", LabelControlPlane)) || !ControlPlane(node("", "", LabelMaster)) || ControlPlane(node("", "", "node-role.kubernetes.io/worker")) {
		t.Error("ControlPlane must be true for either control-plane label only")
	}
}

func TestFormatEgressIPConfigRoundTrip(t *testing.T) {
	for _, c := range []CloudConfig{
		{Interface: "eni-078d267045138e436", IfAddr: IfAddr{IPv4: netip.MustParsePrefix("10.0.128.0/18")}, Capacity: Capacity{IPv4: 14, IPv6: 15}},
		{Interface: "nic0", IfAddr: IfAddr{IPv4: netip.MustParsePrefix("10.0.128.0/18"), IPv6: netip.MustParsePrefix("fd00::/64")}, Capacity: Capacity{Total: true, IP: 14}},
		{Interface: "eni-a", IfAddr: IfAddr{IPv6: netip.MustParsePrefix("2600:1f18::/64")}, Capacity: Capacity{IPv4: 0, IPv6: 0}},
	} {
		s := FormatEgressIPConfig(c)
		got, err := ParseEgressIPConfig(s)
		if err != nil || *got != c {
			t.Errorf("%+v → %s → %+v, %v", c, s, got, err)
		}
	}
	want := `[{"interface":"eni-078d267045138e436","ifaddr":{"ipv4":"10.0.128.0/18"},"capacity":{"ipv4":14,"ipv6":15}}]`
	if s := FormatEgressIPConfig(CloudConfig{Interface: "eni-078d267045138e436", IfAddr: IfAddr{IPv4: netip.MustParsePrefix("10.0.128.0/18")}, Capacity: Capacity{IPv4: 14, IPv6: 15}}); s != want {
		t.Errorf("AWS example: %s; want the specification's %s", s, want)
	}
}
