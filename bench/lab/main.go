// Command lab is the `make bench-lab` smoke benchmark: UDP packets per second
// from a pod through one gateway of the lab, with the CPU that costs, and
// the throughput of one established TCP flow, for Egret's gateway and for
// the kernel doing the same job (VXLAN decap + nftables SNAT + conntrack) in
// an identical lab, and their ratio; on each underlay: VXLAN over IPv4 (the
// default lab) and over IPv6 (the IPv6-only lab, 20 bytes more of outer
// header per packet, pod MTU 1430 instead of 1450).
//
//	go run ./bench/lab [-seconds 5] [-len 64] [-underlay ipv4,ipv6] [-egret bin/egret]
//
// Traffic: iperf3 UDP at full speed, then one iperf3 TCP stream, from pod
// w1-p1 (policy blue, gateway g1) to the outside server. Needs root, iperf3
// and the lab's tools.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/egret-gw/egret/lab"
)

func main() {
	secs := flag.Int("seconds", 5, "traffic duration per mode")
	size := flag.Int("len", 64, "UDP payload bytes")
	bin := flag.String("egret", "", "egret binary (default: go build ./cmd/egret into a temp dir)")
	underlays := flag.String("underlay", lab.UnderlayIPv4+","+lab.UnderlayIPv6, "comma-separated lab underlays to measure: ipv4, ipv6")
	flag.Parse()
	if err := run(*secs, *size, *bin, strings.Split(*underlays, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lab:", err)
		os.Exit(1)
	}
}

// result is one mode's measurement.
type result struct {
	mode     string
	underlay string
	pps      float64 // packets received by the server per second
	sent     float64 // packets the pod sent per second
	gwCores  float64 // CPU of the gateway: process (egret) or machine softirq (kernel)
	allCores float64 // CPU of the whole machine during the run
	tcpMbps  float64 // one established TCP flow: megabits per second received by the server
}

func run(secs, size int, bin string, underlays []string) error {
	for _, u := range underlays {
		if _, err := lab.NewSpec("elb", u); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (it builds network namespaces)")
	}
	for _, tool := range []string{"iperf3", "ip", "nft", "bridge", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing; run make deps", tool)
		}
	}
	if bin == "" {
		dir, err := os.MkdirTemp("", "egret-bench-lab-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "egret")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/egret").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/egret: %v\n%s", err, out)
		}
	}
	fmt.Printf("bench-lab: iperf3 UDP, %d-byte payload, then one TCP stream, %d s each per mode and underlay, pod w1-p1 → gateway g1 → server\n", size, secs)
	var res []result
	for _, u := range underlays {
		for _, mode := range []string{lab.ModeKernel, lab.ModeEgret} {
			if mode == lab.ModeEgret && !lab.EgretAvailable(bin) {
				fmt.Println("egret mode: unavailable (this egret binary has no `gateway` subcommand yet)")
				continue
			}
			r, err := measure(mode, u, bin, secs, size)
			if err != nil {
				return fmt.Errorf("%s mode, %s underlay: %w", mode, u, err)
			}
			res = append(res, r)
		}
	}
	fmt.Printf("\n%-7s %-8s %12s %12s %14s %14s %16s %10s\n", "mode", "underlay", "sent pps", "recv pps", "gateway cores", "machine cores", "gw µs/packet", "TCP Mbit/s")
	for _, r := range res {
		fmt.Printf("%-7s %-8s %12.0f %12.0f %14.2f %14.2f %16.2f %10.0f\n", r.mode, r.underlay, r.sent, r.pps, r.gwCores, r.allCores, perPacket(r.gwCores, r.pps), r.tcpMbps)
	}
	for i := 0; i+1 < len(res); i++ {
		k, e := res[i], res[i+1]
		if k.mode != lab.ModeKernel || e.mode != lab.ModeEgret || k.underlay != e.underlay {
			continue
		}
		fmt.Printf("\n%s underlay, egret/kernel: %.2fx packets per second, %.2fx gateway CPU per packet, %.2fx machine CPU per packet, %.2fx TCP throughput",
			k.underlay, e.pps/k.pps, perPacket(e.gwCores, e.pps)/perPacket(k.gwCores, k.pps), perPacket(e.allCores, e.pps)/perPacket(k.allCores, k.pps), e.tcpMbps/k.tcpMbps)
	}
	fmt.Println()
	fmt.Println("\ngateway cores: egret = the `egret gateway` process (utime+stime; the XDP program and the copy" +
		"\ninto the UMEM run in softirq and are not in it); kernel = softirq time of the whole machine" +
		"\n(decap, NAT and forwarding run there, but so do the worker's encap and the veth hops: an upper" +
		"\nbound). machine cores counts everything, generator included. On a shared machine these are" +
		"\nsmoke figures, not a benchmark.")
	return nil
}

