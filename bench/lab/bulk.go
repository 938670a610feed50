package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egret-gw/egret/lab"
)

// Bulk TCP (issue 34, item 5): what users move most, in Gbit/s through a
// gateway. The other scenarios offer UDP frames at a rate and search for
// the loss limits; these run iperf3 for a fixed time and take what TCP
// gets through, where the kernel has GRO/GSO and Egret handles frame by
// frame. Each side gets a lab of its own per repetition (the MTUs are the
// lab's), the sides interleaved as elsewhere.

// bulk is the shape of a bulk TCP scenario: Streams parallel iperf3 streams
// from pod w1-p1 through its gateway to the outside server, on an underlay
// of UnderlayMTU with the pods' side (pods, cni0, VXLAN devices) at PodMTU.
type bulk struct {
	Streams     int `json:"streams"`
	UnderlayMTU int `json:"underlay_mtu"`
	PodMTU      int `json:"pod_mtu"`
}

// bulkPort is the iperf3 server's port.
const bulkPort = 5201

// iperf3Nice is the nice value iperf3's client and server run at.
const iperf3Nice = -15

// bulkRun is one side's iperf3 run in one repetition.
type bulkRun struct {
	Scenario scenario `json:"-"`
	Mode     string   `json:"mode"`
	Rep      int      `json:"rep"`
	Setup    string   `json:"setup"`
	// Gbps is iperf3's receiver figure (end.sum_received), over Seconds.
	Gbps          float64 `json:"gbps"`
	ReceivedBytes uint64  `json:"received_bytes"`
	Seconds       float64 `json:"seconds"`
	Retransmits   uint64  `json:"retransmits"`
	// ServerSaw is the client address the server's end saw (the egress
	// IP when the traffic went through the gateway's SNAT).
	ServerSaw netip.Addr `json:"server_saw"`
	// GatewayInBytes and GatewayOutBytes are what the fabric bridge's port
	// towards the gateway sent it and got from it during the run.
	GatewayInBytes  uint64 `json:"gateway_in_bytes"`
	GatewayOutBytes uint64 `json:"gateway_out_bytes"`
	// GatewayCores is the gateway core's busy time over the run (in
	// cores), TaskCores the part charged to the gateway's own tasks (see
	// cpuNote); the PerGbps figures divide them by Gbps.
	GatewayCores        float64 `json:"gateway_cores"`
	TaskCores           float64 `json:"gateway_task_cores"`
	GatewayCoresPerGbps float64 `json:"gateway_cores_per_gbps"`
	TaskCoresPerGbps    float64 `json:"gateway_task_cores_per_gbps"`
}

// throughGateway reports, as an error, a run whose bytes did not all pass
// the gateway that SNATs to egress: the server must have seen the egress
// IP, and the gateway must have sent out at least as many bytes as the
// server received (payload; the frames carry headers besides).
func (r *bulkRun) throughGateway(egress netip.Addr) error {
	switch {
	case r.ReceivedBytes == 0:
		return errors.New("iperf3's receiver got nothing")
	case r.ServerSaw != egress:
		return fmt.Errorf("the server saw the client as %v, not the egress IP %v: the traffic did not leave through the gateway", r.ServerSaw, egress)
	case r.GatewayOutBytes < r.ReceivedBytes:
		return fmt.Errorf("the gateway sent %d bytes while the server received %d: the traffic bypassed it", r.GatewayOutBytes, r.ReceivedBytes)
	}
	return nil
}

// bulkResult is one side's bulk scenario over its repetitions: the medians
// with their ranges.
type bulkResult struct {
	Scenario            scenario   `json:"scenario"`
	Mode                string     `json:"mode"`
	Setup               string     `json:"setup"`
	Gbps                spread     `json:"gbps"`
	GatewayCores        spread     `json:"gateway_cores"`
	TaskCores           spread     `json:"gateway_task_cores"`
	GatewayCoresPerGbps spread     `json:"gateway_cores_per_gbps"`
	TaskCoresPerGbps    spread     `json:"gateway_task_cores_per_gbps"`
	Retransmits         spread     `json:"retransmits"`
	Reps                []*bulkRun `json:"reps"`
}

