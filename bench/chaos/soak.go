package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot/plotter"

	"github.com/egret-gw/egret/bench/dist"
	"github.com/egret-gw/egret/lab"
)

// The soak's documented bounds (docs/reliability.md, "The soak").
const (
	// growthBudget: an Egret process's RSS may grow this much over the
	// judged part of the run (after the warm-up).
	growthBudget = 0.05
	// growthEdge: the RSS at each end of the judged part is the median of
	// the samples this close to it, so one sample's noise does not decide.
	growthEdge = time.Minute
)

// Where the lab's Egret processes serve /metrics, inside their own
// namespaces: each binary's default --metrics-addr (metrics.Default*Addr,
// which only commands may import; TestMetricsAddrs keeps them equal).
const (
	gatewayMetrics    = "127.0.0.1:9110"
	controllerMetrics = "127.0.0.1:9111"
	steerMetrics      = "127.0.0.1:9112"
)

// soakOptions shape make soak's run.
type soakOptions struct {
	duration    time.Duration // the whole run
	killEvery   time.Duration // one gateway rebooted this often; the churn cycle
	sampleEvery time.Duration // each Egret process sampled this often
	out         string        // where soak.csv, soak.md and the plots go
}

// warmUp is the part of a run that is not judged for memory growth: the
// issue's 10 of 30 minutes, a third of any other length (whole seconds).
func (o soakOptions) warmUp() time.Duration { return (o.duration / 3).Round(time.Second) }

// procSample is one Egret process at one moment of the run.
type procSample struct {
	at         time.Duration // since the run began
	role       string        // "controller", "steer-w1", "gateway-g1"
	pid        int
	rssKiB     int
	fds        int
	goroutines float64 // from its /metrics; -1 when it did not answer
	flows      float64 // gateways: egret_gateway_flows
	natPorts   float64 // gateways: egret_gateway_nat_ports_in_use, summed
}

// soakResult is the whole soak.
type soakResult struct {
	opts                            soakOptions
	kills, edits, podDeletes        int
	wrong                           int
	wrongSample                     []packet
	doubles                         int
	lost                            int
	worstRecovery                   time.Duration
	unrecovered                     int
	samples                         []procSample
	growth                          []growthLine
	footprintBefore, footprintAfter footprint
}

// growthLine is one process's RSS over the judged part of the run.
type growthLine struct {
	role     string
	pid      int
	from, to int // KiB, medians at each end
	judged   bool
	why      string // when not judged
}

func (g growthLine) ratio() float64 {
	if g.from == 0 {
		return 0
	}
	return float64(g.to)/float64(g.from) - 1
}

// growth judges every process's RSS between warm (the end of the warm-up)
// and end: a process alive through all of it is judged on the median of
// its samples within growthEdge of each end; one that started or ended
// inside it (a rebooted gateway) is listed, not judged.
func growth(samples []procSample, warm, end, every time.Duration) []growthLine {
	type key struct {
		role string
		pid  int
	}
	by := map[key][]procSample{}
	var keys []key
	for _, s := range samples {
		k := key{s.role, s.pid}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], s)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.role, b.role); c != 0 {
			return c
		}
		return a.pid - b.pid
	})
	median := func(ss []procSample, from, to time.Duration) int {
		var v []int
		for _, s := range ss {
			if s.at >= from && s.at <= to {
				v = append(v, s.rssKiB)
			}
		}
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var out []growthLine
	for _, k := range keys {
		ss := by[k]
		first, last := ss[0].at, ss[len(ss)-1].at
		if last < warm {
			continue // ended during the warm-up
		}
		g := growthLine{role: k.role, pid: k.pid}
		switch {
		case first > warm+every:
			g.why = fmt.Sprintf("started %s into the run", first.Round(time.Second))
		case last < end-every:
			g.why = fmt.Sprintf("ended %s into the run", last.Round(time.Second))
		default:
			g.from, g.to = median(ss, warm, warm+growthEdge), median(ss, end-growthEdge, end)
			g.judged = g.from > 0 && g.to > 0
			if !g.judged {
				g.why = "no samples at one end"
			}
		}
		out = append(out, g)
	}
	return out
}

