package v1

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const examplesDir = "../../../deploy/examples"

func sample() *EgressIP {
	return &EgressIP{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.ovn.org/v1", Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "e", Labels: map[string]string{"a": "b"}},
		Spec: EgressIPSpec{
			EgressIPs:         []string{"192.0.2.1", "2001:db8::1"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "qa"}},
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}},
			}},
			TrafficSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"traffic-group": "mgmt"}},
		},
		Status: EgressIPStatus{Items: []EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.1"}}},
	}
}

func TestDeepCopyIndependent(t *testing.T) {
	orig := sample()
	cp := orig.DeepCopy()
	if !reflect.DeepEqual(orig, cp) {
		t.Fatalf("copy differs:\n%+v\n%+v", orig, cp)
	}
	// Mutate everything reachable in the copy; the original must not move.
	cp.Labels["a"] = "x"
	cp.Spec.EgressIPs[0] = "198.51.100.1"
	cp.Spec.NamespaceSelector.MatchLabels["env"] = "prod"
	cp.Spec.PodSelector.MatchExpressions[0].Values[0] = "db"
	cp.Spec.TrafficSelector.MatchLabels["traffic-group"] = "data"
	cp.Status.Items[0].Node = "n2"
	if !reflect.DeepEqual(orig, sample()) {
		t.Fatalf("mutating the copy changed the original: %+v", orig)
	}

	list := &EgressIPList{Items: []EgressIP{*sample()}}
	lc := list.DeepCopyObject().(*EgressIPList)
	lc.Items[0].Spec.EgressIPs[1] = "2001:db8::2"
	if list.Items[0].Spec.EgressIPs[1] != "2001:db8::1" {
		t.Fatal("list copy shares item memory")
	}
	var nilE *EgressIP
	if nilE.DeepCopy() != nil || nilE.DeepCopyObject() != nil {
		t.Fatal("nil DeepCopy must be nil")
	}
}

func TestSchemeRegistration(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, o := range []runtime.Object{&EgressIP{}, &EgressIPList{}} {
		gvks, _, err := s.ObjectKinds(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(gvks) != 1 || gvks[0].GroupVersion() != SchemeGroupVersion {
			t.Fatalf("%T registered as %v", o, gvks)
		}
	}
	if GroupVersionKind.String() != "k8s.ovn.org/v1, Kind=EgressIP" {
		t.Fatalf("GroupVersionKind = %v", GroupVersionKind)
	}
	o, err := s.New(GroupVersionKind)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.(*EgressIP); !ok {
		t.Fatalf("scheme.New gave %T", o)
	}
}

// The JSON shape is what other tools read: check field names and that a
// zero status or pod selector is left out rather than sent as null.
func TestJSONShape(t *testing.T) {
	e := sample()
	e.Status = EgressIPStatus{}
	e.Spec.PodSelector = metav1.LabelSelector{}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"egressIPs":["192.0.2.1","2001:db8::1"]`, `"namespaceSelector":{"matchLabels":{"env":"qa"}}`} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON %s lacks %s", s, want)
		}
	}
	for _, unwanted := range []string{`"status"`, `"podSelector"`} {
		if strings.Contains(s, unwanted) {
			t.Errorf("JSON %s has %s, want it omitted when zero", s, unwanted)
		}
	}
	b, err = json.Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"status":{"items":[{"node":"n1","egressIP":"192.0.2.1"}]}`) {
		t.Errorf("status JSON wrong: %s", b)
	}
}

