package assign

import (
	"errors"

	"github.com/egret-gw/egret/control/cluster"
)

// NodeFromObject builds a Node from a Node object's name, labels and
// annotations (interface subnets: cluster.NodeInterfaces, OVN-Kubernetes'
// annotations when present, Egret's otherwise). Ready, Reachable, Cordoned and HoldDownUntil come from
// elsewhere (conditions, the prober, spec) and are left for the caller.
// Annotation errors are joined into AnnotationErr; the node is then never
// assignable.
func NodeFromObject(name string, labels, annotations map[string]string) Node {
	n := Node{Name: name}
	_, n.Assignable = labels[cluster.LabelEgressAssignable]
	var errs []error
	var err error
	n.PrimaryIfAddr, n.HostCIDRs, _, err = cluster.NodeInterfaces(annotations)
	if err != nil {
		errs = append(errs, err)
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
