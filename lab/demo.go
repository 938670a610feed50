package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/egret-gw/egret/gateway/natlog"
	"golang.org/x/sys/unix"
)

// DemoRecord is one probe from one pod, as `egret demo --json` prints it.
type DemoRecord struct {
	Phase string `json:"phase"` // "before" or "after" the failover
	Pod   string `json:"pod"`
	// Namespace is the pod's Kubernetes namespace; Node its worker node.
	Namespace string `json:"namespace"`
	Node      string `json:"node"`
	// EgressIPObject is the EgressIP object selecting the pod ("" for none).
	EgressIPObject string `json:"egressIPObject"`
	Probe          string `json:"probe"` // http, udp, ping, or http6, udp6, ping6 over IPv6
	// Family is "ipv4" or "ipv6": the address family of the probe.
	Family string `json:"family"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	// Seen is the source address the outside server saw.
	Seen string `json:"seen"`
	// Gateway is the node hosting Seen ("" when not steered).
	Gateway string `json:"gateway"`
	// Steered is false for a pod no EgressIP selects: it leaves with its node's IP.
	Steered bool `json:"steered"`
	// Expected lists the sources the server may see for this pod.
	Expected []string `json:"expected"`
	// AsExpected is true when Seen is one of Expected.
	AsExpected bool `json:"asExpected"`
}

// DemoDestination is one probe from a pod that objects select by
// destination to one outside address, as `egret demo --json` prints it.
type DemoDestination struct {
	Phase string `json:"phase"`
	Pod   string `json:"pod"`
	// Destination is the address probed (HTTP); Server names it: "server 1",
	// "server 2", or "server 2 (excluded address)".
	Destination string `json:"destination"`
	Server      string `json:"server"`
	// EgressIPObject is the object whose egress IPs it should leave with,
	// "" when it should leave as its node; Excluded says an exclusion
	// decided that.
	EgressIPObject string `json:"egressIPObject"`
	Excluded       bool   `json:"excluded"`
	OK             bool   `json:"ok"`
	Error          string `json:"error,omitempty"`
	// Seen is the source address the destination saw, Gateway the node
	// hosting it ("" for the pod's node).
	Seen       string   `json:"seen"`
	Gateway    string   `json:"gateway"`
	Expected   []string `json:"expected"`
	AsExpected bool     `json:"asExpected"`
}

// DemoLongLived is the keep-alive connection the demo holds open through
// the gateway kill, as `egret demo --json` prints it.
type DemoLongLived struct {
	// Pod is the pod it comes from.
	Pod string `json:"pod"`
	// SeenBefore is the source address and port the server saw on it
	// before the kill, SeenAfter in its first answer after the killed
	// gateway was gone.
	SeenBefore string `json:"seenBefore"`
	SeenAfter  string `json:"seenAfter,omitempty"`
	// Gateway hosted SeenBefore's egress IP: the killed gateway.
	Gateway string `json:"gateway"`
	// Survived is true when the same connection was answered again, within
	// longLivedLimit of the kill, and the server saw the same source.
	Survived bool `json:"survived"`
	// Seconds is the time from the kill to that answer.
	Seconds float64 `json:"seconds,omitempty"`
	// Error says why it did not survive.
	Error string `json:"error,omitempty"`
}

// longLivedLimit bounds the wait for the long-lived connection's first
// answer after the kill, and every exchange on it.
const longLivedLimit = 10 * time.Second

// DemoResult is the whole `egret demo --json` output.
type DemoResult struct {
	Lab                             string             `json:"lab"`
	Underlay                        string             `json:"underlay"`
	ReachabilityTotalTimeoutSeconds int                `json:"reachabilityTotalTimeoutSeconds"`
	HoldDownSeconds                 float64            `json:"holdDownSeconds"`
	Assignment                      []AssignmentStatus `json:"assignmentBefore"`
	AssignmentAfter                 []AssignmentStatus `json:"assignmentAfter"`
	Records                         []DemoRecord       `json:"records"`
	// Destinations are the probes of the pods selected by destination
	// (before the failover).
	Destinations           []DemoDestination `json:"destinations"`
	FailedGateway          string            `json:"failedGateway"`
	Failover               *FailoverResult   `json:"failover"`
	FailoverSeconds        float64           `json:"failover_seconds"`
	LongLived              *DemoLongLived    `json:"longLived"`
	ReturnedGatewayHealthy bool              `json:"returnedGatewayHealthy"`
	// NATLog is the NAT log's answer to "who was LongLived.SeenBefore":
	// `egret natlog --lab <lab> --ip .. --port ..` after the failover.
	NATLog  []natlog.Binding `json:"natlog"`
	Kept    bool             `json:"kept"`
	Seconds float64          `json:"seconds"`
}

// Demo is `egret demo`: it builds a lab in network namespaces, runs the
// real control plane in it, shows who egresses as whom, kills a gateway
// and times the failover (docs/demo.md).
type Demo struct {
	// Name is the lab's name, the prefix of its network namespaces.
	Name string
	// Keep leaves the lab up afterwards.
	Keep bool
	// JSON prints a DemoResult on Out instead of the tables.
	JSON bool
	// ReachabilitySeconds is the controller's reachabilityTotalTimeoutSeconds
	// (1-60, checked by the command), HoldDown how long a returned gateway waits for egress IPs.
	ReachabilitySeconds int
	HoldDown            time.Duration
	// Underlay is UnderlayIPv4 or UnderlayIPv6.
	Underlay string
	// Binary is the egret binary the lab runs.
	Binary string
	// Out takes the results, Progress the steps (Out too unless JSON).
	Out, Progress io.Writer
}

// Run runs the demo; an error says what failed (a probe, the failover, the
// long-lived connection).
func (dm *Demo) Run() error {
	name, keep, asJSON, reach, holdDown, self := &dm.Name, &dm.Keep, &dm.JSON, &dm.ReachabilitySeconds, &dm.HoldDown, dm.Binary
	out, progress := dm.Out, dm.Progress
	d := &demo{progress: progress, out: out, started: time.Now(), total: 9}
	res := &DemoResult{Lab: *name, Underlay: dm.Underlay, ReachabilityTotalTimeoutSeconds: *reach, HoldDownSeconds: holdDown.Seconds(), Kept: *keep}

	d.step("checking this machine (root, tools, AF_XDP, egret gateway agent)")
	if err := demoPreflight(self); err != nil {
		return err
	}
	spec, err := NewSpec(*name, dm.Underlay)
	if err != nil {
		return err
	}
	l := &Lab{Spec: spec, Binary: self,
		Impl: Managed{Binary: self, ReachabilityTotalTimeoutSeconds: *reach, HoldDown: *holdDown, DualStack: true}}
	if left := Namespaces(*name); len(left) > 0 {
		d.printf("  lab %q exists already (an earlier --keep or an interrupted run): it is removed and built again\n", *name)
	}

	pods, dual := 0, 0
	for _, w := range l.Spec.Workers {
		for _, p := range w.Pods {
			pods++
			if p.IP6.IsValid() {
				dual++
			}
		}
	}
	what := fmt.Sprintf("2 workers with %d pods (%d dual-stack), 3 gateways, router, 2 echo servers, DNS", pods, dual)
	if l.Spec.IPv6Only() {
		what = fmt.Sprintf("IPv6 only, VXLAN over IPv6: 2 workers with %d pods, 3 gateways, router, 2 echo servers, DNS", pods)
	}
	d.step(fmt.Sprintf("building the lab %q: %s; starting egret controller, 3 egret gateway agents, 2 egret steer agents", *name, what))
	if err := l.Up(); err != nil {
		return fmt.Errorf("building the lab: %w (the logs are in %s; `egret lab down --name %s` removes what is left)", err, l.RunDir(), *name)
	}
	cleanup := func() error {
		if *keep {
			return nil
		}
		return Down("", *name)
	}
	failed := func(err error) error {
		if cerr := cleanup(); cerr != nil {
			err = fmt.Errorf("%w (and removing the lab failed: %v)", err, cerr)
		}
		return err
	}
	st, err := l.Status()
	if err != nil {
		return failed(err)
	}
	res.Assignment = st.Assignment
	d.printf("  the controller assigned: %s\n", assignmentLine(st.Assignment))

	to := fmt.Sprintf("the outside server %v", l.Spec.Server.IP)
	if l.Spec.Server.IP6.IsValid() {
		to += fmt.Sprintf(", and over IPv6 to %v from the dual-stack pods", l.Spec.Server.IP6)
	}
	d.step("sending HTTP, UDP and ping from every pod to " + to)
	recs, ok := probeAll(l, st, "before")
	res.Records = append(res.Records, recs...)
	if !*asJSON {
		printTable(out, recs)
	}

	d.step("sending HTTP from the pods selected by destination to each outside address")
	dests, ok3 := probeDestinations(l, st, "before")
	res.Destinations = dests
	if len(dests) == 0 {
		d.printf("  no pod is selected by destination in this lab\n")
	} else if !*asJSON {
		printDestinations(out, dests)
	}
	ok = ok && ok3

	gw := failoverTarget(st)
	res.FailedGateway = gw
	ka, ll, err := openLongLived(l, st, gw)
	if err != nil {
		return failed(err)
	}
	defer ka.Close()
	kill := make(chan [2]time.Time, 1)
	llDone := watchLongLived(ka, ll, kill)
	time.Sleep(300 * time.Millisecond) // a few exchanges, and scans of the flow sync (every 100 ms), before the kill
	d.step(fmt.Sprintf("killing egret gateway on %s (SIGKILL: agent, health check and data plane stop)", gw))
	fo, err := l.Failover(gw, time.Duration(*reach)*time.Second+8*time.Second)
	res.Failover = fo
	if fo != nil {
		res.FailoverSeconds = fo.Seconds()
	}
	if err != nil {
		return failed(fmt.Errorf("failover of %s: %w", gw, err))
	}
	d.printf("  failover took %.2f s: status changed after %.2f s, the first request with %s from %s after %.2f s (limit %d s + 1 s)\n",
		fo.Seconds(), fo.StatusSeconds, movedLine(fo.Moved), fo.Pod, fo.TrafficSeconds, *reach)
	kill <- [2]time.Time{fo.Killed, fo.Dead}
	res.LongLived = <-llDone
	d.printf("  %s\n", longLivedLine(res.LongLived))

	d.step("sending from every pod again: the moved egress IPs now leave from their new gateways")
	if st, err = l.Status(); err != nil {
		return failed(err)
	}
	res.AssignmentAfter = st.Assignment
	recs, ok2 := probeAll(l, st, "after")
	res.Records = append(res.Records, recs...)
	if !*asJSON {
		printTable(out, recs)
	}

	d.step(fmt.Sprintf("bringing %s back; after the %v hold-down it can take egress IPs again (assigned IPs stay where they are)", gw, *holdDown))
	if err := l.StartGateway(gw); err != nil {
		return failed(fmt.Errorf("restarting egret gateway on %s: %w", gw, err))
	}
	res.ReturnedGatewayHealthy = true

	natlogOK := askNATLog(d, l, res)

	if *keep {
		d.step(fmt.Sprintf("keeping the lab: `egret lab status --name %s`, `ip netns exec %s-w1-p1 curl -s http://%v/`, `egret lab down --name %s`",
			*name, *name, netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort), *name))
	} else {
		d.step("removing the lab (use --keep to leave it up)")
	}
	if err := cleanup(); err != nil {
		return err
	}
	res.Seconds = time.Since(d.started).Seconds()
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "\ndone in %.0f s; failover %.2f s\n", res.Seconds, res.FailoverSeconds)
	}
	if !ok || !ok2 {
		return errors.New("some probes failed or saw an unexpected source (see the table)")
	}
	if !res.LongLived.Survived {
		return fmt.Errorf("the long-lived connection from %s did not survive the kill of %s: %s", res.LongLived.Pod, gw, res.LongLived.Error)
	}
	if !natlogOK {
		return fmt.Errorf("the NAT log did not name %s as the source %s (logs in %s)", res.LongLived.Pod, res.LongLived.SeenBefore, NATLogDir(l.RunDir(), ""))
	}
	return nil
}

