package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/control/filesource"
	"github.com/egret-gw/egret/control/steer"
	"github.com/egret-gw/egret/metrics"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
)

func init() {
	register("steer", "on every node: steer selected pods' external traffic into the tunnel to the gateways", runSteer)
}

func runSteer(args []string) error {
	fs := flag.NewFlagSet("steer", flag.ContinueOnError)
	node := fs.String("node", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	source := fs.String("source", "", "dir:/path reads objects from a directory of YAML files (clusterless); default the Kubernetes API")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config)")
	configPath := fs.String("config", "", "YAML configuration file (see docs/steer.md)")
	nsName := fs.String("netns", "", "program this named network namespace instead of the agent's own (lab)")
	underlay := fs.String("underlay", "", "underlay interface (overrides the config)")
	vtep := fs.String("vtep", "", "this node's VTEP address (overrides the config)")
	logFormat := fs.String("log-format", "", "text or json (overrides the config)")
	failClosed := fs.String("fail-closed", "", "podCIDR (block pod addresses until classified; the default) or selected (block selected pods only); overrides the config")
	podCIDRs := fs.String("pod-cidrs", "", "this node's pod networks, comma-separated (overrides the config and the Node's spec.podCIDRs)")
	once := fs.Bool("once", false, "reconcile once and exit")
	metricsAddr := fs.String("metrics-addr", metrics.DefaultSteerAddr, `host:port serving /metrics, /healthz and /readyz ("off" disables)`)
	cleanup := fs.Bool("cleanup", false, "remove everything the agent programmed (device, rules, routes, filter) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var cfg steer.Config
	if *configPath != "" {
		var err error
		if cfg, err = steer.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	for flagVal, field := range map[string]*string{*underlay: &cfg.Underlay, *vtep: &cfg.VTEP, *logFormat: &cfg.LogFormat} {
		if flagVal != "" {
			*field = flagVal
		}
	}
	if *failClosed != "" {
		cfg.FailClosed = *failClosed
	}
	if *podCIDRs != "" {
		cfg.PodCIDRs = strings.Split(*podCIDRs, ",")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	var log *slog.Logger
	if cfg.LogFormat == "json" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	} else {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}

	ns := netns.None()
	if *nsName != "" {
		h, err := netns.GetFromName(*nsName)
		if err != nil {
			return fmt.Errorf("--netns %s: %w", *nsName, err)
		}
		defer h.Close()
		ns = h
	}
	k, err := steer.NewKernel(cfg, ns, log)
	if err != nil {
		return err
	}
	defer k.Close()
	if *cleanup {
		return k.Cleanup()
	}
	if *node == "" {
		return errors.New("--node: give this node's name (or set NODE_NAME)")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &steer.Agent{Node: *node, Kernel: k, Log: log, Resync: cfg.Resync.Duration}
	switch {
	case strings.HasPrefix(*source, "dir:"):
		if *kubeconfig != "" {
			return errors.New("--kubeconfig and --source dir: exclude each other")
		}
		dir := strings.TrimPrefix(*source, "dir:")
		fsrc, err := filesource.NewReadOnly(dir, 0, log) // status files are the controller's
		if err != nil {
			return err
		}
		a.Source = &ctrlSource{s: fsrc, statusDir: filepath.Join(dir, filesource.StatusDir)}
		a.Status = steer.DirStatus(dir)
	case *source != "":
		return fmt.Errorf("--source %q: use dir:/path, or leave it out for the Kubernetes API", *source)
	default:
		restCfg, err := kubeRESTConfig(*kubeconfig)
		if err != nil {
			return err
		}
		ks, err := controller.NewKubeSource(restCfg)
		if err != nil {
			return err
		}
		a.Source = &ctrlSource{s: ks}
	}
	if !*once && *metricsAddr != "off" {
		reg := metrics.NewRegistry(version)
		a.Metrics = metrics.NewSteer(reg, k.Drops)
		srv, err := metrics.Serve(*metricsAddr, reg, nil)
		if err != nil {
			return err
		}
		defer srv.Close(context.Background())
		log.Info("steer: metrics served", "addr", srv.Addr())
	}
	if *once {
		if err := k.Setup(); err != nil {
			return err
		}
		if err := a.Source.Start(ctx, func() {}); err != nil {
			return err
		}
		ch, st, err := a.ReconcileOnce()
		for _, p := range st.Problems {
			log.Warn("input skipped", "problem", p.Error())
		}
		log.Info("reconciled once", "changes", ch.String())
		return err
	}
	return a.Run(ctx)
}

// ctrlSource adapts the controller's sources (informers or file source) to
// the steer agent; with statusDir it also watches the status files another
// process (the controller) writes there.
type ctrlSource struct {
	s interface {
		Start(ctx context.Context, changed func(controller.Kind)) error
		controllerLister
	}
	statusDir string
}

type controllerLister interface {
	EgressIPs() []*egressv1.EgressIP
	Nodes() []*corev1.Node
	Namespaces() []*corev1.Namespace
	Pods() []*corev1.Pod
}

func (c *ctrlSource) Start(ctx context.Context, changed func()) error {
	if err := c.s.Start(ctx, func(controller.Kind) { changed() }); err != nil {
		return err
	}
	if c.statusDir != "" {
		go pollDir(ctx, c.statusDir, statusPoll, changed)
	}
	return nil
}

func (c *ctrlSource) Objects() steer.Objects {
	return steer.Objects{EgressIPs: c.s.EgressIPs(), Nodes: c.s.Nodes(), Namespaces: c.s.Namespaces(), Pods: c.s.Pods()}
}

// statusPoll is how often the status files of a dir: source are checked.
// A moved egress IP reaches the kernel at most this long after the
// controller wrote it, and failover must finish within the reachability
// timeout + 1 s, so it is well below a second.
const statusPoll = 200 * time.Millisecond

// pollDir calls changed whenever the names, sizes or times of dir's files change.
func pollDir(ctx context.Context, dir string, every time.Duration, changed func()) {
	type sig struct {
		size int64
		mod  time.Time
	}
	scan := func() map[string]sig {
		out := map[string]sig{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				out[e.Name()] = sig{fi.Size(), fi.ModTime()}
			}
		}
		return out
	}
	last := scan()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if now := scan(); !reflect.DeepEqual(now, last) {
				last = now
				changed()
			}
		}
	}
}
