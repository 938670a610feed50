package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/egret-gw/egret/lab"
)

func init() {
	register("lab", "build, inspect or remove the network-namespace lab (up|down|status)", runLab)
	// Set here, not in the declaration: the commands' usage reads it.
	labCommands = []labCommand{
		{name: "up", summary: "build the lab (namespaces, tunnel, gateways, echo server); a second up is a no-op; --gateway managed runs the real controller, gateway and steer agents", run: labUp},
		{name: "down", summary: "remove the lab and any leftovers of a crashed one", run: labDown},
		{name: "status", summary: "print the topology and what runs (--json for scripts)", run: labStatus},
		{name: "echo-server", summary: "the lab's outside echo server, started by lab up inside the server namespace", run: labEcho, hidden: true},
	}
}

// labCommand is a command of `egret lab`; a hidden one is started by the
// lab itself and left out of the usage.
type labCommand struct {
	name, summary string
	run           func(args []string) error
	hidden        bool
}

var labCommands []labCommand

func labUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: egret lab <command> [flags]\n\ncommands:")
	for _, c := range labCommands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w, "\nRun \"egret lab <command> -h\" for its flags. docs/lab.md draws the topology.")
}

func runLab(args []string) error {
	if len(args) == 0 {
		return &usageError{cmd: "egret lab", err: errors.New("missing command: up, down or status")}
	}
	switch args[0] {
	case "-h", "--help", "help":
		labUsage(os.Stderr)
		return flag.ErrHelp
	}
	for _, c := range labCommands {
		if c.name == args[0] {
			return c.run(args[1:])
		}
	}
	return &usageError{cmd: "egret lab", err: fmt.Errorf("unknown command %q: use up, down or status", args[0])}
}

func labFlags(name string) (*flag.FlagSet, *string) {
	fs := newFlagSet("lab " + name)
	n := fs.String("name", lab.DefaultName, "lab name: the prefix of its network namespaces")
	return fs, n
}

func newLab(name, mode, underlay string) (*lab.Lab, error) {
	spec, err := lab.NewSpec(name, underlay)
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
	underlay := fs.String("underlay", lab.UnderlayIPv4, "ipv4 (dual-stack nodes, VXLAN over IPv4) or ipv6 (IPv6-only nodes and pods, VXLAN over IPv6)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	l, err := newLab(*name, mode, *underlay)
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return lab.Down("", *name)
}

func labStatus(args []string) error {
	fs, name := labFlags("status")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	l, err := newLab(*name, lab.ModeKernel, lab.BuiltUnderlay("", *name))
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
	fs := newFlagSet("lab echo-server")
	name := fs.String("lab", "", "the lab this server belongs to (for logs and `lab down`)")
	httpAddr := fs.String("http", "", "HTTP listen address (ip:port)")
	udpAddr := fs.String("udp", "", "UDP listen address (ip:port)")
	httpAddr6 := fs.String("http6", "", "optional second HTTP listen address ([ipv6]:port)")
	udpAddr6 := fs.String("udp6", "", "optional second UDP listen address ([ipv6]:port)")
	lf := bindLogFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *httpAddr == "" || *udpAddr == "" {
		return &usageError{cmd: fs.Name(), err: errors.New("give --http and --udp")}
	}
	log, err := newLogger(lf.format, lf.level)
	if err != nil {
		return err
	}
	log = log.With("lab", *name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return (&lab.EchoServer{HTTPAddr: *httpAddr, UDPAddr: *udpAddr, HTTPAddr6: *httpAddr6, UDPAddr6: *udpAddr6, Log: log}).Run(ctx)
}
