package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/egret-gw/egret/internal/nstest"
)

func TestConntrackSize(t *testing.T) {
	for _, c := range []struct {
		sc                  scenario
		hostMax, hostBucket int
		max, buckets        int
	}{
		{scenario{Traffic: traffic{Flows: 1_000_000}}, 262_144, 262_144, flowLimit, 1 << 20},
		{scenario{Traffic: traffic{Flows: 10_000}}, 262_144, 262_144, flowLimit, 262_144}, // never below the host's
		{scenario{Traffic: traffic{New: true}}, 65_536, 16_384, flowLimit, flowLimit},
		{scenario{Traffic: traffic{Flows: 10}}, 1 << 23, 1 << 23, 1 << 23, 1 << 23},
	} {
		m, b := conntrackSize(c.sc, c.hostMax, c.hostBucket)
		if m != c.max || b != c.buckets {
			t.Errorf("conntrackSize(%+v, %d, %d) = %d, %d; want %d, %d", c.sc.Traffic, c.hostMax, c.hostBucket, m, b, c.max, c.buckets)
		}
	}
}

// TestBridgeNetfilterOff turns bridge netfilter on in a namespace and
// checks that the fabric's setting turns every family of it off.
func TestBridgeNetfilterOff(t *testing.T) {
	ns := nstest.Named(t)
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		t.Skip("no br_netfilter on this kernel: nothing to turn off")
	}
	keys := []string{"iptables", "ip6tables", "arptables"}
	read := func() string {
		var vals []string
		for _, k := range keys {
			out, err := exec.Command("ip", "netns", "exec", ns.Name, "cat", "/proc/sys/net/bridge/bridge-nf-call-"+k).CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			vals = append(vals, strings.TrimSpace(string(out)))
		}
		return strings.Join(vals, " ")
	}
	for _, k := range keys {
		if out, err := exec.Command("ip", "netns", "exec", ns.Name, "sysctl", "-qw", "net.bridge.bridge-nf-call-"+k+"=1").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	if got := read(); got != "1 1 1" {
		t.Fatalf("bridge netfilter before: %s, want 1 1 1", got)
	}
	if err := bridgeNetfilterOff(ns.Name); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "0 0 0" {
		t.Errorf("bridge netfilter after: %s, want 0 0 0", got)
	}
}