// worstGrowth is the judged process whose RSS grew most.
func worstGrowth(lines []growthLine) (growthLine, bool) {
	var worst growthLine
	found := false
	for _, g := range lines {
		if g.judged && (!found || g.ratio() > worst.ratio()) {
			worst, found = g, true
		}
	}
	return worst, found
}

func (r *soakResult) summary() string {
	mem := "no process judged"
	if w, ok := worstGrowth(r.growth); ok {
		mem = fmt.Sprintf("worst %+.1f %% (%s)", 100*w.ratio(), w.role)
	}
	return fmt.Sprintf("soak: %v, %d gateway reboots, %d EgressIP edits, %d pod deletions; %d wrong-source packets, %d double-answer windows over budget, %d connections lost, worst recovery %.1f s; RSS growth over the last %v: %s",
		r.opts.duration, r.kills, r.edits, r.podDeletes, r.wrong, r.doubles, r.lost, r.worstRecovery.Seconds(), r.opts.duration-r.opts.warmUp(), mem)
}

// broken names what the soak broke ("" for nothing): the chaos
// invariants, a reboot not recovered from, and memory growth over budget.
func (r *soakResult) broken() string {
	var out []string
	if r.wrong > 0 {
		out = append(out, fmt.Sprintf("%d wrong-source packets", r.wrong))
	}
	if r.doubles > 0 {
		out = append(out, fmt.Sprintf("%d double-answer windows over %v", r.doubles, doubleBudget))
	}
	if r.unrecovered > 0 {
		out = append(out, fmt.Sprintf("%d gateway reboots not recovered from within %v", r.unrecovered, recoverLimit))
	}
	for _, g := range r.growth {
		if g.judged && g.ratio() > growthBudget {
			out = append(out, fmt.Sprintf("%s (pid %d) RSS grew %+.1f %% (%d → %d KiB), over %.0f %%", g.role, g.pid, 100*g.ratio(), g.from, g.to, 100*growthBudget))
		}
	}
	if _, ok := worstGrowth(r.growth); !ok {
		out = append(out, "no Egret process lived through the judged part of the run")
	}
	return strings.Join(out, "; ")
}

// soak brings the lab up, runs the churn and tears it down.
func soak(o options, so soakOptions, out io.Writer) (*soakResult, error) {
	var res *soakResult
	err := withLab(o, func(l *lab.Lab) error {
		var err error
		res, err = soakPlay(l, so, out)
		return err
	})
	return res, err
}

// churn is one cycle of what a soak does to the lab, as fractions of the
// cycle (killEvery): an EgressIP loses an address, a pod is deleted and
// created again, the address comes back, another EgressIP is deleted and
// created again, and at the cycle's end the busiest gateway is rebooted
// (never the one kept running, whose memory is judged over the whole run).
var churn = []struct {
	at   float64
	what string
}{
	{0.25, "edit"}, {0.5, "pod-delete"}, {0.6, "pod-create"}, {0.75, "edit-back"},
	{0.85, "object-delete"}, {0.95, "object-create"}, {1, "reboot"},
}

