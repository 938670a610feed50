package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/steer"
	"github.com/egret-gw/egret/metrics"
	"github.com/vishvananda/netns"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func init() {
	register("steer", "on every node: steer selected pods' external traffic into the tunnel to the gateways", runSteer)
}

// steerFlags are the steer agent's command line; cfg is the config file
// with the flags that override it applied.
type steerFlags struct {
	node, source, kubeconfig, configPath, nsName string
	metricsAddr, podName, podNamespace           string
	once, cleanup, checkConfig                   bool
	logLevel                                     string
	cfg                                          steer.Config
}

// parseSteerFlags parses the command line, reads the config file, applies
// the flags over it and validates the result.
func parseSteerFlags(args []string) (*steerFlags, error) {
	f := &steerFlags{}
	fs := newFlagSet("steer")
	fs.StringVar(&f.node, "node", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&f.source, "source", "", "dir:/path reads objects from a directory of YAML files (clusterless); default the Kubernetes API")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.configPath, "config", "", "YAML configuration file (see docs/steer.md)")
	fs.StringVar(&f.nsName, "netns", "", "program this named network namespace instead of the agent's own (lab)")
	underlay := fs.String("underlay", "", "underlay interface (overrides the config)")
	vtep := fs.String("vtep", "", "this node's VTEP address (overrides the config)")
	procSysNet := fs.String("proc-sys-net", "", "directory of the node's net sysctls, where a container mounts the node's /proc/sys/net (overrides procSysNet; default /proc/sys/net)")
	lf := bindLogFlags(fs)
	failClosed := fs.String("fail-closed", "", "podCIDR (block pod addresses until classified; the default) or selected (block selected pods only); overrides the config")
	trustPodIPs := fs.Bool("trust-pod-ips", false, "steer selected pods' addresses as the API gives them, even outside this node's pod networks (CNIs whose IPAM ignores spec.podCIDRs); overrides trustPodIPs")
	podCIDRs := fs.String("pod-cidrs", "", "this node's pod networks, comma-separated (overrides the config and the Node's spec.podCIDRs)")
	fs.BoolVar(&f.once, "once", false, "reconcile once and exit")
	fs.StringVar(&f.metricsAddr, "metrics-addr", metrics.DefaultSteerAddr, `host:port serving /metrics, /healthz and /readyz ("off" disables)`)
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove everything the agent programmed (device, rules, routes, filter) and exit")
	fs.StringVar(&f.podName, "pod", os.Getenv("POD_NAME"), "this agent's pod (default $POD_NAME): on exit, if its DaemonSet is gone (uninstall), remove what the agent programmed")
	fs.StringVar(&f.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the namespace of --pod (default $POD_NAMESPACE)")
	fs.BoolVar(&f.checkConfig, "check-config", false, "parse the flags and the config file, validate them, print the result and exit (0 valid, 1 not); touches neither the kernel nor the API")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if f.metricsAddr != "off" {
		if err := checkListenAddr("--metrics-addr", f.metricsAddr); err != nil {
			return nil, err
		}
	}
	cfg := &f.cfg
	if f.configPath != "" {
		var err error
		if *cfg, err = steer.LoadConfig(f.configPath); err != nil {
			return nil, err
		}
	}
	for flagVal, field := range map[string]*string{*underlay: &cfg.Underlay, *vtep: &cfg.VTEP, *procSysNet: &cfg.ProcSysNet, lf.format: &cfg.LogFormat} {
		if flagVal != "" {
			*field = flagVal
		}
	}
	if *failClosed != "" {
		cfg.FailClosed = *failClosed
	}
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "trust-pod-ips" {
			cfg.TrustPodIPs = *trustPodIPs
		}
	})
	if *podCIDRs != "" {
		cfg.PodCIDRs = strings.Split(*podCIDRs, ",")
	}
	*cfg = cfg.WithDefaults()
	f.logLevel = lf.level
	return f, checkSteerConfig(*cfg, f.configPath, f.source, f.node, f.cleanup)
}

