package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/metrics"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func init() {
	register("controller", "assign egress IPs to nodes, check node health, write status (leader elected)", runController)
}

func runController(args []string) error {
	fs := newFlagSet("controller")
	f := controller.BindFlags(fs)
	lf := bindLogFlags(fs)
	metricsAddr := fs.String("metrics-addr", metrics.DefaultControllerAddr, `host:port serving /metrics, /healthz and /readyz ("off" disables)`)
	checkConfig := fs.Bool("check-config", false, "parse and validate the flags, print the result and exit (0 valid, 1 not); touches nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *metricsAddr != "off" {
		if err := checkListenAddr("--metrics-addr", *metricsAddr); err != nil {
			return err
		}
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	log, err := newLogger(lf.format, lf.level)
	if err != nil {
		return err
	}
	dir, isDir, err := f.SourceDir()
	if err != nil {
		return err
	}
	if *checkConfig {
		fmt.Println("controller: configuration valid")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var m *controller.Metrics
	if *metricsAddr != "off" {
		reg := metrics.NewRegistry(version)
		m = controller.NewMetrics(reg)
		// A standby replica is ready too: it takes over when the leader goes.
		srv, err := metrics.Serve(*metricsAddr, reg, nil)
		if err != nil {
			return err
		}
		defer srv.Close(context.Background())
		log.Info("controller: metrics served", "addr", srv.Addr())
	}
	if isDir {
		if f.Kubeconfig != "" {
			return errors.New("--kubeconfig and --source dir: exclude each other")
		}
		src, err := cluster.NewDir(dir, f.PollInterval, log)
		if err != nil {
			return err
		}
		c, err := controller.New(src, cfg, log)
		if err != nil {
			return err
		}
		c.SetMetrics(m)
		if cfg.Cloud.Provider != cloud.ProviderNone {
			p, err := cloud.New(ctx, cfg.Cloud)
			if err != nil {
				return err
			}
			c.SetCloud(p, src)
		}
		return c.Run(ctx)
	}
	restCfg, err := kubeRESTConfig(f.Kubeconfig)
	if err != nil {
		return err
	}
	return controller.RunKube(ctx, restCfg, cfg, f.Identity, log, m)
}

// kubeRESTConfig uses the named kubeconfig, else the in-cluster service
// account, else $KUBECONFIG or ~/.kube/config.
func kubeRESTConfig(path string) (*rest.Config, error) {
	return restConfig(path, false, "not in a cluster; give --kubeconfig or use --source dir:/path")
}

// restConfig loads the kubeconfig at path; without one, the in-cluster
// configuration unless skipInCluster, then $KUBECONFIG or ~/.kube/config.
// hint ends the error that says none was found.
func restConfig(path string, skipInCluster bool, hint string) (*rest.Config, error) {
	if path == "" && !skipInCluster {
		if c, err := rest.InClusterConfig(); err == nil {
			return c, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes configuration (%s): %w", hint, err)
	}
	return c, nil
}
