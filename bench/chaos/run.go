package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egret-gw/egret/bench/dist"
	"github.com/egret-gw/egret/lab"
)

// The documented bounds (docs/reliability.md).
const (
	// moveWindow: a packet's source is judged against what the status
	// allowed its pod within this much of the packet. The data plane
	// follows a status change within a status poll (200 ms with dir:) and
	// a rebuild; the sampler reads the status every 100 ms.
	moveWindow = 2 * time.Second
	// doubleBudget: two gateways may both answer ARP for one IP this long
	// (a partitioned gateway's --fence-after, 3 s by default).
	doubleBudget = 3 * time.Second
	// recoverLimit: a fault not recovered from this long after it is
	// cleared breaks the run.
	recoverLimit = 60 * time.Second
	// shortHold caps how long a fault lasts in the short variant.
	shortHold = 5 * time.Second
	// arpGap: answers of one MAC closer than this form one run (the
	// watcher asks every arpInterval).
	arpInterval = 200 * time.Millisecond
	arpGap      = time.Second
)

type options struct {
	short bool
	egret string
	// lease is the gateways' --controller-lease ("off": the fence of
	// --fence-after alone, as before the lease).
	lease string
}

// faultResult is one fault's line.
type faultResult struct {
	name        string
	held        time.Duration
	wrong       int
	wrongSample []packet
	doubles     int // windows over budget
	longestDbl  time.Duration
	lost        int
	stall       time.Duration
	recovery    time.Duration
	recovered   bool
	// noMove faults: how often the status changed while the fault lasted.
	noMove bool
	moves  int
	note   string
}

// result is the whole run.
type result struct {
	faults []faultResult
}

func (r *result) totals() (wrong, doubles, lost int, worst time.Duration) {
	for _, f := range r.faults {
		wrong += f.wrong
		doubles += f.doubles
		lost += f.lost
		worst = max(worst, f.recovery)
	}
	return
}

// summary is the line make chaos ends with.
func (r *result) summary() string {
	wrong, doubles, lost, worst := r.totals()
	return fmt.Sprintf("chaos: %d faults, %d wrong-source packets, %d double-answer windows over budget, %d connections lost, worst recovery %.1f s",
		len(r.faults), wrong, doubles, lost, worst.Seconds())
}

// broken names the invariants the run broke ("" for none): a wrong
// source, a double answer over budget, a fault not recovered from.
func (r *result) broken() string {
	wrong, doubles, _, _ := r.totals()
	var out []string
	if wrong > 0 {
		out = append(out, fmt.Sprintf("%d wrong-source packets", wrong))
	}
	if doubles > 0 {
		out = append(out, fmt.Sprintf("%d double-answer windows over %v", doubles, doubleBudget))
	}
	for _, f := range r.faults {
		if !f.recovered {
			out = append(out, fmt.Sprintf("%s: not recovered within %v", f.name, recoverLimit))
		}
		if f.noMove && f.moves > 0 {
			out = append(out, fmt.Sprintf("%s: the status changed %d times (egress IPs moved)", f.name, f.moves))
		}
	}
	return strings.Join(out, "; ")
}

func (f faultResult) line() string {
	rec := fmt.Sprintf("recovery %.1f s", f.recovery.Seconds())
	if !f.recovered {
		rec = fmt.Sprintf("NOT recovered within %v", recoverLimit)
	}
	s := fmt.Sprintf("  %-42s held %4.1f s: %d wrong-source packets, %d double-answer windows over budget (longest %.1f s), %d connections lost, longest stall %.1f s, %s",
		f.name, f.held.Seconds(), f.wrong, f.doubles, f.longestDbl.Seconds(), f.lost, f.stall.Seconds(), rec)
	if f.noMove {
		s += fmt.Sprintf(", %d status changes (none allowed)", f.moves)
	}
	if f.note != "" {
		s += "\n      " + f.note
	}
	for _, p := range f.wrongSample {
		s += fmt.Sprintf("\n      wrong: %s %s from %s as %v", p.at.Format("15:04:05.000"), p.kind, p.pod, p.src)
	}
	return s
}

// run brings the lab up, plays the faults and tears it down.
func run(o options, out io.Writer) (*result, error) {
	var res *result
	err := withLab(o, func(l *lab.Lab) error {
		var err error
		res, err = play(l, o, out)
		return err
	})
	return res, err
}

