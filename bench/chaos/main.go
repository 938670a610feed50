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
// Root.
//
//	go run ./bench/chaos [-short] [-egret bin/egret]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	o := options{}
	flag.BoolVar(&o.short, "short", false, "the short variant of make test: fewer faults, each held at most "+shortHold.String())
	flag.StringVar(&o.egret, "egret", "", "egret binary (default: go build ./cmd/egret into a temporary folder)")
	flag.Parse()
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
