// Command lab is `make bench-lab`: Egret's gateway against the kernel doing
// the same job (VXLAN decap + conntrack + nftables SNAT, the lab's kernel
// mode), with one generator, in one run.
//
//	go run ./bench/lab [-egret bin/egret] [-out dir] [-trial 5s] [-quick] [-extra] [-scenarios est-10k,cps,...]
//
// A generator in this process sends VXLAN frames from worker w1's eth0 as
// its VTEP would for pod w1-p1 (AF_XDP transmit, gateway/nic), a sequence
// number and a send time in each payload; a receiver in this process counts
// them on the router's fabric side (AF_PACKET), with loss, reordering,
// duplicates and latency on the same clock. The generator and receiver run
// on one core, the gateway on the other (threaded NAPI on the gateway's
// interface, egret's threads pinned there). For each scenario it finds the
// NDR and PDR by binary search, measures latency at 10, 50 and 90 % of each
// side's NDR, and writes dataplane.json, dataplane.md and dataplane-*.png
// into the report folder (docs/benchmarks.md has the folder's contract).
// Two more sides, afxdp-reflector and xdp-reflector (reflector.go), do only a
// fixed rewrite on the same rig: the ceiling of each kind of gateway here.
// Each side runs -reps times, the sides interleaved, and each figure is the
// median (stats.go). The bulk TCP scenarios (bulk.go) run iperf3 through
// the gateway instead, for a trial's length, in Gbit/s. It ends with the summary lines of 64-byte frames over
// 10k flows.
package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/egret-gw/egret/bench/dist"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/egret-gw/egret/lab"
)

// scenario is one row of the standard set.
type scenario struct {
	Name     string  `json:"name"`
	Underlay string  `json:"underlay"`
	Traffic  traffic `json:"traffic"`
	// Latency: also measure latency at 10/50/90 % of the NDR.
	Latency bool   `json:"-"`
	About   string `json:"about"`
	// Extra scenarios are not in the standard set (make bench-lab keeps
	// to about 15 minutes): -extra or -scenarios runs them.
	Extra bool `json:"extra,omitempty"`
	// Queues is the gateway's receive queues (a multi-queue veth; 0: one).
	Queues int `json:"gateway_queues,omitempty"`
	// Bulk makes it a bulk TCP scenario (bulk.go): iperf3 for a trial's
	// length instead of frames at a rate, on a lab of its own per side.
	Bulk *bulk `json:"bulk,omitempty"`
}