// withLab brings a managed lab of its own up, calls fn and tears it down.
func withLab(o options, fn func(l *lab.Lab) error) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (it builds network namespaces)")
	}
	for _, tool := range []string{"ip", "nft", "bridge", "ethtool", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing; run make deps", tool)
		}
	}
	dir, err := os.MkdirTemp("", "egret-chaos-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := dist.EgretBinary(o.egret, dir)
	if err != nil {
		return err
	}
	spec, err := lab.DefaultSpec("ech" + strconv.FormatInt(int64(os.Getpid()), 36))
	if err != nil {
		return err
	}
	impl, err := lab.NewImpl(lab.ModeManaged, bin)
	if err != nil {
		return err
	}
	if m, ok := impl.(lab.Managed); ok {
		// The lab's probes are plain gRPC, and nothing but the controller
		// probes the gateways' namespaces.
		m.ControllerLease = cmp.Or(o.lease, "any")
		impl = m
	}
	l := &lab.Lab{Spec: spec, Impl: impl, Binary: bin}
	if err := l.Up(); err != nil {
		lab.Down("", spec.Name)
		return fmt.Errorf("bringing the lab up: %w", err)
	}
	defer lab.Down("", spec.Name)
	return fn(l)
}

// play runs the traffic, the recorders and the faults on a lab that is up.
func play(l *lab.Lab, o options, out io.Writer) (*result, error) {
	r, err := startRig(l)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	st, err := l.Status()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "chaos: managed lab %s, %d pods, egress IPs %v; move window %v, double-answer budget %v\n",
		l.Spec.Name, len(r.traffic), r.eips, moveWindow, doubleBudget)
	// Every pod leaving as expected before the first fault.
	if _, ok := recovered(l, r.traffic, time.Now(), recoverLimit); !ok {
		return nil, fmt.Errorf("the lab's pods do not leave as expected before any fault")
	}

	before := measure(l, st)
	res := &result{}
	mark := 0
	for _, f := range faults() {
		if o.short && !f.short {
			continue
		}
		hold := f.hold
		if o.short {
			hold = min(hold, shortHold)
		}
		st, err := l.Status()
		if err != nil {
			return res, err
		}
		start := time.Now()
		clear, err := f.inject(l, st)
		if err != nil {
			return res, fmt.Errorf("%s: %w", f.name, err)
		}
		time.Sleep(hold) // the fault lasts this long: nothing to wait for
		cleared := time.Now()
		if err := clear(); err != nil {
			return res, fmt.Errorf("clearing %s: %w", f.name, err)
		}
		fr := faultResult{name: f.name, held: cleared.Sub(start), noMove: f.noMove}
		if f.noMove {
			fr.moves = r.tl.changes(start, cleared)
		}
		if f.note != nil {
			fr.note = f.note()
		}
		var at time.Time
		at, fr.recovered = recovered(l, r.traffic, cleared, recoverLimit)
		fr.recovery = at.Sub(cleared)
		if !fr.recovered {
			fr.recovery = recoverLimit
		}
		// A moment of steady traffic after the recovery belongs to this
		// fault too, and lets the sampler pass the move window.
		time.Sleep(moveWindow + 500*time.Millisecond)
		end := time.Now()
		for _, t := range r.traffic {
			lost, stall := t.connStats(start, end)
			fr.lost += lost
			fr.stall = max(fr.stall, stall)
		}
		var pkts []packet
		pkts, mark = r.rec.since(mark)
		bad := wrongSources(r.tl, pkts, moveWindow)
		fr.wrong = len(bad)
		fr.wrongSample = bad[:min(len(bad), 5)]
		for _, w := range doubleAnswers(r.arp.all(), arpGap) {
			if w.from.Before(start) || !w.from.Before(end) {
				continue
			}
			fr.longestDbl = max(fr.longestDbl, w.length())
			if w.length() > doubleBudget {
				fr.doubles++
			}
		}
		res.faults = append(res.faults, fr)
		fmt.Fprintln(out, fr.line())
	}
	if st, err := l.Status(); err == nil {
		fmt.Fprintf(out, "  footprint before the faults: %v\n  footprint after the last recovery: %v\n", before, measure(l, st))
	}
	fmt.Fprintln(out, res.summary())
	return res, nil
}

// recovered waits until the status places every egress IP and every pod
// had a new connection answered, at or after since, with a source the
// status allows it; it returns when that was (the latest of those).
func recovered(l *lab.Lab, traffic []*podTraffic, since time.Time, limit time.Duration) (time.Time, bool) {
	deadline := since.Add(limit)
	for {
		st, err := l.Status()
		if err == nil && st.Up {
			done, at := true, time.Time{}
			for _, a := range st.Assignment {
				done = done && a.Node != ""
			}
			for _, t := range traffic {
				p := st.Pod(t.name)
				ok, good := t.okSince(since, func(src netip.Addr) bool { return slices.Contains(p.ExpectedSources, src) })
				if !good {
					done = false
					break
				}
				at = later(at, ok)
			}
			if done {
				return at, true
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
