package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// steerUninstalled reports whether the agent's exit is an uninstall: the
// DaemonSet that runs its pod, or its namespace, is gone or being deleted. Then the agent removes
// what it programmed; on a restart or a rolling update the DaemonSet stays, and
// so does the kernel state, whose fail-closed filter keeps selected pods from
// leaving as the node until the next agent takes over.
//
// `kubectl delete -k deploy/` removes the agent's RBAC, service account and
// namespace together with the DaemonSet, so an API that no longer knows or
// admits the agent (NotFound, Forbidden, Unauthorized) also means uninstall.
// Any other error keeps the state: an unreachable API is no reason to open
// the filter.
func steerUninstalled(ctx context.Context, cs kubernetes.Interface, namespace, pod string) (bool, error) {
	gone := func(err error) bool {
		return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
	}
	// Deleting the namespace (deploy/namespace.yaml is part of the install)
	// deletes its pods, maybe before their DaemonSet.
	n, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		if gone(err) {
			return true, nil
		}
		return false, fmt.Errorf("read namespace %s to tell an uninstall from a restart: %w", namespace, err)
	}
	if n.DeletionTimestamp != nil {
		return true, nil
	}
	p, err := cs.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		if gone(err) {
			return true, nil
		}
		return false, fmt.Errorf("read pod %s/%s to tell an uninstall from a restart: %w", namespace, pod, err)
	}
	for _, o := range p.OwnerReferences {
		if o.Kind != "DaemonSet" {
			continue
		}
		ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			if gone(err) {
				return true, nil
			}
			return false, fmt.Errorf("read DaemonSet %s/%s to tell an uninstall from a restart: %w", namespace, o.Name, err)
		}
		return ds.DeletionTimestamp != nil || ds.UID != o.UID, nil
	}
	return false, nil
}
