package steer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// DesiredFrom is Desired over the egress plan of the view v.
func DesiredFrom(v cluster.View, node string, p Params) State {
	return Desired(plan.Build(v, plan.Options{TrustPodIPs: p.TrustPodIPs}), node, p)
}

// Agent keeps one node's kernel in line with the objects: it recomputes the
// desired state on every change and every Resync, and applies the
// difference. Apply errors are retried with backoff; the kernel keeps its
// last state meanwhile (and the filter keeps selected pods in).
type Agent struct {
	Node string
	// Source supplies the objects: a cluster.Kube, or a cluster.Dir reader
	// that follows the status files a controller in another process writes.
	Source cluster.Source
	Kernel *Kernel
	Log    *slog.Logger
	// Resync is how often the kernel is checked without a change.
	Resync time.Duration
	// Metrics, if set, records every reconcile.
	Metrics *Metrics
	// ConfigMaps, if set, is where the agent reads Cilium's configuration
	// at start, and refuses eBPF host routing (checkCilium); nil with a
	// directory source.
	ConfigMaps typedcorev1.ConfigMapsGetter
	// AllowCiliumHostRouting starts the agent under Cilium's eBPF host
	// routing (Config.AllowCiliumHostRouting).
	AllowCiliumHostRouting bool

	lastFailClosed string
}

// Run checks that the CNI lets the node's kernel steer (checkCilium), sets
// up the kernel, starts the source and reconciles until ctx ends.
// It leaves the kernel programmed when it returns: traffic keeps flowing
// (and stays contained) while the agent restarts.
func (a *Agent) Run(ctx context.Context) error {
	log := a.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkCilium(ctx, a.ConfigMaps, a.AllowCiliumHostRouting, log); err != nil {
		return err
	}
	if err := a.Kernel.Setup(); err != nil {
		return err
	}
	log.Info("steer agent ready", "node", a.Node, "vtep", a.Kernel.VTEP(), "tunnelMAC", macString(a.Kernel.TunnelMAC()))
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if err := a.Source.Start(ctx, func(cluster.Kind) { poke() }); err != nil {
		return err // the source names what failed
	}
	resync := a.Resync
	if resync <= 0 {
		resync = 30 * time.Second
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	// 1 s, 2 s, 4 s ... up to 30 s between failed passes; a success starts over.
	fresh := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt}
	backoff := fresh
	var lastProblems string
	for {
		_, st, err := a.ReconcileOnce()
		a.Metrics.ObserveApply(len(st.Rules), len(st.Routes), len(st.Selected), len(st.Problems), err)
		if p := problemsString(st.Problems); p != lastProblems {
			for _, e := range st.Problems {
				log.Warn("input skipped", "problem", e.Error())
			}
			lastProblems = p
		}
		var retry <-chan time.Time
		if err != nil {
			in := backoff.Step()
			log.Error("programming the kernel failed; retrying", "err", err, "in", in)
			retry = time.After(in)
		} else {
			backoff = fresh
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
			// Let a burst of changes settle into one pass.
			time.Sleep(50 * time.Millisecond)
		case <-tick.C:
		case <-retry:
		}
	}
}

// ReconcileOnce computes the desired state from the source's current
// objects and applies it.
func (a *Agent) ReconcileOnce() (Changes, State, error) {
	st := DesiredFrom(a.Source.View(), a.Node, a.Kernel.Params())
	a.logFailClosed(st)
	ch, err := a.Kernel.Apply(st)
	if a.Log != nil && !ch.Zero() {
		for _, obj := range st.Objects {
			a.Log.Info("steering", "egressIP", obj.Name, "table", obj.Table, "pods", obj.Pods, "gateways", obj.Gateways)
		}
		for _, c := range st.Classes {
			a.Log.Info("steering by destination", "class", c.ID, "egressIPs", c.Key, "intervals", len(c.Intervals))
		}
		a.Log.Info("kernel updated", "changes", ch.String())
	}
	return ch, st, err
}

// logFailClosed says which fail-closed mode is in effect whenever it
// changes: podCIDR with the node's pod networks, or selected, and why.
func (a *Agent) logFailClosed(st State) {
	note := fmt.Sprint(st.FailClosed, st.PodCIDRs, st.FailClosedWhy)
	if a.Log == nil || note == a.lastFailClosed {
		return
	}
	a.lastFailClosed = note
	switch {
	case st.KeepPodCIDRs:
		a.Log.Info("fail-closed: keeping the pod networks already in the kernel", "failClosed", st.FailClosed, "why", st.FailClosedWhy)
	case st.FailClosed == FailClosedPodCIDR:
		a.Log.Info("fail-closed: pod addresses are blocked until classified", "failClosed", st.FailClosed, "podCIDRs", st.PodCIDRs)
	case st.FailClosedWhy != "":
		a.Log.Warn("fail-closed: falling back to blocking selected pods only", "failClosed", st.FailClosed, "why", st.FailClosedWhy)
	default:
		a.Log.Info("fail-closed: blocking selected pods only (configured)", "failClosed", st.FailClosed)
	}
}

func problemsString(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}