// soakPlay runs the soak on a lab that is up.
func soakPlay(l *lab.Lab, so soakOptions, out io.Writer) (*soakResult, error) {
	if err := os.MkdirAll(so.out, 0o755); err != nil {
		return nil, err
	}
	r, err := startRig(l)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	start := time.Now()
	if _, ok := recovered(l, r.traffic, start, recoverLimit); !ok {
		return nil, errors.New("the lab's pods do not leave as expected before the soak")
	}
	st, err := l.Status()
	if err != nil {
		return nil, err
	}
	res := &soakResult{opts: so, footprintBefore: measure(l, st)}
	ed, err := newEditor(l, st)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "soak: from %s, managed lab %s, %d pods, %v; every %v: %s's %v removed and back, pod %s deleted and created, EgressIP %s deleted and created, the busiest gateway but %s rebooted; samples every %v into %s\n",
		start.Format("15:04:05.000"), l.Spec.Name, len(r.traffic), so.duration, so.killEvery, ed.object, ed.ip, ed.pod, ed.gone, ed.kept, so.sampleEvery, so.out)

	// The process sampler, in its own goroutine so that a slow recovery
	// does not leave gaps in the plots.
	var (
		smu     sync.Mutex
		samples []procSample
	)
	stopSampling := make(chan struct{})
	var swg sync.WaitGroup
	take := func() {
		ss := sampleProcesses(l, time.Since(start))
		smu.Lock()
		samples = append(samples, ss...)
		smu.Unlock()
	}
	take()
	every(stopSampling, &swg, so.sampleEvery, take)

	type event struct {
		at   time.Duration
		what string
	}
	var events []event
	for cycle := time.Duration(0); cycle < so.duration; cycle += so.killEvery {
		for _, c := range churn {
			if at := cycle + time.Duration(c.at*float64(so.killEvery)); at <= so.duration {
				events = append(events, event{at, c.what})
			}
		}
	}
	for _, ev := range events {
		time.Sleep(time.Until(start.Add(ev.at))) // the churn's schedule: nothing to wait for
		what := ev.what
		now := time.Since(start).Round(time.Second)
		switch what {
		case "edit", "edit-back":
			if err := ed.toggleIP(what == "edit"); err != nil {
				return res, err
			}
			res.edits++
			fmt.Fprintf(out, "  %8v %s %v of %s\n", now, map[bool]string{true: "removed", false: "restored"}[what == "edit"], ed.ip, ed.object)
		case "pod-delete", "pod-create":
			del := what == "pod-delete"
			if del {
				// From now on the pod is no pod to the controller: it may
				// leave as its node (masquerade) or not at all, never as an
				// egress IP (beyond the move window).
				r.setOverride(func(allowed map[string][]netip.Addr) { allowed[ed.pod] = []netip.Addr{ed.podNode} })
			}
			if err := ed.togglePod(del); err != nil {
				return res, err
			}
			if !del {
				r.setOverride(nil)
			} else {
				res.podDeletes++
			}
			fmt.Fprintf(out, "  %8v pod %s %s\n", now, ed.pod, map[bool]string{true: "deleted", false: "created again"}[del])
		case "object-delete", "object-create":
			del := what == "object-delete"
			if err := ed.toggleObject(del); err != nil {
				return res, err
			}
			res.edits++
			fmt.Fprintf(out, "  %8v EgressIP %s %s\n", now, ed.gone, map[bool]string{true: "deleted", false: "created again"}[del])
		case "reboot":
			st, err := l.Status()
			if err != nil {
				return res, err
			}
			gw := busiestExcept(st, ed.kept)
			if err := l.KillGateway(gw); err != nil {
				return res, err
			}
			time.Sleep(2 * time.Second) // the node is down this long, as in make chaos
			if err := l.StartGateway(gw); err != nil {
				return res, err
			}
			cleared := time.Now()
			at, ok := recovered(l, r.traffic, cleared, recoverLimit)
			res.kills++
			if !ok {
				res.unrecovered++
				fmt.Fprintf(out, "  %8v gateway %s rebooted: NOT recovered within %v\n", now, gw, recoverLimit)
				continue
			}
			res.worstRecovery = max(res.worstRecovery, at.Sub(cleared))
			fmt.Fprintf(out, "  %8v gateway %s rebooted, recovered in %.1f s\n", now, gw, at.Sub(cleared).Seconds())
		}
	}
	// Steady traffic past the last move window, then the verdict.
	time.Sleep(moveWindow + 500*time.Millisecond)
	close(stopSampling)
	swg.Wait()
	take()
	end := time.Now()

	pkts, _ := r.rec.since(0)
	bad := wrongSources(r.tl, pkts, moveWindow)
	res.wrong = len(bad)
	for _, w := range doubleAnswers(r.arp.all(), arpGap) {
		if w.length() > doubleBudget {
			res.doubles++
		}
	}
	for _, t := range r.traffic {
		lost, _ := t.connStats(start, end)
		res.lost += lost
	}
	smu.Lock()
	res.samples = samples
	smu.Unlock()
	res.growth = growth(res.samples, so.warmUp(), end.Sub(start), so.sampleEvery)
	if st, err := l.Status(); err == nil {
		res.footprintAfter = measure(l, st)
	}
	if err := res.write(so.out); err != nil {
		return res, err
	}
	for _, e := range episodes(bad) {
		fmt.Fprintf(out, "  wrong: %v; the status allowed %v\n", e, r.tl.allowedAt(e.pod, e.first))
	}
	fmt.Fprint(out, res.growthTable())
	fmt.Fprintf(out, "  footprint before: %v\n  footprint after:  %v\n", res.footprintBefore, res.footprintAfter)
	fmt.Fprintln(out, res.summary())
	return res, nil
}

