package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/egret-gw/egret/control/access"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/control/status"
	"github.com/egret-gw/egret/lab"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

const statusPodsSummary = "per pod (`status pods [-n NS] [NAME ...]`): its node, addresses, owning EgressIP, the egress IPs it leaves as and their gateways, or why none"

func init() {
	register("status", "who leaves as what: per EgressIP its IPs, nodes, standbys and problems, per pod its egress IPs and gateways or why none (status pods for pods only); also kubectl egret status", func(args []string) error {
		return access.Explain("status", runStatus(args))
	})
}

// statusFlags are the flags of `egret status` and `egret status pods`.
type statusFlags struct {
	output, kubeconfig, lab, namespace string
	trustPodIPs                        bool
}

func bindStatusFlags(fs *flag.FlagSet) *statusFlags {
	f := &statusFlags{}
	fs.StringVar(&f.output, "o", "table", "output format: table, json or yaml")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else the in-cluster configuration, else ~/.kube/config)")
	fs.StringVar(&f.lab, "lab", "", "read the managed lab of this name (egret lab up --gateway managed) instead of a cluster")
	fs.BoolVar(&f.trustPodIPs, "trust-pod-ips", false, "judge pod addresses as agents running with trustPodIPs do (a CNI whose IPAM ignores spec.podCIDRs)")
	return f
}

func runStatus(args []string) error {
	pods := len(args) > 0 && args[0] == "pods"
	name := "status"
	if pods {
		name, args = "status pods", args[1:]
	}
	fs := newFlagSet(name)
	f := bindStatusFlags(fs)
	var names []string
	if pods {
		fs.StringVar(&f.namespace, "n", "", "only the pods of this namespace (default: every namespace)")
		fs.StringVar(&f.namespace, "namespace", "", "the same as -n")
		var err error
		if names, err = parseFlagsAndNames(fs, args); err != nil {
			return err
		}
	} else if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case f.output != "table" && f.output != "json" && f.output != "yaml":
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("-o %q: use table, json or yaml", f.output)}
	case f.lab != "" && f.kubeconfig != "":
		return &usageError{cmd: fs.Name(), err: errors.New("--lab and --kubeconfig exclude each other")}
	}
	if _, err := newLogger("", "warn"); err != nil { // client-go's warnings, on stderr
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	view, in, err := f.inputs(ctx)
	if err != nil {
		return err
	}
	in.Plan = plan.Options{TrustPodIPs: f.trustPodIPs}
	r := status.Build(view, in)
	if pods {
		if err := onlyPods(r, f.namespace, names); err != nil {
			return err
		}
	}
	return writeStatus(os.Stdout, r, f.output, !pods)
}

// parseFlagsAndNames is parseFlags for a command that also takes names,
// before, between or after its flags.
func parseFlagsAndNames(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			printUsage(os.Stderr, fs)
			return nil, flag.ErrHelp
		case err != nil:
			return nil, &usageError{cmd: fs.Name(), err: err}
		case fs.NArg() == 0:
			return names, nil
		}
		names, args = append(names, fs.Arg(0)), fs.Args()[1:]
	}
}

// inputs reads the objects from the lab or the cluster the flags name.
func (f *statusFlags) inputs(ctx context.Context) (cluster.View, status.Inputs, error) {
	if f.lab != "" {
		return labInputs(ctx, f.lab)
	}
	cfg, err := statusRESTConfig(f.kubeconfig)
	if err != nil {
		return cluster.View{}, status.Inputs{}, err
	}
	src, err := cluster.NewKube(cfg)
	if err != nil {
		return cluster.View{}, status.Inputs{}, err
	}
	if err := src.Start(ctx, func(cluster.Kind) {}); err != nil {
		return cluster.View{}, status.Inputs{}, err
	}
	in := status.Inputs{UnknownWhy: "not read from a cluster: the flow sync's counters are per gateway, not per standby (docs/status.md says how to compare the two gateways' flows)"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return cluster.View{}, status.Inputs{}, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	evs, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=EgressIP"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: the EgressIPs' Events are left out: %v\n", prog+" status", err)
	} else {
		in.Events = evs.Items
	}
	return src.View(), in, nil
}

// statusRESTConfig is --kubeconfig, else $KUBECONFIG, else the in-cluster
// configuration, else ~/.kube/config: what a user running the command
// (or kubectl running it as a plugin) means.
func statusRESTConfig(path string) (*rest.Config, error) {
	return restConfig(path, os.Getenv("KUBECONFIG") != "", "give --kubeconfig or set KUBECONFIG; --lab NAME reads a lab")
}

// labInputs reads the objects of managed lab name, and has the status
// compare its gateways' flows for each standby.
func labInputs(ctx context.Context, name string) (cluster.View, status.Inputs, error) {
	l, err := newLab(name, lab.ModeKernel, lab.BuiltUnderlay("", name))
	if err != nil {
		return cluster.View{}, status.Inputs{}, err
	}
	st, err := l.Status()
	switch {
	case err != nil:
		return cluster.View{}, status.Inputs{}, err
	case !st.Up:
		return cluster.View{}, status.Inputs{}, fmt.Errorf("lab %s is not up", name)
	case st.Mode != lab.ModeManaged:
		return cluster.View{}, status.Inputs{}, fmt.Errorf("lab %s runs gateway mode %s: only a managed lab (egret lab up --gateway managed) has EgressIP objects", name, st.Mode)
	}
	src, err := cluster.NewDirReader(st.ObjectsDir, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		return cluster.View{}, status.Inputs{}, err
	}
	if err := src.Start(ctx, func(cluster.Kind) {}); err != nil {
		return cluster.View{}, status.Inputs{}, err
	}
	runDir := l.RunDir()
	return src.View(), status.Inputs{Standby: func(ip netip.Addr, node, standby string) (string, string) {
		return compareStandby(lab.FlowsSocket(runDir, node), lab.FlowsSocket(runDir, standby), ip, node, standby)
	}}, nil
}

// onlyPods keeps the pods of namespace ns ("" any) named in names (none:
// all; "ns/name" or "name"); a name that matches no pod is an error.
func onlyPods(r *status.Report, ns string, names []string) error {
	matches := func(p status.Pod, n string) bool {
		if pns, pn, ok := strings.Cut(n, "/"); ok {
			return p.Namespace == pns && p.Name == pn
		}
		return p.Name == n
	}
	found := map[string]bool{}
	r.Only(func(p status.Pod) bool {
		if ns != "" && p.Namespace != ns {
			return false
		}
		hit := len(names) == 0
		for _, n := range names {
			if matches(p, n) {
				found[n], hit = true, true
			}
		}
		return hit
	})
	for _, n := range names {
		if !found[n] {
			where := "any namespace"
			if ns != "" {
				where = "namespace " + ns
			}
			return fmt.Errorf("no pod %s in %s", n, where)
		}
	}
	return nil
}

// writeStatus prints r as format (table, json, yaml); the table leaves the
// EgressIPs out unless objects.
func writeStatus(w io.Writer, r *status.Report, format string, objects bool) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "yaml":
		b, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return r.WriteTable(w, objects, time.Now())
}