// scenarios are the standard set and the extra ones, in the order they
// run; the first is the summary line's case, and the connection-rate ones
// come last on their lab because the flows they open stay in the table.
var scenarios = []scenario{
	{Name: "est-10k", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 64}, Latency: true,
		About: "10k established UDP flows, 64-byte frames, VXLAN over IPv4"},
	{Name: "est-1", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 1, Dist: "uniform", Size: 64},
		About: "one established flow, 64-byte frames"},
	{Name: "est-1M", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 1_000_000, Dist: "uniform", Size: 64},
		About: "1M established flows, 64-byte frames"},
	{Name: "est-10k-imix", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 0},
		About: "10k flows, IMIX (7:4:1 of 64, 576, 1500 bytes)"},
	{Name: "reply-10k", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 64, Dir: dirReply}, Extra: true,
		About: "the reply direction: the server's 64-byte UDP frames to the egress IP on 10k established flows, sent from the router's fabric side, received translated inside VXLAN on worker w1"},
	{Name: "bidir-10k", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 64, Dir: dirBoth}, Extra: true,
		About: "both directions at once on 10k established flows, 64-byte frames, batches alternating (the rate is the sum)"},
	{Name: "est-10k-2q", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 64}, Extra: true, Queues: 2,
		About: "est-10k through two gateway queues (a two-queue veth: Egret runs a worker per queue, the kernel a NAPI thread per queue; the flows spread over the queues by the outer UDP source port); on its own lab"},
	{Name: "icmp-frag-10k", Underlay: lab.UnderlayIPv4, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 64, Kind: kindICMPErr}, Extra: true,
		About: "ICMP errors: fragmentation-needed from outside for 10k established UDP flows (90-byte frames quoting the flow's packet), translated back to the pod"},
	{Name: "cps", Underlay: lab.UnderlayIPv4, Traffic: traffic{Size: 64, New: true},
		About: "new flows per second: every frame a 5-tuple never seen before (UDP, one packet each), the table growing (last on its lab: it fills the table)"},
	{Name: "cps-tcp", Underlay: lab.UnderlayIPv4, Traffic: traffic{Size: 64, New: true, Kind: kindTCPSYN}, Extra: true,
		About: "TCP connection setup: the rate is connections per second, each a SYN from the pod on a 5-tuple never seen before, answered by a responder outside with a SYN-ACK when the SYN reaches it; a connection counts when its SYN-ACK reaches the pod; the table growing"},
	{Name: "est-10k-v6", Underlay: lab.UnderlayIPv6, Traffic: traffic{Flows: 10_000, Dist: "uniform", Size: 64},
		About: "10k established flows over an IPv6 underlay (IPv6-only lab: 82-byte frames, the smallest IPv6 frame with the stamp)"},
	{Name: "tcp-bulk", Underlay: lab.UnderlayIPv4, Bulk: &bulk{Streams: 8, UnderlayMTU: 1500, PodMTU: lab.TunnelMTU},
		About: "bulk TCP: iperf3, 8 streams from pod w1-p1 through its gateway to the server for a trial's length, underlay MTU 1500, the pods' 1450 (room for VXLAN); Gbit/s at the receiver"},
	{Name: "tcp-bulk-jumbo", Underlay: lab.UnderlayIPv4, Bulk: &bulk{Streams: 8, UnderlayMTU: 9000, PodMTU: 1500},
		About: "tcp-bulk on an underlay of MTU 9000, the pods' 1500"},
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "reflector" {
		// A reflector side's process (reflector.go), started by the run.
		if err := reflectorMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "reflector:", err)
			os.Exit(1)
		}
		return
	}
	bin := flag.String("egret", "", "egret binary (default: go build ./cmd/egret into a temp dir)")
	out := flag.String("out", "", "report folder (default: bench-report-<UTC time> in the current directory)")
	full := flag.Duration("trial", 5*time.Second, "length of a trial that counts (RFC 2544: ≥ 5 s)")
	quick := flag.Bool("quick", false, "1 s trials and a coarser search, for trying the harness (figures not comparable)")
	reps := flag.Int("reps", 0, "repetitions of every side, interleaved (A B A B …); a figure is their median (default 3, 1 with -quick)")
	names := flag.String("scenarios", "", "comma-separated scenarios to run (default: the standard set): "+scenarioNames())
	extra := flag.Bool("extra", false, "run the extra scenarios too (reply direction, bidirectional, ICMP errors, TCP connection setup)")
	genCPU := flag.Int("gen-cpu", 0, "the generator's and receiver's core")
	gwCPU := flag.Int("gw-cpu", 1, "the gateway's core")
	gwCPU2 := flag.Int("gw-cpu2", -1, "the second gateway queue's core in the two-queue scenario (default: -gw-cpu, the one core a 2-core machine has for the gateway)")
	hold := flag.Float64("hold", 0, "instead of searching, offer this many frames per second for one trial per scenario (to profile a side under load: perf record -C <gw-cpu>)")
	sides := flag.String("sides", strings.Join(allSides, ","), "the gateways to measure (kernel and egret for the ratios, the reflectors for the ceiling; empty: none, for a run of the -sync sides alone)")
	syncs := flag.String("sync", "est-10k,est-1M", "scenarios that measure the flow sync's cost: the gateway agent as the DaemonSet runs it (the managed lab) without the flow sync ("+sideSyncOff+") and with it, to a standby ("+sideSyncOn+"), one lab each; empty: none")
	busyPoll := flag.Bool("busy-poll", false, "also run Egret's gateway with --busy-poll, as side "+sideEgretBusyPoll+" after egret, interleaved with the others (busypoll.go)")
	natlogs := flag.String("natlog", "est-10k,cps", "scenarios that measure the NAT log's cost: the gateway agent of the managed lab without the flow sync, without the NAT log ("+sideNATLogOff+") and with it ("+sideNATLogOn+"), one lab each; empty: none")
	flag.Parse()
	cfg := config{hold: *hold, sides: strings.FieldsFunc(*sides, func(r rune) bool { return r == ',' }), full: *full, short: *full / 5, goal: 0.03, coarse: 0.1, genCPU: *genCPU, gwCPU: *gwCPU, gwCPU2: *gwCPU2, bin: *bin, out: *out}
	if cfg.gwCPU2 < 0 {
		cfg.gwCPU2 = cfg.gwCPU
	}
	cfg.reps = 3
	if *quick {
		cfg.full, cfg.short, cfg.goal, cfg.reps = time.Second, 500*time.Millisecond, 0.05, 1
	}
	if *reps > 0 {
		cfg.reps = *reps
	}
	// An interrupted run takes its lab down.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		upLab.Lock()
		if upLab.stopReflector != nil {
			upLab.stopReflector()
		}
		if upLab.name != "" {
			lab.Down("", upLab.name)
		}
		restoreConntrack()
		fmt.Fprintln(os.Stderr, "bench-lab: interrupted")
		os.Exit(1)
	}()
	var err error
	for _, m := range cfg.sides {
		if !slices.Contains(allSides, m) {
			err = fmt.Errorf("-sides: %q is none of %s", m, strings.Join(allSides, ", "))
		}
	}
	if *busyPoll {
		cfg.sides = append(cfg.sides, sideEgretBusyPoll)
	}
	if err != nil {
	} else if cfg.scenarios, err = pick(*names, *extra); err != nil {
	} else if cfg.syncScenarios, err = pickSync("-sync", *syncs); err != nil {
	} else if cfg.natlogScenarios, err = pickSync("-natlog", *natlogs); err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-lab:", err)
		os.Exit(1)
	}
}