// askNATLog answers, from the gateways' NAT logs, who the server's view of
// the long-lived connection was (as `egret natlog --lab` does), and
// reports whether the answer names its pod.
func askNATLog(d *demo, l *Lab, res *DemoResult) bool {
	seen, err := netip.ParseAddrPort(res.LongLived.SeenBefore)
	if err != nil {
		return false
	}
	d.step(fmt.Sprintf("asking the NAT log who was %v: egret natlog --lab %s --ip %v --port %d", seen, l.Spec.Name, seen.Addr(), seen.Port()))
	q := natlog.Question{IP: seen.Addr(), Port: seen.Port(), Protocol: "tcp", At: time.Now()}
	es, _, err := natlog.Entries(NATLogDir(l.RunDir(), ""))
	if err != nil {
		d.printf("  %v\n", err)
		return false
	}
	res.NATLog = natlog.Query(es, q)
	ok := false
	for _, b := range res.NATLog {
		d.printf("  %s/%s %s:%d → %s %s, on %s since %s\n", b.Namespace, b.Pod, b.PodIP, b.PodPort, b.Destination, b.Protocol,
			b.Gateway, b.Start.Format("15:04:05.000"))
		ok = ok || b.Pod == res.LongLived.Pod
	}
	if len(res.NATLog) == 0 {
		d.printf("  no binding held %v\n", seen)
	}
	return ok
}

