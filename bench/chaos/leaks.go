package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/egret-gw/egret/lab"
)

// footprint is what the lab's Egret parts hold, summed over the gateway
// and worker nodes, compared before the first fault and after the last
// recovery: what a fault left behind shows as growth.
type footprint struct {
	nftLines, routes, rules, addrs int
	rssKiB, threads                int
}

func (f footprint) String() string {
	return fmt.Sprintf("nft rule lines %d, routes %d, ip rules %d, addresses %d, Egret RSS %d MiB, threads %d",
		f.nftLines, f.routes, f.rules, f.addrs, f.rssKiB/1024, f.threads)
}

// measure counts the footprint of the lab's nodes and Egret processes.
func measure(l *lab.Lab, st *lab.Status) footprint {
	var f footprint
	var nss []string
	for _, w := range l.Spec.Workers {
		nss = append(nss, l.Spec.NS(w.Name))
	}
	for _, g := range l.Spec.Gateways {
		nss = append(nss, l.Spec.NS(g.Name))
	}
	lines := func(ns string, args ...string) int {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).Output()
		if err != nil {
			return 0
		}
		return strings.Count(string(out), "\n")
	}
	for _, ns := range nss {
		f.nftLines += lines(ns, "nft", "list", "ruleset")
		f.routes += lines(ns, "ip", "route", "show", "table", "all")
		f.rules += lines(ns, "ip", "rule", "show")
		f.addrs += lines(ns, "ip", "-o", "addr", "show")
	}
	pids := []int{st.Controller.PID}
	for _, s := range st.Steer {
		pids = append(pids, s.PID)
	}
	for _, g := range st.Gateways {
		pids = append(pids, g.PID)
	}
	for _, pid := range pids {
		if rss, threads, ok := procStatus(pid); ok {
			f.rssKiB += rss
			f.threads += threads
		}
	}
	return f
}

// procStatus reads a process's resident memory (KiB) and thread count
// from /proc; ok is false for a process that is gone or a zombie (no
// VmRSS).
func procStatus(pid int) (rssKiB, threads int, ok bool) {
	if pid <= 0 {
		return 0, 0, false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch {
		case err != nil:
		case k == "VmRSS":
			rssKiB, ok = n, true
		case k == "Threads":
			threads = n
		}
	}
	return rssKiB, threads, ok
}
