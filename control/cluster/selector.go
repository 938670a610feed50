package cluster

import (
	"cmp"
	"fmt"
	"slices"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
}

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
	return &s, problems
}

// Len is the number of usable objects.
func (s *Selector) Len() int { return len(s.objs) }

// Object is the i-th usable object in name order.
func (s *Selector) Object(i int) *egressv1.EgressIP { return s.objs[i].eip }

// Match returns the indexes (name order) of the objects selecting a pod
// with these labels; the first owns the pod.
func (s *Selector) Match(nsLabels, podLabels map[string]string) []int {
	var out []int
	for i, o := range s.objs {
		if o.nsSel.Matches(labels.Set(nsLabels)) && o.podSel.Matches(labels.Set(podLabels)) {
			out = append(out, i)
		}
	}
	return out
}

// Owner is the index of the object owning a pod with these labels, or -1
// when none selects it.
func (s *Selector) Owner(nsLabels, podLabels map[string]string) int {
	for i, o := range s.objs {
		if o.nsSel.Matches(labels.Set(nsLabels)) && o.podSel.Matches(labels.Set(podLabels)) {
			return i
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
