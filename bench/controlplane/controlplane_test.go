package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
)

// The generated cluster is what the measurement assumes: each pod selected
// by its one owner (through the agents' own selection), every egress IP
// hostable on every node, all addresses distinct.
func TestObjects(t *testing.T) {
	sc, err := NewScale(0.01)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Nodes != 5 || sc.Workers != 2 || sc.EgressIPs != 100 || sc.Pods != 1000 || sc.WorkerPods != 100 {
		t.Fatalf("scale 0.01 = %+v", sc)
	}
	if _, err := NewScale(0); err == nil {
		t.Error("scale 0 accepted")
	}
	var eips []*egressv1.EgressIP
	seen := map[string]bool{}
	for i := range sc.EgressIPs {
		e := sc.eipObject(i)
		eips = append(eips, e)
		if seen[e.Spec.EgressIPs[0]] {
			t.Fatalf("egress IP %s twice", e.Spec.EgressIPs[0])
		}
		seen[e.Spec.EgressIPs[0]] = true
	}
	sel, problems := cluster.NewSelector(eips)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	nsLabels := map[string]map[string]string{}
	for i := range sc.Namespaces {
		ns := namespaceObject(i)
		nsLabels[ns.Name] = ns.Labels
	}
	onWorker := 0
	for j := range sc.Pods {
		p := sc.podObject(j)
		if got := sel.Owner(nsLabels[p.Namespace], p.Labels); got < 0 || sel.Object(got).Name != eipName(sc.podOwner(j)) {
			t.Fatalf("pod %s/%s is owned by object %d, want %s", p.Namespace, p.Name, got, eipName(sc.podOwner(j)))
		}
		if ips := cluster.PodIPs(p); len(ips) != 1 || seen[ips[0].String()] {
			t.Fatalf("pod %s address %v", p.Name, ips)
		}
		seen[cluster.PodIPs(p)[0].String()] = true
		if p.Spec.NodeName == workerName(0) {
			onWorker++
		}
	}
	if onWorker != sc.WorkerPods {
		t.Errorf("%d pods on %s, want %d", onWorker, workerName(0), sc.WorkerPods)
	}
	var nodes []assign.Node
	for i := range sc.Nodes {
		n := nodeObject(i)
		an := assign.NodeFromObject(n.Name, n.Labels, n.Annotations)
		an.Ready, an.Reachable = cluster.NodeReady(n), true
		nodes = append(nodes, an)
	}
	var objs []assign.Object
	for _, e := range eips {
		objs = append(objs, assign.Object{Name: e.Name, EgressIPs: e.Spec.EgressIPs})
	}
	objs = append(objs, assign.Object{Name: "changed", EgressIPs: []string{egressAddr(sc.EgressIPs + 99).String()}})
	r, err := assign.Assign(objs, nodes, assign.Options{})
	if err != nil || len(r.Events) > 0 {
		t.Fatalf("the cluster cannot host its egress IPs: %v %v", err, r.Events)
	}
}

