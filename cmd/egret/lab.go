package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/egret-gw/egret/lab"
)

func init() {
	register("lab", "build, inspect or remove the network-namespace lab (up|down|status)", runLab)
}

const labUsage = `usage: egret lab <up|down|status> [flags]

  up      build the lab (namespaces, tunnel, gateways, echo server); a second up is a no-op;
          --gateway managed runs the real controller, gateway and steer agents
  down    remove the lab and any leftovers of a crashed one
  status  print the topology and what runs (--json for scripts)

Run "egret lab <command> -h" for the flags. docs/lab.md draws the topology.`

func runLab(args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, labUsage)
		return errors.New("missing lab command")
	}
	switch args[0] {
	case "up":
		return labUp(args[1:])
	case "down":
		return labDown(args[1:])
	case "status":
		return labStatus(args[1:])
	case "echo-server": // started by `lab up` inside the server namespace
		return labEcho(args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(os.Stderr, labUsage)
		return nil
	}
	fmt.Fprintln(os.Stderr, labUsage)
	return fmt.Errorf("unknown lab command %q", args[0])
}

func labFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("egret lab "+name, flag.ContinueOnError)
	n := fs.String("name", lab.DefaultName, "lab name: the prefix of its network namespaces")
	return fs, n
}

// parse parses a subcommand's flags; help is true when they asked for the
// usage (-h), which fs has printed: the caller then returns nil.
func parse(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return false, nil
}

func newLab(name, mode string) (*lab.Lab, error) {
	spec, err := lab.DefaultSpec(name)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the egret binary: %w", err)
	}
	impl, err := lab.NewImpl(mode, self)
	if err != nil {
		return nil, err
	}
	return &lab.Lab{Spec: spec, Impl: impl, Binary: self}, nil
}

func labUp(args []string) error {
	fs, name := labFlags("up")
	mode := os.Getenv("EGRET_LAB_GATEWAY")
	if mode == "" {
		mode = lab.ModeKernel
	}
	fs.StringVar(&mode, "gateway", mode, "gateway implementation: kernel (VXLAN + nftables SNAT), egret (egret gateway, static config) or managed (egret controller + gateway and steer agents); default from EGRET_LAB_GATEWAY")
	reach := fs.Int("reachability-timeout", lab.DefaultReachabilitySeconds, "managed: the controller's reachabilityTotalTimeoutSeconds (1-60)")
	holdDown := fs.Duration("hold-down", lab.DefaultHoldDown, "managed: how long a returned gateway waits before it gets egress IPs again")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	l, err := newLab(*name, mode)
	if err != nil {
		return err
	}
	if m, ok := l.Impl.(lab.Managed); ok {
		if *reach < 1 || *reach > 60 {
			return fmt.Errorf("--reachability-timeout %d: use 1-60 seconds (the lab needs the check on)", *reach)
		}
		m.ReachabilityTotalTimeoutSeconds, m.HoldDown = *reach, *holdDown
		l.Impl = m
	}
	if err := l.Up(); err != nil {
		return err
	}
	st, err := l.Status()
	if err != nil {
		return err
	}
	st.WriteText(os.Stdout)
	return nil
}

func labDown(args []string) error {
	fs, name := labFlags("down")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	return lab.Down("", *name)
}

func labStatus(args []string) error {
	fs, name := labFlags("status")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	l, err := newLab(*name, lab.ModeKernel)
	if err != nil {
		return err
	}
	st, err := l.Status()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	st.WriteText(os.Stdout)
	return nil
}

func labEcho(args []string) error {
	fs := flag.NewFlagSet("egret lab echo-server", flag.ContinueOnError)
	name := fs.String("lab", "", "the lab this server belongs to (for logs and `lab down`)")
	httpAddr := fs.String("http", "", "HTTP listen address (ip:port)")
	udpAddr := fs.String("udp", "", "UDP listen address (ip:port)")
	httpAddr6 := fs.String("http6", "", "optional second HTTP listen address ([ipv6]:port)")
	udpAddr6 := fs.String("udp6", "", "optional second UDP listen address ([ipv6]:port)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *httpAddr == "" || *udpAddr == "" {
		return errors.New("echo-server needs --http and --udp")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("lab", *name)
	return (&lab.EchoServer{HTTPAddr: *httpAddr, UDPAddr: *udpAddr, HTTPAddr6: *httpAddr6, UDPAddr6: *udpAddr6, Log: log}).Run(ctx)
}
