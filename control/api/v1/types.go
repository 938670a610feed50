package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressIP gives the pods it selects a fixed source IP for traffic that
// leaves the cluster. It is cluster-scoped (kubectl short name: eip).
//
// The CRD has no status subresource, as upstream: status is written with a
// normal update of the whole object.
type EgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the user asks for.
	Spec EgressIPSpec `json:"spec"`
	// Status is where the controller records the assignment. A zero status
	// is left out of the JSON, because the CRD requires status.items
	// whenever status is present.
	Status EgressIPStatus `json:"status,omitzero"`
}

// AnnotationNoEgressIP on an EgressIP overrides, for the pods it selects,
// the steer agents' noEgressIP setting: "block" drops a selected pod's
// traffic of a family the object has no usable egress IP of, "node" lets it
// leave through the node's normal routing and SNAT.
const AnnotationNoEgressIP = "egret.io/no-egress-ip"

// AnnotationStandby on an EgressIP is written by the controller in the same
// update as status.items: for each assigned egress IP, the node that holds a
// synced copy of its flows and becomes its owner when the owner fails. The
// value is a JSON object from egress IP (as written in status.items) to node
// name, e.g. {"192.0.2.10":"gw2"}; an IP without a standby is left out. It
// is an annotation so that status keeps the upstream CRD's shape.
const AnnotationStandby = "egret.io/standby"

// EgressIPSpec is the desired state of an EgressIP.
type EgressIPSpec struct {
	// EgressIPs are the IPv4 and/or IPv6 addresses to use as source.
	EgressIPs []string `json:"egressIPs"`
	// NamespaceSelector selects the namespaces whose pods use the egress
	// IPs. Required.
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	// PodSelector, if set, narrows the selection to matching pods in the
	// selected namespaces; empty selects every pod there.
	PodSelector metav1.LabelSelector `json:"podSelector,omitzero"`
	// TrafficSelector, if set, narrows the egress IPs to destinations: it
	// selects EgressIPTraffic objects by label, and the egress IPs serve
	// only their destinations (less those of the selected objects marked
	// egret.io/exclude). Unset, they serve every destination outside the
	// cluster. Set but selecting no destination, they serve none: the
	// selected pods leave as their node. docs/api.md has the rules when
	// several objects select one pod.
	TrafficSelector *metav1.LabelSelector `json:"trafficSelector,omitempty"`
}

// EgressIPStatus is the observed assignment of an EgressIP.
type EgressIPStatus struct {
	// Items lists each assigned egress IP and the node hosting it.
	Items []EgressIPStatusItem `json:"items"`
}

// EgressIPStatusItem is one egress IP and the node it is assigned to.
type EgressIPStatusItem struct {
	// Node is the name of the node hosting EgressIP.
	Node string `json:"node"`
	// EgressIP is the assigned address, as written in the spec.
	EgressIP string `json:"egressIP"`
}

// EgressIPList is a list of EgressIP objects.
type EgressIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the EgressIP objects.
	Items []EgressIP `json:"items"`
}