// growthTable is the per-process memory verdict, for the output and soak.md.
func (r *soakResult) growthTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  RSS over the last %v (after a %v warm-up), budget %+.0f %%:\n", r.opts.duration-r.opts.warmUp(), r.opts.warmUp(), 100*growthBudget)
	for _, g := range r.growth {
		if !g.judged {
			fmt.Fprintf(&b, "    %-12s pid %-7d not judged: %s\n", g.role, g.pid, g.why)
			continue
		}
		fmt.Fprintf(&b, "    %-12s pid %-7d %7d → %7d KiB  %+5.1f %%\n", g.role, g.pid, g.from, g.to, 100*g.ratio())
	}
	return b.String()
}

// editor makes the soak's changes to the lab's objects, as a user's kubectl
// would: one EgressIP's spec and the pods' manifest.
type editor struct {
	dir     string
	object  string     // the EgressIP that loses ip and gets it back
	file    string     // its manifest
	orig    []byte     // its manifest as lab up wrote it
	ip      netip.Addr // the address it loses
	pod     string     // the pod deleted and created again
	podNode netip.Addr // its node's address: what it may leave as while deleted
	pods    []byte     // pods.yaml as lab up wrote it
	gone    string     // the EgressIP deleted and created again
	// kept is the gateway never rebooted, so that one gateway's memory
	// is judged over the whole run; it takes the others' IPs over.
	kept string
}

// busiestExcept is busiest among the gateways but kept.
func busiestExcept(st *lab.Status, kept string) string {
	c := *st
	c.Gateways = slices.DeleteFunc(slices.Clone(st.Gateways), func(g lab.GatewayStatus) bool { return g.Name == kept })
	return busiest(&c)
}

// quietest is the gateway hosting the fewest IPv4 egress IPs (the last by
// name among equals): the soak's kept gateway.
func quietest(st *lab.Status) string {
	best, n := "", -1
	for _, g := range st.Gateways {
		if c := v4Count(g); n < 0 || c < n || (c == n && g.Name > best) {
			best, n = g.Name, c
		}
	}
	return best
}

// newEditor picks the first object with two IPv4 egress IPs (it loses its
// last) and the first selected pod of another object.
func newEditor(l *lab.Lab, st *lab.Status) (*editor, error) {
	ed := &editor{dir: lab.ObjectsDir(l.RunDir()), kept: quietest(st)}
	if len(st.Gateways) < 2 {
		return nil, errors.New("the soak reboots one gateway while another keeps running: the lab needs two")
	}
	eips, err := lab.EgressIPs(ed.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range eips {
		var v4 []netip.Addr
		for _, s := range e.Spec.EgressIPs {
			if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
				v4 = append(v4, a)
			}
		}
		if len(v4) >= 2 {
			ed.object, ed.ip = e.Name, v4[len(v4)-1]
			break
		}
	}
	if ed.object == "" {
		return nil, errors.New("no EgressIP of the lab has two IPv4 egress IPs to edit")
	}
	ed.file = ed.objectFile(ed.object)
	if ed.orig, err = os.ReadFile(ed.file); err != nil {
		return nil, err
	}
	if _, err := withoutLine(ed.orig, "- "+ed.ip.String()); err != nil {
		return nil, fmt.Errorf("%s: %w", ed.file, err)
	}
	podPolicy := ""
	for _, p := range st.Pods {
		if p.Policy != "" && p.Policy != ed.object {
			ed.pod, podPolicy = p.Name, p.Policy
			for _, w := range l.Spec.Workers {
				if w.Name == p.Node {
					ed.podNode = w.IP
				}
			}
			break
		}
	}
	if ed.pod == "" || !ed.podNode.IsValid() {
		return nil, fmt.Errorf("no selected pod outside %s to delete", ed.object)
	}
	for _, e := range eips {
		if e.Name != ed.object && e.Name != podPolicy {
			ed.gone = e.Name
			break
		}
	}
	if ed.gone == "" {
		return nil, fmt.Errorf("no third EgressIP to delete besides %s and %s", ed.object, podPolicy)
	}
	if _, err := os.Stat(ed.objectFile(ed.gone)); err != nil {
		return nil, err
	}
	if ed.pods, err = os.ReadFile(filepath.Join(ed.dir, "pods.yaml")); err != nil {
		return nil, err
	}
	if _, err := withoutPod(ed.pods, ed.pod); err != nil {
		return nil, err
	}
	return ed, nil
}

