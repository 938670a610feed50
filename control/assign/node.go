package assign

import (
	"errors"

	"github.com/egret-gw/egret/control/cluster"
)

// NodeFromObject builds a Node from a Node object's name, labels and
// annotations. Ready, Reachable, Cordoned and HoldDownUntil come from
// elsewhere (conditions, the prober, spec) and are left for the caller.
// Annotation errors are joined into AnnotationErr; the node is then never
// assignable.
func NodeFromObject(name string, labels, annotations map[string]string) Node {
	n := Node{Name: name}
	_, n.Assignable = labels[cluster.LabelEgressAssignable]
	var errs []error
	if s, ok := annotations[cluster.AnnotationPrimaryIfAddr]; ok {
		a, err := cluster.ParsePrimaryIfAddr(s)
		if err != nil {
			errs = append(errs, err)
		}
		n.PrimaryIfAddr = a
	}
	if s, ok := annotations[cluster.AnnotationHostCIDRs]; ok {
		c, err := cluster.ParseHostCIDRs(s)
		if err != nil {
			errs = append(errs, err)
		}
		n.HostCIDRs = c
	}
	if s, ok := annotations[cluster.AnnotationEgressIPConfig]; ok {
		c, err := cluster.ParseEgressIPConfig(s)
		if err != nil {
			errs = append(errs, err)
		}
		n.Cloud = c
	}
	n.AnnotationErr = errors.Join(errs...)
	return n
}
