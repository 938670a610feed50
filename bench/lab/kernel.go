package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// A fair kernel (issue 34, item 2). The kernel side used to keep the
// host's conntrack table (nf_conntrack_max 262,144 and its hash) while
// Egret's was given 4M flows, and the fabric bridge ran every frame
// through bridge netfilter on both sides. Now the kernel's table is sized
// for each scenario's flows and admits as many as Egret's, and the fabric
// is a plain bridge, as a switch between real nodes is. GRO is on the
// gateway's interface for both sides (threadedNAPI), as on a real node.

// flowLimit is the most flows either side's table admits in the lab: Egret's
// conntrackMax and the kernel's nf_conntrack_max alike.
const flowLimit = 1 << 22

// conntrackSysctl is where the host's conntrack table is sized. A network
// namespace other than the first may not write these (they are the
// kernel's one table), so a run sets them on the host for the kernel side
// and puts the old values back after it.
const conntrackSysctl = "/proc/sys/net/netfilter/"

// conntrackSize is the table the kernel side gets for sc: room for
// flowLimit flows as Egret has, and a bucket per flow the scenario holds (a
// power of two; the connection-rate scenarios fill the table), never fewer
// than the host has already, since the table is shared with the rest of
// the machine.
func conntrackSize(sc scenario, hostMax, hostBuckets int) (maxFlows, buckets int) {
	need := sc.Traffic.Flows
	if sc.Traffic.New {
		need = flowLimit
	}
	buckets = 1
	for buckets < need {
		buckets <<= 1
	}
	return max(flowLimit, hostMax), max(buckets, hostBuckets)
}

// hostConntrack holds the host's values from before the run, to put back.
var hostConntrack struct {
	sync.Mutex
	saved            bool
	maxFlows, bucket int
}

func readInt(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(conntrackSysctl, name))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func writeInt(name string, v int) error {
	return os.WriteFile(filepath.Join(conntrackSysctl, name), []byte(strconv.Itoa(v)), 0o644)
}

// sizeConntrack sizes the host's conntrack table for sc and returns what
// it set, for the setup line.
func sizeConntrack(sc scenario) (string, error) {
	hostConntrack.Lock()
	defer hostConntrack.Unlock()
	if !hostConntrack.saved {
		m, err := readInt("nf_conntrack_max")
		if err != nil {
			return "", fmt.Errorf("conntrack table: %w", err)
		}
		b, err := readInt("nf_conntrack_buckets")
		if err != nil {
			return "", fmt.Errorf("conntrack table: %w", err)
		}
		hostConntrack.saved, hostConntrack.maxFlows, hostConntrack.bucket = true, m, b
	}
	m, b := conntrackSize(sc, hostConntrack.maxFlows, hostConntrack.bucket)
	if err := writeInt("nf_conntrack_buckets", b); err != nil {
		return "", fmt.Errorf("conntrack buckets %d: %w", b, err)
	}
	if err := writeInt("nf_conntrack_max", m); err != nil {
		return "", fmt.Errorf("nf_conntrack_max %d: %w", m, err)
	}
	return fmt.Sprintf("kernel conntrack: nf_conntrack_max %d, %d buckets", m, b), nil
}

// restoreConntrack puts back the host's table as it was before the run.
func restoreConntrack() {
	hostConntrack.Lock()
	defer hostConntrack.Unlock()
	if !hostConntrack.saved {
		return
	}
	// The old bucket count may be below the live entries: the kernel
	// rehashes them either way.
	if err := writeInt("nf_conntrack_max", hostConntrack.maxFlows); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lab: restoring nf_conntrack_max:", err)
	}
	if err := writeInt("nf_conntrack_buckets", hostConntrack.bucket); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lab: restoring the conntrack buckets:", err)
	}
	hostConntrack.saved = false
}

// bridgeNetfilterOff turns bridge netfilter off in the fabric namespace
// (for both sides): with br_netfilter loaded, a bridge passes every frame
// through the IP hooks, which a switch between nodes does not. Without
// br_netfilter there is nothing to turn off.
func bridgeNetfilterOff(ns string) error {
	var args []string
	for _, k := range []string{"iptables", "ip6tables", "arptables"} {
		args = append(args, "net.bridge.bridge-nf-call-"+k+"=0")
	}
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "sysctl", "-qw"}, args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("bridge netfilter off in %s: %v: %s", ns, err, out)
	}
	return nil
}
