package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func traffic(name string, l map[string]string, exclude bool, nets ...string) *egressv1.EgressIPTraffic {
	t := &egressv1.EgressIPTraffic{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	if exclude {
		t.Annotations = map[string]string{egressv1.AnnotationExclude: "true"}
	}
	t.Spec.DestinationNetworks = nets
	return t
}

func withTraffic(e *egressv1.EgressIP, sel map[string]string) *egressv1.EgressIP {
	e.Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: sel}
	return e
}

// destCluster: one pod in namespace shop selected by every object given.
func destCluster(eips []*egressv1.EgressIP, tr ...*egressv1.EgressIPTraffic) cluster.View {
	return cluster.View{
		Nodes: []*corev1.Node{
			node("w1", nil, []string{"10.128.1.0/24"}, "10.0.0.11"),
			node("g1", nil, nil, "10.0.0.21"), node("g2", nil, nil, "10.0.0.22"),
		},
		Namespaces: []*corev1.Namespace{ns("shop", map[string]string{"team": "shop"})},
		Pods:       []*corev1.Pod{pod("shop", "web", "w1", map[string]string{"app": "web"}, "10.128.1.2")},
		EgressIPs:  eips,
		Traffic:    tr,
	}
}

// TestDestSemantics walks the rules docs/api.md states, one case each.
func TestDestSemantics(t *testing.T) {
	shop := map[string]string{"team": "shop"}
	bank := traffic("bank", map[string]string{"to": "bank"}, false, "203.0.113.0/25")
	partner := traffic("partner", map[string]string{"to": "partner"}, false, "203.0.113.128/25", "2001:db8:5200::/48")
	noCard := traffic("no-card", map[string]string{"to": "bank"}, true, "203.0.113.64/26")
	dnsT := traffic("api", map[string]string{"to": "api"}, false)
	dnsT.Spec.DNSNames = []string{"api.example.com", "Old.Example.com."}
	dnsT.Status.DNSNames = []egressv1.ResolvedName{
		{Name: "api.example.com.", Addresses: []string{"198.51.100.7", "2001:db8:77::1"}},
		{Name: "gone.example.com", Addresses: []string{"198.51.100.99"}}, // no longer in spec
		{Name: "old.example.com", Addresses: []string{"bogus"}},
	}
	all := []*egressv1.EgressIPTraffic{bank, partner, noCard, dnsT}
	a := func() *egressv1.EgressIP { return eip("a", []string{"192.0.2.10"}, shop, nil, "g1", "192.0.2.10") }
	b := func() *egressv1.EgressIP { return eip("b", []string{"192.0.2.20"}, shop, nil, "g2", "192.0.2.20") }
	f := func() *egressv1.EgressIP { return eip("f", []string{"192.0.2.30"}, shop, nil, "g1", "192.0.2.30") }

	type want struct {
		dst, owner string
		excluded   bool
	}
	for _, c := range []struct {
		name  string
		eips  []*egressv1.EgressIP
		cases []want
		sub   string // a conflict's message must contain it ("" for none)
	}{
		{"no selector serves everything", []*egressv1.EgressIP{a()}, []want{{"203.0.113.5", "a", false}, {"8.8.8.8", "a", false}}, ""},
		{"pair by destination, rest as node", []*egressv1.EgressIP{withTraffic(a(), map[string]string{"to": "partner"}), withTraffic(b(), map[string]string{"to": "bank"})},
			[]want{{"203.0.113.200", "a", false}, {"2001:db8:5200::10", "a", false}, {"203.0.113.10", "b", false}, {"203.0.113.70", "b", true}, {"8.8.8.8", "", false}}, ""},
		{"fallback takes the rest", []*egressv1.EgressIP{withTraffic(b(), map[string]string{"to": "bank"}), f()},
			[]want{{"203.0.113.10", "b", false}, {"203.0.113.70", "b", true}, {"8.8.8.8", "f", false}, {"203.0.113.200", "f", false}}, ""},
		{"only exclusions: all but these", []*egressv1.EgressIP{withTraffic(a(), map[string]string{"x": "y"}), withTraffic(b(), nil)},
			// b's empty selector selects every object: bank, partner, api and the exclusion.
			[]want{{"203.0.113.70", "b", true}, {"203.0.113.10", "b", false}, {"8.8.8.8", "", false}}, ""},
		{"selector selecting nothing: the node", []*egressv1.EgressIP{withTraffic(a(), map[string]string{"to": "none"})},
			[]want{{"203.0.113.10", "", false}, {"8.8.8.8", "", false}}, ""},
		{"dns addresses are host routes", []*egressv1.EgressIP{withTraffic(a(), map[string]string{"to": "api"}), f()},
			[]want{{"198.51.100.7", "a", false}, {"2001:db8:77::1", "a", false}, {"198.51.100.8", "f", false}, {"198.51.100.99", "f", false}}, ""},
		{"tie: first by name, told", []*egressv1.EgressIP{withTraffic(b(), map[string]string{"to": "bank"}), withTraffic(a(), map[string]string{"to": "bank"})},
			[]want{{"203.0.113.10", "a", false}}, "both claim 203.0.113.0/25"},
		{"nested: longer wins, told", []*egressv1.EgressIP{withTraffic(a(), map[string]string{"to": "partner"}), withTraffic(b(), map[string]string{"to": "bank"}),
			func() *egressv1.EgressIP {
				e := withTraffic(eip("c", []string{"192.0.2.40"}, shop, nil, "g1", "192.0.2.40"), map[string]string{"to": "wide"})
				return e
			}()},
			[]want{{"203.0.113.10", "b", false}, {"203.0.112.1", "c", false}}, "overlap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := all
			if strings.HasPrefix(c.name, "nested") {
				tr = append(slices.Clone(all), traffic("wide", map[string]string{"to": "wide"}, false, "203.0.112.0/23"))
			}
			p := Build(destCluster(c.eips, tr...), Options{})
			if len(p.Pods) != 1 {
				t.Fatalf("pods %+v", p.Pods)
			}
			pd := p.Pods[0]
			for _, w := range c.cases {
				owner, ex := pd.OwnerFor(netip.MustParseAddr(w.dst))
				if owner != w.owner || ex != w.excluded {
					t.Errorf("to %s: owner %q excluded %v, want %q %v (dest %+v)", w.dst, owner, ex, w.owner, w.excluded, pd.Dest)
				}
			}
			var msgs []string
			for _, cf := range p.Conflicts {
				msgs = append(msgs, cf.String())
			}
			if got := strings.Join(msgs, "; "); (c.sub == "") != (got == "") || !strings.Contains(got, c.sub) {
				t.Errorf("conflicts %q, want one containing %q", got, c.sub)
			}
		})
	}
	p := Build(destCluster([]*egressv1.EgressIP{withTraffic(a(), map[string]string{"to": "api"})}, all...), Options{})
	if !hasProblem(p, `EgressIPTraffic api: status address "bogus" of old.example.com`) {
		t.Errorf("problems %v", p.Problems)
	}
}