// runBulk runs the bulk scenarios among cfg's on the kernel and egret sides
// (the reflectors forward UDP one way only) and adds their results to rep.
func runBulk(cfg config, rep *report) error {
	var sides []string
	for _, s := range cfg.sides {
		if s == lab.ModeKernel || s == lab.ModeEgret {
			sides = append(sides, s)
		}
	}
	var runs []*bulkRun
	for _, sc := range cfg.scenarios {
		if sc.Bulk == nil {
			continue
		}
		for _, st := range schedule(sides, cfg.reps) {
			r, err := bulkSide(cfg, st, sc)
			if err != nil {
				return fmt.Errorf("%s side, %s: %w", st.Side, sc.Name, err)
			}
			runs = append(runs, r)
		}
	}
	rep.Bulk = aggregateBulk(runs)
	return nil
}

// aggregateBulk folds the repetitions of each side's scenario into one.
func aggregateBulk(runs []*bulkRun) []*bulkResult {
	var out []*bulkResult
	for _, r := range runs {
		i := slices.IndexFunc(out, func(b *bulkResult) bool { return b.Mode == r.Mode && b.Scenario.Name == r.Scenario.Name })
		if i < 0 {
			out = append(out, &bulkResult{Scenario: r.Scenario, Mode: r.Mode, Setup: r.Setup})
			i = len(out) - 1
		}
		out[i].Reps = append(out[i].Reps, r)
	}
	for _, b := range out {
		field := func(f func(*bulkRun) float64) spread {
			var v []float64
			for _, r := range b.Reps {
				v = append(v, f(r))
			}
			return newSpread(v)
		}
		b.Gbps = field(func(r *bulkRun) float64 { return r.Gbps })
		b.GatewayCores = field(func(r *bulkRun) float64 { return r.GatewayCores })
		b.TaskCores = field(func(r *bulkRun) float64 { return r.TaskCores })
		b.GatewayCoresPerGbps = field(func(r *bulkRun) float64 { return r.GatewayCoresPerGbps })
		b.TaskCoresPerGbps = field(func(r *bulkRun) float64 { return r.TaskCoresPerGbps })
		b.Retransmits = field(func(r *bulkRun) float64 { return float64(r.Retransmits) })
	}
	return out
}

// bulkSide builds a lab for one repetition of one side, gives it the
// scenario's MTUs, pins it as the other scenarios do, and runs iperf3.
func bulkSide(cfg config, st step, sc scenario) (*bulkRun, error) {
	spec, err := lab.NewSpec("ebl"+fmt.Sprint(os.Getpid()%100000), sc.Underlay)
	if err != nil {
		return nil, err
	}
	impl, err := lab.NewImpl(st.Side, cfg.bin)
	if err != nil {
		return nil, err
	}
	fmt.Printf("\n== %s gateway, %s, repetition %d of %d: building the lab\n", st.Side, sc.Name, st.Rep+1, max(cfg.reps, 1))
	l := &lab.Lab{Spec: spec, Impl: impl, Binary: cfg.bin}
	if err := l.Up(); err != nil {
		return nil, err
	}
	defer lab.Down("", spec.Name)
	upLab.Lock()
	upLab.name = spec.Name
	upLab.Unlock()
	defer restoreConntrack()
	b, err := newBulkLab(l, st.Side, sc, cfg.genCPU, cfg.gwCPU)
	if err != nil {
		return nil, err
	}
	fmt.Println("  " + b.setup)
	fmt.Printf("-- %s, %s: %s\n", st.Side, sc.Name, sc.About)
	r, err := b.run(spec.Workers[0].Pods[0], cfg.full)
	if err != nil {
		return nil, err
	}
	r.Scenario, r.Mode, r.Rep = sc, st.Side, st.Rep
	if err := r.throughGateway(b.tg.egress); err != nil {
		return nil, err
	}
	fmt.Printf("   %.2f Gbit/s (%d bytes in %.1f s, %d retransmits), gateway tasks %.2f cores = %.3f per Gbit/s (its core %.2f busy); the gateway took in %d bytes and sent out %d\n",
		r.Gbps, r.ReceivedBytes, r.Seconds, r.Retransmits, r.TaskCores, r.TaskCoresPerGbps, r.GatewayCores, r.GatewayInBytes, r.GatewayOutBytes)
	return r, nil
}

// bulkLab is a lab set up for a bulk scenario.
type bulkLab struct {
	spec    *lab.Spec
	tg      target
	sc      scenario
	genCPU  int
	gwCPU   int
	gwTasks []int
	setup   string
}

