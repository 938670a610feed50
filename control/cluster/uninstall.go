package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// daemonSetGone reports whether a node agent's exit (steer, gateway) is an
// uninstall: the DaemonSet that runs its pod, or its namespace, is gone or
// being deleted. Then the agent removes what it programmed; on a restart or
// a rolling update the DaemonSet stays, and so does the kernel state: the
// steer agent's fail-closed filter, which keeps selected pods from leaving
// as the node until the next agent takes over, and the gateway's XDP
// program, held for the next pod.
//
// `kubectl delete -k deploy/` removes the agent's RBAC, service account and
// namespace together with the DaemonSet, so an API that no longer knows or
// admits the agent (NotFound, Forbidden, Unauthorized) also means uninstall.
// Any other error keeps the state: an unreachable API is no reason to open
// the filter.
func daemonSetGone(ctx context.Context, cs kubernetes.Interface, namespace, pod string) (bool, error) {
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

// Uninstalling reports whether a node agent's stop is an uninstall: it asks
// daemonSetGone for the agent's pod (namespace/pod) as it stops. Each try
// opens a connection of its own: the informers' connection may be one the
// network dropped (a node whose link went down and came back holds a TCP
// connection that stays silent for many seconds), and reusing it would time
// out and keep the state of an uninstalled agent. Four tries, 4 s each, fit
// the pod's default 30 s grace period. who prefixes the log lines.
func Uninstalling(restCfg *rest.Config, namespace, pod, who string, log *slog.Logger) (bool, error) {
	var gone bool
	var err error
	for try := 1; try <= 4; try++ {
		if try > 1 {
			time.Sleep(time.Second)
		}
		gone, err = func() (bool, error) {
			c := rest.CopyConfig(restCfg)
			// A Dial function makes client-go build a transport of its own
			// instead of sharing the cached one.
			c.Dial = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
			cs, err := kubernetes.NewForConfig(c)
			if err != nil {
				return false, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			return daemonSetGone(ctx, cs, namespace, pod)
		}()
		if err == nil {
			return gone, nil
		}
		log.Warn(who+": cannot tell an uninstall from a restart yet", "try", try, "err", err.Error())
	}
	return false, err
}
