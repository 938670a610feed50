package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of EgressIP, shared with OVN-Kubernetes.
const GroupName = "k8s.ovn.org"

// Names of the EgressIP resource, as in the CRD.
const (
	Kind      = "EgressIP"
	ListKind  = "EgressIPList"
	Resource  = "egressips"
	Singular  = "egressip"
	ShortName = "eip"
)

// SchemeGroupVersion is k8s.ovn.org/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

// GroupVersionResource addresses EgressIPs for dynamic and REST clients.
var GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

// GroupVersionKind identifies an EgressIP object.
var GroupVersionKind = SchemeGroupVersion.WithKind(Kind)

var (
	// SchemeBuilder registers the EgressIP types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds EgressIP, EgressIPTraffic and their lists to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &EgressIP{}, &EgressIPList{}, &EgressIPTraffic{}, &EgressIPTrafficList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
