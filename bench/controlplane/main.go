// Command controlplane is the control-plane part of the benchmark harness:
// Egret's controller at scale on a real kube-apiserver and etcd (objects
// only, no kubelet), and the steer and gateway agents building their
// configuration from the same cluster.
//
//	go run ./bench/controlplane -out DIR [-scale 1] [-egret bin/egret]
//
// At scale 1 the cluster has 500 assignable Nodes, 10,000 EgressIPs (one
// egress IP each, ten pods each) and 100,000 Pods (10,000 of them on
// node-000). It measures the time from the controller's start to every
// status written, from one change of an object to its status, from a node
// turning NotReady to its IPs placed elsewhere, the controller's memory,
// and the steer agent's (node-000) and a gateway agent's time to build
// their configuration, and last, as a baseline, the time a bare client-go
// client with the controller's writers and client limits takes to update
// every status once (controller/bare-client). It writes controlplane.json, controlplane.md and
// controlplane-*.png into DIR. -scale 0.05 is a quick run.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	o := options{}
	flag.StringVar(&o.out, "out", "", "report folder: controlplane.json, controlplane.md and controlplane-*.png are written there (required)")
	flag.Float64Var(&o.scale, "scale", 1, "fraction of the full cluster (500 nodes, 10k EgressIPs, 100k pods); 0.05 is a quick run")
	flag.StringVar(&o.egret, "egret", "", "egret binary whose `controller` runs (default: go build ./cmd/egret into a temporary folder)")
	flag.IntVar(&o.changes, "changes", 100, "single-object changes timed one after another")
	flag.IntVar(&o.losses, "losses", 5, "node losses timed one after another")
	flag.IntVar(&o.workers, "concurrency", 32, "concurrent API requests while the objects are created")
	flag.StringVar(&o.controllerArgs, "controller-args", "", "extra flags for `egret controller`, space-separated (e.g. \"--workers=8\")")
	flag.Parse()
	if o.out == "" {
		fmt.Fprintln(os.Stderr, "bench-controlplane: -out DIR is required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-controlplane:", err)
		os.Exit(1)
	}
}
