// Package status is the model behind `egret status`: per EgressIP its
// egress IPs, the node hosting each, its standby and whether the standby
// is in step, problems and recent Events; per pod the egress IPs it leaves
// as and through which gateways, or why none.
//
// It is computed from the egress plan (control/plan) of one cluster.View,
// the value the steer agents (Plan.Worker) and the gateway agents
// (Plan.Gateway) render, so that it says what they decide: it holds no
// second copy of the rules. docs/status.md describes the output field by
// field.
package status

import (
	"net/netip"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	corev1 "k8s.io/api/core/v1"
)

// Report is what `egret status` prints: the JSON shape of docs/status.md.
type Report struct {
	EgressIPs []EgressIP `json:"egressIPs"`
	Pods      []Pod      `json:"pods"`
}

// EgressIP is one EgressIP object.
type EgressIP struct {
	Name string `json:"name"`
	// IPs are its spec's egress IPs, in spec order.
	IPs []IP `json:"ips"`
	// Pods is the number of pods it owns in the plan.
	Pods int `json:"pods"`
	// Problems are, each as one sentence, what keeps it from working in
	// full: the plan's problems naming it, its unassigned egress IPs (with
	// the Warning Event that explains each), missing or lagging standbys.
	Problems []string `json:"problems"`
	// Events are its most recent Events, newest first (at most MaxEvents).
	Events []Event `json:"events"`
}

// IP is one egress IP of an object.
type IP struct {
	// IP is the address as the spec writes it.
	IP string `json:"ip"`
	// Node hosts it in the plan (a status item the plan uses); nil while
	// unassigned.
	Node *string `json:"node"`
	// Standby is the node the controller recorded to take it over
	// (egret.io/standby); nil when there is none.
	Standby *string `json:"standby"`
	// StandbyState says whether the standby holds the owner's flows:
	// SyncInStep, SyncBehind, SyncUnknown, or SyncNone without a standby.
	StandbyState string `json:"standbyState"`
	// StandbyDetail is what the state was judged from, or why it is unknown.
	StandbyDetail string `json:"standbyDetail,omitempty"`
}

// Standby states of an IP.
const (
	SyncInStep  = "in-step"
	SyncBehind  = "behind"
	SyncUnknown = "unknown"
	SyncNone    = "none"
)

// Event is one Kubernetes Event about an object.
type Event struct {
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	Count    int32     `json:"count"`
	LastSeen time.Time `json:"lastSeen"`
}

// MaxEvents is how many Events of an object a Report keeps.
const MaxEvents = 10

// Pod is one pod and what it leaves as.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	// PodIPs are its addresses (status.podIPs).
	PodIPs []netip.Addr `json:"podIPs"`
	// EgressIP is the object that owns it in the plan; nil when none does.
	// With Destinations, it is the object serving the destinations no
	// entry there decides (nil: those leave as the node).
	EgressIP *string `json:"egressIP"`
	// Destinations are the networks that objects with a trafficSelector
	// decide for it, sorted; the longest containing a destination wins.
	Destinations []Destination `json:"destinations,omitempty"`
	// Sources are the egress IPs its new connections may leave as, each
	// with the gateways that serve it to this pod.
	Sources []Source `json:"sources"`
	// State sums up what it leaves as (the State constants).
	State string `json:"state"`
	// Problems say why an address leaves as no egress IP, and what the
	// plan refused about the pod, each as one sentence.
	Problems []string `json:"problems"`
}

// Source is an egress IP a pod's connections of one family may leave as.
type Source struct {
	// Family is "IPv4" or "IPv6".
	Family   string     `json:"family"`
	IP       netip.Addr `json:"ip"`
	Gateways []string   `json:"gateways"`
	// Object is the EgressIP object whose egress IP it is.
	Object string `json:"object"`
}

// Destination is a network an object's trafficSelector decides for a pod.
type Destination struct {
	Network netip.Prefix `json:"network"`
	// EgressIP is the object deciding it.
	EgressIP string `json:"egressIP"`
	// Excluded says the network is one of its exclusions: traffic there
	// leaves as the node or is blocked (egret.io/no-egress-ip).
	Excluded bool `json:"excluded,omitempty"`
}

// Pod states. A selected pod is StateEgress when every address has a
// source; otherwise each blocked address is fail-closed or has no node
// that can host, and a pod with some of each kind is StatePartial.
const (
	// StateEgress: every address leaves as one of Sources.
	StateEgress = "egress"
	// StatePartial: some addresses leave as Sources, the others are
	// blocked (Problems say which and why).
	StatePartial = "partial"
	// StateNotSelected: no EgressIP selects it; it leaves as its node.
	StateNotSelected = "not-selected"
	// StateHostNetwork: it uses its node's network; it leaves as its node.
	StateHostNetwork = "host-network"
	// StateFailClosed: selected, but its addresses may not use the
	// egress IPs (outside its node's pod networks, used by another pod,
	// a node's address): its traffic is held in.
	StateFailClosed = "fail-closed"
	// StateNoNode: selected, but no node hosts an egress IP of its
	// object (of its addresses' families) that its node can reach:
	// blocked, or its node's address with egret.io/no-egress-ip: node.
	StateNoNode = "no-node-can-host"
	// StateNodeUnknown: its Node object is not known: no gateway takes
	// its node's tunnel traffic.
	StateNodeUnknown = "node-unknown"
	// StatePending: it has no address yet.
	StatePending = "pending"
	// StateCompleted: it has ended (Succeeded or Failed).
	StateCompleted = "completed"
	// StateNamespaceUnknown: its Namespace object is not known yet, so
	// no selector can be applied to it.
	StateNamespaceUnknown = "namespace-unknown"
)

// Inputs are what a Report is computed from besides the View.
type Inputs struct {
	// Plan are the settings the agents build their plan with.
	Plan plan.Options
	// Events are the cluster's Events (only those about EgressIP objects
	// are used); none in the lab.
	Events []corev1.Event
	// Standby reports whether standby holds the flows of egress IP ip that
	// node hosts. It is called concurrently, once per assigned IP with a
	// standby; nil leaves every standby SyncUnknown with UnknownWhy.
	Standby func(ip netip.Addr, node, standby string) (state, detail string)
	// UnknownWhy is StandbyDetail when Standby is nil.
	UnknownWhy string
}

// Build computes the Report of the cluster in v: every EgressIP and every
// pod. It modifies nothing in v.
func Build(v cluster.View, in Inputs) *Report {
	pl := plan.Build(v, in.Plan)
	r := &Report{EgressIPs: objects(v, pl, in), Pods: pods(v, pl)}
	owned := map[string]int{}
	for _, p := range r.Pods {
		if p.EgressIP != nil {
			owned[*p.EgressIP]++
		}
	}
	for i := range r.EgressIPs {
		r.EgressIPs[i].Pods = owned[r.EgressIPs[i].Name]
	}
	return r
}

// Only keeps the pods keep accepts and the objects that own one of them.
func (r *Report) Only(keep func(Pod) bool) {
	owners := map[string]bool{}
	pods := r.Pods[:0]
	for _, p := range r.Pods {
		if keep(p) {
			pods = append(pods, p)
			if p.EgressIP != nil {
				owners[*p.EgressIP] = true
			}
			for _, d := range p.Destinations {
				owners[d.EgressIP] = true
			}
		}
	}
	r.Pods = pods
	objs := r.EgressIPs[:0]
	for _, o := range r.EgressIPs {
		if owners[o.Name] {
			objs = append(objs, o)
		}
	}
	r.EgressIPs = objs
}