// objectFile is where lab up wrote EgressIP name.
func (ed *editor) objectFile(name string) string {
	return filepath.Join(ed.dir, "egressip-"+name+".yaml")
}

// toggleObject deletes the EgressIP gone (its manifest becomes a dot file,
// which the object readers skip) or creates it again.
func (ed *editor) toggleObject(del bool) error {
	file := ed.objectFile(ed.gone)
	hidden := filepath.Join(ed.dir, ".soak-deleted-"+filepath.Base(file))
	if del {
		return os.Rename(file, hidden)
	}
	return os.Rename(hidden, file)
}

// toggleIP removes the object's last IPv4 egress IP, or puts it back.
func (ed *editor) toggleIP(remove bool) error {
	b := ed.orig
	if remove {
		var err error
		if b, err = withoutLine(ed.orig, "- "+ed.ip.String()); err != nil {
			return err
		}
	}
	return replaceFile(ed.file, b)
}

// withoutLine is a manifest without its one line that reads item once
// trimmed: the whole line goes, indentation too, or the next line would
// move under the list.
func withoutLine(manifest []byte, item string) ([]byte, error) {
	lines := bytes.SplitAfter(manifest, []byte("\n"))
	n := len(lines)
	lines = slices.DeleteFunc(lines, func(l []byte) bool { return string(bytes.TrimSpace(l)) == item })
	if len(lines) != n-1 {
		return nil, fmt.Errorf("%d lines read %q, want 1", n-len(lines), item)
	}
	return bytes.Join(lines, nil), nil
}

// togglePod deletes the pod's object from pods.yaml, or puts it back.
func (ed *editor) togglePod(del bool) error {
	b := ed.pods
	if del {
		var err error
		if b, err = withoutPod(ed.pods, ed.pod); err != nil {
			return err
		}
	}
	return replaceFile(filepath.Join(ed.dir, "pods.yaml"), b)
}

// withoutPod is a multi-document manifest without the document of the
// pod named name.
func withoutPod(manifest []byte, name string) ([]byte, error) {
	docs := bytes.Split(manifest, []byte("---\n"))
	n := len(docs)
	docs = slices.DeleteFunc(docs, func(d []byte) bool {
		return bytes.Contains(d, []byte("kind: Pod\n")) && bytes.Contains(d, []byte("\n  name: "+name+"\n"))
	})
	if len(docs) != n-1 {
		return nil, fmt.Errorf("the pods' manifest has %d documents of pod %s, want 1", n-len(docs), name)
	}
	return bytes.Join(docs, []byte("---\n")), nil
}

// replaceFile writes b to path at once: the object readers skip dot files,
// so they never see a half-written manifest.
func replaceFile(path string, b []byte) error {
	tmp := filepath.Join(filepath.Dir(path), ".soak-"+filepath.Base(path))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// sampleProcesses measures every Egret process of the lab: RSS and open
// files from /proc, goroutines, flows and NAT ports from its /metrics,
// read inside its namespace.
func sampleProcesses(l *lab.Lab, at time.Duration) []procSample {
	st, err := l.Status()
	if err != nil || st.Controller == nil {
		return nil
	}
	type proc struct {
		role, ns, addr string
		pid            int
	}
	procs := []proc{{"controller", st.Controller.Namespace, controllerMetrics, st.Controller.PID}}
	for _, s := range st.Steer {
		procs = append(procs, proc{s.Name, s.Namespace, steerMetrics, s.PID})
	}
	for _, g := range st.Gateways {
		procs = append(procs, proc{"gateway-" + g.Name, g.Namespace, gatewayMetrics, g.PID})
	}
	var out []procSample
	for _, p := range procs {
		rss, _, ok := procStatus(p.pid)
		if !ok {
			continue // not running at this moment (a reboot)
		}
		s := procSample{at: at, role: p.role, pid: p.pid, rssKiB: rss, fds: procFDs(p.pid), goroutines: -1}
		if fams, err := scrape(p.ns, p.addr); err == nil {
			s.goroutines = sum(fams, "go_goroutines")
			s.flows = sum(fams, "egret_gateway_flows")
			s.natPorts = sum(fams, "egret_gateway_nat_ports_in_use")
		}
		out = append(out, s)
	}
	return out
}

func procFDs(pid int) int {
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return -1
	}
	return len(ents)
}

