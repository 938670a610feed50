package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the EgressIPTraffic resource, as in its CRD.
const (
	TrafficKind      = "EgressIPTraffic"
	TrafficListKind  = "EgressIPTrafficList"
	TrafficResource  = "egressiptraffics"
	TrafficSingular  = "egressiptraffic"
	TrafficShortName = "eipt"
)

// TrafficGroupVersionResource addresses EgressIPTraffic objects.
var TrafficGroupVersionResource = SchemeGroupVersion.WithResource(TrafficResource)

// MaxDestinations bounds spec.destinationNetworks and spec.dnsNames each
// (the CRD's maxItems: the CEL cost budget needs bounded lists).
const MaxDestinations = 1024

// AnnotationExclude on an EgressIPTraffic, set to "true", makes its
// destinations exclusions: an EgressIP that selects it does not use its
// egress IPs for them, and its pods' traffic there leaves as their node, or
// is dropped when that EgressIP is annotated egret.io/no-egress-ip: block. The
// enhancement this API follows has no exclusions; this annotation is
// Egret's (docs/api.md).
const AnnotationExclude = "egret.io/exclude"

// EgressIPTraffic is a set of destinations outside the cluster that
// EgressIP objects select with spec.trafficSelector (OpenShift enhancement
// "Egress IP per destination"). Cluster-scoped, short name eipt.
type EgressIPTraffic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec lists the destinations.
	Spec EgressIPTrafficSpec `json:"spec"`
	// Status holds what the controller resolved spec.dnsNames to.
	Status EgressIPTrafficStatus `json:"status,omitzero"`
}

// EgressIPTrafficSpec lists destinations; at least one of its fields is set.
type EgressIPTrafficSpec struct {
	// DestinationNetworks are IPv4 and/or IPv6 networks in CIDR notation,
	// written masked (192.0.2.0/24, not 192.0.2.1/24).
	DestinationNetworks []string `json:"destinationNetworks,omitempty"`
	// DNSNames are fully qualified names whose every address is a
	// destination, resolved by the controller (an Egret extension).
	DNSNames []string `json:"dnsNames,omitempty"`
}

// EgressIPTrafficStatus is what the controller resolved the names to.
type EgressIPTrafficStatus struct {
	// DNSNames has one entry per resolved name of spec.dnsNames.
	DNSNames []ResolvedName `json:"dnsNames,omitempty"`
}

// ResolvedName is one DNS name and its addresses at the last resolution.
type ResolvedName struct {
	// Name is the name as written in spec.dnsNames.
	Name string `json:"name"`
	// Addresses are every A and AAAA address of the name.
	Addresses []string `json:"addresses,omitempty"`
	// ResolvedAt is when the addresses were last read.
	ResolvedAt metav1.Time `json:"resolvedAt,omitzero"`
	// NextResolution is when the controller reads them again (the answer's
	// TTL within the controller's floor and ceiling).
	NextResolution metav1.Time `json:"nextResolution,omitzero"`
	// Error is why the last resolution failed, "" when it did not; the
	// addresses of the last success are kept.
	Error string `json:"error,omitempty"`
}

// EgressIPTrafficList is a list of EgressIPTraffic objects.
type EgressIPTrafficList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the EgressIPTraffic objects.
	Items []EgressIPTraffic `json:"items"`
}

// Excluded says t's destinations are exclusions (AnnotationExclude).
func (t *EgressIPTraffic) Excluded() bool { return t.Annotations[AnnotationExclude] == "true" }
