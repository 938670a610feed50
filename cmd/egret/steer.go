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
	"k8s.io/client-go/rest"
)

func init() {
	register("steer", "on every node: steer selected pods' external traffic into the tunnel to the gateways", runSteer)
}

func runSteer(args []string) error {
	fs := newFlagSet("steer")
	node := fs.String("node", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	source := fs.String("source", "", "dir:/path reads objects from a directory of YAML files (clusterless); default the Kubernetes API")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config)")
	configPath := fs.String("config", "", "YAML configuration file (see docs/steer.md)")
	nsName := fs.String("netns", "", "program this named network namespace instead of the agent's own (lab)")
	underlay := fs.String("underlay", "", "underlay interface (overrides the config)")
	vtep := fs.String("vtep", "", "this node's VTEP address (overrides the config)")
	procSysNet := fs.String("proc-sys-net", "", "directory of the node's net sysctls, where a container mounts the node's /proc/sys/net (overrides procSysNet; default /proc/sys/net)")
	lf := bindLogFlags(fs)
	failClosed := fs.String("fail-closed", "", "podCIDR (block pod addresses until classified; the default) or selected (block selected pods only); overrides the config")
	trustPodIPs := fs.Bool("trust-pod-ips", false, "steer selected pods' addresses as the API gives them, even outside this node's pod networks (CNIs whose IPAM ignores spec.podCIDRs); overrides trustPodIPs")
	podCIDRs := fs.String("pod-cidrs", "", "this node's pod networks, comma-separated (overrides the config and the Node's spec.podCIDRs)")
	once := fs.Bool("once", false, "reconcile once and exit")
	metricsAddr := fs.String("metrics-addr", metrics.DefaultSteerAddr, `host:port serving /metrics, /healthz and /readyz ("off" disables)`)
	cleanup := fs.Bool("cleanup", false, "remove everything the agent programmed (device, rules, routes, filter) and exit")
	podName := fs.String("pod", os.Getenv("POD_NAME"), "this agent's pod (default $POD_NAME): on exit, if its DaemonSet is gone (uninstall), remove what the agent programmed")
	podNamespace := fs.String("pod-namespace", os.Getenv("POD_NAMESPACE"), "the namespace of --pod (default $POD_NAMESPACE)")
	checkConfig := fs.Bool("check-config", false, "parse the flags and the config file, validate them, print the result and exit (0 valid, 1 not); touches neither the kernel nor the API")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *metricsAddr != "off" {
		if err := checkListenAddr("--metrics-addr", *metricsAddr); err != nil {
			return err
		}
	}
	var cfg steer.Config
	if *configPath != "" {
		var err error
		if cfg, err = steer.LoadConfig(*configPath); err != nil {
			return err
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
	cfg = cfg.WithDefaults()
	if err := checkSteerConfig(cfg, *configPath, *source, *node, *cleanup); err != nil {
		return err
	}
	if *checkConfig {
		fmt.Printf("steer: configuration valid (underlay %q, vtep %q, %d excluded networks)\n", cfg.Underlay, cfg.VTEP, len(cfg.ClusterCIDRs)+len(cfg.ServiceCIDRs)+len(cfg.NodeCIDRs))
		return nil
	}
	log, err := newLogger(cfg.LogFormat, lf.level)
	if err != nil {
		return err
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &steer.Agent{Node: *node, Kernel: k, Log: log, Resync: cfg.Resync.Duration}
	switch {
	case strings.HasPrefix(*source, "dir:"):
		if *kubeconfig != "" {
			return errors.New("--kubeconfig and --source dir: exclude each other")
		}
		// A reader: the status files are the controller's.
		if a.Source, err = cluster.NewDirReader(strings.TrimPrefix(*source, "dir:"), 0, log); err != nil {
			return err
		}
	case *source != "":
		return fmt.Errorf("--source %q: use dir:/path, or leave it out for the Kubernetes API", *source)
	default:
		restCfg, err := kubeRESTConfig(*kubeconfig)
		if err != nil {
			return err
		}
		// Only this node's pods are steered here (steer.InputsFrom).
		if a.Source, err = cluster.NewKube(restCfg, cluster.PodsOn(a.Node)); err != nil {
			return err
		}
		if *podName != "" && *podNamespace != "" && !*once {
			defer cleanupIfUninstalled(restCfg, *podNamespace, *podName, k, log)
		}
	}
	if !*once && *metricsAddr != "off" {
		reg := metrics.NewRegistry(version)
		a.Metrics = steer.NewMetrics(reg, k.Drops)
		a.Metrics.RegisterTunnelDrops(reg, k.TunnelDrops)
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
		if err := a.Source.Start(ctx, func(cluster.Kind) {}); err != nil {
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

// cleanupIfUninstalled runs when the agent stops: after an uninstall (its
// DaemonSet gone, cluster.Uninstalling) it removes the device, rules, routes and
// filter, which a restart keeps.
func cleanupIfUninstalled(restCfg *rest.Config, namespace, pod string, k *steer.Kernel, log *slog.Logger) {
	gone, err := cluster.Uninstalling(restCfg, namespace, pod, "steer", log)
	if err != nil {
		log.Warn("steer: kernel state kept", "err", err.Error())
		return
	}
	if !gone {
		log.Info("steer: DaemonSet still there, kernel state kept for the next agent")
		return
	}
	if err := k.Cleanup(); err != nil {
		log.Error("steer: uninstall cleanup failed", "err", err.Error())
		return
	}
	log.Info("steer: DaemonSet gone (uninstall): removed the device, rules, routes and filter")
}
