package cni

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func pfx(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, v := range s {
		out[i] = netip.MustParsePrefix(v)
	}
	return out
}

func TestParseConfigForms(t *testing.T) {
	c, err := ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"n","type":"egress-router","ip":{"addresses":["192.168.1.99/24","2001:db8::99/64"],"gateway":"192.168.1.1","destinations":["10.1.2.3/32","10.9.0.7/16"]},"clusterNetworks":["10.128.0.0/14"],"serviceNetworks":["172.30.0.0/16"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.InterfaceType != InterfaceMacvlan || c.Mode != "bridge" {
		t.Errorf("defaults: type %q mode %q, want macvlan bridge", c.InterfaceType, c.Mode)
	}
	if !slices.Equal(c.Static.Addresses, pfx("192.168.1.99/24", "2001:db8::99/64")) {
		t.Errorf("addresses %v", c.Static.Addresses)
	}
	if c.Static.Gateway != netip.MustParseAddr("192.168.1.1") {
		t.Errorf("gateway %v", c.Static.Gateway)
	}
	if !slices.Equal(c.Static.Destinations, pfx("10.1.2.3/32", "10.9.0.0/16")) {
		t.Errorf("destinations not masked: %v", c.Static.Destinations)
	}
	if !slices.Equal(c.ClusterNetworks, pfx("10.128.0.0/14")) || !slices.Equal(c.ServiceNetworks, pfx("172.30.0.0/16")) {
		t.Errorf("cluster/service networks %v %v", c.ClusterNetworks, c.ServiceNetworks)
	}

	c, err = ParseConfig([]byte(`{"name":"n","type":"openshift-egress","interfaceType":"ipvlan","interfaceArgs":{"master":"eth1"},"podIP":{"db-router":{"addresses":["192.168.3.10/24"],"gateway":"192.168.3.1","destinations":["10.1.2.3/32"]},"alpha-*":{"addresses":["192.168.3.12/24"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != "l2" || c.Master != "eth1" || len(c.PodIP) != 2 {
		t.Errorf("ipvlan podIP config: mode %q master %q entries %d", c.Mode, c.Master, len(c.PodIP))
	}

	c, err = ParseConfig([]byte(`{"name":"n","type":"egress-router","ipConfig":{"name":"cm","overrides":{"gateway":"192.168.1.1","destinations":["10.0.0.0/8"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.IPConfig.Name != "cm" || c.IPConfig.Overrides.Gateway != netip.MustParseAddr("192.168.1.1") {
		t.Errorf("ipConfig %+v", c.IPConfig)
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	base := `"name":"n","type":"egress-router"`
	cases := []struct{ conf, field string }{
		{`{"type":"egress-router","ip":{"addresses":["1.2.3.4/24"]}}`, "name"},
		{`{"name":"n","type":"bridge","ip":{"addresses":["1.2.3.4/24"]}}`, "type"},
		{`{` + base + `}`, "ip/podIP/ipConfig"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"]},"ipConfig":{"name":"x"}}`, "ip/podIP/ipConfig"},
		{`{` + base + `,"ip":{}}`, "ip.addresses"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/"]}}`, "ip.addresses[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3"]}}`, "ip.addresses[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.0/24"]}}`, "ip.addresses[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24","1.2.3.4/24"]}}`, "ip.addresses[1]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"gateway":"nope"}}`, "ip.gateway"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"gateway":"2001:db8::1"}}`, "ip.gateway"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["10.0.0.1/"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["80 TCP"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["0 TCP 10.0.0.1"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["80 ICMP 10.0.0.1"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["80 TCP 10.0.0.1 65536"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["80 TCP 224.0.0.1"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"ip":{"addresses":["1.2.3.4/24"],"destinations":["80 TCP 10.0.0.1 80 x"]}}`, "ip.destinations[0]"},
		{`{` + base + `,"podIP":{}}`, "podIP"},
		{`{` + base + `,"podIP":{"a*b":{"addresses":["1.2.3.4/24"]}}}`, `podIP["a*b"]`},
		{`{` + base + `,"podIP":{"a":{"addresses":[]}}}`, `podIP["a"].addresses`},
		{`{` + base + `,"ipConfig":{"namespace":"x"}}`, "ipConfig.name"},
		{`{` + base + `,"ipConfig":{"name":"x","overrides":{"gateway":"::g"}}}`, "ipConfig.overrides.gateway"},
		{`{` + base + `,"interfaceType":"vxlan","ip":{"addresses":["1.2.3.4/24"]}}`, "interfaceType"},
		{`{` + base + `,"interfaceArgs":{"mode":"l3"},"ip":{"addresses":["1.2.3.4/24"]}}`, "interfaceArgs.mode"},
		{`{` + base + `,"interfaceType":"ipvlan","interfaceArgs":{"mode":"bridge"},"ip":{"addresses":["1.2.3.4/24"]}}`, "interfaceArgs.mode"},
		{`{` + base + `,"interfaceArgs":{"mtu":20},"ip":{"addresses":["1.2.3.4/24"]}}`, "interfaceArgs.mtu"},
		{`{` + base + `,"interfaceArgs":{"mtu":1000},"ip":{"addresses":["2001:db8::5/64"]}}`, "interfaceArgs.mtu"},
		{`{` + base + `,"interfaceArgs":{"master":"a/b"},"ip":{"addresses":["1.2.3.4/24"]}}`, "interfaceArgs.master"},
		{`{` + base + `,"clusterNetworks":["x"],"ip":{"addresses":["1.2.3.4/24"]}}`, "clusterNetworks[0]"},
		{`{` + base + `,"serviceNetworks":["10.0.0.0/33"],"ip":{"addresses":["1.2.3.4/24"]}}`, "serviceNetworks[0]"},
		// The kubeconfig is the node's (egress-router-host.json), not the author's.
		{`{` + base + `,"kubeconfig":"/etc/kubernetes/admin.conf","ipConfig":{"name":"x"}}`, "kubeconfig"},
	}
	for _, tc := range cases {
		_, err := ParseConfig([]byte(tc.conf))
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: got %v, want a FieldError", tc.conf, err)
			continue
		}
		if fe.Field != tc.field {
			t.Errorf("%s: error names %q, want %q (%v)", tc.conf, fe.Field, tc.field, err)
		}
	}
	for _, ok := range []string{"192.0.2.0/31", "192.0.2.1/31", "192.0.2.7/32", "2001:db8::/64"} {
		if _, err := ParseConfig([]byte(`{` + base + `,"ip":{"addresses":["` + ok + `"]}}`)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	if _, err := ParseConfig([]byte(`{"name":`)); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("truncated JSON: %v", err)
	}
}

func TestMatchPod(t *testing.T) {
	entries, err := parsePodIP("podIP", map[string]IPSpec{
		"db-router":      {Addresses: []string{"192.168.3.10/24"}},
		"alpha-*":        {Addresses: []string{"192.168.3.12/24"}},
		"alpha-beta-*":   {Addresses: []string{"192.168.3.13/24"}},
		"alpha-beta-one": {Addresses: []string{"192.168.3.14/24"}},
		"*":              {Addresses: []string{"192.168.3.15/24"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for pod, want := range map[string]string{
		"db-router":        "db-router",
		"db-router-2":      "*",
		"alpha-1":          "alpha-*",
		"alpha-":           "alpha-*",
		"alpha-beta-7":     "alpha-beta-*",
		"alpha-beta-one":   "alpha-beta-one",
		"alpha-beta-one-x": "alpha-beta-*",
		"zzz":              "*",
	} {
		e, err := MatchPod(entries, pod)
		if err != nil || e.Key != want {
			t.Errorf("pod %q: got %v %v, want %q", pod, e, err, want)
		}
	}
	entries = slices.DeleteFunc(entries, func(e PodEntry) bool { return e.Key == "*" })
	if _, err := MatchPod(entries, "other"); !errors.Is(err, ErrNoPodMatch) {
		t.Errorf("unmatched pod: %v", err)
	}
}

func TestParseArgs(t *testing.T) {
	a, err := ParseArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=db-router;K8S_POD_INFRA_CONTAINER_ID=abc")
	if err != nil || a.Name != "db-router" || a.Namespace != "ns1" {
		t.Errorf("got %+v %v", a, err)
	}
	if _, err := ParseArgs("K8S_POD_NAME"); err == nil {
		t.Error("malformed CNI_ARGS accepted")
	}
}

func TestIntersectPrefixes(t *testing.T) {
	got := IntersectPrefixes(pfx("10.0.0.0/8", "192.168.1.0/24", "2001:db8::/32"), pfx("10.1.0.0/16", "10.2.3.4/32", "192.168.0.0/16", "172.16.0.0/12"))
	want := pfx("10.1.0.0/16", "10.2.3.4/32", "192.168.1.0/24")
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := IntersectPrefixes(pfx("10.0.0.0/8"), pfx("11.0.0.0/8")); len(got) != 0 {
		t.Errorf("disjoint: %v", got)
	}
	// A narrow block covered by a wider one in the result is dropped.
	if got := IntersectPrefixes(pfx("10.0.0.0/8", "10.1.0.0/16"), pfx("10.0.0.0/8")); !slices.Equal(got, pfx("10.0.0.0/8")) {
		t.Errorf("covered: %v", got)
	}
}

func TestApplyOverrides(t *testing.T) {
	cm := IPSettings{Addresses: pfx("192.168.1.99/24"), Destinations: pfx("10.0.0.0/8")}
	ov := &IPSettings{
		Addresses:    pfx("192.168.1.99/24", "192.168.1.98/24"),
		Gateway:      netip.MustParseAddr("192.168.1.1"),
		Destinations: pfx("10.1.0.0/16", "172.16.0.0/12"),
	}
	got, err := ApplyOverrides("cm", cm, ov)
	if err != nil {
		t.Fatal(err)
	}
	if got.Gateway != ov.Gateway || !slices.Equal(got.Destinations, pfx("10.1.0.0/16")) || !slices.Equal(got.Addresses, cm.Addresses) {
		t.Errorf("got %+v", got)
	}

	// Rule 1: an address outside overrides.addresses is refused.
	bad := cm
	bad.Addresses = pfx("192.168.1.50/24")
	if _, err := ApplyOverrides("cm", bad, ov); !isField(err, "ipConfig.overrides.addresses") {
		t.Errorf("forbidden address: %v", err)
	}
	// Same address, other prefix length: not what the admin allowed.
	bad.Addresses = pfx("192.168.1.99/25")
	if _, err := ApplyOverrides("cm", bad, ov); !isField(err, "ipConfig.overrides.addresses") {
		t.Errorf("forbidden prefix length: %v", err)
	}
	// Rule 2: the ConfigMap may not pick another gateway; the same one is fine.
	bad = cm
	bad.Gateway = netip.MustParseAddr("192.168.1.254")
	if _, err := ApplyOverrides("cm", bad, ov); !isField(err, "ipConfig.overrides.gateway") {
		t.Errorf("other gateway: %v", err)
	}
	bad.Gateway = ov.Gateway
	if _, err := ApplyOverrides("cm", bad, ov); err != nil {
		t.Errorf("same gateway refused: %v", err)
	}
	// Rule 3: no ConfigMap destinations means the override's; disjoint ones are refused
	// rather than turned into "anywhere".
	free := IPSettings{Addresses: pfx("192.168.1.98/24")}
	got, err = ApplyOverrides("cm", free, ov)
	if err != nil || !slices.Equal(got.Destinations, ov.Destinations) {
		t.Errorf("default destinations: %v %v", got.Destinations, err)
	}
	free.Destinations = pfx("8.8.8.8/32")
	if _, err := ApplyOverrides("cm", free, ov); !isField(err, "ipConfig.overrides.destinations") {
		t.Errorf("disjoint destinations: %v", err)
	}
	// No overrides: the ConfigMap as is.
	got, err = ApplyOverrides("cm", cm, nil)
	if err != nil || !slices.Equal(got.Destinations, cm.Destinations) || got.Gateway.IsValid() {
		t.Errorf("no overrides: %+v %v", got, err)
	}
}

func isField(err error, field string) bool {
	var fe *FieldError
	return errors.As(err, &fe) && fe.Field == field
}

type fakeCMs map[string]map[string]string

func (f fakeCMs) ConfigMapData(_ context.Context, ns, name string) (map[string]string, error) {
	d, ok := f[ns+"/"+name]
	if !ok {
		return nil, errors.New("not found")
	}
	return d, nil
}

func TestResolveIP(t *testing.T) {
	cms := fakeCMs{
		"ns1/static": {"ip": `{"addresses":["192.168.1.99/24"],"destinations":["10.0.0.0/8"]}`, "other": "ignored"},
		"ns1/perpod": {"podIP": `{"db-*":{"addresses":["192.168.1.70/24"]}}`},
		"ns1/both":   {"ip": `{"addresses":["192.168.1.99/24"]}`, "podIP": `{}`},
		"ns1/none":   {"x": "y"},
		"ns1/broken": {"ip": `{"addresses":`},
		"ns1/badip":  {"ip": `{"addresses":["300.1.1.1/24"]}`},
		"other/cm":   {"ip": `{"addresses":["192.168.1.98/24"]}`},
	}
	pod := PodArgs{Name: "db-1", Namespace: "ns1"}
	cfg := func(s string) *Config {
		c, err := ParseConfig([]byte(`{"name":"n","type":"egress-router",` + s + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s, err := ResolveIP(context.Background(), cfg(`"ipConfig":{"name":"static"}`), pod, cms)
	if err != nil || !slices.Equal(s.Addresses, pfx("192.168.1.99/24")) {
		t.Errorf("static: %+v %v", s, err)
	}
	s, err = ResolveIP(context.Background(), cfg(`"ipConfig":{"name":"perpod"}`), pod, cms)
	if err != nil || !slices.Equal(s.Addresses, pfx("192.168.1.70/24")) {
		t.Errorf("perpod: %+v %v", s, err)
	}
	s, err = ResolveIP(context.Background(), cfg(`"ipConfig":{"name":"cm","namespace":"other"}`), pod, cms)
	if err != nil || !slices.Equal(s.Addresses, pfx("192.168.1.98/24")) {
		t.Errorf("explicit namespace: %+v %v", s, err)
	}
	for _, name := range []string{"both", "none", "broken", "badip", "missing"} {
		if _, err := ResolveIP(context.Background(), cfg(`"ipConfig":{"name":"`+name+`"}`), pod, cms); err == nil {
			t.Errorf("ConfigMap %s accepted", name)
		}
	}
	if _, err := ResolveIP(context.Background(), cfg(`"ipConfig":{"name":"static"}`), PodArgs{}, cms); !isField(err, "ipConfig.namespace") {
		t.Errorf("no namespace: %v", err)
	}
	if _, err := ResolveIP(context.Background(), cfg(`"ipConfig":{"name":"static","overrides":{"addresses":["192.168.1.5/24"]}}`), pod, cms); !isField(err, "ipConfig.overrides.addresses") {
		t.Errorf("override refusing the address: %v", err)
	}
	if _, err := ResolveIP(context.Background(), cfg(`"podIP":{"x":{"addresses":["192.168.1.5/24"]}}`), PodArgs{}, cms); !isField(err, "podIP") {
		t.Errorf("podIP without pod name: %v", err)
	}
	if _, err := ResolveIP(context.Background(), cfg(`"podIP":{"x":{"addresses":["192.168.1.5/24"]}}`), pod, cms); !errors.Is(err, ErrNoPodMatch) {
		t.Errorf("podIP without match: %v", err)
	}
}

func TestInferMaster(t *testing.T) {
	links := []HostLink{
		{Name: "eth0", Index: 2, Prefixes: pfx("10.0.0.5/24", "2001:db8:0::5/64")},
		{Name: "eth1", Index: 3, Prefixes: pfx("192.168.1.5/24")},
		{Name: "eth2", Index: 4, Prefixes: pfx("192.168.0.5/16")},
		{Name: "eth3", Index: 5},
	}
	m, err := InferMaster(links, pfx("10.0.0.99/24"))
	if err != nil || m.Name != "eth0" {
		t.Errorf("v4: %v %v", m, err)
	}
	m, err = InferMaster(links, pfx("2001:db8::99/64"))
	if err != nil || m.Name != "eth0" {
		t.Errorf("v6: %v %v", m, err)
	}
	_, err = InferMaster(links, pfx("192.168.1.99/24"))
	if !isField(err, "interfaceArgs.master") || !strings.Contains(err.Error(), "eth1, eth2") {
		t.Errorf("several candidates: %v", err)
	}
	_, err = InferMaster(links, pfx("172.16.0.1/24"))
	if !isField(err, "interfaceArgs.master") || !strings.Contains(err.Error(), "eth1 192.168.1.5/24") {
		t.Errorf("no candidate: %v", err)
	}
}

func TestFilterRulesShape(t *testing.T) {
	r := FilterRules("net1", pfx("10.1.2.3/32", "2001:db8::/48"))
	// established, neighbour discovery, one per destination, drop.
	if len(r) != 5 {
		t.Fatalf("%d rules, want 5", len(r))
	}
	if len(FilterRules("net1", nil)) != 3 {
		t.Error("no-destination rule set should be established+nd+drop")
	}
}

func TestAnnouncementFrames(t *testing.T) {
	mac := []byte{2, 0, 0, 0, 0, 9}
	arp := ARPAnnouncement(mac, netip.MustParseAddr("192.0.2.99"))
	if len(arp) != 28 || arp[7] != 1 || string(arp[14:18]) != string(arp[24:28]) || arp[17] != 99 || arp[13] != 9 {
		t.Errorf("ARP %x", arp)
	}
	na := UnsolicitedNA(mac, netip.MustParseAddr("2001:db8::99"))
	if na[0] != 136 || na[4] != 0x20 || na[23] != 0x99 || na[24] != 2 || na[31] != 9 {
		t.Errorf("NA %x", na)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"name":"n","type":"egress-router","ip":{"addresses":["192.168.1.99/24"]}}`))
	f.Add([]byte(`{"name":"n","type":"egress-router","podIP":{"a*":{"addresses":["2001:db8::1/64"],"gateway":"2001:db8::fe"}}}`))
	f.Add([]byte(`{"name":"n","type":"egress-router","ipConfig":{"name":"x","overrides":{"destinations":["10.0.0.0/8"]}}}`))
	f.Add([]byte(`{"name":"n","type":"egress-router","ip":{"addresses":["192.168.3.10"],"destinations":["80 UDP 10.100.3.0/30","8080 TCP 203.0.113.26/30 80","10.1.2.3"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err == nil && c.Static == nil && c.PodIP == nil && c.IPConfig == nil {
			t.Fatal("accepted a config without IP configuration")
		}
	})
}

func FuzzConfigMapData(f *testing.F) {
	f.Add(`{"addresses":["192.168.1.99/24"],"gateway":"192.168.1.1","destinations":["10.0.0.0/8"]}`, "", "db-1")
	f.Add("", `{"db-*":{"addresses":["2001:db8::5/64"]}}`, "db-1")
	f.Add(`{"addresses":["192.168.1.99"],"destinations":["10.1.2.3","53 udp 10.0.0.53 5353"]}`, "", "db-1")
	f.Fuzz(func(t *testing.T, ip, podIP, pod string) {
		data := map[string]string{}
		if ip != "" {
			data["ip"] = ip
		}
		if podIP != "" {
			data["podIP"] = podIP
		}
		s, err := parseConfigMapData("cm", data, pod)
		if err != nil {
			return
		}
		if len(s.Addresses) == 0 {
			t.Fatal("accepted a ConfigMap without addresses")
		}
		ov := &IPSettings{Destinations: pfx("10.0.0.0/8")}
		if got, err := ApplyOverrides("cm", s, ov); err == nil && len(got.Allowed()) == 0 {
			t.Fatal("overrides widened destinations to any")
		}
	})
}

func BenchmarkParseConfig(b *testing.B) {
	conf := []byte(`{"cniVersion":"1.0.0","name":"n","type":"egress-router","podIP":{"db-router":{"addresses":["192.168.3.10/24"],"gateway":"192.168.3.1","destinations":["10.1.2.3/32"]},"alpha-*":{"addresses":["192.168.3.12/24","2001:db8::12/64"]}},"clusterNetworks":["10.128.0.0/14"],"serviceNetworks":["172.30.0.0/16"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseConfig(conf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatchPod(b *testing.B) {
	m := map[string]IPSpec{}
	for i := range 200 {
		m["team-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"-*"] = IPSpec{Addresses: []string{"192.168.3.12/24"}}
	}
	entries, err := parsePodIP("podIP", m)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MatchPod(entries, "team-xxxq-7f9c"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBareAddresses: upstream configs write addresses without a prefix length (the
// master's subnet gives it) and destinations without one (a single host).
func TestBareAddresses(t *testing.T) {
	// Upstream's docs/content/post/developer-documentation.md, as written.
	c, err := ParseConfig([]byte(`{
    "cniVersion": "0.4.0",
    "type": "egress-router",
    "name": "egress-router",
    "ip": {
      "addresses": [
        "192.168.123.99"
        ],
      "destinations": [
        "192.168.123.91"
      ],
      "gateway": "192.168.123.1"
      }
    }`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Static.Bare, []netip.Addr{netip.MustParseAddr("192.168.123.99")}) || !slices.Equal(c.Static.Destinations, pfx("192.168.123.91/32")) {
		t.Errorf("bare address %v, destinations %v", c.Static.Bare, c.Static.Destinations)
	}
	master := HostLink{Name: "eth1", Prefixes: pfx("192.168.123.5/24", "2001:db8:7::5/64")}
	got, err := c.Static.WithLengths(master)
	if err != nil || !slices.Equal(got.Addresses, pfx("192.168.123.99/24")) || got.Bare != nil {
		t.Errorf("with the master's length: %v %v %v", got.Addresses, got.Bare, err)
	}
	if !slices.Equal(c.Static.Addresses, pfx("192.168.123.99/32")) {
		t.Error("WithLengths changed its receiver's addresses")
	}
	v6 := IPSettings{Addresses: pfx("2001:db8:7::99/128"), Bare: []netip.Addr{netip.MustParseAddr("2001:db8:7::99")}}
	if got, err := v6.WithLengths(master); err != nil || !slices.Equal(got.Addresses, pfx("2001:db8:7::99/64")) {
		t.Errorf("IPv6: %v %v", got.Addresses, err)
	}
	// No subnet of the master holds it, or several of different lengths: say what to write.
	if _, err := c.Static.WithLengths(HostLink{Name: "eth1", Prefixes: pfx("10.0.0.5/24")}); !isField(err, "addresses") || !strings.Contains(err.Error(), "no subnet of the master eth1 (10.0.0.5/24) contains it") {
		t.Errorf("no subnet: %v", err)
	}
	if _, err := c.Static.WithLengths(HostLink{Name: "eth1", Prefixes: pfx("192.168.123.5/24", "192.168.0.5/16")}); !isField(err, "addresses") || !strings.Contains(err.Error(), "several subnets containing it (lengths [16 24])") {
		t.Errorf("ambiguous: %v", err)
	}
	// Two addresses of the same subnet length are no ambiguity.
	if _, err := c.Static.WithLengths(HostLink{Name: "eth1", Prefixes: pfx("192.168.123.5/24", "192.168.123.6/24")}); err != nil {
		t.Errorf("one length twice: %v", err)
	}
	// The length found may make it the subnet's broadcast address.
	bc := IPSettings{Addresses: pfx("192.168.123.255/32"), Bare: []netip.Addr{netip.MustParseAddr("192.168.123.255")}}
	if _, err := bc.WithLengths(master); !isField(err, "addresses") || !strings.Contains(err.Error(), "broadcast") {
		t.Errorf("broadcast once the length is known: %v", err)
	}
	// Overrides compare a bare address with a written length by address.
	ov := &IPSettings{Addresses: pfx("192.168.123.99/24")}
	if _, err := ApplyOverrides("cm", c.Static.withoutRedirects(), ov); err != nil {
		t.Errorf("bare ConfigMap address against an allowed /24: %v", err)
	}
	ov = &IPSettings{Addresses: pfx("192.168.123.99/32"), Bare: []netip.Addr{netip.MustParseAddr("192.168.123.99")}}
	if _, err := ApplyOverrides("cm", IPSettings{Addresses: pfx("192.168.123.99/24")}, ov); err != nil {
		t.Errorf("ConfigMap /24 against an allowed bare address: %v", err)
	}
	if _, err := ApplyOverrides("cm", IPSettings{Addresses: pfx("192.168.123.98/24")}, ov); !isField(err, "ipConfig.overrides.addresses") {
		t.Errorf("another address: %v", err)
	}
}

// TestMTUAsString: upstream's interfaceArgs are strings, "mtu" among them.
func TestMTUAsString(t *testing.T) {
	base := `"name":"n","type":"egress-router","ip":{"addresses":["1.2.3.4/24"]},"interfaceArgs":`
	for conf, want := range map[string]int{`{"mtu":"1400"}`: 1400, `{"mtu":1400}`: 1400, `{"master":"eth1","mode":"bridge"}`: 0} {
		c, err := ParseConfig([]byte(`{` + base + conf + `}`))
		if err != nil || c.MTU != want {
			t.Errorf("%s: MTU %v, %v; want %d", conf, c, err, want)
		}
	}
	if _, err := ParseConfig([]byte(`{` + base + `{"mtu":"big"}}`)); !isField(err, "interfaceArgs.mtu") || !strings.Contains(err.Error(), `"big" is not a number`) {
		t.Errorf("mtu \"big\": %v", err)
	}
}

func (s IPSettings) withoutRedirects() IPSettings { s.Redirects = nil; return s }

// upstreamRedirect is upstream's multiple-destinations example
// (docs/content/post/multiple_ports.md), as written, log settings included.
const upstreamRedirect = `{
	"cniVersion": "0.4.0",
	"type": "egress-router",
	"name": "egress-router",
	"ip": {
		"addresses": ["192.168.3.10/24"],
		"destinations": ["80 UDP 10.100.3.0/30",
		                 "8080 TCP 203.0.113.26/30 80",
		                 "8443 TCP 203.0.113.27/30 443"],
		"gateway": "192.168.3.1"
	},
	"log_file": "/tmp/egress-router-log",
	"log_level": "debug"
}`

// TestRedirectDestinations parses upstream's redirect form from its own documentation
// (docs/content/post/multiple_ports.md and logging.md), as written.
func TestRedirectDestinations(t *testing.T) {
	c, err := ParseConfig([]byte(upstreamRedirect))
	if err != nil {
		t.Fatal(err)
	}
	want := []Redirect{
		{Port: 80, Proto: "udp", To: netip.MustParsePrefix("10.100.3.0/30"), ToPort: 80},
		{Port: 8080, Proto: "tcp", To: netip.MustParsePrefix("203.0.113.26/30"), ToPort: 80},
		{Port: 8443, Proto: "tcp", To: netip.MustParsePrefix("203.0.113.27/30"), ToPort: 443},
	}
	if !slices.Equal(c.Static.Redirects, want) || len(c.Static.Destinations) != 0 {
		t.Errorf("redirects %+v, destinations %v", c.Static.Redirects, c.Static.Destinations)
	}
	// The redirects' blocks are where the pod may go.
	if got := c.Static.Allowed(); !slices.Equal(got, pfx("10.100.3.0/30", "203.0.113.24/30")) {
		t.Errorf("allowed %v", got)
	}
	// What the OpenShift network operator renders: plain addresses, lower-case too.
	c, err = ParseConfig([]byte(`{"cniVersion":"0.4.0","type":"egress-router","name":"egress-router-cni-nad","ip":{"addresses":["192.168.3.10"],"destinations":["80 UDP 10.100.3.0","8080 SCTP 203.0.113.26 80","8443 tcp 203.0.113.27 443","10.1.2.0/24","2001:db8::5"],"gateway":"192.168.3.1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Static.Redirects) != 3 || c.Static.Redirects[1].Proto != "sctp" || c.Static.Redirects[0].To != netip.MustParsePrefix("10.100.3.0/32") {
		t.Errorf("redirects %+v", c.Static.Redirects)
	}
	if got := c.Static.Allowed(); !slices.Equal(got, pfx("10.1.2.0/24", "2001:db8::5/128", "10.100.3.0/32", "203.0.113.26/32", "203.0.113.27/32")) {
		t.Errorf("allowed %v", got)
	}
	rules := TableRules("net1", "eth0", *c.Static)
	if len(rules["prerouting"]) != 3 || len(rules["postrouting"]) != 1 || len(rules["output"]) != 2+5+1 {
		t.Errorf("rules per chain: prerouting %d postrouting %d output %d", len(rules["prerouting"]), len(rules["postrouting"]), len(rules["output"]))
	}

	// Overrides: the ConfigMap's redirects must lead inside the allowed blocks; without
	// destinations of its own, the ConfigMap gets the overrides' redirects.
	ov := &IPSettings{Destinations: pfx("203.0.113.0/24"), Redirects: []Redirect{{Port: 53, Proto: "udp", To: netip.MustParsePrefix("198.51.100.53/32"), ToPort: 53}}}
	cm := IPSettings{Addresses: pfx("192.168.3.10/24"), Redirects: want[1:2]}
	if got, err := ApplyOverrides("cm", cm, ov); err != nil || !slices.Equal(got.Redirects, want[1:2]) {
		t.Errorf("allowed redirect: %+v %v", got.Redirects, err)
	}
	cm.Redirects = want[:1]
	if _, err := ApplyOverrides("cm", cm, ov); !isField(err, "ipConfig.overrides.destinations") || !strings.Contains(err.Error(), "10.100.3.0/30") {
		t.Errorf("redirect outside the allowed destinations: %v", err)
	}
	cm.Redirects = nil
	if got, err := ApplyOverrides("cm", cm, ov); err != nil || !slices.Equal(got.Redirects, ov.Redirects) || !slices.Equal(got.Destinations, ov.Destinations) {
		t.Errorf("default destinations: %+v %v", got, err)
	}
}

// TestJSONErrorPosition: the spec's second example is not JSON as printed (a comma
// after the last member of interfaceArgs, then missing and trailing commas in podIP);
// the error says where it breaks.
func TestJSONErrorPosition(t *testing.T) {
	for _, f := range []func([]byte) error{CheckJSON, func(b []byte) error { _, err := ParseConfig(b); return err }} {
		err := f([]byte(specExample2))
		if err == nil || !strings.Contains(err.Error(), "line 8, column 2: invalid character '}' looking for beginning of object key string") {
			t.Errorf("spec example 2: %v", err)
		}
	}
	if err := CheckJSON([]byte(`{"name": "n", "ip": {"addresses": 7}}`)); err != nil {
		t.Errorf("CheckJSON judges syntax only: %v", err)
	}
	if _, err := ParseConfig([]byte("{\n \"name\": 7}")); err == nil || !strings.Contains(err.Error(), "line 2, column 10") {
		t.Errorf("type error: %v", err)
	}
	if err := CheckJSON([]byte(`{"name":`)); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("truncated: %v", err)
	}
}

// The filter functions refuse namespace handle fd 0, which the nftables
// library would take as the plugin's own namespace (the node's): a pod's
// filter must never land there (a closed stdin once made the pod's handle
// fd 0).
func TestFilterRefusesFdZero(t *testing.T) {
	for name, call := range map[string]func() error{
		"install": func() error { return InstallFilter(0, "net1", "eth0", IPSettings{}) },
		"remove":  func() error { return RemoveFilter(0, "net1") },
		"count":   func() error { _, err := TableRuleCounts(0, "net1"); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "fd 0") {
			t.Errorf("%s with fd 0: %v, want a refusal naming fd 0", name, err)
		}
	}
}