// scrape reads /metrics at addr inside namespace ns.
func scrape(ns, addr string) (map[string]*dto.MetricFamily, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			return lab.DialContext(ctx, ns, network, a)
		},
		DisableKeepAlives: true,
	}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s in %s: %s", addr, ns, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sum adds up every gauge (or counter) of one metric, over its labels.
func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range fams[name].GetMetric() {
		v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	return v
}

// write leaves the run's record in dir: every sample (soak.csv), the
// summary (soak.md) and one plot per measure (soak-*.png).
func (r *soakResult) write(dir string) error {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"seconds", "process", "pid", "rss_kib", "open_fds", "goroutines", "flows", "nat_ports"})
	for _, s := range r.samples {
		w.Write([]string{strconv.FormatFloat(s.at.Seconds(), 'f', 1, 64), s.role, strconv.Itoa(s.pid), strconv.Itoa(s.rssKiB),
			strconv.Itoa(s.fds), strconv.FormatFloat(s.goroutines, 'f', -1, 64), strconv.FormatFloat(s.flows, 'f', -1, 64), strconv.FormatFloat(s.natPorts, 'f', -1, 64)})
	}
	w.Flush()
	if err := os.WriteFile(filepath.Join(dir, "soak.csv"), b.Bytes(), 0o644); err != nil {
		return err
	}
	md := fmt.Sprintf("```\n%s  footprint before: %v\n  footprint after:  %v\n%s\n```\n", r.growthTable(), r.footprintBefore, r.footprintAfter, r.summary())
	if err := os.WriteFile(filepath.Join(dir, "soak.md"), []byte(md), 0o644); err != nil {
		return err
	}
	for _, m := range []struct {
		file, title, unit string
		v                 func(procSample) float64
		gateways          bool
	}{
		{"soak-rss.png", "RSS per Egret process", "MiB", func(s procSample) float64 { return float64(s.rssKiB) / 1024 }, false},
		{"soak-goroutines.png", "goroutines per Egret process", "goroutines", func(s procSample) float64 { return s.goroutines }, false},
		{"soak-fds.png", "open files per Egret process", "fds", func(s procSample) float64 { return float64(s.fds) }, false},
		{"soak-flows.png", "flows per gateway", "flows", func(s procSample) float64 { return s.flows }, true},
		{"soak-natports.png", "NAT ports in use per gateway", "ports", func(s procSample) float64 { return s.natPorts }, true},
	} {
		if err := dist.SavePNG(filepath.Join(dir, m.file), m.title, "minutes", m.unit, series(r.samples, m.v, m.gateways)...); err != nil {
			return err
		}
	}
	return nil
}

// series is one line per process role (a rebooted gateway's line goes on
// with its new process), skipping samples the process did not answer.
func series(samples []procSample, v func(procSample) float64, gatewaysOnly bool) []dist.Series {
	var roles []string
	xy := map[string]plotter.XYs{}
	for _, s := range samples {
		if gatewaysOnly && !strings.HasPrefix(s.role, "gateway-") {
			continue
		}
		y := v(s)
		if y < 0 {
			continue
		}
		if _, ok := xy[s.role]; !ok {
			roles = append(roles, s.role)
		}
		xy[s.role] = append(xy[s.role], plotter.XY{X: s.at.Minutes(), Y: y})
	}
	slices.Sort(roles)
	out := make([]dist.Series, 0, len(roles))
	for _, role := range roles {
		out = append(out, dist.Series{Name: role, XY: xy[role]})
	}
	return out
}
