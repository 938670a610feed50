package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/egret-gw/egret/lab"
	"github.com/egret-gw/egret/lab/dnsserver"
)

func init() {
	register("lab", "build, inspect or remove the network-namespace lab (up|down|status)", runLab)
	// Set here, not in the declaration: the commands' usage reads it.
	labCommands = []labCommand{
		{name: "up", summary: "build the lab (namespaces, tunnel, gateways, echo server); a second up is a no-op; --gateway managed runs the real controller, gateway and steer agents", run: labUp},
		{name: "down", summary: "remove the lab and any leftovers of a crashed one", run: labDown},
		{name: "status", summary: "print the topology and what runs (--json for scripts)", run: labStatus},
		{name: "dns", summary: "change what a name of the lab's DNS answers (--host NAME with --addrs, --cname or --fail; none of them removes it)", run: labDNS},
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

func labDNS(args []string) error {
	fs, name := labFlags("dns")
	host := fs.String("host", "", "the name to change, e.g. "+lab.DNSName)
	addrs := fs.String("addrs", "", "its addresses, comma-separated (A and AAAA)")
	ttl := fs.Duration("ttl", lab.DNSTTL, "the answer's TTL")
	cname := fs.String("cname", "", "make the name an alias of this name instead")
	fail := fs.Bool("fail", false, "answer SERVFAIL for the name instead")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *host == "" {
		return &usageError{cmd: fs.Name(), err: errors.New("give --host")}
	}
	r := lab.DNSRecord{Name: *host, TTL: *ttl, CNAME: *cname, Fail: *fail}
	for _, a := range strings.FieldsFunc(*addrs, func(r rune) bool { return r == ',' }) {
		ip, err := netip.ParseAddr(strings.TrimSpace(a))
		if err != nil {
			return &usageError{cmd: fs.Name(), err: fmt.Errorf("--addrs: %w", err)}
		}
		r.Addrs = append(r.Addrs, ip)
	}
	l, err := newLab(*name, lab.ModeKernel, lab.BuiltUnderlay("", *name))
	if err != nil {
		return err
	}
	return l.SetDNS(r)
}

func labEcho(args []string) error {
	fs := newFlagSet("lab echo-server")
	name := fs.String("lab", "", "the lab this server belongs to (for logs and `lab down`)")
	httpAddr := fs.String("http", "", "HTTP listen address (ip:port)")
	udpAddr := fs.String("udp", "", "UDP listen address (ip:port)")
	httpAddr6 := fs.String("http6", "", "optional second HTTP listen address ([ipv6]:port)")
	udpAddr6 := fs.String("udp6", "", "optional second UDP listen address ([ipv6]:port)")
	also := fs.String("also", "", "further addresses, comma-separated, answered on the ports of --http and --udp")
	dnsAddr := fs.String("dns", "", "also serve the lab's DNS on this address (ip:port, UDP and TCP)")
	dnsRecords := fs.String("dns-records", "", "with --dns: the records file, read again on SIGHUP")
	lf := bindLogFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *httpAddr == "" || *udpAddr == "" {
		return &usageError{cmd: fs.Name(), err: errors.New("give --http and --udp")}
	}
	if (*dnsAddr == "") != (*dnsRecords == "") {
		return &usageError{cmd: fs.Name(), err: errors.New("give --dns and --dns-records together")}
	}
	var more []netip.Addr
	for _, a := range strings.FieldsFunc(*also, func(r rune) bool { return r == ',' }) {
		ip, err := netip.ParseAddr(strings.TrimSpace(a))
		if err != nil {
			return &usageError{cmd: fs.Name(), err: fmt.Errorf("--also: %w", err)}
		}
		more = append(more, ip)
	}
	log, err := newLogger(lf.format, lf.level)
	if err != nil {
		return err
	}
	log = log.With("lab", *name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	echo := &lab.EchoServer{HTTPAddr: *httpAddr, UDPAddr: *udpAddr, HTTPAddr6: *httpAddr6, UDPAddr6: *udpAddr6, Also: more, Log: log}
	if *dnsAddr == "" {
		return echo.Run(ctx)
	}
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	// Either server failing ends the process: `lab status` then reports it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dnsErr := make(chan error, 1)
	go func() {
		err := serveLabDNS(ctx, *dnsAddr, *dnsRecords, reload, log)
		cancel()
		dnsErr <- err
	}()
	err = echo.Run(ctx)
	cancel()
	return errors.Join(err, <-dnsErr)
}

// serveLabDNS runs the lab's DNS server on addr with the records of file,
// read again on every value from reload, until ctx is done. A records
// file that cannot be read is logged and the answers stay as they were.
func serveLabDNS(ctx context.Context, addr, file string, reload <-chan os.Signal, log *slog.Logger) error {
	srv, err := dnsserver.New(addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	var names []string
	apply := func() {
		recs, err := lab.ReadDNSRecords(file)
		if err != nil {
			log.Error("lab DNS: records not applied", "err", err)
			return
		}
		var now []string
		for _, r := range recs {
			now = append(now, dnsKey(r.Name))
			switch {
			case r.Fail:
				srv.Fail(r.Name)
			case r.CNAME != "":
				if err := srv.CNAME(r.Name, r.TTL, r.CNAME); err != nil {
					log.Error("lab DNS: record not applied", "name", r.Name, "err", err)
				}
			default:
				srv.Set(r.Name, r.TTL, r.Addrs...)
			}
		}
		for _, n := range names {
			if !slices.Contains(now, n) {
				srv.Set(n, 0) // gone from the file: NXDOMAIN
			}
		}
		names = now
		log.Info("lab DNS: records applied", "names", len(recs))
	}
	apply()
	log.Info("lab DNS listening", "on", srv.Addr().String(), "records", file)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reload:
			apply()
		}
	}
}

// dnsKey is how the records file's names compare: lower case, with the
// final dot.
func dnsKey(n string) string {
	n = strings.ToLower(n)
	if !strings.HasSuffix(n, ".") {
		n += "."
	}
	return n
}