// openLongLived opens a keep-alive connection through gw: from a pod
// that may leave with one of gw's egress IPs, new connections until the
// server sees one of them (a multipath route picks a gateway per
// connection), and exchanges a first request on it.
func openLongLived(l *Lab, st *Status, gw string) (*KeepAlive, *DemoLongLived, error) {
	var ips []netip.Addr
	for _, a := range st.Assignment {
		if a.Node == gw {
			ips = append(ips, a.IP)
		}
	}
	onGW := func(a netip.Addr) bool { return slices.Contains(ips, a) }
	// The pods that may leave through gw, those with the fewest egress IPs
	// first (green's only IP: every connection takes it).
	type candidate struct {
		pod  PodStatus
		srv  netip.Addr
		srcs int
	}
	var cands []candidate
	for _, p := range st.Pods {
		if l.Spec.Server.IP.IsValid() && slices.ContainsFunc(p.ExpectedSources, onGW) {
			cands = append(cands, candidate{p, l.Spec.Server.IP, len(p.ExpectedSources)})
		}
		if l.Spec.Server.IP6.IsValid() && slices.ContainsFunc(p.ExpectedSources6, onGW) {
			cands = append(cands, candidate{p, l.Spec.Server.IP6, len(p.ExpectedSources6)})
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return a.srcs - b.srcs })
	for _, c := range cands {
		srv := netip.AddrPortFrom(c.srv, HTTPPort).String()
		for range 16 {
			ka, err := DialKeepAlive(c.pod.Namespace, srv, 5*time.Second)
			if err != nil {
				return nil, nil, fmt.Errorf("opening the long-lived connection from %s to %s: %w", c.pod.Name, srv, err)
			}
			seen, err := ka.Get(longLivedLimit)
			if err != nil {
				ka.Close()
				return nil, nil, fmt.Errorf("the first request on the long-lived connection from %s to %s: %w", c.pod.Name, srv, err)
			}
			if onGW(seen.Addr()) {
				return ka, &DemoLongLived{Pod: c.pod.Name, SeenBefore: seen.String(), Gateway: gw}, nil
			}
			ka.Close()
		}
	}
	return nil, nil, fmt.Errorf("no pod's connection left through %s (egress IPs %v) in 16 tries each", gw, ips)
}

