package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/egret-gw/egret/control/access"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/gwagent"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/control/steer"
	"github.com/egret-gw/egret/control/trace"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/lab"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

func init() {
	register("trace", "why one connection (trace NS/POD DEST[:PORT][/tcp|udp|icmp]) leaves as what, or is dropped: the owning EgressIP, the destination's checks, the gateways, flow limits and the address the outside sees", func(args []string) error {
		return access.Explain("trace", runTrace(args))
	})
}

// The ConfigMaps of deploy/ (kustomize and Helm) that hold the agents'
// configuration files, and their keys.
const (
	gatewayConfigMap, gatewayConfigKey = "egret-gateway", "gateway.yaml"
	steerConfigMap, steerConfigKey     = "egret-steer", "steer.yaml"
)

func runTrace(args []string) error {
	fs := newFlagSet("trace")
	f := bindStatusFlags(fs)
	fs.Lookup("o").Usage = "output format: table or json"
	egretNS := fs.String("egret-namespace", "egret-system", "the namespace Egret is installed in, whose ConfigMaps "+gatewayConfigMap+" and "+steerConfigMap+" hold the agents' configuration")
	names, err := parseFlagsAndNames(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(names) != 2:
		return &usageError{cmd: fs.Name(), err: errors.New("give NAMESPACE/POD and DEST[:PORT][/tcp|udp|icmp]")}
	case f.output != "table" && f.output != "json":
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("-o %q: use table or json", f.output)}
	case f.lab != "" && f.kubeconfig != "":
		return &usageError{cmd: fs.Name(), err: errors.New("--lab and --kubeconfig exclude each other")}
	}
	q, err := trace.ParseQuery(names[0], names[1])
	if err != nil {
		return &usageError{cmd: fs.Name(), err: err}
	}
	if _, err := newLogger("", "warn"); err != nil { // client-go's warnings, on stderr
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	view, _, err := f.inputs(ctx)
	if err != nil {
		return err
	}
	opts := plan.Options{TrustPodIPs: f.trustPodIPs}
	var ac agentConfigs
	if f.lab != "" {
		ac, err = labAgentConfigs(f.lab, podNode(view, q))
	} else {
		ac, err = clusterAgentConfigs(ctx, f.kubeconfig, *egretNS)
	}
	if err != nil {
		return err
	}
	in := ac.inputs(view, opts)
	t, err := trace.Build(view, in, q)
	if err != nil {
		return err
	}
	if f.output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(t)
	}
	return t.WriteTable(os.Stdout)
}

// podNode is the node of q's pod in v, "" if not found.
func podNode(v cluster.View, q trace.Query) string {
	for _, p := range v.Pods {
		if p != nil && p.Namespace == q.Namespace && p.Name == q.Pod {
			return p.Spec.NodeName
		}
	}
	return ""
}

// agentConfigs are the agents' configuration files as the trace reads
// them: raw YAML, where each came from, or why it was not read.
type agentConfigs struct {
	gateway, steer       []byte
	gatewayAt, steerAt   string
	gatewayErr, steerErr error
}

// clusterAgentConfigs reads the ConfigMaps of Egret's namespace ns.
func clusterAgentConfigs(ctx context.Context, kubeconfig, ns string) (agentConfigs, error) {
	var ac agentConfigs
	cfg, err := statusRESTConfig(kubeconfig)
	if err != nil {
		return ac, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ac, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	read := func(name, key string) ([]byte, string, error) {
		at := fmt.Sprintf("ConfigMap %s/%s, key %s", ns, name, key)
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, at, err
		}
		d, ok := cm.Data[key]
		if !ok {
			return nil, at, fmt.Errorf("it has no key %s", key)
		}
		return []byte(d), at, nil
	}
	ac.gateway, ac.gatewayAt, ac.gatewayErr = read(gatewayConfigMap, gatewayConfigKey)
	ac.steer, ac.steerAt, ac.steerErr = read(steerConfigMap, steerConfigKey)
	return ac, nil
}

// labAgentConfigs reads the files managed lab name's agents run with:
// node's steer agent's, and the gateways' (written only when the lab sets
// flow limits; without one a gateway runs with the defaults).
func labAgentConfigs(name, node string) (agentConfigs, error) {
	var ac agentConfigs
	l, err := newLab(name, lab.ModeKernel, lab.BuiltUnderlay("", name))
	if err != nil {
		return ac, err
	}
	dir := l.RunDir()
	ac.steerAt = filepath.Join(dir, "steer-"+node+".yaml")
	ac.steer, ac.steerErr = os.ReadFile(ac.steerAt)
	// The lab's gateways share one configuration; the first found stands for all.
	ac.gatewayAt = "the defaults: the lab's gateways run without --config"
	for _, g := range l.Spec.Gateways {
		p := filepath.Join(dir, "gateway-"+g.Name+".yaml")
		if b, err := os.ReadFile(p); err == nil {
			ac.gateway, ac.gatewayAt = b, p
			break
		}
	}
	return ac, nil
}

// inputs turns the configurations into the trace's inputs: the steer
// agents' unsteered networks, and per gateway the data plane
// configuration its agent builds (gwagent.Build) on the static one.
func (ac agentConfigs) inputs(v cluster.View, opts plan.Options) trace.Inputs {
	in := trace.Inputs{Plan: opts, SteerConfig: ac.steerAt, GatewayConfig: ac.gatewayAt}
	if ac.steerErr == nil {
		var sc steer.Config
		if err := yaml.UnmarshalStrict(ac.steer, &sc); err != nil {
			ac.steerErr = err
		} else {
			in.SteerRead, in.NoEgressIP = true, sc.NoEgressIP
			for _, k := range []struct {
				key string
				c   steer.Config
			}{{"clusterCIDRs", steer.Config{ClusterCIDRs: sc.ClusterCIDRs}}, {"serviceCIDRs", steer.Config{ServiceCIDRs: sc.ServiceCIDRs}}, {"nodeCIDRs", steer.Config{NodeCIDRs: sc.NodeCIDRs}}} {
				nets, err := k.c.Excluded()
				if err != nil {
					in.SteerRead, ac.steerErr = false, err
					break
				}
				for _, n := range nets {
					in.Unsteered = append(in.Unsteered, trace.Network{Prefix: n, Key: k.key})
				}
			}
		}
	}
	if ac.steerErr != nil {
		in.SteerRead, in.Unsteered, in.NoEgressIP = false, nil, ""
		in.SteerConfig = fmt.Sprintf("%s: %v", ac.steerAt, ac.steerErr)
	}
	base := config.Spec{}
	if ac.gatewayErr == nil && ac.gateway != nil {
		c, err := config.ParseConfig(ac.gateway)
		var s *config.Spec
		if err == nil {
			s, err = c.Spec()
		}
		if err == nil {
			base = *s
		} else {
			ac.gatewayErr = err
		}
	}
	if ac.gatewayErr != nil {
		in.GatewayConfig = fmt.Sprintf("%s, not read: %v; the built-in deny-list, the nodes' networks and the default limits are checked", ac.gatewayAt, ac.gatewayErr)
	}
	specs := map[string]config.Spec{}
	in.Gateway = func(node string) config.Spec {
		s, ok := specs[node]
		if !ok {
			s = gwagent.Build(base, node, v, gwagent.Options{TrustPodIPs: opts.TrustPodIPs}).Spec
			specs[node] = s
		}
		return s
	}
	return in
}
