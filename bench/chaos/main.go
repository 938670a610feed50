// Command chaos is the fault harness (issue 31, docs/reliability.md): on
// the managed lab (the real controller, gateway and steer agents in
// network namespaces) it runs steady traffic from every pod to outside
// servers that record the source of every packet, injects faults one at a
// time with recovery between, and checks on every packet that the source
// was one the controller's status allowed that pod at that moment (within
// the move window), that no two gateways answered ARP for one egress IP
// longer than the double-answer budget, how many long-lived connections
// were lost, and how long each recovery took. It prints one line per
// fault and a summary line, and exits 1 when an invariant is broken.
//
// With -soak it is make soak instead: the same traffic and checks for a
// long run with churn (an EgressIP edited, a pod deleted and created, a
// gateway rebooted, every -kill-every), every Egret process's RSS, open
// files, goroutines, flows and NAT ports sampled, plotted into -out, and
// the RSS judged for growth after the warm-up. Root.
//
//	go run ./bench/chaos [-short] [-egret bin/egret] [-controller-lease any|off]
//	go run ./bench/chaos -soak 30m [-kill-every 5m] [-out DIR] [-egret bin/egret]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	o := options{}
	so := soakOptions{}
	flag.BoolVar(&o.short, "short", false, "the short variant of make test: fewer faults, each held at most "+shortHold.String())
	flag.StringVar(&o.egret, "egret", "", "egret binary (default: go build ./cmd/egret into a temporary folder)")
	flag.StringVar(&o.lease, "controller-lease", "any", "the gateway agents' --controller-lease: any (the lab's probes are plain gRPC) or off (--fence-after alone, the fence before the lease)")
	flag.DurationVar(&so.duration, "soak", 0, "run the soak for this long instead of the faults (make soak: 30m)")
	flag.DurationVar(&so.killEvery, "kill-every", 5*time.Minute, "soak: one churn cycle, ending in the busiest gateway's reboot")
	flag.DurationVar(&so.sampleEvery, "sample-every", 10*time.Second, "soak: how often every Egret process is sampled")
	flag.StringVar(&so.out, "out", "egret-soak", "soak: the folder for soak.csv, soak.md and the plots")
	flag.Parse()
	if so.duration > 0 {
		if so.killEvery <= 0 || so.sampleEvery <= 0 {
			fmt.Fprintln(os.Stderr, "chaos: -kill-every and -sample-every must be positive")
			os.Exit(2)
		}
		res, err := soak(o, so, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
		if broken := res.broken(); broken != "" {
			fmt.Fprintln(os.Stderr, "soak: broken:", broken)
			os.Exit(1)
		}
		return
	}
	res, err := run(o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if broken := res.broken(); broken != "" {
		fmt.Fprintln(os.Stderr, "chaos: invariant broken:", broken)
		os.Exit(1)
	}
}
