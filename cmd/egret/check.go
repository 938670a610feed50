package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/egret-gw/egret/control/access"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/control/status"
	"github.com/egret-gw/egret/lab"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

func init() {
	register("check", "in a cluster, run a probe pod per selected namespace that fetches --url (an echo server, e.g. egret echo-server) and compare the address the outside saw with egret status; non-zero on a mismatch", func(args []string) error {
		return access.Explain("check", runCheck(args))
	})
	register("echo-server", "answer HTTP GET (and UDP) with the caller's address: the outside end of egret check", runEchoServer)
	register("probe-fetch", "fetch URL and print the answer (egret check's probe pods run it)", runProbeFetch)
}

// CheckLabel marks what one run of egret check creates (its value is the
// run's id), so that it finds and deletes its own objects only.
const checkLabel = "egret.io/check"

// checkFlags are the flags of `egret check`.
type checkFlags struct {
	kubeconfig  string
	namespaces  listFlag
	url         string
	timeout     time.Duration
	image       string
	trustPodIPs bool
}

func runCheck(args []string) error {
	fs := newFlagSet("check")
	f := &checkFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else the in-cluster configuration, else ~/.kube/config)")
	fs.Var(&f.namespaces, "n", "check this namespace (repeatable or comma-separated; default: every namespace with a pod an EgressIP selects)")
	fs.StringVar(&f.url, "url", "", "the echo endpoint outside the cluster: answers GET with the caller's address (egret echo-server; required)")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long the probe pods may take, from creation (image pull included) to their answer")
	fs.StringVar(&f.image, "image", "ghcr.io/egret-gw/egret:"+version, "the probe pods' image: Egret's own, which runs egret probe-fetch")
	fs.BoolVar(&f.trustPodIPs, "trust-pod-ips", false, "judge pod addresses as agents running with trustPodIPs do (a CNI whose IPAM ignores spec.podCIDRs)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	u, err := url.Parse(f.url)
	switch {
	case f.url == "":
		return &usageError{cmd: fs.Name(), err: errors.New("give --url, an echo endpoint outside the cluster (egret echo-server)")}
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("--url %q: give an http:// or https:// URL", f.url)}
	case f.timeout <= 0:
		return &usageError{cmd: fs.Name(), err: errors.New("--timeout must be positive")}
	}
	if _, err := newLogger("", "warn"); err != nil { // client-go's warnings, on stderr
		return err
	}
	// Ctrl-C and SIGTERM end the wait; the probe pods are deleted either way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := statusRESTConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	sf := &statusFlags{kubeconfig: f.kubeconfig}
	c := &checker{cs: cs, f: f, id: checkID(), view: func(ctx context.Context) (cluster.View, error) {
		v, _, err := sf.inputs(ctx)
		return v, err
	}}
	// The server's address, as the probe pods will reach it, decides which
	// object a pod that leaves by destination uses; a name is resolved here
	// (the pods' resolver may answer otherwise: then the check says so).
	if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		c.dst = a.Unmap()
	} else if as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname()); err == nil && len(as) > 0 {
		c.dst = as[0].Unmap()
	}
	rows, err := c.run(ctx)
	if err != nil {
		return err
	}
	return writeCheck(os.Stdout, rows)
}

func checkID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// checker is one run of egret check.
type checker struct {
	cs   kubernetes.Interface
	f    *checkFlags
	id   string
	view func(context.Context) (cluster.View, error)
	// dst is the echo server's address, invalid when --url names a host
	// that did not resolve.
	dst netip.Addr
}

// checkRow is one probe's outcome.
type checkRow struct {
	Namespace, Pod, Node string
	// Expected are the addresses egret status says the pod leaves as, or
	// what it says instead; Seen what the outside saw.
	Expected, Seen string
	Mismatch       bool
}

// run creates the probe pods, waits for their answers and compares them
// with the status; it deletes the pods before it returns, whatever
// happened (ctx cancelled by a signal included).
func (c *checker) run(ctx context.Context) ([]checkRow, error) {
	v, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	nss, labels := c.targets(v)
	if len(nss) == 0 {
		return nil, errors.New("no namespace has a pod an EgressIP selects: nothing to check (name namespaces with -n)")
	}
	defer c.cleanup(nss)
	pods := map[string]string{}
	for _, ns := range nss {
		p, err := c.cs.CoreV1().Pods(ns).Create(ctx, c.probePod(ns, labels[ns]), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating the probe pod in namespace %s: %w", ns, err)
		}
		pods[ns] = p.Name
	}
	answers := c.wait(ctx, pods)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted; the probe pods are deleted: %w", context.Cause(ctx))
	}
	if v, err = c.view(ctx); err != nil {
		return nil, err
	}
	var rows []checkRow
	for _, ns := range nss {
		rows = append(rows, compare(v, answers[ns], c.dst, c.f.trustPodIPs))
	}
	return rows, nil
}