// newBulkLab gives the lab l (side mode) the scenario's MTUs and the
// cores: the gateway pinned as in the other scenarios, and the path past
// it (the router's and worker w1's receive, with the server's and the
// pod's TCP) on the generator's core with iperf3, so that the gateway's
// core carries the gateway's work and not the TCP ends'.
func newBulkLab(l *lab.Lab, mode string, sc scenario, genCPU, gwCPU int) (*bulkLab, error) {
	spec := l.Spec
	if err := bridgeNetfilterOff(spec.NS("fabric")); err != nil {
		return nil, err
	}
	tg, err := staticTarget(spec)
	if err != nil {
		return nil, err
	}
	setup := ""
	if mode == lab.ModeKernel {
		if setup, err = sizeConntrack(sc); err != nil {
			return nil, err
		}
		setup += "; "
	}
	mtus, err := setMTUs(spec, *sc.Bulk)
	if err != nil {
		return nil, err
	}
	tasks, note, err := pinGateway(l, tg.gw.Name, mode == lab.ModeEgret, genCPU, []int{gwCPU})
	if err != nil {
		return nil, err
	}
	ends := []string{spec.Router.Name, spec.Workers[0].Name}
	for _, m := range ends {
		// As for the gateway (pinGateway): a veth hands frames to its
		// peer's NAPI only when the sending port has no TSO.
		if out, err := exec.Command("ip", "netns", "exec", spec.NS("fabric"), "ethtool", "-K", m, "tso", "off").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ethtool -K %s tso off: %v: %s", m, err, out)
		}
		if _, err := threadedNAPI(spec.NS(m), "eth0", []int{genCPU}, prioNAPI); err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
	}
	setup += mtus + "; " + note + fmt.Sprintf("; the router's and worker %s's eth0 with GRO and threaded NAPI on the generator core %d, where iperf3's client and server run (nice %d)",
		spec.Workers[0].Name, genCPU, iperf3Nice)
	return &bulkLab{spec: spec, tg: tg, sc: sc, genCPU: genCPU, gwCPU: gwCPU, gwTasks: tasks, setup: setup}, nil
}

// setMTUs gives every link of the underlay (each fabric member's eth0, its
// port on the fabric bridge) b.UnderlayMTU, or the most the link takes when
// that is less (a veth whose peer has an XDP program without multi-buffer
// support takes about 3500), and the pods' side (each pod's eth0 and its
// port, cni0, the VXLAN devices of workers and kernel gateways)
// b.PodMTU. The outside link (router to server) stays 1500. It returns
// what it set, for the setup line.
func setMTUs(spec *lab.Spec, b bulk) (string, error) {
	members := []string{spec.Router.Name}
	if spec.Controller.Name != "" {
		members = append(members, spec.Controller.Name)
	}
	for _, w := range spec.Workers {
		members = append(members, w.Name)
	}
	for _, g := range spec.Gateways {
		members = append(members, g.Name)
	}
	var capped []string
	set := func(ns, dev string, mtu int) error {
		if hi, err := maxMTU(ns, dev); err != nil {
			return err
		} else if hi < mtu {
			capped = append(capped, fmt.Sprintf("%s in %s %d", dev, ns, hi))
			mtu = hi
		}
		if out, err := exec.Command("ip", "-n", ns, "link", "set", "dev", dev, "mtu", strconv.Itoa(mtu)).CombinedOutput(); err != nil {
			return fmt.Errorf("MTU %d on %s in %s: %v: %s", mtu, dev, ns, err, bytes.TrimSpace(out))
		}
		return nil
	}
	// No traffic flows meanwhile, so the order does not matter.
	for _, m := range members {
		if err := set(spec.NS("fabric"), m, b.UnderlayMTU); err != nil {
			return "", err
		}
		if err := set(spec.NS(m), "eth0", b.UnderlayMTU); err != nil {
			return "", err
		}
	}
	for _, w := range spec.Workers {
		for _, p := range w.Pods {
			veth := "veth-" + p.Name // as lab names it
			if len(veth) > 15 {
				veth = veth[:15]
			}
			if err := set(spec.NS(p.Name), "eth0", b.PodMTU); err != nil {
				return "", err
			}
			if err := set(spec.NS(w.Name), veth, b.PodMTU); err != nil {
				return "", err
			}
		}
		for _, dev := range []string{"cni0", "egv0"} {
			if err := set(spec.NS(w.Name), dev, b.PodMTU); err != nil {
				return "", err
			}
		}
	}
	for _, g := range spec.Gateways {
		if hasLink(spec.NS(g.Name), "egv0") { // the kernel gateway's VTEP
			if err := set(spec.NS(g.Name), "egv0", b.PodMTU); err != nil {
				return "", err
			}
		}
	}
	s := fmt.Sprintf("underlay MTU %d, pods' side %d", b.UnderlayMTU, b.PodMTU)
	if len(capped) > 0 {
		s += " (less where a link takes no more: " + strings.Join(capped, ", ") + ")"
	}
	return s, nil
}

