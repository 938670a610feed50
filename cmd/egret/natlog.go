package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egret-gw/egret/control/access"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/lab"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// DefaultNATLogDir is the gateway DaemonSet's --natlog-dir (a hostPath).
const DefaultNATLogDir = "/var/log/egret/natlog"

func init() {
	register("natlog", "which pod held egress IP:port at a time: the NAT log of a node (--dir), of every gateway of a cluster, or of a lab (--lab)", func(args []string) error {
		return access.Explain("natlog", runNATLog(args))
	})
}

type natlogQueryFlags struct {
	ip, at, proto, output, dir, lab, kubeconfig, namespace, selector string
	port                                                             int
}

func runNATLog(args []string) error {
	fs := newFlagSet("natlog")
	f := &natlogQueryFlags{}
	fs.StringVar(&f.ip, "ip", "", "the egress IP the outside saw (required)")
	fs.IntVar(&f.port, "port", 0, "the source port the outside saw (required)")
	fs.StringVar(&f.at, "at", "", "when: RFC 3339 (2026-12-04T14:02:07Z, or with an offset) or \"2006-01-02 15:04:05\" in UTC (default now)")
	fs.StringVar(&f.proto, "proto", "", "tcp or udp (default: either)")
	fs.StringVar(&f.output, "o", "table", "output format: table or json")
	fs.StringVar(&f.dir, "dir", "", "read the NAT log files in this directory (a node's --natlog-dir; subdirectories too)")
	fs.StringVar(&f.lab, "lab", "", "read the NAT logs of the gateways of this lab (egret lab up)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "read every gateway pod's NAT log through the API server (pods/exec; default: $KUBECONFIG, else the in-cluster configuration, else ~/.kube/config)")
	fs.StringVar(&f.namespace, "namespace", "egret-system", "the gateway pods' namespace (cluster)")
	fs.StringVar(&f.selector, "selector", "app.kubernetes.io/name=egret-gateway", "the gateway pods' label selector (cluster)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	q, err := f.question()
	if err != nil {
		return &usageError{cmd: fs.Name(), err: err}
	}
	if f.output != "table" && f.output != "json" {
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("-o %q: use table or json", f.output)}
	}
	if f.dir != "" && f.lab != "" {
		return &usageError{cmd: fs.Name(), err: errors.New("--dir and --lab exclude each other")}
	}
	var got []natlog.Binding
	switch {
	case f.dir != "" || f.lab != "":
		dir := f.dir
		if f.lab != "" {
			l, err := newLab(f.lab, lab.ModeKernel, lab.BuiltUnderlay("", f.lab))
			if err != nil {
				return err
			}
			dir = lab.NATLogDir(l.RunDir(), "")
		}
		if got, err = queryDir(dir, q); err != nil {
			return err
		}
	default:
		if got, err = f.queryCluster(q); err != nil {
			return err
		}
	}
	if err := writeBindings(os.Stdout, got, f.output); err != nil {
		return err
	}
	if len(got) == 0 {
		return fmt.Errorf("no binding held %s at %s", netip.AddrPortFrom(q.IP, q.Port), q.At.UTC().Format(time.RFC3339))
	}
	return nil
}

func (f *natlogQueryFlags) question() (natlog.Question, error) {
	var q natlog.Question
	ip, err := netip.ParseAddr(f.ip)
	if err != nil {
		return q, fmt.Errorf("--ip %q: want an IP address", f.ip)
	}
	if f.port < 1 || f.port > 65535 {
		return q, fmt.Errorf("--port %d: want 1–65535", f.port)
	}
	if f.proto != "" && f.proto != "tcp" && f.proto != "udp" {
		return q, fmt.Errorf("--proto %q: use tcp or udp", f.proto)
	}
	at, err := parseAt(f.at, time.Now())
	if err != nil {
		return q, err
	}
	return natlog.Question{IP: ip.Unmap(), Port: uint16(f.port), Protocol: f.proto, At: at}, nil
}

// parseAt reads --at; "" is now.
func parseAt(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--at %q: want RFC 3339 (2026-12-04T14:02:07Z) or \"2006-01-02 15:04:05\" (UTC)", s)
}

