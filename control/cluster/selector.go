package cluster

import (
	"cmp"
	"fmt"
	"slices"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Selector is the pod selection of a set of EgressIP objects, compiled once:
// a pod is selected by the objects whose namespaceSelector matches its
// namespace's labels and whose podSelector matches its own labels, and the
// one whose name sorts first (byte order) owns it. The EgressIP spec leaves
// open which object a pod selected by several uses, but a pod leaves by one
// object's egress IPs: the steer agent steers it to its owner's gateways,
// the gateway agent accepts it under that owner's policy and the lab
// expects that owner's IPs, so all of them use this one definition.
type Selector struct {
	objs []selObject
	// Each object is indexed under the label values one equality (or In)
	// requirement of its podSelector, else of its namespaceSelector, asks
	// for: a pod it selects has one of them, so a pod is only tested against
	// the objects indexed under its own labels and its namespace's, and
	// the few (scan) with no such requirement. With 10,000 objects of one
	// app label each, choosing the owners of 100,000 pods by testing every
	// object took minutes (bench/controlplane).
	byPod, byNS map[labelKV][]int32
	scan        []int32
}

type labelKV struct{ key, value string }

type selObject struct {
	eip           *egressv1.EgressIP
	nsSel, podSel labels.Selector
}

// NewSelector compiles the selectors of eips. An object whose name was
// already seen or whose selector is invalid is left out and reported in
// the returned problems; nil entries are ignored.
func NewSelector(eips []*egressv1.EgressIP) (*Selector, []error) {
	var (
		s        Selector
		problems []error
	)
	seen := map[string]bool{}
	for _, e := range eips {
		if e == nil {
			continue
		}
		if seen[e.Name] {
			problems = append(problems, fmt.Errorf("EgressIP %q appears twice in the input; using the first", e.Name))
			continue
		}
		seen[e.Name] = true
		nsSel, err := selector(e.Spec.NamespaceSelector)
		if err != nil {
			problems = append(problems, fmt.Errorf("EgressIP %s: namespaceSelector: %w", e.Name, err))
			continue
		}
		podSel, err := selector(e.Spec.PodSelector)
		if err != nil {
			problems = append(problems, fmt.Errorf("EgressIP %s: podSelector: %w", e.Name, err))
			continue
		}
		s.objs = append(s.objs, selObject{eip: e, nsSel: nsSel, podSel: podSel})
	}
	slices.SortFunc(s.objs, func(a, b selObject) int { return cmp.Compare(a.eip.Name, b.eip.Name) })
	s.byPod, s.byNS = map[labelKV][]int32{}, map[labelKV][]int32{}
	for i, o := range s.objs {
		if k, vs, ok := equality(o.podSel); ok {
			for _, v := range vs {
				s.byPod[labelKV{k, v}] = append(s.byPod[labelKV{k, v}], int32(i))
			}
		} else if k, vs, ok := equality(o.nsSel); ok {
			for _, v := range vs {
				s.byNS[labelKV{k, v}] = append(s.byNS[labelKV{k, v}], int32(i))
			}
		} else {
			s.scan = append(s.scan, int32(i))
		}
	}
	return &s, problems
}

// equality returns the key and values of a requirement of sel that a
// matching set of labels must meet with one of the values (=, ==, in).
func equality(sel labels.Selector) (string, []string, bool) {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return "", nil, false
	}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			return r.Key(), r.ValuesUnsorted(), true
		}
	}
	return "", nil, false
}

// candidates returns, in name order, the objects that may select a pod with
// these labels: a superset of those that do.
func (s *Selector) candidates(nsLabels, podLabels map[string]string) []int32 {
	out := slices.Clone(s.scan)
	for k, v := range podLabels {
		out = append(out, s.byPod[labelKV{k, v}]...)
	}
	for k, v := range nsLabels {
		out = append(out, s.byNS[labelKV{k, v}]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Len is the number of usable objects.
func (s *Selector) Len() int { return len(s.objs) }

// Object is the i-th usable object in name order.
func (s *Selector) Object(i int) *egressv1.EgressIP { return s.objs[i].eip }

// Match returns the indexes (name order) of the objects selecting a pod
// with these labels; the first owns the pod.
func (s *Selector) Match(nsLabels, podLabels map[string]string) []int {
	var out []int
	for _, i := range s.candidates(nsLabels, podLabels) {
		if o := s.objs[i]; o.nsSel.Matches(labels.Set(nsLabels)) && o.podSel.Matches(labels.Set(podLabels)) {
			out = append(out, int(i))
		}
	}
	return out
}

// Owner is the index of the object owning a pod with these labels, or -1
// when none selects it.
func (s *Selector) Owner(nsLabels, podLabels map[string]string) int {
	for _, i := range s.candidates(nsLabels, podLabels) {
		if o := s.objs[i]; o.nsSel.Matches(labels.Set(nsLabels)) && o.podSel.Matches(labels.Set(podLabels)) {
			return int(i)
		}
	}
	return -1
}

// selector converts a LabelSelector; the empty selector selects everything,
// as in the EgressIP API (an empty podSelector selects every pod of the
// selected namespaces).
func selector(s metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&s)
}
