package controller

import (
	"context"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	corev1 "k8s.io/api/core/v1"
)

// Kind names the type of object a Source reports a change of.
type Kind uint8

// Kinds of objects the controller reads.
const (
	KindEgressIP Kind = iota + 1
	KindNode
	KindNamespace
	KindPod
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
	}
	return "unknown"
}

// Source is everything the controller core needs from where the objects
// live: the Kubernetes API (KubeSource, informers) or a directory of YAML
// files (package filesource). Objects it returns belong to its cache and
// must not be modified.
type Source interface {
	// Start begins watching and returns once every kind is listed and
	// cached. From then on changed is called, from any goroutine, whenever
	// an object of that kind was added, updated or deleted. Watching stops
	// when ctx ends.
	Start(ctx context.Context, changed func(Kind)) error
	// EgressIPs lists the cached EgressIP objects.
	EgressIPs() []*egressv1.EgressIP
	// EgressIP returns one cached EgressIP.
	EgressIP(name string) (*egressv1.EgressIP, bool)
	// Nodes, Namespaces and Pods list the cached objects of those kinds.
	Nodes() []*corev1.Node
	Namespaces() []*corev1.Namespace
	Pods() []*corev1.Pod
	// UpdateEgressIP stores eip (the caller's own copy) whole, status
	// included, as a normal update: it must fail with an error for which
	// k8s.io/apimachinery/pkg/api/errors.IsConflict is true when
	// eip.ResourceVersion is not the stored one, and IsNotFound when the
	// object is gone.
	UpdateEgressIP(ctx context.Context, eip *egressv1.EgressIP) error
	// Event records an Event about the object ref points to.
	Event(ref *corev1.ObjectReference, eventType, reason, message string)
}
