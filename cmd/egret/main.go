// Command egret is Egret's one binary: the gateway data plane, the controller,
// the steer agent, the lab and the demo, as subcommands.
//
// Every subcommand parses its flags the same way (newFlagSet, parseFlags):
// -h prints its usage and exits 0; a flag it does not know, a bad value or
// a stray argument is one line on stderr and exit 2; any other failure is
// "egret <command>: <error>" and exit 1. The long-running ones take
// --log-format and --log-level and build their logger with newLogger.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/klog/v2"
)

// command is one subcommand; each lives in its own file and registers itself.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

// prog is how the user called the binary: "egret", or "kubectl egret" when
// it is installed as the kubectl plugin kubectl-egret (main sets it).
var prog = "egret"

// progName is prog for a binary called as argv0.
func progName(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-egret" {
		return "kubectl egret"
	}
	return "egret"
}

// register adds a subcommand; called from init in the subcommand's file.
func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("egret: subcommand registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", prog)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun \"%s <command> -h\" for its flags.\n", prog)
}

func main() {
	// The same binary is the kubectl plugin: kubectl runs kubectl-egret
	// with the arguments after "kubectl egret".
	prog = progName(os.Args[0])
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stderr)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown command %q (%s -h lists them)\n", prog, os.Args[1], prog)
		os.Exit(2)
	}
	os.Exit(exitCode(os.Stderr, prog+" "+os.Args[1], c.run(os.Args[2:])))
}

// exitCode reports err of the command named name on w and returns the exit
// status: 0 for none or -h (the usage is printed already), 2 for a usage
// mistake, 1 for anything else.
func exitCode(w io.Writer, name string, err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(w, "%s: %v (see %s -h)\n", ue.cmd, ue.err, ue.cmd)
		return 2
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
	return 1
}

// usageError is a mistake on the command line of cmd ("egret lab up").
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// newFlagSet returns the flag set of subcommand name ("gateway", "lab up").
// It prints nothing itself: parseFlags prints the usage on -h and returns
// every other mistake for main to print on one line.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args into fs, which takes flags only. On -h it prints
// the usage to stderr and returns flag.ErrHelp, which main turns into exit
// status 0; the caller returns it as it returns any error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(os.Stderr, fs)
		return flag.ErrHelp
	case err != nil:
		return &usageError{cmd: fs.Name(), err: err}
	case fs.NArg() > 0:
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))}
	}
	return nil
}

// printUsage prints the usage of fs's subcommand: what it does and its flags.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s [flags]\n\n", fs.Name())
	if s := summary(strings.TrimPrefix(fs.Name(), prog+" ")); s != "" {
		fmt.Fprintf(w, "%s\n\n", s)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintln(w, "It takes no flags.")
		return
	}
	fmt.Fprintln(w, "flags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// summary is the one-line description of subcommand name ("lab up").
func summary(name string) string {
	if c, ok := commands[name]; ok {
		return c.summary
	}
	if name == "status pods" {
		return statusPodsSummary
	}
	if sub, ok := strings.CutPrefix(name, "lab "); ok {
		for _, c := range labCommands {
			if c.name == sub {
				return c.summary
			}
		}
	}
	return ""
}

// logFlags are --log-format and --log-level, which every long-running
// subcommand has; empty means the configuration file's value, else the default.
type logFlags struct {
	format, level string
}

func bindLogFlags(fs *flag.FlagSet) *logFlags {
	l := &logFlags{}
	fs.StringVar(&l.format, "log-format", "", "log format: text or json (default text)")
	fs.StringVar(&l.level, "log-level", "", "log level: debug, info, warn or error (default info)")
	return l
}

// newLogger is the logger of every subcommand: slog on stderr, in format
// (text or json; "" is text) from level up (debug, info, warn or error; ""
// is info). klog, which client-go logs through, writes into the same handler.
func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level // info
	if level != "" {
		if err := lv.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
		}
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "", "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("log format %q: use text or json", format)
	}
	log := slog.New(h)
	// client-go logs through klog, which would otherwise write its own text
	// lines to stderr: --log-format=json must give only JSON.
	klog.SetSlogLogger(log)
	return log, nil
}