// targets are the namespaces to probe (-n, or those with a selected pod)
// and, per namespace, the labels the probe pod needs to be selected as a
// selected pod there is: that pod's values of the keys its owner's
// podSelector names. No other label is copied, so that no controller or
// Service takes the probe for one of its pods.
func (c *checker) targets(v cluster.View) ([]string, map[string]map[string]string) {
	r := status.Build(v, status.Inputs{Plan: plan.Options{TrustPodIPs: c.f.trustPodIPs}})
	owners := map[string][]string{} // namespace/name → owners
	for _, p := range r.Pods {
		k := p.Namespace + "/" + p.Name
		if p.EgressIP != nil {
			owners[k] = append(owners[k], *p.EgressIP)
		}
		for _, d := range p.Destinations {
			owners[k] = append(owners[k], d.EgressIP)
		}
	}
	labels := map[string]map[string]string{}
	var nss []string
	for _, p := range v.Pods {
		if p == nil || len(owners[p.Namespace+"/"+p.Name]) == 0 || labels[p.Namespace] != nil {
			continue
		}
		l := map[string]string{}
		for _, e := range v.EgressIPs {
			if e == nil || !slices.Contains(owners[p.Namespace+"/"+p.Name], e.Name) {
				continue
			}
			keys := slices.Collect(maps.Keys(e.Spec.PodSelector.MatchLabels))
			for _, x := range e.Spec.PodSelector.MatchExpressions {
				keys = append(keys, x.Key)
			}
			for _, k := range keys {
				if val, ok := p.Labels[k]; ok {
					l[k] = val
				}
			}
		}
		labels[p.Namespace] = l
		nss = append(nss, p.Namespace)
	}
	if len(c.f.namespaces) > 0 {
		nss = slices.Clone(c.f.namespaces)
	}
	slices.Sort(nss)
	return slices.Compact(nss), labels
}

// probePod is the probe of namespace ns: Egret's image running
// probe-fetch, restricted as PodSecurity's restricted profile asks.
func (c *checker) probePod(ns string, labels map[string]string) *corev1.Pod {
	l := map[string]string{checkLabel: c.id}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "egret-check-", Labels: l},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: c.f.image,
				Args:                     []string{"probe-fetch", "--timeout", "10s", c.f.url},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

// answer is a finished probe: its pod and what it printed, or why none.
type answer struct {
	pod  *corev1.Pod
	out  string
	fail string
}

// wait polls the probe pods until each has ended, the timeout passes or
// ctx is done.
func (c *checker) wait(ctx context.Context, pods map[string]string) map[string]answer {
	ctx, cancel := context.WithTimeout(ctx, c.f.timeout)
	defer cancel()
	out := map[string]answer{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for ns, name := range pods {
			if _, done := out[ns]; done {
				continue
			}
			p, err := c.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue // asked again on the next tick, or reported at the timeout
			}
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				out[ns] = c.result(ctx, p)
			}
		}
		if len(out) == len(pods) {
			return out
		}
		select {
		case <-ctx.Done():
			for ns, name := range pods {
				if _, done := out[ns]; !done {
					p, _ := c.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
					if p == nil {
						p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
					}
					out[ns] = answer{pod: p, fail: fmt.Sprintf("no answer within --timeout %v (pod %s)", c.f.timeout, podPhase(p))}
				}
			}
			return out
		case <-tick.C:
		}
	}
}

// result reads what ended probe pod p printed: its termination message,
// else its log.
func (c *checker) result(ctx context.Context, p *corev1.Pod) answer {
	a := answer{pod: p}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			a.out = strings.TrimSpace(s.State.Terminated.Message)
		}
	}
	if a.out == "" {
		b, err := c.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			a.fail = fmt.Sprintf("probe %s, its log unreadable: %v", podPhase(p), err)
			return a
		}
		a.out = strings.TrimSpace(string(b))
	}
	if p.Status.Phase == corev1.PodFailed {
		a.fail, a.out = "the fetch failed: "+a.out, ""
	}
	return a
}

func podPhase(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			s += ", " + w.Reason
		}
	}
	if s == "" {
		return "not found"
	}
	return s
}