// maxMTU is the largest MTU dev in ns takes now.
func maxMTU(ns, dev string) (int, error) {
	out, err := exec.Command("ip", "-n", ns, "-d", "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		return 0, fmt.Errorf("%s in %s: %w", dev, ns, err)
	}
	var links []struct {
		MaxMTU int `json:"max_mtu"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) == 0 || links[0].MaxMTU == 0 {
		return 0, fmt.Errorf("%s in %s: no max_mtu in %s", dev, ns, out)
	}
	return links[0].MaxMTU, nil
}

func hasLink(ns, dev string) bool {
	return exec.Command("ip", "-n", ns, "link", "show", "dev", dev).Run() == nil
}

// portBytes is what the veth dev in ns sent and received so far.
func portBytes(ns, dev string) (tx, rx uint64, err error) {
	out, err := exec.Command("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("counters of %s in %s: %w", dev, ns, err)
	}
	var links []struct {
		Stats struct {
			TX struct {
				Bytes uint64 `json:"bytes"`
			} `json:"tx"`
			RX struct {
				Bytes uint64 `json:"bytes"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) == 0 {
		return 0, 0, fmt.Errorf("counters of %s in %s: %s", dev, ns, out)
	}
	return links[0].Stats.TX.Bytes, links[0].Stats.RX.Bytes, nil
}

