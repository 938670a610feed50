package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The selection both agents share: first object by name owns a pod, every
// match is reported, duplicates and invalid selectors are left out.
func TestSelector(t *testing.T) {
	bad := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Nope"}}}
	sel, problems := NewSelector([]*egressv1.EgressIP{
		eip("zeta", match("team", "shop"), metav1.LabelSelector{}, nil),
		nil,
		eip("alpha", match("team", "shop"), match("app", "web"), nil),
		eip("alpha", match(), match(), nil), // duplicate name: the first stays
		eip("broken", bad, match(), nil),
		eip("mid", match("team", "billing"), match(), nil),
	})
	if len(problems) != 2 {
		t.Errorf("problems %v, want the duplicate and the invalid selector", problems)
	}
	var names []string
	for i := range sel.Len() {
		names = append(names, sel.Object(i).Name)
	}
	if !slices.Equal(names, []string{"alpha", "mid", "zeta"}) {
		t.Fatalf("objects %v, want alpha mid zeta", names)
	}
	shop, web := map[string]string{"team": "shop"}, map[string]string{"app": "web"}
	if got := sel.Match(shop, web); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Match(shop, web) = %v, want [0 2] (alpha, zeta)", got)
	}
	if got := sel.Owner(shop, web); got != 0 {
		t.Errorf("Owner(shop, web) = %d, want 0 (alpha: first by name)", got)
	}
	if got := sel.Owner(shop, map[string]string{"app": "batch"}); got != 2 {
		t.Errorf("Owner(shop, batch) = %d, want 2 (zeta's empty podSelector)", got)
	}
	if got := sel.Owner(map[string]string{"team": "other"}, web); got != -1 || sel.Match(map[string]string{"team": "other"}, web) != nil {
		t.Errorf("a pod no object selects has owner %d", got)
	}
}

func eip(name string, ns, pod metav1.LabelSelector, ips []string) *egressv1.EgressIP {
	return &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: egressv1.EgressIPSpec{EgressIPs: ips, NamespaceSelector: ns, PodSelector: pod}}
}

func match(kv ...string) metav1.LabelSelector {
	s := metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

// TestSelectorIndexMatchesScan: the indexed Match and Owner answer as
// testing every object would, for random selectors of every operator
// (equality, in, notin, exists, doesnotexist, empty) over a small label
// alphabet, so that many objects overlap.
func TestSelectorIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 5))
	keys, values := []string{"a", "b", "c"}, []string{"x", "y", "z"}
	randLabels := func() map[string]string {
		l := map[string]string{}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				l[k] = values[rng.IntN(len(values))]
			}
		}
		return l
	}
	ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
	randSelector := func() metav1.LabelSelector {
		var s metav1.LabelSelector
		if rng.IntN(3) == 0 {
			s.MatchLabels = map[string]string{keys[rng.IntN(len(keys))]: values[rng.IntN(len(values))]}
		}
		for range rng.IntN(3) {
			r := metav1.LabelSelectorRequirement{Key: keys[rng.IntN(len(keys))], Operator: ops[rng.IntN(len(ops))]}
			if r.Operator == metav1.LabelSelectorOpIn || r.Operator == metav1.LabelSelectorOpNotIn {
				r.Values = values[:1+rng.IntN(len(values))]
			}
			s.MatchExpressions = append(s.MatchExpressions, r)
		}
		return s
	}
	for round := range 50 {
		var eips []*egressv1.EgressIP
		for i := range 1 + rng.IntN(40) {
			eips = append(eips, eip(fmt.Sprintf("o%02d", i), randSelector(), randSelector(), nil))
		}
		sel, problems := NewSelector(eips)
		if len(problems) > 0 {
			t.Fatalf("round %d: %v", round, problems)
		}
		for range 200 {
			ns, pod := randLabels(), randLabels()
			var want []int
			for i, o := range sel.objs {
				if o.nsSel.Matches(labels.Set(ns)) && o.podSel.Matches(labels.Set(pod)) {
					want = append(want, i)
				}
			}
			if got := sel.Match(ns, pod); !slices.Equal(got, want) {
				t.Fatalf("round %d: Match(%v, %v) = %v, testing every object gives %v", round, ns, pod, got, want)
			}
			owner := -1
			if len(want) > 0 {
				owner = want[0]
			}
			if got := sel.Owner(ns, pod); got != owner {
				t.Fatalf("round %d: Owner(%v, %v) = %d, want %d", round, ns, pod, got, owner)
			}
		}
	}
}

// BenchmarkOwner: the owner of each of 100,000 pods among 10,000 objects
// that select one app label each, in 100 namespaces (bench/controlplane's
// cluster).
func BenchmarkOwner(b *testing.B) {
	var eips []*egressv1.EgressIP
	for i := range 10000 {
		eips = append(eips, eip(fmt.Sprintf("e%05d", i), match("ns", fmt.Sprint(i%100)), match("app", fmt.Sprint(i)), nil))
	}
	sel, _ := NewSelector(eips)
	b.ReportAllocs()
	for b.Loop() {
		for j := range 100000 {
			if sel.Owner(map[string]string{"ns": fmt.Sprint(j % 10000 % 100)}, map[string]string{"app": fmt.Sprint(j % 10000)}) < 0 {
				b.Fatal("pod not selected")
			}
		}
	}
}