// compare judges answer a against egret status for its pod, as the pod
// was while it ran (the status of an ended pod has no sources). dst is the
// echo server's address (invalid when unknown): for a pod whose objects
// choose by destination, only the object it picks counts.
func compare(v cluster.View, a answer, dst netip.Addr, trustPodIPs bool) checkRow {
	row := checkRow{Namespace: a.pod.Namespace, Pod: a.pod.Name, Node: a.pod.Spec.NodeName}
	running := a.pod.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	v.Pods = append(slices.DeleteFunc(slices.Clone(v.Pods), func(p *corev1.Pod) bool {
		return p != nil && p.Namespace == running.Namespace && p.Name == running.Name
	}), running)
	r := status.Build(v, status.Inputs{Plan: plan.Options{TrustPodIPs: trustPodIPs}})
	r.Only(func(p status.Pod) bool { return p.Namespace == running.Namespace && p.Name == running.Name })
	var st status.Pod
	if len(r.Pods) == 1 {
		st = r.Pods[0]
	}
	seen, err := seenAddr(a.out)
	switch {
	case a.fail != "":
		row.Seen = a.fail
	case err != nil:
		row.Seen = err.Error()
	default:
		row.Seen = seen.String()
	}
	// The object the pod's connection to dst uses, when its objects
	// choose by destination ("" and outside: none, the node's address).
	byDest, owner, outside := false, "", false
	if dst.IsValid() && len(st.Destinations) > 0 {
		pl := plan.Build(v, plan.Options{TrustPodIPs: trustPodIPs})
		if i := slices.IndexFunc(pl.Pods, func(p plan.Pod) bool { return p.Namespace == running.Namespace && p.Name == running.Name }); i >= 0 {
			byDest = true
			owner, outside = pl.Pods[i].OwnerFor(dst)
			outside = outside || owner == ""
		}
	}
	var want []string
	for _, s := range st.Sources {
		if (!seen.IsValid() || s.IP.Is4() == seen.Is4()) && (!byDest || !outside && s.Object == owner) {
			want = append(want, s.IP.String())
		}
	}
	egress := map[netip.Addr]bool{}
	for _, o := range r.EgressIPs {
		for _, ip := range o.IPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				egress[a] = true
			}
		}
	}
	switch {
	case len(want) > 0:
		row.Expected = strings.Join(want, " or ")
		row.Mismatch = !slices.Contains(want, row.Seen)
	case byDest && outside:
		// No object's egress IPs towards dst: the node's address, or
		// nothing when an exclusion's object blocks; never an egress IP.
		row.Expected = "not an egress IP (no EgressIP of the pod claims " + dst.String() + ")"
		row.Mismatch = egress[seen]
	case st.State == status.StateNotSelected, slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, "leaves as its node's address") }):
		// Its node's address, whatever the node's SNAT makes it; never an
		// egress IP of an object.
		row.Expected = "not an egress IP (" + st.State + ": its node's address)"
		row.Mismatch = !seen.IsValid() || egress[seen]
	default:
		row.Expected = "no answer (" + st.State + ": " + strings.Join(st.Problems, "; ") + ")"
		row.Mismatch = seen.IsValid()
	}
	return row
}

// seenAddr reads the echo server's answer: "<ip>:<port>" or "<ip>".
func seenAddr(out string) (netip.Addr, error) {
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	first = strings.TrimSpace(first)
	if ap, err := netip.ParseAddrPort(first); err == nil {
		return ap.Addr().Unmap(), nil
	}
	if a, err := netip.ParseAddr(first); err == nil {
		return a.Unmap(), nil
	}
	return netip.Addr{}, fmt.Errorf("the echo server answered %q, not an address", first)
}

// cleanup deletes this run's probe pods in nss, with a context of its own:
// the run's may be cancelled already.
func (c *checker) cleanup(nss []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range nss {
		err := c.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
			metav1.ListOptions{LabelSelector: checkLabel + "=" + c.id})
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "%s check: deleting the probe pods of namespace %s (label %s=%s): %v\n", prog, ns, checkLabel, c.id, err)
		}
	}
}

// writeCheck prints the mismatches as a table; any is an error.
func writeCheck(w io.Writer, rows []checkRow) error {
	bad := 0
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		if !r.Mismatch {
			continue
		}
		if bad == 0 {
			fmt.Fprintln(tw, "NAMESPACE\tPOD\tNODE\tEGRET STATUS SAYS\tTHE OUTSIDE SAW")
		}
		bad++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Pod, r.Node, r.Expected, r.Seen)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d namespaces leave as something other than egret status says", bad, len(rows))
	}
	fmt.Fprintf(w, "%d namespaces checked: every probe left as egret status says\n", len(rows))
	return nil
}

func runEchoServer(args []string) error {
	fs := newFlagSet("echo-server")
	listen := fs.String("listen", ":8080", "the address to answer on, HTTP over TCP and UDP (host:port)")
	lf := bindLogFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(lf.format, lf.level)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return (&lab.EchoServer{HTTPAddr: *listen, UDPAddr: *listen, Log: log}).Run(ctx)
}

// terminationLog is where Kubernetes reads a container's termination
// message from.
const terminationLog = "/dev/termination-log"

func runProbeFetch(args []string) error {
	fs := newFlagSet("probe-fetch")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	names, err := parseFlagsAndNames(fs, args)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		return &usageError{cmd: fs.Name(), err: errors.New("give one URL")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, names[0], nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", names[0], resp.Status)
	}
	os.Stdout.Write(b)
	// In a pod the answer is also its termination message, read without
	// the log API; elsewhere the file does not exist.
	if f, err := os.OpenFile(terminationLog, os.O_WRONLY|os.O_TRUNC, 0); err == nil {
		f.Write(b)
		f.Close()
	}
	return nil
}
