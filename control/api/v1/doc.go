// Package v1 is the EgressIP API, group k8s.ovn.org version v1: the same
// cluster-scoped EgressIP objects OVN-Kubernetes reads, so existing
// manifests work unchanged. The CRD is deploy/crd/k8s.ovn.org_egressips.yaml.
//
// +groupName=k8s.ovn.org
package v1