// The tracker counts an object assigned once every spec IP has a node,
// draws the curve from the controller's start and wakes waiters.
func TestTracker(t *testing.T) {
	tr := newTracker()
	t0 := time.Now()
	obj := func(name string, spec []string, status ...string) *egressv1.EgressIP {
		e := &egressv1.EgressIP{}
		e.Name, e.Spec.EgressIPs = name, spec
		for i := 0; i+1 < len(status); i += 2 {
			e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
		}
		return e
	}
	tr.observe(obj("a", []string{"10.0.0.1", "10.0.0.2"}), t0)
	tr.started(t0)
	moved := tr.wait("a", func(w map[string]string) bool { return w["10.0.0.2"] == "n2" })
	tr.observe(obj("a", []string{"10.0.0.1", "10.0.0.2"}, "n1", "10.0.0.1"), t0.Add(time.Second))
	if tr.assigned() != 0 {
		t.Fatal("an object with one of two IPs placed counts as assigned")
	}
	tr.observe(obj("a", []string{"10.0.0.1", "10.0.0.2"}, "n1", "10.0.0.1", "n1", "10.0.0.2"), t0.Add(2*time.Second))
	tr.observe(obj("b", []string{"10.0.0.3"}, "n2", "10.0.0.3"), t0.Add(3*time.Second))
	select {
	case <-moved:
		t.Fatal("waiter woken before its condition held")
	default:
	}
	tr.observe(obj("a", []string{"10.0.0.1", "10.0.0.2"}, "n1", "10.0.0.1", "n2", "10.0.0.2"), t0.Add(4*time.Second))
	if at := <-moved; !at.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("waiter woken with %v, want the observation's time", at.Sub(t0))
	}
	if got, want := tr.convergence(), []Point{{0, 0}, {2, 1}, {3, 2}}; !slices.Equal(got, want) {
		t.Errorf("curve %v, want %v", got, want)
	}
	if on := tr.on("n1"); len(on) != 1 || !slices.Equal(on["a"], []string{"10.0.0.1"}) {
		t.Errorf("on(n1) = %v", on)
	}
	if th := thin([]Point{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}}, 3); !slices.Equal(th, []Point{{0, 0}, {2, 2}, {4, 4}}) {
		t.Errorf("thin = %v", th)
	}
}

// TestRun runs the whole benchmark on a tiny cluster against a real
// kube-apiserver and the real `egret controller`, and checks what it
// reports: every object assigned, each change and node loss timed, the
// agents' configurations holding the pods they should, and the files.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds egret and runs a control plane")
	}
	kubetest.Tool(t, "kube-apiserver", "hack/k8s-bins.sh")
	kubetest.Tool(t, "etcd", "hack/k8s-bins.sh")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := testbin.Build(t, "egret")
	t.Chdir(root) // deploy/crd
	out := t.TempDir()
	if err := run(options{out: out, scale: 0.002, egret: bin, changes: 5, losses: 1, workers: 4}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "controlplane.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	sc := r.Scale
	if last := r.Convergence[len(r.Convergence)-1]; last.Assigned != sc.EgressIPs || r.Controller.AllAssignedSeconds <= 0 {
		t.Errorf("convergence ends at %+v after %v s, want all %d", last, r.Controller.AllAssignedSeconds, sc.EgressIPs)
	}
	if b := r.Bare; b.Writes != sc.EgressIPs || b.Writers != 8 || b.Seconds <= 0 || b.Ratio <= 0 || r.Controller.WriteSpanSeconds <= 0 {
		t.Errorf("bare client %+v, controller write span %v s: want every EgressIP written by 8 writers", b, r.Controller.WriteSpanSeconds)
	}
	if r.Change.N != 5 || r.Change.P50 <= 0 || len(r.ChangeMillis) != 5 {
		t.Errorf("changes %+v", r.Change)
	}
	if len(r.Losses) != 1 || r.Losses[0].IPs == 0 || r.Losses[0].Millis <= 0 {
		t.Errorf("node losses %+v: want one loss that moved IPs", r.Losses)
	}
	if r.Steer.Pods != sc.WorkerPods || r.Steer.Problems != 0 {
		t.Errorf("steer agent %+v, want %d pod rules and no problems", r.Steer, sc.WorkerPods)
	}
	if r.Gateway.Hosted == 0 || r.Gateway.Pods != sc.Pods || r.Gateway.Problems != 0 {
		t.Errorf("gateway agent %+v: want hosted IPs, all %d pods, no problems", r.Gateway, sc.Pods)
	}
	if r.Controller.PeakRSSMB <= 0 || len(r.Targets) != 3 {
		t.Errorf("controller %+v, targets %v", r.Controller, r.Targets)
	}
	md, err := os.ReadFile(filepath.Join(out, "controlplane.md"))
	if err != nil || !strings.Contains(string(md), "## Control plane at scale") || !strings.Contains(string(md), fmt.Sprintf("%d EgressIPs", sc.EgressIPs)) {
		t.Errorf("controlplane.md: %v\n%s", err, md)
	}
	for _, png := range []string{"controlplane-convergence.png", "controlplane-change-cdf.png"} {
		if fi, err := os.Stat(filepath.Join(out, png)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", png, err)
		}
	}
}