// TestDestShared: pods selected by the same objects share one Dest, and a
// pod whose objects' selectors pick nothing is not selected at all.
func TestDestShared(t *testing.T) {
	shop := map[string]string{"team": "shop"}
	v := destCluster([]*egressv1.EgressIP{
		withTraffic(eip("a", []string{"192.0.2.10"}, shop, nil, "g1", "192.0.2.10"), map[string]string{"to": "bank"}),
		withTraffic(eip("n", []string{"192.0.2.11"}, map[string]string{"team": "none"}, nil, "g1", "192.0.2.11"), map[string]string{"to": "none"}),
	}, traffic("bank", map[string]string{"to": "bank"}, false, "203.0.113.0/24"))
	v.Namespaces = append(v.Namespaces, ns("none", map[string]string{"team": "none"}))
	v.Pods = append(v.Pods, pod("shop", "api", "w1", nil, "10.128.1.3"), pod("none", "x", "w1", nil, "10.128.1.4"))
	p := Build(v, Options{})
	byName := map[string]Pod{}
	for _, pd := range p.Pods {
		byName[pd.Key()] = pd
	}
	if byName["shop/web"].Dest == nil || byName["shop/web"].Dest != byName["shop/api"].Dest {
		t.Errorf("shop pods do not share one Dest: %p %p", byName["shop/web"].Dest, byName["shop/api"].Dest)
	}
	if x := byName["none/x"]; x.Selected() || !slices.Equal(x.IPs, []netip.Addr{netip.MustParseAddr("10.128.1.4")}) {
		t.Errorf("none/x: %+v, want unselected with its address", x)
	}
	w := p.Worker("w1", netip.MustParseAddr("10.0.0.11"))
	if len(w.Objects) != 1 || w.Objects[0].Name != "a" {
		t.Errorf("worker objects %+v, want a", w.Objects)
	}
	g := p.Gateway("g1", []netip.Addr{netip.MustParseAddr("10.0.0.21")})
	var got []string
	for _, wk := range g.Workers {
		for _, pa := range wk.Pods {
			got = append(got, fmt.Sprintf("%v:%q:%v", pa.Addr, pa.Owner, pa.Dest != nil))
		}
	}
	if want := []string{`10.128.1.2:"":true`, `10.128.1.3:"":true`}; !slices.Equal(got, want) {
		t.Errorf("gateway pods %v, want %v", got, want)
	}
}