func perPacket(cores, pps float64) float64 {
	if pps == 0 {
		return 0
	}
	return cores / pps * 1e6
}

func measure(mode, underlay, bin string, secs, size int) (result, error) {
	r := result{mode: mode, underlay: underlay}
	spec, err := lab.NewSpec("elb"+strconv.FormatInt(int64(os.Getpid()), 36), underlay)
	if err != nil {
		return r, err
	}
	impl, err := lab.NewImpl(mode, bin)
	if err != nil {
		return r, err
	}
	l := &lab.Lab{Spec: spec, Impl: impl, Binary: bin}
	if err := l.Up(); err != nil {
		return r, err
	}
	defer lab.Down("", spec.Name)
	srvIP := spec.Server.IP.String()
	srv := exec.Command("ip", "netns", "exec", spec.NS(spec.Server.Name), "iperf3", "-s", "--forceflush", "-B", srvIP, "-p", "5201")
	out, err := srv.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := srv.Start(); err != nil {
		return r, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Server listening") {
				close(ready)
				for sc.Scan() {
				}
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		return r, errors.New("iperf3 server did not start")
	}
	gwPid := 0
	if mode == lab.ModeEgret {
		st, err := l.Status()
		if err != nil {
			return r, err
		}
		gwPid = st.Gateways[0].PID
	}
	busy0, soft0 := procStat()
	gw0 := procTicks(gwPid)
	t0 := time.Now()
	cli := exec.Command("ip", "netns", "exec", spec.NS("w1-p1"), "iperf3", "-c", srvIP, "-p", "5201",
		"-u", "-b", "0", "-l", strconv.Itoa(size), "-t", strconv.Itoa(secs), "-J")
	js, err := cli.Output()
	el := time.Since(t0).Seconds()
	busy1, soft1 := procStat()
	gw1 := procTicks(gwPid)
	if err != nil {
		return r, fmt.Errorf("iperf3 client: %v\n%s", err, js)
	}
	var rep struct {
		End struct {
			Sum struct {
				Seconds float64 `json:"seconds"`
				Packets int64   `json:"packets"`
				Lost    int64   `json:"lost_packets"`
			} `json:"sum"`
		} `json:"end"`
	}
	if err := json.Unmarshal(js, &rep); err != nil || rep.End.Sum.Seconds == 0 {
		return r, fmt.Errorf("iperf3 JSON (%v): %.300s", err, js)
	}
	s := rep.End.Sum
	r.sent = float64(s.Packets) / s.Seconds
	r.pps = float64(s.Packets-s.Lost) / s.Seconds
	ticks := float64(clkTck) * el
	r.allCores = float64(busy1-busy0) / ticks
	if mode == lab.ModeEgret {
		r.gwCores = float64(gw1-gw0) / ticks
	} else {
		r.gwCores = float64(soft1-soft0) / ticks
	}
	fmt.Printf("%s mode, %s underlay: %d packets sent, %d lost in %.1f s\n", mode, underlay, s.Packets, s.Lost, s.Seconds)

	// One established TCP flow: full-sized segments, so the underlay's
	// 20 extra header bytes show as a smaller MSS (pod MTU 1430, not 1450).
	js, err = exec.Command("ip", "netns", "exec", spec.NS("w1-p1"), "iperf3", "-c", srvIP, "-p", "5201",
		"-t", strconv.Itoa(secs), "-J").Output()
	if err != nil {
		return r, fmt.Errorf("iperf3 TCP client: %v\n%.300s", err, js)
	}
	var tcp struct {
		End struct {
			Received struct {
				Bits float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(js, &tcp); err != nil || tcp.End.Received.Bits == 0 {
		return r, fmt.Errorf("iperf3 TCP JSON (%v): %.300s", err, js)
	}
	r.tcpMbps = tcp.End.Received.Bits / 1e6
	return r, nil
}

// clkTck is USER_HZ, the unit of /proc tick counters (100 on Linux).
const clkTck = 100

// procStat returns busy and softirq ticks summed over all CPUs.
func procStat() (busy, softirq uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
		if i == 6 {
			softirq = n
		}
	}
	return
}

// procTicks is utime+stime of pid (0 when pid is 0 or gone).
func procTicks(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:]) // state is f[0]; utime, stime are fields 14, 15 of the line
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}