// Every EgressIP example from the spec decodes strictly into the Go types
// (no unknown fields) and passes Validate.
func TestExamplesDecodeAndValidate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in %s: %v", examplesDir, err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(b, &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if tm.Kind != Kind {
			continue
		}
		n++
		var e EgressIP
		if err := yaml.UnmarshalStrict(b, &e); err != nil {
			t.Errorf("%s: strict decode: %v", f, err)
			continue
		}
		if err := e.Validate(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if len(e.Spec.EgressIPs) < 2 {
			t.Errorf("%s: decoded %d egress IPs, the examples all have 2", f, len(e.Spec.EgressIPs))
		}
	}
	if n < 4 {
		t.Fatalf("found %d EgressIP examples, want the spec's 4", n)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*EgressIP)
		want   []string // substrings of the error; none means valid
	}{
		{"valid", func(*EgressIP) {}, nil},
		{"no name", func(e *EgressIP) { e.Name = "" }, []string{"metadata.name"}},
		{"no IPs", func(e *EgressIP) { e.Spec.EgressIPs = nil }, []string{"spec.egressIPs: must list at least one"}},
		{"garbage", func(e *EgressIP) { e.Spec.EgressIPs[0] = "not-an-ip" }, []string{`spec.egressIPs[0]: "not-an-ip" is not an IP address`}},
		{"octet too big", func(e *EgressIP) { e.Spec.EgressIPs[0] = "192.168.1.300" }, []string{"spec.egressIPs[0]", "not an IP"}},
		{"leading zero", func(e *EgressIP) { e.Spec.EgressIPs[0] = "192.168.01.1" }, []string{"spec.egressIPs[0]"}},
		{"zone", func(e *EgressIP) { e.Spec.EgressIPs[1] = "2001:db8::1%eth0" }, []string{"spec.egressIPs[1]", "zone"}},
		{"4in6", func(e *EgressIP) { e.Spec.EgressIPs[1] = "::ffff:192.0.2.9" }, []string{"IPv4-mapped"}},
		{"loopback", func(e *EgressIP) { e.Spec.EgressIPs[0] = "127.0.0.1" }, []string{"cannot be a source"}},
		{"unspecified", func(e *EgressIP) { e.Spec.EgressIPs[1] = "::" }, []string{"cannot be a source"}},
		{"multicast", func(e *EgressIP) { e.Spec.EgressIPs[0] = "224.0.0.1" }, []string{"cannot be a source"}},
		{"link-local", func(e *EgressIP) { e.Spec.EgressIPs[1] = "fe80::1" }, []string{"cannot be a source"}},
		{"duplicate spelled differently", func(e *EgressIP) { e.Spec.EgressIPs = []string{"2001:db8::1", "2001:DB8:0::1"} },
			[]string{`spec.egressIPs[1]: "2001:DB8:0::1" repeats spec.egressIPs[0]`}},
		{"bad operator", func(e *EgressIP) { e.Spec.PodSelector.MatchExpressions[0].Operator = "Near" }, []string{"spec.podSelector"}},
		{"bad ns label", func(e *EgressIP) { e.Spec.NamespaceSelector.MatchLabels = map[string]string{"bad key!": "x"} }, []string{"spec.namespaceSelector"}},
		{"status bad", func(e *EgressIP) { e.Status.Items[0] = EgressIPStatusItem{EgressIP: "x"} },
			[]string{"status.items[0].node", "status.items[0].egressIP"}},
		{"too many", func(e *EgressIP) {
			e.Spec.EgressIPs = nil
			for i := range MaxEgressIPs + 1 {
				e.Spec.EgressIPs = append(e.Spec.EgressIPs, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String())
			}
		}, []string{"spec.egressIPs: 1025 addresses, at most 1024"}},
		{"all errors reported", func(e *EgressIP) { e.Spec.EgressIPs = []string{"a", "b"} },
			[]string{"spec.egressIPs[0]", "spec.egressIPs[1]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := sample()
			c.mutate(e)
			err := e.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want error containing %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func FuzzParseEgressIP(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "2001:db8::1", "", "::ffff:1.2.3.4", "fe80::1%eth0", "1.2.3.04"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseEgressIP(s)
		if err != nil {
			return
		}
		// Anything accepted round-trips and is a usable unicast address.
		if b, err := ParseEgressIP(a.String()); err != nil || b != a {
			t.Fatalf("%q accepted as %v but its canonical form %q gives %v, %v", s, a, a.String(), b, err)
		}
		if a.Zone() != "" || a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() {
			t.Fatalf("%q accepted as unusable %v", s, a)
		}
	})
}

// The controller validates and copies objects on every informer event.
func BenchmarkValidate(b *testing.B) {
	e := sample()
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDeepCopy(b *testing.B) {
	e := sample()
	b.ReportAllocs()
	for b.Loop() {
		_ = e.DeepCopy()
	}
}

func TestStandbysRoundTrip(t *testing.T) {
	m := map[netip.Addr]string{netip.MustParseAddr("192.0.2.10"): "gw2", netip.MustParseAddr("2001:db8::10"): "gw1"}
	e := &EgressIP{}
	e.Name = "x"
	e.Annotations = map[string]string{AnnotationStandby: FormatStandbys(m)}
	if got := e.Annotations[AnnotationStandby]; got != `{"192.0.2.10":"gw2","2001:db8::10":"gw1"}` {
		t.Fatalf("formatted %s", got)
	}
	back, err := Standbys(e)
	if err != nil || len(back) != 2 || back[netip.MustParseAddr("192.0.2.10")] != "gw2" || back[netip.MustParseAddr("2001:db8::10")] != "gw1" {
		t.Fatalf("parsed %v, %v", back, err)
	}
	for _, bad := range []string{`[1]`, `{"x":"gw1"}`, `{"192.0.2.1":""}`, `{`} {
		e.Annotations[AnnotationStandby] = bad
		if _, err := Standbys(e); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	delete(e.Annotations, AnnotationStandby)
	if m, err := Standbys(e); m != nil || err != nil {
		t.Errorf("no annotation: %v, %v", m, err)
	}
}