// iperf3Result is the part of iperf3's -J output read here.
type iperf3Result struct {
	Start struct {
		Connected []struct {
			RemoteHost string `json:"remote_host"`
		} `json:"connected"`
	} `json:"start"`
	End struct {
		SumSent struct {
			Retransmits uint64 `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         uint64  `json:"bytes"`
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

func parseIperf3(out []byte) (*iperf3Result, error) {
	var r iperf3Result
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("iperf3's output is not its JSON: %w: %.300s", err, out)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", r.Error)
	}
	return &r, nil
}

// run runs iperf3 for d from pod through the lab to the server (a one-off
// server, so that its JSON is this run's) and counts the gateway's core
// and port meanwhile.
func (b *bulkLab) run(pod lab.Pod, d time.Duration) (*bulkRun, error) {
	spec := b.spec
	srvNS, fabric, port := spec.NS(spec.Server.Name), spec.NS("fabric"), b.tg.gw.Name
	// iperf3 runs in the default class: at SCHED_FIFO, client and server
	// on one core kept each other from running and a 3 s test did not end
	// in a minute. At nice -15 it outweighs the shared machine's other
	// work (builds at nice 0) about 35 to 1 on its core.
	pinned := []string{"taskset", "-c", strconv.Itoa(b.genCPU), "nice", "-n", strconv.Itoa(iperf3Nice), "iperf3"}
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", append(append([]string{"netns", "exec", srvNS}, pinned...),
		"-s", "-1", "-J", "-B", spec.Server.IP.String(), "-p", strconv.Itoa(bulkPort))...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	defer func() {
		cancel()
		<-srvDone
	}()
	if err := waitListening(srvNS, bulkPort, srvDone); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w: %s", err, srvOut.Bytes())
	}
	streams := max(b.sc.Bulk.Streams, 1)
	cli := exec.CommandContext(ctx, "ip", append(append([]string{"netns", "exec", spec.NS(pod.Name)}, pinned...),
		"-c", spec.Server.IP.String(), "-p", strconv.Itoa(bulkPort), "-P", strconv.Itoa(streams),
		"-t", strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1)), "-J")...)
	in0, out0, err := portBytes(fabric, port)
	if err != nil {
		return nil, err
	}
	cpu0, tasks0 := coreTicks([]int{b.gwCPU}), taskTicks(b.gwTasks)
	start := time.Now()
	cliOut, cliErr := cli.Output()
	secs := time.Since(start).Seconds()
	cpu1, tasks1 := coreTicks([]int{b.gwCPU}), taskTicks(b.gwTasks)
	in1, out1, err := portBytes(fabric, port)
	if err != nil {
		return nil, err
	}
	c, err := parseIperf3(cliOut)
	if err != nil {
		return nil, fmt.Errorf("iperf3 client (%v): %w", cliErr, err)
	}
	select {
	case <-srvDone:
		srvDone <- nil // for the deferred wait
	case <-ctx.Done():
		return nil, errors.New("iperf3 server did not end after its test")
	}
	s, err := parseIperf3(srvOut.Bytes())
	if err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	r := &bulkRun{Setup: b.setup, ReceivedBytes: c.End.SumReceived.Bytes, Seconds: c.End.SumReceived.Seconds,
		Gbps: c.End.SumReceived.BitsPerSecond / 1e9, Retransmits: c.End.SumSent.Retransmits,
		GatewayInBytes: in1 - in0, GatewayOutBytes: out1 - out0,
		GatewayCores: float64(cpu1-cpu0) / clkTck / secs, TaskCores: float64(tasks1-tasks0) / clkTck / secs}
	if len(s.Start.Connected) > 0 {
		r.ServerSaw, _ = netip.ParseAddr(s.Start.Connected[0].RemoteHost)
	}
	if r.Gbps > 0 {
		r.GatewayCoresPerGbps, r.TaskCoresPerGbps = r.GatewayCores/r.Gbps, r.TaskCores/r.Gbps
	}
	return r, nil
}

// waitListening waits until a TCP socket listens on port in ns, or the
// server exits (done).
func waitListening(ns string, port int, done chan error) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Hltn", "sport", "=", ":"+strconv.Itoa(port)).Output()
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			return nil
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("exited before it listened: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("not listening on port %d after 10 s", port)
}

// bulkTable is the bulk TCP scenarios' table ("" when none ran): each
// side's Gbit/s and the gateway's CPU per Gbit/s, medians and ranges, and
// Egret over the kernel. The ratio is of the gateway's own tasks' time: on
// this shared machine its core is busy all the time whatever it forwards,
// other work filling its idle time.
func (rep *report) bulkTable() string {
	if len(rep.Bulk) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nBulk TCP (iperf3's receiver figure; the gateway's CPU per Gbit/s: the time charged to its own tasks on its core, " +
		"and the core's whole busy time, which also holds whatever else the shared machine ran in the gateway's idle time):\n\n" +
		"| scenario | side | Gbit/s | gateway cores per Gbit/s | gateway tasks, cores | gateway core busy | core busy per Gbit/s | retransmits | egret/kernel Gbit/s | egret/kernel gateway cores per Gbit/s |\n|---|---|---|---|---|---|---|---|---|---|\n")
	f := func(s spread, prec int) string {
		if len(s.Values) < 2 {
			return strconv.FormatFloat(s.Median, 'f', prec, 64)
		}
		return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s.Median, prec, s.Min, prec, s.Max)
	}
	for _, r := range rep.Bulk {
		kg, kc := "", ""
		if r.Mode == lab.ModeEgret {
			for _, k := range rep.Bulk {
				if k.Mode == lab.ModeKernel && k.Scenario.Name == r.Scenario.Name {
					kg = ratio(r.Gbps.Median, k.Gbps.Median) + "x"
					kc = ratio(r.TaskCoresPerGbps.Median, k.TaskCoresPerGbps.Median) + "x"
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Scenario.Name, r.Mode, f(r.Gbps, 2), f(r.TaskCoresPerGbps, 3),
			f(r.TaskCores, 2), f(r.GatewayCores, 2), f(r.GatewayCoresPerGbps, 3), f(r.Retransmits, 0), kg, kc)
	}
	seen := map[string]bool{}
	for _, r := range rep.Bulk {
		if !seen[r.Scenario.Name] {
			seen[r.Scenario.Name] = true
			fmt.Fprintf(&b, "\n`%s`: %s.\n", r.Scenario.Name, r.Scenario.About)
		}
		fmt.Fprintf(&b, "- %s: %s\n", r.Mode, r.Setup)
	}
	return b.String()
}