// TestChooseProperties checks Dest.Choose and Pod.OwnerFor against a model
// stated independently: among all (network, object, exclusion) entries of
// the objects selecting the pod, the longest network containing the
// destination decides; among equal networks an exclusion, then the first
// object by name; with none, the first object without a selector by name.
func TestChooseProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shop := map[string]string{"team": "shop"}
	randNet := func() string {
		if rng.IntN(4) == 0 {
			bits := 32 + rng.IntN(97)
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(rng.IntN(4)), byte(rng.IntN(4))})
			return netip.PrefixFrom(a, min(bits, 128)).Masked().String()
		}
		bits := rng.IntN(33)
		a := netip.AddrFrom4([4]byte{203, 0, byte(112 + rng.IntN(4)), byte(rng.IntN(256))})
		return netip.PrefixFrom(a, bits).Masked().String()
	}
	randDst := func() netip.Addr {
		if rng.IntN(4) == 0 {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(rng.IntN(4)), byte(rng.IntN(4)), 15: byte(rng.IntN(256))})
		}
		return netip.AddrFrom4([4]byte{203, 0, byte(112 + rng.IntN(4)), byte(rng.IntN(256))})
	}
	for iter := range 3000 {
		var tr []*egressv1.EgressIPTraffic
		for i := range 1 + rng.IntN(5) {
			var nets []string
			for range rng.IntN(4) {
				nets = append(nets, randNet())
			}
			if len(nets) == 0 {
				nets = []string{"bogus"} // an object with nothing usable
			}
			tr = append(tr, traffic(fmt.Sprintf("t%d", i), map[string]string{fmt.Sprintf("t%d", i): "y", "all": "y"}, rng.IntN(4) == 0, nets...))
		}
		var eips []*egressv1.EgressIP
		for i := range 1 + rng.IntN(4) {
			e := eip(fmt.Sprintf("e%d", i), []string{fmt.Sprintf("192.0.2.%d", 10+i)}, shop, nil, "g1", fmt.Sprintf("192.0.2.%d", 10+i))
			switch rng.IntN(4) {
			case 0: // no selector: a fallback
			case 1:
				e = withTraffic(e, map[string]string{"all": "y"})
			default:
				e = withTraffic(e, map[string]string{fmt.Sprintf("t%d", rng.IntN(len(tr))): "y"})
			}
			eips = append(eips, e)
		}
		p := Build(destCluster(eips, tr...), Options{})
		pd := p.Pods[0]
		for range 20 {
			dst := randDst()
			wantOwner, wantEx := model(eips, tr, dst)
			owner, ex := pd.OwnerFor(dst)
			if owner != wantOwner || ex != wantEx {
				t.Fatalf("iteration %d, to %v: got %q excluded %v, model %q %v\nobjects %s\ndest %+v",
					iter, dst, owner, ex, wantOwner, wantEx, describe(eips, tr), pd.Dest)
			}
		}
	}
}

