package main

import (
	"fmt"
	"os"

	"github.com/egret-gw/egret/lab"
)

func init() {
	register("demo", "build the lab, run the real control plane, show who egresses as whom, kill a gateway and time the failover", runDemo)
}

// runDemo parses the flags; lab.Demo runs the demo.
func runDemo(args []string) error {
	fs := newFlagSet("demo")
	d := &lab.Demo{Out: os.Stdout, Progress: os.Stdout}
	fs.StringVar(&d.Name, "name", "egd", "lab name: the prefix of the demo's network namespaces")
	fs.BoolVar(&d.Keep, "keep", false, "leave the lab up afterwards to poke at (remove it with `egret lab down --name NAME`)")
	fs.BoolVar(&d.JSON, "json", false, "print the results as JSON on stdout (progress goes to stderr)")
	fs.IntVar(&d.ReachabilitySeconds, "reachability-timeout", lab.DefaultReachabilitySeconds, "the controller's reachabilityTotalTimeoutSeconds (1-60)")
	fs.DurationVar(&d.HoldDown, "hold-down", lab.DefaultHoldDown, "how long a returned gateway waits before it gets egress IPs again")
	fs.StringVar(&d.Underlay, "underlay", lab.UnderlayIPv4, "ipv4 (dual-stack nodes, VXLAN over IPv4) or ipv6 (IPv6-only nodes and pods, VXLAN over IPv6)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if d.ReachabilitySeconds < 1 || d.ReachabilitySeconds > 60 {
		return fmt.Errorf("--reachability-timeout %d: use 1-60 seconds", d.ReachabilitySeconds)
	}
	if d.JSON {
		d.Progress = os.Stderr
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the egret binary: %w", err)
	}
	d.Binary = self
	return d.Run()
}