// allSides are the gateways a run can measure, in their running order.
var allSides = []string{lab.ModeKernel, lab.ModeEgret, sideAFXDPReflector, sideXDPReflector}

// upLab is the lab that is up, for the interrupt handler.
var upLab struct {
	sync.Mutex
	name          string
	stopReflector func() // the reflector side's process, if one runs
}

type config struct {
	full, short   time.Duration
	goal, coarse  float64
	genCPU, gwCPU int
	gwCPU2        int // the second queue's core (two-queue scenario)
	bin, out      string
	scenarios     []scenario
	syncScenarios []scenario // run on the sync-off and sync-on sides
	// natlogScenarios run on the natlog-off and natlog-on sides.
	natlogScenarios []scenario
	sides           []string
	hold            float64
	reps            int // repetitions of every side, interleaved
}

func scenarioNames() string {
	var s []string
	for _, sc := range scenarios {
		n := sc.Name
		if sc.Extra {
			n += " (extra)"
		}
		s = append(s, n)
	}
	return strings.Join(s, ", ")
}

// pick returns the scenarios named (in the order named), or without names
// the standard set and, with extra, the extra ones, in their running order.
func pick(names string, extra bool) ([]scenario, error) {
	if names == "" {
		var out []scenario
		for _, sc := range scenarios {
			if !sc.Extra || extra {
				out = append(out, sc)
			}
		}
		return out, nil
	}
	var out []scenario
	for _, n := range strings.Split(names, ",") {
		found := false
		for _, sc := range scenarios {
			if sc.Name == n {
				out, found = append(out, sc), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no scenario %q; the scenarios are %s", n, scenarioNames())
		}
	}
	return out, nil
}

func run(cfg config) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (it builds network namespaces)")
	}
	for _, tool := range []string{"ip", "nft", "bridge", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing; run make deps", tool)
		}
	}
	if cfg.bin == "" {
		dir, err := os.MkdirTemp("", "egret-bench-lab-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if cfg.bin, err = dist.EgretBinary("", dir); err != nil {
			return err
		}
	}
	if cfg.out == "" {
		cfg.out = "bench-report-" + time.Now().UTC().Format("20060102-150405")
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	rep := &report{Started: time.Now().UTC(), Trial: cfg.full.String(), Load: dist.LoadAvg(), GenCPU: cfg.genCPU, GwCPU: cfg.gwCPU, Reps: cfg.reps}
	var names []string
	for _, sc := range cfg.syncScenarios {
		names = append(names, sc.Name)
	}
	n := len(cfg.scenarios)
	if len(cfg.sides) == 0 {
		n = 0
	}
	fmt.Printf("bench-lab: %d scenarios × {%s}, the flow sync's cost on {%s}; %d repetitions, sides interleaved; trials of %v (short %v), NDR loss ≤ %g, PDR ≤ %g; machine load %s; report folder %s\n",
		n, strings.Join(cfg.sides, ", "), strings.Join(names, ", "), cfg.reps, cfg.full, cfg.short, ndrLoss, pdrLoss, rep.Load, cfg.out)
	// One lab per underlay and gateway queue count, each side in turn.
	for _, u := range []string{lab.UnderlayIPv4, lab.UnderlayIPv6} {
		for _, q := range []int{1, 2} {
			var scs []scenario
			for _, sc := range cfg.scenarios {
				if sc.Underlay == u && max(sc.Queues, 1) == q && sc.Bulk == nil {
					scs = append(scs, sc)
				}
			}
			if len(scs) == 0 {
				continue
			}
			for _, st := range schedule(cfg.sides, cfg.reps) {
				scs := scs
				if reflectorSide(st.Side) {
					// The reflectors stand in only where a fixed
					// rewrite is the gateway's whole job.
					scs = slices.DeleteFunc(slices.Clone(scs), func(sc scenario) bool { return !reflects(sc) })
					if len(scs) == 0 {
						continue
					}
				}
				if err := runMode(cfg, rep, st, u, q, scs); err != nil {
					return fmt.Errorf("%s mode, %s underlay, %d gateway queues: %w", st.Side, u, q, err)
				}
			}
		}
	}
	if err := runBulk(cfg, rep); err != nil {
		return err
	}
	// The flow sync's cost: the same gateway agent without and with it.
	for _, st := range schedule([]string{sideSyncOff, sideSyncOn}, cfg.reps) {
		if len(cfg.syncScenarios) == 0 {
			break
		}
		if err := runMode(cfg, rep, st, lab.UnderlayIPv4, 1, cfg.syncScenarios); err != nil {
			return fmt.Errorf("%s side: %w", st.Side, err)
		}
	}
	// The NAT log's cost: the same gateway agent without and with it,
	// the two sides' labs in turn.
	for _, st := range schedule([]string{sideNATLogOff, sideNATLogOn}, cfg.reps) {
		if len(cfg.natlogScenarios) == 0 {
			break
		}
		if err := runMode(cfg, rep, st, lab.UnderlayIPv4, 1, cfg.natlogScenarios); err != nil {
			return fmt.Errorf("%s side: %w", st.Side, err)
		}
	}
	rep.Results = aggregate(rep.runs)
	rep.LoadAfter = dist.LoadAvg()
	rep.print(os.Stdout)
	return rep.write(cfg.out)
}