// model decides dst for a pod every object of eips selects, from the
// objects themselves, without the plan.
func model(eips []*egressv1.EgressIP, tr []*egressv1.EgressIPTraffic, dst netip.Addr) (string, bool) {
	eips = slices.Clone(eips)
	slices.SortFunc(eips, func(a, b *egressv1.EgressIP) int { return strings.Compare(a.Name, b.Name) })
	best, bestOwner, bestEx := -1, "", false
	fallback := ""
	for _, e := range eips {
		if e.Spec.TrafficSelector == nil {
			if fallback == "" {
				fallback = e.Name
			}
			continue
		}
		var inc, exc []netip.Prefix
		var picked bool
		for _, t := range tr {
			match := true
			for k, v := range e.Spec.TrafficSelector.MatchLabels {
				match = match && t.Labels[k] == v
			}
			if !match {
				continue
			}
			picked = true
			for _, s := range t.Spec.DestinationNetworks {
				n, err := netip.ParsePrefix(s)
				if err != nil {
					continue
				}
				if t.Annotations[egressv1.AnnotationExclude] == "true" {
					exc = append(exc, n)
				} else {
					inc = append(inc, n)
				}
			}
		}
		if picked && len(inc) == 0 && slices.ContainsFunc(tr, func(t *egressv1.EgressIPTraffic) bool {
			match := true
			for k, v := range e.Spec.TrafficSelector.MatchLabels {
				match = match && t.Labels[k] == v
			}
			return match && t.Annotations[egressv1.AnnotationExclude] == "true"
		}) {
			inc = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		}
		consider := func(n netip.Prefix, ex bool) {
			if !n.Contains(dst) {
				return
			}
			// Longer wins; at equal length an exclusion beats an
			// inclusion; else the earlier object (name order) stays.
			if n.Bits() > best || n.Bits() == best && ex && !bestEx {
				best, bestOwner, bestEx = n.Bits(), e.Name, ex
			}
		}
		for _, n := range inc {
			consider(n, false)
		}
		for _, n := range exc {
			consider(n, true)
		}
	}
	if best < 0 {
		return fallback, false
	}
	return bestOwner, bestEx
}

func describe(eips []*egressv1.EgressIP, tr []*egressv1.EgressIPTraffic) string {
	var b strings.Builder
	for _, e := range eips {
		fmt.Fprintf(&b, "%s sel=%v; ", e.Name, e.Spec.TrafficSelector)
	}
	for _, t := range tr {
		fmt.Fprintf(&b, "%s %v ex=%v %v; ", t.Name, t.Labels, t.Excluded(), t.Spec.DestinationNetworks)
	}
	return b.String()
}

// TestPerDestinationExamples: the shipped per-destination examples decode
// strictly, pass the objects' own validation, and mean what their comments
// say for a pod of a team=payments namespace.
func TestPerDestinationExamples(t *testing.T) {
	files, err := filepath.Glob("../../deploy/examples/per-destination/*.yaml")
	if err != nil || len(files) != 5 {
		t.Fatalf("examples %v (%v), want 5", files, err)
	}
	v := destCluster(nil)
	v.Namespaces = append(v.Namespaces, ns("pay", map[string]string{"team": "payments"}))
	v.Pods = append(v.Pods, pod("pay", "api", "w1", nil, "10.128.1.9"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(b, &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		switch tm.Kind {
		case egressv1.Kind:
			var e egressv1.EgressIP
			if err := yaml.UnmarshalStrict(b, &e); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := e.Validate(); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			// Placed as the controller would, each IP on g1.
			for _, ip := range e.Spec.EgressIPs {
				e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: "g1", EgressIP: ip})
			}
			v.EgressIPs = append(v.EgressIPs, &e)
		case egressv1.TrafficKind:
			var tr egressv1.EgressIPTraffic
			if err := yaml.UnmarshalStrict(b, &tr); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if errs := tr.Problems(); len(errs) > 0 {
				t.Errorf("%s: %v", f, errs)
			}
			v.Traffic = append(v.Traffic, &tr)
		default:
			t.Errorf("%s: kind %q", f, tm.Kind)
		}
	}
	p := Build(v, Options{})
	if len(p.Problems) > 0 || len(p.Conflicts) > 0 {
		t.Errorf("problems %v, conflicts %v", p.Problems, p.Conflicts)
	}
	i := slices.IndexFunc(p.Pods, func(pd Pod) bool { return pd.Key() == "pay/api" })
	for dst, want := range map[string]string{
		"203.0.113.10": "payments-to-bank", "203.0.113.70": "payments-to-bank excluded",
		"198.51.100.5": "payments-to-partner", "2001:db8:5200::10": "payments-to-partner", "8.8.8.8": "",
	} {
		owner, ex := p.Pods[i].OwnerFor(netip.MustParseAddr(dst))
		if ex {
			owner += " excluded"
		}
		if owner != want {
			t.Errorf("pay/api to %s: %q, want %q", dst, owner, want)
		}
	}
}
