// Package assign decides which node hosts each egress IP of each EgressIP
// object. It is a pure, deterministic function of plain model types: the
// controller fills Node and Object from the Kubernetes objects (see
// NodeFromObject for the node annotations) and writes back the status items
// and Events it returns. Nothing here talks to the API server.
//
// See docs/assignment.md for the rules and the tests that prove each one.
package assign

import (
	"net/netip"
	"time"

	"github.com/egret-gw/egret/control/cluster"
)

// Node is what the assignment needs to know about one cluster node.
type Node struct {
	Name string
	// Assignable is true when the node carries the k8s.ovn.org/egress-assignable label.
	Assignable bool
	// Excluded, if set, says why the controller's configuration keeps a
	// labelled node out (its nodeSelector); such a node hosts nothing.
	Excluded string
	// Ready mirrors the node's Ready condition.
	Ready bool
	// Reachable is the reachability prober's verdict (true when the check is disabled).
	Reachable bool
	// Cordoned is spec.unschedulable; it matters only with Options.AvoidCordoned.
	Cordoned bool
	// HoldDownUntil keeps a node that just recovered out of assignment until
	// this time (zero: no hold-down), so a flapping node does not attract IPs.
	HoldDownUntil time.Time
	// PrimaryIfAddr is the primary interface's address and mask per family
	// (k8s.ovn.org/node-primary-ifaddr).
	PrimaryIfAddr cluster.IfAddr
	// HostCIDRs are the addresses with masks of all host interfaces
	// (k8s.ovn.org/host-cidrs); the primary one is usually among them.
	HostCIDRs []netip.Prefix
	// Cloud is the cloud egress IP configuration
	// (cloud.network.openshift.io/egress-ipconfig); nil on bare metal. When
	// set, only its subnet is used: secondary interfaces are a bare-metal feature.
	Cloud *cluster.CloudConfig
	// AnnotationErr is set when one of the annotations could not be parsed:
	// such a node is never assignable and the problem is reported.
	AnnotationErr error
}

// Object is one EgressIP object as the assignment sees it.
type Object struct {
	Name string
	// Created is metadata.creationTimestamp; it decides conflicts (older wins).
	Created time.Time
	// EgressIPs is spec.egressIPs exactly as the user wrote it (may be invalid).
	EgressIPs []string
	// Status is status.items as currently stored.
	Status []StatusItem
	// Standbys is the standby node of each egress IP as currently recorded
	// (the egret.io/standby annotation); nil when there is none.
	Standbys map[netip.Addr]string
}

// StatusItem is one entry of an EgressIP's status.items.
type StatusItem struct {
	Node     string
	EgressIP string
}

// Options tune the assignment.
type Options struct {
	// AvoidCordoned makes cordoned (unschedulable) nodes ineligible, so a
	// drain moves their egress IPs away.
	AvoidCordoned bool
	// Now is compared with Node.HoldDownUntil; a node with a hold-down set
	// stays out while Now is before it (a zero Now keeps it out).
	Now time.Time
}

// InterfaceKind says which kind of node interface will carry an egress IP.
type InterfaceKind uint8

const (
	// Primary is the interface of k8s.ovn.org/node-primary-ifaddr.
	Primary InterfaceKind = iota + 1
	// Secondary is another host interface, found by longest-prefix match over
	// k8s.ovn.org/host-cidrs.
	Secondary
	// Cloud is the interface named in the egress-ipconfig annotation.
	Cloud
)

func (k InterfaceKind) String() string {
	switch k {
	case Primary:
		return "primary"
	case Secondary:
		return "secondary"
	case Cloud:
		return "cloud"
	}
	return "unknown"
}

// Interface is the node interface chosen for an egress IP.
type Interface struct {
	Kind InterfaceKind
	// Name is the cloud interface ID for Cloud; empty otherwise (the node
	// agent finds the Linux link that holds Subnet).
	Name string
	// Subnet is the matched interface address with its mask, as annotated.
	Subnet netip.Prefix
}

// Assignment is one egress IP placed on one node.
type Assignment struct {
	Node      string
	EgressIP  string // canonical form, as written to status
	Addr      netip.Addr
	Interface Interface
	// Standby is the node that takes the IP over when Node fails (it holds
	// a copy of its flows); empty when no node qualifies.
	Standby string
}

// ObjectResult is the new status of one EgressIP object.
type ObjectResult struct {
	Name string
	// Status lists the assignments ordered by address; write it to status.items.
	Status []Assignment
}

// Reason is an Event reason; the names follow OVN-Kubernetes where it has one.
type Reason string

// Event reasons.
const (
	// ReasonInvalidEgressIP: a spec.egressIPs entry is not a usable IP address.
	ReasonInvalidEgressIP Reason = "InvalidEgressIP"
	// ReasonNoMatchingNodeFound: a valid IP could not be placed on any node;
	// the message says why (no eligible node, no subnet match, cloud
	// capacity, or every candidate already hosts an IP of the object).
	ReasonNoMatchingNodeFound Reason = "NoMatchingNodeFound"
	// ReasonEgressIPConflict: an IP is claimed by two objects or is a node's own address.
	ReasonEgressIPConflict Reason = "EgressIPConflict"
	// ReasonInvalidNodeAnnotation: a node annotation is broken, so the node hosts no egress IP.
	ReasonInvalidNodeAnnotation Reason = "InvalidNodeAnnotation"
	// ReasonNoStandbyNode: an assigned IP has no standby, so its
	// connections break if its node fails; the message says why.
	ReasonNoStandbyNode Reason = "NoStandbyNode"
)

// Event is a Warning to record on an EgressIP object (or, for node problems, on a Node).
type Event struct {
	// Object is the EgressIP name, or the Node name for ReasonInvalidNodeAnnotation.
	Object   string
	Reason   Reason
	EgressIP string // the IP concerned, as the user wrote it; empty if none
	Message  string
}

// Result is the outcome of an assignment.
type Result struct {
	// Objects holds every object's new status, ordered by name.
	Objects []ObjectResult
	// Events are ordered by object, IP, reason, message.
	Events []Event
	// NodeProblems report nodes left out because of broken annotations, ordered by node.
	NodeProblems []Event
	// NoStandby reports, as ReasonNoStandbyNode Events, the assigned IPs
	// that got no standby, ordered like Events.
	NoStandby []Event
}
