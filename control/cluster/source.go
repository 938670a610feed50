package cluster

import (
	"context"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	corev1 "k8s.io/api/core/v1"
)

// Kind names the type of object a Source reports a change of.
type Kind uint8

// Kinds of objects a Source holds.
const (
	KindEgressIP Kind = iota + 1
	KindNode
	KindNamespace
	KindPod
	KindTraffic
)

func (k Kind) String() string {
	switch k {
	case KindEgressIP:
		return "EgressIP"
	case KindNode:
		return "Node"
	case KindNamespace:
		return "Namespace"
	case KindPod:
		return "Pod"
	case KindTraffic:
		return "EgressIPTraffic"
	}
	return "unknown"
}

// View is one consistent look at the cluster objects every role works
// from. The objects belong to the Source's cache and must not be modified.
type View struct {
	EgressIPs  []*egressv1.EgressIP
	Nodes      []*corev1.Node
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	// Traffic are the EgressIPTraffic objects EgressIPs' trafficSelectors
	// pick destinations from.
	Traffic []*egressv1.EgressIPTraffic
}

// Statuses maps an EgressIP name to its status as last read from the
// source's backend itself (not a cache).
type Statuses map[string]egressv1.EgressIPStatus

// Source is where the objects live: the Kubernetes API (Kube, informers)
// or a directory of YAML files (Dir). The controller reads and writes
// through it, the gateway and steer agents only read.
type Source interface {
	// Start begins watching and returns once every kind is listed and
	// cached. From then on changed is called, from any goroutine, whenever
	// an object of that kind was added, updated or deleted. Watching stops
	// when ctx ends.
	Start(ctx context.Context, changed func(Kind)) error
	// View returns the cached objects.
	View() View
	// EgressIP returns one cached EgressIP.
	EgressIP(name string) (*egressv1.EgressIP, bool)
	// Check reaches the backend once (a quorum list from the API server, or
	// the directory's status files) and returns the EgressIP statuses it
	// read. A nil error is the contact that keeps a gateway from fencing
	// itself.
	Check(ctx context.Context) (Statuses, error)
	// UpdateEgressIP stores eip (the caller's own copy) whole, status
	// included, as a normal update: it must fail with an error for which
	// k8s.io/apimachinery/pkg/api/errors.IsConflict is true when
	// eip.ResourceVersion is not the stored one, and IsNotFound when the
	// object is gone.
	UpdateEgressIP(ctx context.Context, eip *egressv1.EgressIP) error
	// UpdateTrafficStatus stores t.Status (t is the caller's own copy) and
	// nothing else of t, with UpdateEgressIP's conflict and not-found
	// errors: through the status subresource (Kube) or the status files
	// (Dir).
	UpdateTrafficStatus(ctx context.Context, t *egressv1.EgressIPTraffic) error
	// Event records an Event about the object ref points to.
	Event(ref *corev1.ObjectReference, eventType, reason, message string)
}