// watchLongLived asks on ka every 100 ms until the kill's times (the kill
// was sent, the process was gone) arrive on kill and an answer came after
// the process was gone, or until an exchange fails; then it sends ll
// filled in. An answer between the kill and the process's end may have
// passed the dying gateway, so it does not count.
func watchLongLived(ka *KeepAlive, ll *DemoLongLived, kill <-chan [2]time.Time) <-chan *DemoLongLived {
	done := make(chan *DemoLongLived, 1)
	go func() {
		type answer struct {
			at   time.Time
			seen netip.AddrPort
		}
		var answers []answer
		var killed, dead time.Time
		for {
			seen, err := ka.Get(longLivedLimit)
			if err == nil {
				answers = append(answers, answer{time.Now(), seen})
			}
			if dead.IsZero() {
				select {
				case t := <-kill:
					killed, dead = t[0], t[1]
				default:
				}
			}
			if !dead.IsZero() {
				if i := slices.IndexFunc(answers, func(a answer) bool { return a.at.After(dead) }); i >= 0 {
					a := answers[i]
					ll.SeenAfter, ll.Seconds = a.seen.String(), a.at.Sub(killed).Seconds()
					switch {
					case ll.SeenAfter != ll.SeenBefore:
						ll.Error = "the server saw another source on it"
					case a.at.Sub(killed) > longLivedLimit:
						ll.Error = fmt.Sprintf("its first answer came later than %v after the kill", longLivedLimit)
					default:
						ll.Survived = true
					}
					done <- ll
					return
				}
			}
			if err != nil {
				ll.Error = fmt.Sprintf("a request on it failed: %v", err)
				done <- ll
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return done
}

// longLivedLine is the demo's line about the long-lived connection.
func longLivedLine(ll *DemoLongLived) string {
	head := fmt.Sprintf("long-lived connection from %s (seen as %s through %s before the kill)", ll.Pod, ll.SeenBefore, ll.Gateway)
	if !ll.Survived {
		return fmt.Sprintf("%s: BROKEN: %s", head, ll.Error)
	}
	return fmt.Sprintf("%s: survived, answered on the same connection %.2f s after the kill, seen as %s", head, ll.Seconds, ll.SeenAfter)
}

// demo prints the demo's progress.
type demo struct {
	progress, out io.Writer
	started       time.Time
	n, total      int
}

// step prints the next step of the demo.
func (d *demo) step(msg string) {
	d.n++
	fmt.Fprintf(d.progress, "[%d/%d %5.1fs] %s\n", d.n, d.total, time.Since(d.started).Seconds(), msg)
}

func (d *demo) printf(format string, a ...any) { fmt.Fprintf(d.progress, format, a...) }

// demoPreflight explains what is missing before anything is built.
func demoPreflight(self string) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo builds network namespaces and needs root: run `sudo make demo` (or sudo bin/egret demo)")
	}
	var missing []string
	for _, t := range []string{"ip", "bridge", "nft", "ethtool", "sysctl"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing tools %s: install them with `apt-get install iproute2 nftables ethtool procps`", strings.Join(missing, ", "))
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("this kernel has no AF_XDP sockets (%w): egret gateway needs Linux ≥ 5.4 with CONFIG_XDP_SOCKETS", err)
	}
	unix.Close(fd)
	help, _ := exec.Command(self, "gateway", "--help").CombinedOutput()
	if !strings.Contains(string(help), "-node") || !strings.Contains(string(help), "-source") {
		return fmt.Errorf("%s has no gateway agent mode (egret gateway --node --source) yet; the demo needs it", self)
	}
	return nil
}

// failoverTarget is the gateway whose failure shows the most: the one
// hosting the IP of the object with the fewest egress IPs (every pod of
// that object must move), ties by name.
func failoverTarget(st *Status) string {
	count := map[string]int{}
	for _, a := range st.Assignment {
		count[a.EgressIP]++
	}
	// Only the objects whose IPs some pod uses for all its traffic: the
	// per-destination pair stays out of the failover.
	used := func(obj string) bool {
		return slices.ContainsFunc(st.Pods, func(p PodStatus) bool { return p.Policy == obj && p.Destinations == nil })
	}
	best, bestN := "", 0
	for _, a := range st.Assignment {
		if a.Node == "" || !used(a.EgressIP) {
			continue
		}
		if n := count[a.EgressIP]; best == "" || n < bestN || (n == bestN && a.Node < best) {
			best, bestN = a.Node, n
		}
	}
	return best
}

// probeAll sends every probe kind from every pod; ok is false when one
// failed or the server saw an unexpected source.
func probeAll(l *Lab, st *Status, phase string) ([]DemoRecord, bool) {
	host := map[netip.Addr]string{}
	for _, a := range st.Assignment {
		host[a.IP] = a.Node
	}
	var out []DemoRecord
	ok := true
	for _, p := range st.Pods {
		kinds := ProbeKinds
		if p.IP6.IsValid() && len(p.ExpectedSources6) > 0 {
			kinds = append(append([]string{}, ProbeKinds...), ProbeKinds6...)
		}
		for _, kind := range kinds {
			r := DemoRecord{Phase: phase, Pod: p.Name, Namespace: p.KubeNamespace, Node: p.Node,
				EgressIPObject: p.Policy, Probe: kind, Family: "ipv4", Steered: p.Policy != ""}
			if p.IP.Is6() {
				r.Family = "ipv6" // an IPv6-only lab: the primary probes are IPv6
			}
			want := p.ExpectedSources
			if slices.Contains(ProbeKinds6, kind) {
				r.Family, want = "ipv6", p.ExpectedSources6
			}
			for _, e := range want {
				r.Expected = append(r.Expected, e.String())
			}
			var seen netip.Addr
			var err error
			for try := 0; try < 3; try++ { // a lost first datagram or ARP miss is not a failure
				if seen, err = l.Spec.ProbeSource(p.Namespace, kind, 2*time.Second); err == nil {
					break
				}
			}
			if err != nil {
				r.Error = err.Error()
			} else {
				r.OK, r.Seen, r.Gateway = true, seen.String(), host[seen]
				r.AsExpected = slices.Contains(want, seen)
			}
			ok = ok && r.OK && r.AsExpected
			out = append(out, r)
		}
	}
	return out, ok
}

// probeDestinations sends an HTTP probe from every pod that objects select
// by destination to each outside address its status lists; ok is false
// when one failed or was seen with an unexpected source.
func probeDestinations(l *Lab, st *Status, phase string) ([]DemoDestination, bool) {
	host := map[netip.Addr]string{}
	for _, a := range st.Assignment {
		host[a.IP] = a.Node
	}
	names := map[netip.Addr]string{}
	for i, v := range l.Spec.Servers() {
		n := fmt.Sprintf("server %d", i+1)
		names[v.IP], names[v.IP6] = n, n
		if v.Excluded.IsValid() {
			names[v.Excluded] = n + " (excluded address)"
		}
	}
	var out []DemoDestination
	ok := true
	for _, p := range st.Pods {
		for _, ds := range p.Destinations {
			r := DemoDestination{Phase: phase, Pod: p.Name, Destination: ds.Destination.String(), Server: names[ds.Destination],
				EgressIPObject: ds.EgressIPObject, Excluded: ds.Excluded}
			for _, e := range ds.ExpectedSources {
				r.Expected = append(r.Expected, e.String())
			}
			var seen netip.AddrPort
			var err error
			for try := 0; try < 3; try++ { // a lost first packet is not a failure
				if seen, err = HTTPSource(p.Namespace, netip.AddrPortFrom(ds.Destination, HTTPPort).String(), 2*time.Second); err == nil {
					break
				}
			}
			if err != nil {
				r.Error = err.Error()
			} else {
				r.OK, r.Seen, r.Gateway = true, seen.Addr().String(), host[seen.Addr()]
				r.AsExpected = slices.Contains(ds.ExpectedSources, seen.Addr())
			}
			ok = ok && r.OK && r.AsExpected
			out = append(out, r)
		}
	}
	return out, ok
}

// printDestinations prints one line per pod and destination: the source
// the destination saw and why.
func printDestinations(w io.Writer, recs []DemoDestination) {
	if len(recs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\n  the source each destination saw of a pod whose objects choose by destination")
	fmt.Fprintln(tw, "  POD\tDESTINATION\tSEEN AS\tBECAUSE\tOK")
	for _, r := range recs {
		why := "egress IP of " + r.EgressIPObject
		switch {
		case r.Excluded:
			why = "excluded: leaves as its node"
		case r.EgressIPObject == "":
			why = "no object claims it: leaves as its node"
		}
		seen := r.Seen
		switch {
		case !r.OK:
			seen = "FAILED"
		case r.Gateway != "":
			seen += " (" + r.Gateway + ")"
		default:
			seen += " (node IP)"
		}
		okCell := "yes"
		if !r.OK {
			okCell = "NO: " + r.Error
		} else if !r.AsExpected {
			okCell = "NO: want " + strings.Join(r.Expected, " or ")
		}
		fmt.Fprintf(tw, "  %s\t%s %s\t%s\t%s\t%s\n", r.Pod, r.Destination, r.Server, seen, why, okCell)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// printTable prints one line per pod and address family: the source the
// server saw for each probe and the gateway node hosting it.
func printTable(w io.Writer, recs []DemoRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\n  each probe column: the source address the outside server saw (the gateway node hosting it)")
	fmt.Fprint(tw, "  POD\tNAMESPACE\tNODE\tEGRESSIP\tIP\t")
	for _, k := range ProbeKinds {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(k))
	}
	fmt.Fprintln(tw, "OK")
	for i := 0; i < len(recs); {
		r := recs[i]
		obj := r.EgressIPObject
		if !r.Steered {
			obj = "(none)"
		}
		fam := "v4"
		if r.Family == "ipv6" {
			fam = "v6"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t", r.Pod, r.Namespace, r.Node, obj, fam)
		var bad []string
		for ; i < len(recs) && recs[i].Pod == r.Pod && recs[i].Family == r.Family; i++ {
			p := recs[i]
			cell := p.Seen + " (" + p.Gateway + ")"
			switch {
			case !p.OK:
				cell = "FAILED"
				bad = append(bad, p.Probe+": "+p.Error)
			case !p.Steered:
				cell = p.Seen + " (node IP: not steered)"
			}
			if p.OK && !p.AsExpected {
				bad = append(bad, p.Probe+": want "+strings.Join(p.Expected, " or "))
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		if len(bad) == 0 {
			fmt.Fprintln(tw, "yes")
		} else {
			fmt.Fprintln(tw, "NO: "+strings.Join(bad, "; "))
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func assignmentLine(as []AssignmentStatus) string {
	parts := make([]string, len(as))
	for i, a := range as {
		node := a.Node
		if node == "" {
			node = "unassigned"
		}
		parts[i] = fmt.Sprintf("%s %v → %s", a.EgressIP, a.IP, node)
	}
	return strings.Join(parts, ", ")
}

func movedLine(ms []AssignmentStatus) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%v (now on %s)", m.IP, m.Node)
	}
	return strings.Join(parts, ", ")
}