// runMode brings up one lab for one repetition of one side (a gateway
// mode) and runs the scenarios on it.
func runMode(cfg config, rep *report, st step, underlay string, queues int, scs []scenario) error {
	mode := st.Side
	spec, err := lab.NewSpec("ebl"+fmt.Sprint(os.Getpid()%100000), underlay)
	if err != nil {
		return err
	}
	spec.GatewayQueues = queues
	// The connection-rate and 1M-flow scenarios come from one pod through
	// one egress IP: the table's size is the limit, as the kernel's is, and
	// when it is full both sides early-drop unanswered flows to admit new
	// ones.
	limits := lab.FlowLimits{ConntrackMax: flowLimit, PodFlowLimit: flowLimit, EgressIPFlowLimit: flowLimit}
	var impl lab.Impl
	switch mode {
	case sideSyncOff, sideSyncOn, sideNATLogOff, sideNATLogOn:
		// An overload trial (the generator's ceiling, the search's upper
		// bound) starves the gateway agent for seconds: its core's
		// real-time NAPI thread runs above the gateway process. Its
		// default 3 s without contact with the source would fence the
		// gateway (egress IPs released, the controller told NOT_SERVING,
		// the IP moved) in the middle of the search, and a missed second
		// of the reachability check would move the IP too: the agent
		// fences after 10 minutes and the controller's checks have the
		// longest budget, 60 s.
		impl = lab.Managed{Binary: cfg.bin, ReachabilityTotalTimeoutSeconds: 60, FenceAfter: 10 * time.Minute,
			SyncOff: mode != sideSyncOn, NATLogOff: mode != sideNATLogOn, FlowLimits: limits}
	case sideEgretBusyPoll:
		impl = egretBusyPoll(cfg.bin, limits)
	case sideAFXDPReflector, sideXDPReflector:
		// The kernel side's lab, which forwards (lab.Up checks it); the
		// reflector's XDP program takes the tunnel frames before the
		// kernel sees them.
		impl = lab.Kernel{}
	default:
		if impl, err = lab.NewImpl(mode, cfg.bin); err != nil {
			return err
		}
		if e, ok := impl.(lab.Egret); ok {
			e.FlowLimits = limits
			impl = e
		}
	}
	fmt.Printf("\n== %s gateway, %s underlay, %d gateway queues, repetition %d of %d: building the lab\n", mode, underlay, queues, st.Rep+1, max(cfg.reps, 1))
	l := &lab.Lab{Spec: spec, Impl: impl, Binary: cfg.bin}
	if err := l.Up(); err != nil {
		return err
	}
	defer lab.Down("", spec.Name)
	defer restoreConntrack()
	if err := bridgeNetfilterOff(spec.NS("fabric")); err != nil {
		return err
	}
	upLab.Lock()
	upLab.name = spec.Name
	upLab.Unlock()
	gwCPUs := []int{cfg.gwCPU}
	if queues > 1 {
		gwCPUs = append(gwCPUs, cfg.gwCPU2)
	}
	var tg target
	var standby string
	if mode == sideSyncOff || mode == sideSyncOn || mode == sideNATLogOff || mode == sideNATLogOn {
		tg, standby, err = managedTarget(l, mode == sideSyncOn)
	} else {
		tg, err = staticTarget(spec)
	}
	if err != nil {
		return err
	}
	// A reflector starts as Egret's gateway does, before its core is set up.
	refl := 0
	if reflectorSide(mode) {
		pid, stop, err := startReflector(mode, spec, tg)
		if err != nil {
			return err
		}
		upLab.Lock()
		upLab.stopReflector = stop
		upLab.Unlock()
		defer func() {
			upLab.Lock()
			upLab.stopReflector = nil
			upLab.Unlock()
			stop()
		}()
		if mode == sideAFXDPReflector {
			refl = pid
		} else {
			var c io.Closer
			if err := lab.Do(spec.NS("fabric"), func() (err error) { c, err = peerXDP(tg.gw.Name); return err }); err != nil {
				return err
			}
			defer c.Close()
		}
	}
	gwTasks, note, err := pinGateway(l, tg.gw.Name, mode != lab.ModeKernel && !reflectorSide(mode), cfg.genCPU, gwCPUs)
	if err != nil {
		return err
	}
	switch mode {
	case sideAFXDPReflector:
		if err := pinProcess(refl, gwCPUs, prioGateway); err != nil {
			return err
		}
		gwTasks = append(gwTasks, refl)
		note += "; the AF_XDP reflector's process (gateway/xdp's program, gateway/nic's socket) pinned with it"
	case sideXDPReflector:
		note += "; the XDP reflector on the gateway's eth0 (XDP_TX, in its NAPI thread), an XDP_PASS program on its fabric port (which XDP_TX on a veth needs)"
	}
	var writers []int
	if mode == sideNATLogOn {
		if writers, err = placeWriter(gwTasks, cfg.genCPU); err != nil {
			return err
		}
		note += fmt.Sprintf("; the NAT log's writer thread %v on the generator's core %d, SCHED_FIFO below the generator (on a node: a core the workers do not use)", writers, cfg.genCPU)
	}
	if mode == sideSyncOn {
		note += fmt.Sprintf("; egress IP %v on %s, its flows synced to the standby %s (unpinned: it shares the cores)", tg.egress, tg.gw.Name, standby)
	}
	fmt.Println("  " + note)
	r, err := newRig(spec, tg, cfg.genCPU, gwCPUs)
	if err != nil {
		return err
	}
	defer r.close()
	r.gwTasks = gwTasks
	for _, sc := range scs {
		setup := note
		if mode == lab.ModeKernel {
			ct, err := sizeConntrack(sc)
			if err != nil {
				return err
			}
			setup += "; " + ct
			fmt.Println("  " + ct)
		}
		var res *result
		run := func() (err error) {
			res, err = runScenario(cfg, rep, r, st, sc)
			return err
		}
		var st *syncStats
		var nst *natlogStats
		switch mode {
		case sideSyncOn:
			st, err = measureSync(spec, tg.gw.Name, standby, run)
		case sideNATLogOn:
			nst, err = measureNATLog(spec, tg.gw.Name, writers, run)
		default:
			err = run()
		}
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		if res.Sync = st; st != nil {
			fmt.Printf("   flow sync %s → %s during the scenario: %d records (%d bytes) sent, %d full resyncs, %d stalls; at its end %d flows on %s, %d backup flows on %s\n",
				st.Primary, st.Standby, st.RecordsSent, st.BytesSent, st.FullResyncs, st.Stalls, st.PrimaryFlows, st.Primary, st.StandbyBackupFlows, st.Standby)
		}
		if res.NATLog = nst; nst != nil {
			fmt.Printf("   NAT log on %s during the scenario: %d records written, %d lost to a full ring, %d failed; %d flows made; writer %.0f ns of CPU per record\n",
				tg.gw.Name, nst.Written, nst.Dropped, nst.Failed, nst.FlowsNew, nst.WriterNsPerRecord)
		}
		res.Setup = setup
		rep.runs = append(rep.runs, res)
	}
	return nil
}

