// Command failover is the failover part of the benchmark harness: in the
// managed lab (the real controller, gateway and steer agents in network
// namespaces), it kills the `egret gateway` of a gateway hosting egress IPs
// with SIGKILL, -kills times one after another, and times for each kill
//
//   - "status moved": until the controller's status places every egress IP
//     of the killed gateway on another node;
//   - "first packet, new connection": until a new HTTP connection from a pod
//     that uses a moved IP is served with it (lab.Failover);
//   - "first packet, old connection": until each long-lived connection that
//     was leaving through the killed gateway gets its next answer, through
//     the new owner (TCP's retransmission timer paces this one).
//
// The killed gateway is started again and the controller's hold-down is
// waited out before the next kill, so every kill meets the same three
// gateways. Root. It writes failover.json, failover.md and failover-cdf.png
// into -out.
//
//	go run ./bench/failover -out DIR [-kills 20] [-egret bin/egret]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	o := options{}
	flag.StringVar(&o.out, "out", "", "report folder: failover.json, failover.md and failover-cdf.png are written there (required)")
	flag.IntVar(&o.kills, "kills", 20, "gateway kills")
	flag.StringVar(&o.egret, "egret", "", "egret binary (default: go build ./cmd/egret into a temporary folder)")
	flag.IntVar(&o.conns, "conns", 4, "long-lived connections opened per pod before each kill (those through the killed gateway are timed)")
	flag.DurationVar(&o.wait, "wait", 10*time.Second, "how long each kill may take before it counts as failed")
	flag.Parse()
	if o.out == "" {
		fmt.Fprintln(os.Stderr, "bench-failover: -out DIR is required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-failover:", err)
		os.Exit(1)
	}
}
