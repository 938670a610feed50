package cluster

import (
	"slices"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
