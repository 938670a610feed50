package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	controlpkg "github.com/egret-gw/egret/control/controller"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// BareResult is the API server's own update rate: one plain status update
// of every EgressIP by a bare client-go client with the controller's
// client limits and writer count, against the same kube-apiserver and etcd
// in the same run. It says whether the controller's time is its own or
// the API server's.
type BareResult struct {
	Writes    int     `json:"writes"`
	Writers   int     `json:"writers"`
	QPS       float32 `json:"qps"`
	Burst     int     `json:"burst"`
	Conflicts int     `json:"conflicts"` // retried with a fresh Get
	Seconds   float64 `json:"seconds"`   // first write sent → last write answered
	PerSecond float64 `json:"per_second"`
	// Ratio is the controller's "start → every status written" over
	// Seconds; WriteSpanRatio its first status to its last over Seconds.
	Ratio          float64 `json:"controller_over_bare"`
	WriteSpanRatio float64 `json:"controller_write_span_over_bare"`
}

// controllerWriters is the controller's status writer count in this run:
// --workers from the extra controller flags, else its default.
func controllerWriters(extra string) (int, error) {
	for _, f := range strings.Fields(extra) {
		if v, ok := strings.CutPrefix(f, "--workers="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("-controller-args %q: --workers must be a positive number", f)
			}
			return n, nil
		}
	}
	return controlpkg.DefaultWorkers, nil
}

// bareWrites updates the status of every EgressIP in store once, each
// item moved to another node, the way the controller writes it (a full
// update under its field manager), with writers goroutines and a client
// limited like the controller's; the controller must be stopped.
func bareWrites(ctx context.Context, base *rest.Config, store cache.Store, writers int, res *Result) error {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = controlpkg.DefaultKubeAPIQPS, controlpkg.DefaultKubeAPIBurst
	eips, err := egressv1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var objs []*egressv1.EgressIP
	for _, o := range store.List() {
		objs = append(objs, o.(*egressv1.EgressIP))
	}
	fmt.Printf("baseline: %d plain status updates by a bare client (%d writers, QPS %d, burst %d) ...\n",
		len(objs), writers, controlpkg.DefaultKubeAPIQPS, controlpkg.DefaultKubeAPIBurst)
	var conflicts atomic.Int64
	start := time.Now()
	err = parallel(ctx, "bare status updates", len(objs), writers, func(ctx context.Context, i int) error {
		e := objs[i]
		for {
			cp := e.DeepCopy()
			cp.Status.Items = slices.Clone(cp.Status.Items)
			for k := range cp.Status.Items {
				cp.Status.Items[k].Node = otherNode(cp.Status.Items[k].Node)
			}
			_, err := eips.Update(ctx, cp, metav1.UpdateOptions{FieldManager: cluster.Component})
			if !apierrors.IsConflict(err) {
				return err
			}
			conflicts.Add(1) // the harness's cache was behind: read it fresh
			if e, err = eips.Get(ctx, e.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return err
	}
	b := &res.Bare
	b.Writes, b.Writers, b.Conflicts = len(objs), writers, int(conflicts.Load())
	b.QPS, b.Burst = controlpkg.DefaultKubeAPIQPS, controlpkg.DefaultKubeAPIBurst
	b.Seconds = time.Since(start).Seconds()
	b.PerSecond = float64(b.Writes) / b.Seconds
	b.Ratio = res.Controller.AllAssignedSeconds / b.Seconds
	b.WriteSpanRatio = res.Controller.WriteSpanSeconds / b.Seconds
	fmt.Printf("  bare client: %d updates in %.2f s (%.0f/s); controller/bare-client %.2fx (write span %.2fx)\n",
		b.Writes, b.Seconds, b.PerSecond, b.Ratio, b.WriteSpanRatio)
	return nil
}

// otherNode is a node other than n, so the update changes the status.
func otherNode(n string) string {
	if n == nodeName(0) {
		return nodeName(1)
	}
	return nodeName(0)
}