func queryDir(dir string, q natlog.Question) ([]natlog.Binding, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("no NAT log here: %w", err)
	}
	es, bad, err := natlog.Entries(dir)
	if err != nil {
		return nil, err
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "natlog: %d lines in %s are not records (skipped)\n", bad, dir)
	}
	return natlog.Query(es, q), nil
}

// queryCluster runs `egret natlog --dir <its --natlog-dir>` in every
// gateway pod through the API server (pods/exec) and merges the answers.
func (f *natlogQueryFlags) queryCluster(q natlog.Question) ([]natlog.Binding, error) {
	cfg, err := restConfig(f.kubeconfig, os.Getenv("KUBECONFIG") != "", "give --kubeconfig or set KUBECONFIG; --lab NAME or --dir DIR read a lab or a node")
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := cs.CoreV1().Pods(f.namespace).List(ctx, metav1.ListOptions{LabelSelector: f.selector})
	if err != nil {
		return nil, fmt.Errorf("listing the gateway pods: %w", err)
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Errorf("no gateway pods in namespace %s with labels %s", f.namespace, f.selector)
	}
	cmd := []string{"egret", "natlog", "--ip", q.IP.String(), "--port", strconv.Itoa(int(q.Port)),
		"--at", q.At.UTC().Format(time.RFC3339Nano), "-o", "json"}
	if q.Protocol != "" {
		cmd = append(cmd, "--proto", q.Protocol)
	}
	var all []natlog.Binding
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning {
			fmt.Fprintf(os.Stderr, "natlog: gateway pod %s is %s: its log is not read\n", p.Name, p.Status.Phase)
			continue
		}
		dir, ok := podNATLogDir(p)
		if !ok {
			fmt.Fprintf(os.Stderr, "natlog: gateway pod %s runs without --natlog-dir\n", p.Name)
			continue
		}
		out, err := execIn(ctx, cfg, cs, p, append(cmd, "--dir", dir))
		var got []natlog.Binding
		if jerr := json.Unmarshal(out, &got); jerr != nil {
			if err == nil {
				err = jerr
			}
			fmt.Fprintf(os.Stderr, "natlog: gateway pod %s: %v\n", p.Name, err)
			continue
		}
		all = append(all, got...) // its exit status is 1 when it found none
	}
	return all, nil
}

// podNATLogDir is the --natlog-dir of a gateway pod's container.
func podNATLogDir(p *corev1.Pod) (string, bool) {
	for _, c := range p.Spec.Containers {
		for i, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--natlog-dir="); ok {
				return v, v != ""
			}
			if a == "--natlog-dir" && i+1 < len(c.Args) {
				return c.Args[i+1], c.Args[i+1] != ""
			}
		}
	}
	return "", false
}

// execIn runs cmd in p's first container and returns its standard output.
func execIn(ctx context.Context, cfg *rest.Config, cs *kubernetes.Clientset, p *corev1.Pod, cmd []string) ([]byte, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: p.Spec.Containers[0].Name, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return true })
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil && stdout.Len() == 0 {
		return nil, fmt.Errorf("exec egret natlog: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func writeBindings(w io.Writer, bs []natlog.Binding, output string) error {
	if output == "json" {
		if bs == nil {
			bs = []natlog.Binding{}
		}
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(bs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOD\tPOD ADDRESS\tDESTINATION\tPROTO\tGATEWAY\tSTART\tEND")
	for _, b := range bs {
		end := "-"
		if b.End != nil {
			end = b.End.UTC().Format(time.RFC3339Nano)
		}
		ns, pod := b.Namespace, b.Pod
		if pod == "" {
			ns, pod = "-", "(unknown)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ns, pod, netip.AddrPortFrom(netip.MustParseAddr(b.PodIP), b.PodPort),
			b.Destination, b.Protocol, b.Gateway, b.Start.UTC().Format(time.RFC3339Nano), end)
	}
	return tw.Flush()
}
