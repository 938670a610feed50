package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/egret-gw/egret/bench/dist"
	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

type options struct {
	out            string
	scale          float64
	egret          string
	changes        int
	losses         int
	workers        int
	controllerArgs string
}

func run(o options) error {
	sc, err := NewScale(o.scale)
	if err != nil {
		return err
	}
	writers, err := controllerWriters(o.controllerArgs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("creating the report folder: %w", err)
	}
	work, err := os.MkdirTemp("", "egret-bench-controlplane-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if o.egret == "" {
		fmt.Println("building ./cmd/egret ...")
	}
	bin, err := dist.EgretBinary(o.egret, work)
	if err != nil {
		return err
	}
	crds := filepath.Join("deploy", "crd")
	if _, err := os.Stat(crds); err != nil {
		return fmt.Errorf("the EgressIP CRD is read from %s: run from the repository's root: %w", crds, err)
	}

	res := &Result{Scale: sc, Machine: machine()}
	fmt.Printf("control plane at scale: %d assignable nodes, %d EgressIPs, %d pods on %d workers (%d on %s); starting etcd and kube-apiserver ...\n",
		sc.Nodes, sc.EgressIPs, sc.Pods, sc.Workers, sc.WorkerPods, workerName(0))
	env, err := kubetest.Run(filepath.Join(work, "kube"))
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer env.Stop()
	if err := env.CreateCRDs(crds); err != nil {
		return err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the harness's own requests are not what is measured
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	eips, err := egressv1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	setupStart := time.Now()
	if err := create(ctx, sc, cs, eips, o.workers, res); err != nil {
		return err
	}
	res.Setup.TotalSeconds = time.Since(setupStart).Seconds()

	tr := newTracker()
	inf := cache.NewSharedIndexInformer(eips.ListWatch(), &egressv1.EgressIP{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { tr.observe(o.(*egressv1.EgressIP), time.Now()) },
		UpdateFunc: func(_, o any) { tr.observe(o.(*egressv1.EgressIP), time.Now()) },
		DeleteFunc: func(o any) {
			if e, ok := o.(*egressv1.EgressIP); ok {
				tr.forget(e.Name)
			}
		},
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("the harness's EgressIP watch did not sync")
	}

	ctl, err := startController(bin, env.Kubeconfig, work, o.controllerArgs, tr)
	if err != nil {
		return err
	}
	defer ctl.stop()
	if err := ctl.converge(ctx, sc, tr, res); err != nil {
		return err
	}
	res.Convergence = thin(tr.convergence(), 400)
	if err := changes(ctx, sc, eips, tr, o.changes, res); err != nil {
		return err
	}
	if err := losses(ctx, sc, cs, tr, o.losses, res); err != nil {
		return err
	}
	if err := ctl.memory(res); err != nil {
		return err
	}
	ctl.stop()
	if err := agents(ctx, sc, cfg, res); err != nil {
		return err
	}
	// Last: its writes move every status, which the agents' builds read.
	if err := bareWrites(ctx, cfg, inf.GetStore(), writers, res); err != nil {
		return err
	}
	res.Targets = targets(res)
	res.Machine.LoadEnd = dist.LoadAvg()
	return write(o.out, res)
}

// create makes the cluster's objects with concurrent requests, showing progress.
func create(ctx context.Context, sc Scale, cs kubernetes.Interface, eips *egressv1.Client, workers int, res *Result) error {
	step := func(what string, n int, fn func(ctx context.Context, i int) error) error {
		start := time.Now()
		if err := parallel(ctx, what, n, workers, fn); err != nil {
			return err
		}
		s := time.Since(start).Seconds()
		res.Setup.Steps = append(res.Setup.Steps, SetupStep{What: what, Count: n, Seconds: s, PerSecond: float64(n) / s})
		return nil
	}
	cr := metav1.CreateOptions{}
	if err := step("nodes (create + status)", sc.Nodes+sc.Workers, func(ctx context.Context, i int) error {
		n := nodeObject(i)
		if i >= sc.Nodes {
			n = workerObject(i - sc.Nodes)
		}
		st := n.Status
		got, err := cs.CoreV1().Nodes().Create(ctx, n, cr)
		if err != nil {
			return err
		}
		got.Status = st
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := step("namespaces", sc.Namespaces, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, namespaceObject(i), cr)
		return err
	}); err != nil {
		return err
	}
	if err := step("EgressIPs", sc.EgressIPs, func(ctx context.Context, i int) error {
		_, err := eips.Create(ctx, sc.eipObject(i), cr)
		return err
	}); err != nil {
		return err
	}
	return step("pods (create + status)", sc.Pods, func(ctx context.Context, j int) error {
		p := sc.podObject(j)
		st := p.Status
		got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, cr)
		if err != nil {
			return err
		}
		got.Status = st
		_, err = cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	})
}

// parallel runs fn for 0..n-1 on workers goroutines, printing progress every
// 5 s; the first error stops it.
func parallel(ctx context.Context, what string, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	errc := make(chan error, workers)
	start := time.Now()
	for range max(1, workers) {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					errc <- nil
					return
				}
				if err := fn(ctx, i); err != nil {
					err = fmt.Errorf("creating %s, item %d: %w", what, i, err)
					cancel(err)
					errc <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var first error
	for left := max(1, workers); left > 0; {
		select {
		case err := <-errc:
			left--
			if err != nil && first == nil {
				first = err
			}
		case <-tick.C:
			d := done.Load()
			fmt.Printf("  %s: %d/%d (%.0f/s)\n", what, d, n, float64(d)/time.Since(start).Seconds())
		}
	}
	if first != nil {
		return first
	}
	fmt.Printf("  %s: %d in %.1f s\n", what, n, time.Since(start).Seconds())
	return ctx.Err()
}

// controller is the `egret controller` process under test.
type controller struct {
	cmd     *exec.Cmd
	metrics string // http://host:port/metrics
	log     string
	start   time.Time
	exited  chan struct{}
}

func startController(bin, kubeconfig, work, extra string, tr *tracker) (*controller, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	args := []string{"controller", "--kubeconfig", kubeconfig, "--leader-elect=false",
		// No gateway agents answer the reachability probe here: a node is
		// lost by turning NotReady, the other signal the controller acts on.
		"--reachability-total-timeout-seconds=0", "--metrics-addr", addr}
	args = append(args, strings.Fields(extra)...)
	logPath := filepath.Join(work, "controller.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &controller{cmd: exec.Command(bin, args...), metrics: "http://" + addr + "/metrics", log: logPath, exited: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = lf, lf
	c.start = time.Now()
	tr.started(c.start)
	if err := c.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s controller: %w", bin, err)
	}
	go func() {
		c.cmd.Wait()
		lf.Close()
		close(c.exited)
	}()
	fmt.Printf("controller started: %s %s (log %s)\n", bin, strings.Join(args, " "), logPath)
	return c, nil
}

func (c *controller) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

func (c *controller) stop() {
	if c.running() {
		c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
}

// scrape returns the value of the metric series whose line starts with name.
func (c *controller) scrape(name string) (float64, error) {
	resp, err := http.Get(c.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", c.metrics, name)
}

// converge waits until every object's status is written, showing progress,
// and records when the controller led (caches synced) and when all were in.
func (c *controller) converge(ctx context.Context, sc Scale, tr *tracker, res *Result) error {
	const limit = 30 * time.Minute
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastShown := time.Now()
	for tr.assigned() < sc.EgressIPs {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.exited:
			return fmt.Errorf("the controller exited; log %s:\n%s", c.log, tail(c.log))
		case <-tick.C:
		}
		if res.Controller.SyncedSeconds == 0 {
			if v, err := c.scrape("egret_controller_leader"); err == nil && v == 1 {
				res.Controller.SyncedSeconds = time.Since(c.start).Seconds()
				fmt.Printf("  controller caches synced after %.2f s\n", res.Controller.SyncedSeconds)
			}
		}
		if time.Since(lastShown) >= 5*time.Second {
			lastShown = time.Now()
			fmt.Printf("  statuses written: %d/%d after %.0f s\n", tr.assigned(), sc.EgressIPs, time.Since(c.start).Seconds())
		}
		if time.Since(c.start) > limit {
			return fmt.Errorf("only %d of %d EgressIPs assigned %v after the controller started", tr.assigned(), sc.EgressIPs, limit)
		}
	}
	res.Controller.AllAssignedSeconds = time.Since(c.start).Seconds()
	pts := tr.convergence()
	if len(pts) > 0 {
		res.Controller.AllAssignedSeconds = pts[len(pts)-1].T
	}
	for _, p := range pts {
		if p.Assigned > pts[0].Assigned {
			res.Controller.WriteSpanSeconds = res.Controller.AllAssignedSeconds - p.T
			break
		}
	}
	fmt.Printf("  all %d statuses written %.2f s after the controller started\n", sc.EgressIPs, res.Controller.AllAssignedSeconds)
	return nil
}

// memory reads the controller's peak and current RSS and its Go heap.
func (c *controller) memory(res *Result) error {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("reading the controller's memory: %w", err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmHWM:":
			res.Controller.PeakRSSMB = kb / 1024
		case "VmRSS:":
			res.Controller.RSSMB = kb / 1024
		}
	}
	if v, err := c.scrape("go_memstats_heap_inuse_bytes"); err == nil {
		res.Controller.HeapInuseMB = v / (1 << 20)
	}
	if v, err := c.scrape("process_cpu_seconds_total"); err == nil {
		res.Controller.CPUSeconds = v
	}
	fmt.Printf("  controller memory: peak RSS %.0f MB, RSS %.0f MB, heap in use %.0f MB; CPU %.1f s\n",
		res.Controller.PeakRSSMB, res.Controller.RSSMB, res.Controller.HeapInuseMB, res.Controller.CPUSeconds)
	return nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// changes replaces the egress IP of one object at a time with a new
// address and times until its status places the new address.
func changes(ctx context.Context, sc Scale, eips *egressv1.Client, tr *tracker, n int, res *Result) error {
	fmt.Printf("timing %d single-object changes ...\n", n)
	var lat []time.Duration
	for k := range n {
		name := eipName((k * 7919) % sc.EgressIPs)
		ip := egressAddr(sc.EgressIPs + k).String() // never used before
		e, err := eips.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		e.Spec.EgressIPs = []string{ip}
		done := tr.wait(name, func(w map[string]string) bool { return w[ip] != "" })
		start := time.Now()
		if _, err := eips.Update(ctx, e, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("changing %s: %w", name, err)
		}
		select {
		case at := <-done:
			lat = append(lat, at.Sub(start))
		case <-time.After(time.Minute):
			return fmt.Errorf("%s's new egress IP %s was not in its status a minute after the change", name, ip)
		}
		if (k+1)%25 == 0 {
			fmt.Printf("  %d/%d changes: %s\n", k+1, n, dist.Summarize(lat))
		}
	}
	res.Change = dist.Summarize(lat)
	res.ChangeMillis = dist.Millis(lat)
	fmt.Printf("  one change → its status: %s\n", res.Change)
	return nil
}

// losses turns nodes NotReady one at a time and times until none of their
// egress IPs is placed on them any more and every one is placed elsewhere.
func losses(ctx context.Context, sc Scale, cs kubernetes.Interface, tr *tracker, n int, res *Result) error {
	fmt.Printf("timing %d node losses (Ready=False) ...\n", n)
	var lat []time.Duration
	for k := range n {
		node := nodeName(1 + (k*37)%(sc.Nodes-1))
		hosted := tr.on(node)
		moved := 0
		var waits []<-chan time.Time
		for name, ips := range hosted {
			moved += len(ips)
			waits = append(waits, tr.wait(name, func(w map[string]string) bool {
				for _, ip := range ips {
					if w[ip] == "" || w[ip] == node {
						return false
					}
				}
				return true
			}))
		}
		nd, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range nd.Status.Conditions {
			if nd.Status.Conditions[i].Type == corev1.NodeReady {
				nd.Status.Conditions[i].Status = corev1.ConditionFalse
				nd.Status.Conditions[i].Reason = "BenchmarkNodeLost"
				nd.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		start := time.Now()
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("turning %s NotReady: %w", node, err)
		}
		last := start
		for _, w := range waits {
			select {
			case at := <-w:
				if at.After(last) {
					last = at
				}
			case <-time.After(2 * time.Minute):
				return fmt.Errorf("%s's egress IPs were not all placed elsewhere two minutes after it turned NotReady", node)
			}
		}
		lat = append(lat, last.Sub(start))
		res.Losses = append(res.Losses, Loss{Node: node, IPs: moved, Millis: float64(last.Sub(start)) / float64(time.Millisecond)})
		fmt.Printf("  %s NotReady: its %d egress IPs placed elsewhere after %.0f ms\n", node, moved, float64(last.Sub(start))/float64(time.Millisecond))
	}
	res.Loss = dist.Summarize(lat)
	return nil
}

func machine() Machine {
	return Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadAvg: dist.LoadAvg()}
}
