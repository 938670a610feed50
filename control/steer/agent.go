package steer

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/filesource"
	"github.com/egret-gw/egret/metrics"
	corev1 "k8s.io/api/core/v1"
)

// AnnotationVTEP on a Node lists its tunnel addresses (comma-separated, at
// most one per family). Without it, the node's InternalIP addresses are its
// VTEPs.
const AnnotationVTEP = "egret.io/vtep"

// Objects is one consistent view of the cluster objects the agent reads.
// They belong to the source's cache and are not modified.
type Objects struct {
	EgressIPs  []*egressv1.EgressIP
	Nodes      []*corev1.Node
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
}

// Source is where the objects come from: informers, or a directory of YAML
// files. cmd/egret adapts the controller's sources to it.
type Source interface {
	// Start lists everything and returns once the cache is filled; changed
	// is then called, from any goroutine, after each change.
	Start(ctx context.Context, changed func()) error
	// Objects returns the current objects.
	Objects() Objects
}

// InputsFrom converts objects to the desired-state inputs of node.
func InputsFrom(node string, o Objects) Inputs {
	in := Inputs{Node: node, Namespaces: map[string]map[string]string{}, VTEPs: map[string][]netip.Addr{}, EgressIPs: o.EgressIPs}
	for _, ns := range o.Namespaces {
		in.Namespaces[ns.Name] = ns.Labels
	}
	for _, n := range o.Nodes {
		in.VTEPs[n.Name] = NodeVTEPs(n)
		if n.Name == node {
			in.NodeKnown = true
			in.NodePodCIDRs = n.Spec.PodCIDRs
			if len(in.NodePodCIDRs) == 0 && n.Spec.PodCIDR != "" {
				in.NodePodCIDRs = []string{n.Spec.PodCIDR}
			}
		}
	}
	for _, p := range o.Pods {
		if p.Spec.NodeName != node {
			continue
		}
		in.Pods = append(in.Pods, PodFrom(p))
	}
	return in
}

// PodFrom converts a Pod; unparsable addresses are left out.
func PodFrom(p *corev1.Pod) Pod {
	out := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Labels: p.Labels,
		HostNetwork: p.Spec.HostNetwork, Done: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out.IPs, a.Unmap()) {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if p.Status.PodIP != "" {
		add(p.Status.PodIP)
	}
	return out
}

// NodeVTEPs returns a node's tunnel addresses: the egret.io/vtep annotation,
// else its InternalIP addresses.
func NodeVTEPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	if s, ok := n.Annotations[AnnotationVTEP]; ok {
		for _, f := range strings.Split(s, ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(f)); err == nil {
				out = append(out, a.Unmap())
			}
		}
		return out
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// Agent keeps one node's kernel in line with the objects: it recomputes the
// desired state on every change and every Resync, and applies the
// difference. Apply errors are retried with backoff; the kernel keeps its
// last state meanwhile (and the filter keeps selected pods in).
type Agent struct {
	Node   string
	Source Source
	Kernel *Kernel
	Log    *slog.Logger
	// Resync is how often the kernel is checked without a change.
	Resync time.Duration
	// Status, if set, supplies an EgressIP's status (the file source
	// written by a controller in another process).
	Status func(name string) (egressv1.EgressIPStatus, bool)
	// Metrics, if set, records every reconcile.
	Metrics *metrics.Steer

	lastFailClosed string
}

// Run sets up the kernel, starts the source and reconciles until ctx ends.
// It leaves the kernel programmed when it returns: traffic keeps flowing
// (and stays contained) while the agent restarts.
func (a *Agent) Run(ctx context.Context) error {
	log := a.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	if err := a.Source.Start(ctx, poke); err != nil {
		return fmt.Errorf("start the object source: %w", err)
	}
	resync := a.Resync
	if resync <= 0 {
		resync = 30 * time.Second
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	backoff := time.Duration(0)
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
			backoff = min(max(backoff*2, time.Second), 30*time.Second)
			log.Error("programming the kernel failed; retrying", "err", err, "in", backoff)
			retry = time.After(backoff)
		} else {
			backoff = 0
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
	o := a.Source.Objects()
	if a.Status != nil {
		eips := make([]*egressv1.EgressIP, 0, len(o.EgressIPs))
		for _, e := range o.EgressIPs {
			if st, ok := a.Status(e.Name); ok {
				c := e.DeepCopy()
				c.Status = st
				e = c
			}
			eips = append(eips, e)
		}
		o.EgressIPs = eips
	}
	st := Desired(InputsFrom(a.Node, o), a.Kernel.Params())
	a.logFailClosed(st)
	ch, err := a.Kernel.Apply(st)
	if a.Log != nil && !ch.Zero() {
		for _, obj := range st.Objects {
			a.Log.Info("steering", "egressIP", obj.Name, "table", obj.Table, "pods", obj.Pods, "gateways", obj.Gateways)
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

// DirStatus reads the status a controller wrote for EgressIP name into
// dir/status/<name>.yaml (the file source's layout). The file source reads
// status only when it first sees an object, so an agent in another process
// than the controller needs this to follow assignments.
func DirStatus(dir string) func(name string) (egressv1.EgressIPStatus, bool) {
	return func(name string) (egressv1.EgressIPStatus, bool) {
		if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
			return egressv1.EgressIPStatus{}, false
		}
		st, err := filesource.ReadStatus(filepath.Join(dir, filesource.StatusDir), name)
		if err != nil {
			// No (readable) status file: keep the status in the object itself.
			return egressv1.EgressIPStatus{}, false
		}
		return st, true
	}
}
