// Package cluster is the one model of the cluster that Egret's roles work
// from: the View (EgressIP, Node, Namespace and Pod objects), the Source it
// comes from (Kube: the Kubernetes API through informers; Dir: a directory
// of YAML files, with the status files and Events the controller writes
// there), the Selector that says which EgressIP owns a pod, and the facts
// read from Node annotations (VTEPs, tunnel MACs, interface addresses and
// cloud capacity).
//
// The controller, the gateway agent and the steer agent each turn a View
// into their own output; they share this package and import no other role.
package cluster