// runSteer is `egret steer`: the flags wire a steer.Agent to this node's
// kernel and the source they name.
func runSteer(args []string) error {
	f, err := parseSteerFlags(args)
	if err != nil {
		return err
	}
	cfg := f.cfg
	if f.checkConfig {
		fmt.Printf("steer: configuration valid (underlay %q, vtep %q, %d excluded networks)\n", cfg.Underlay, cfg.VTEP, len(cfg.ClusterCIDRs)+len(cfg.ServiceCIDRs)+len(cfg.NodeCIDRs))
		return nil
	}
	log, err := newLogger(cfg.LogFormat, f.logLevel)
	if err != nil {
		return err
	}

	ns := netns.None()
	if f.nsName != "" {
		h, err := netns.GetFromName(f.nsName)
		if err != nil {
			return fmt.Errorf("--netns %s: %w", f.nsName, err)
		}
		defer h.Close()
		ns = h
	}
	k, err := steer.NewKernel(cfg, ns, log)
	if err != nil {
		return err
	}
	defer k.Close()
	if f.cleanup {
		return k.Cleanup()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &steer.Agent{Node: f.node, Kernel: k, Log: log, Resync: cfg.Resync.Duration, AllowCiliumHostRouting: cfg.AllowCiliumHostRouting}
	var restCfg *rest.Config // nil with --source dir:
	if a.Source, restCfg, err = f.openSource(log); err != nil {
		return err
	}
	if restCfg != nil {
		// For the start's check of Cilium's host routing.
		cs, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return fmt.Errorf("building the Kubernetes client: %w", err)
		}
		a.ConfigMaps = cs.CoreV1()
	}
	if restCfg != nil && f.podName != "" && f.podNamespace != "" && !f.once {
		defer k.CleanupIfUninstalled(func() (bool, error) {
			return cluster.Uninstalling(restCfg, f.podNamespace, f.podName, "steer", log)
		}, log)
	}
	if f.once {
		return a.RunOnce(ctx)
	}
	if f.metricsAddr != "off" {
		srv, err := serveSteerMetrics(f.metricsAddr, a, k)
		if err != nil {
			return err
		}
		defer srv.Close(context.Background())
		log.Info("steer: metrics served", "addr", srv.Addr())
	}
	return a.Run(ctx)
}

// openSource opens the source --source names: a directory reader, or the
// Kubernetes API (then also its REST config, for the uninstall check).
func (f *steerFlags) openSource(log *slog.Logger) (cluster.Source, *rest.Config, error) {
	switch {
	case strings.HasPrefix(f.source, "dir:"):
		if f.kubeconfig != "" {
			return nil, nil, errors.New("--kubeconfig and --source dir: exclude each other")
		}
		// A reader: the status files are the controller's.
		src, err := cluster.NewDirReader(strings.TrimPrefix(f.source, "dir:"), 0, log)
		return src, nil, err
	case f.source != "":
		return nil, nil, fmt.Errorf("--source %q: use dir:/path, or leave it out for the Kubernetes API", f.source)
	}
	restCfg, err := kubeRESTConfig(f.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	// Only this node's pods are steered here (steer.InputsFrom).
	src, err := cluster.NewKube(restCfg, cluster.PodsOn(f.node))
	if err != nil {
		return nil, nil, err
	}
	return src, restCfg, nil
}

// serveSteerMetrics registers the agent's metrics (set on a) and serves them.
func serveSteerMetrics(addr string, a *steer.Agent, k *steer.Kernel) (*metrics.Server, error) {
	reg := metrics.NewRegistry(version)
	a.Metrics = steer.NewMetrics(reg, k.Drops)
	a.Metrics.RegisterTunnelDrops(reg, k.TunnelDrops)
	return metrics.Serve(addr, reg, nil)
}

// checkSteerConfig validates the settled configuration and says where each
// setting is made: a DaemonSet that crash-loops must tell the admin which
// ConfigMap key or flag to fix.
func checkSteerConfig(cfg steer.Config, configPath, source, node string, cleanup bool) error {
	where := "no config file given (--config)"
	if configPath != "" {
		where = configPath
	}
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	// On a cluster the pod and service networks must never be steered: without
	// them a selected pod's in-cluster traffic would be sent to the gateway.
	// The lab (dir source) knows its own networks.
	if source == "" && !cleanup {
		if len(cfg.ClusterCIDRs) == 0 {
			errs = append(errs, errors.New("clusterCIDRs: give the cluster's pod networks (key clusterCIDRs of the egret-steer ConfigMap, deploy/steer/config.yaml)"))
		}
		if len(cfg.ServiceCIDRs) == 0 {
			errs = append(errs, errors.New("serviceCIDRs: give the cluster's service networks (key serviceCIDRs of the egret-steer ConfigMap, deploy/steer/config.yaml)"))
		}
	}
	if node == "" && !cleanup {
		errs = append(errs, errors.New("--node: give this node's name (or set NODE_NAME)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("steer configuration (%s, flags override it) is invalid: %w", where, err)
	}
	return nil
}