// runScenario finds one side's PDR and NDR for a scenario and the latency
// around its NDR.
func runScenario(cfg config, rep *report, r *rig, st step, sc scenario) (*result, error) {
	mode := st.Side
	res := &result{Scenario: sc, Mode: mode, Rep: st.Rep}
	fmt.Printf("-- %s, %s: %s\n", mode, sc.Name, sc.About)
	tr := sc.Traffic
	fwd, rev := tr.legs()
	warm := func() error {
		// Establish every flow once, from the pod.
		w, rate := tr, 50_000.0
		w.Dir, w.Kind = "", ""
		d := time.Duration(float64(tr.Flows)/rate*float64(time.Second)) + 200*time.Millisecond
		_, err := r.run(w, rate, d)
		return err
	}
	if !tr.New && (tr.Flows > 1 || rev) {
		if err := warm(); err != nil {
			return nil, err
		}
	}
	// run is one trial. Traffic from outside only keeps its flows alive
	// only as far as it reaches them (a slow trial touches a few, and the
	// kernel forgets an unanswered UDP flow after 30 s): each of its
	// trials is preceded by a pass over the flows from the pod.
	run := func(rate float64, d time.Duration) (trial, error) {
		if rev && !fwd {
			if err := warm(); err != nil {
				return trial{}, err
			}
		}
		return r.run(tr, rate, d)
	}
	if cfg.hold > 0 {
		fmt.Printf("   holding %.0f pps for %v (gateway core %d)\n", cfg.hold, cfg.full, cfg.gwCPU)
		t, err := run(cfg.hold, cfg.full)
		if err != nil {
			return nil, err
		}
		l := newLatency("hold", t)
		fmt.Printf("   offered %.0f pps, lost %.2e (at gateway input %d), gateway tasks %.2f cores = %.0f ns/packet; latency p50 %.1f µs, p90 %.1f, p99 %.1f, p99.9 %.1f\n",
			t.Offered(), t.Loss(), t.InputDrops, t.TaskCores, t.TaskNsPerPacket, l.P50, l.P90, l.P99, l.P999)
		return res, nil
	}
	// The generator's ceiling: a short trial at a rate nothing here reaches.
	top, err := run(5e6, cfg.short)
	if err != nil {
		return nil, err
	}
	res.GeneratorPPS = top.Offered()
	fmt.Printf("   generator ceiling %.0f pps (gateway forwarded %.0f pps of it)\n", top.Offered(), float64(top.Received)/top.Seconds)
	s := &searcher{cfg: searchConfig{Max: top.Offered() * 0.98, Min: 1000, Full: cfg.full, Short: cfg.short, Goal: cfg.goal, Coarse: cfg.coarse,
		Progress: func(c string, t trial) {
			fmt.Printf("   %s trial %4.1f s at %8.0f pps: sent %9d, lost %.2e (at gateway input %d, receiver %d; reordered %d), gateway core %.2f busy, its tasks %.2f = %5.0f ns/packet\n",
				c, t.Seconds, t.Offered(), t.Sent, t.Loss(), t.InputDrops, t.ReceiverDrops, t.Reordered, t.GatewayCores, t.TaskCores, t.TaskNsPerPacket)
		}},
		run: run}
	if res.PDR, err = s.find("PDR", pdrLoss); err != nil {
		return nil, err
	}
	if res.NDR, err = s.findConfirmed("NDR", ndrLoss); err != nil {
		return nil, err
	}
	fmt.Printf("   %s %s: NDR %.0f pps, PDR %.0f pps\n", mode, sc.Name, res.NDR.Rate, res.PDR.Rate)
	if !sc.Latency || res.NDR.Rate == 0 {
		return res, nil
	}
	loads := []float64{0.1, 0.5, 0.9}
	for _, f := range loads {
		t, err := run(f*res.NDR.Rate, cfg.full)
		if err != nil {
			return nil, err
		}
		res.Latency = append(res.Latency, newLatency(fmt.Sprintf("%.0f%% of own NDR", f*100), t))
	}
	// The target's comparison: both sides at half the kernel's NDR, the
	// kernel's of the same round.
	if k := rep.findRun(lab.ModeKernel, sc.Name, sc.Underlay, st.Rep); egretSide(mode) && k != nil && k.NDR.Rate > 0 {
		t, err := run(0.5*k.NDR.Rate, cfg.full)
		if err != nil {
			return nil, err
		}
		res.Latency = append(res.Latency, newLatency("50% of kernel NDR", t))
	}
	for _, l := range res.Latency {
		fmt.Printf("   latency at %s (%.0f pps): p50 %.1f µs, p90 %.1f, p99 %.1f, p99.9 %.1f, loss %.1e\n",
			l.Load, l.PPS, l.P50, l.P90, l.P99, l.P999, l.Loss)
	}
	return res, nil
}
