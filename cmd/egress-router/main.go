// Command egress-router is the egress-router CNI plugin. It is installed under both type
// names of the spec, egress-router and openshift-egress (a copy or a symlink).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/egret-gw/egret/cni"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

func init() {
	// Namespace switches apply to one OS thread; keep main on it.
	runtime.LockOSThread()
}

func main() {
	// "egress-router install ..." is for the installer DaemonSet; runtimes always set
	// CNI_COMMAND, so the two cannot be confused.
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 && os.Args[1] == "install" {
		os.Exit(exitCode(os.Stderr, install(os.Args[2:])))
	}
	if err := checkStdin(); err != nil {
		_ = err.Print()
		os.Exit(1)
	}
	p := &cni.Plugin{}
	skel.PluginMainFuncs(p.Funcs(), cni.Versions, "CNI plugin egress-router "+version)
}

// checkStdin refuses a network configuration that is not JSON, saying where it breaks
// (the CNI library would refuse it too, naming no position), and hands the library
// the configuration it read.
func checkStdin() *types.Error {
	cmd := os.Getenv("CNI_COMMAND")
	if cmd == "" || cmd == "VERSION" {
		return nil
	}
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("reading the network configuration: %v", err), "")
	}
	if err := cni.CheckJSON(stdin); err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("passing on the network configuration: %v", err), "")
	}
	go func() {
		_, _ = w.Write(stdin)
		w.Close()
	}()
	// The *os.File of fd 0 must stay reachable: once collected, its finalizer
	// closes fd 0, and the next descriptor opened (the pod's namespace) becomes
	// fd 0, which netlink and nftables read as "the current namespace".
	origStdin = os.Stdin
	os.Stdin = r
	return nil
}

// origStdin keeps the runtime's stdin (fd 0) open after checkStdin replaces os.Stdin.
var origStdin *os.File

// The install command parses its flags as every egret subcommand does
// (cmd/egret/main.go): -h prints the usage and exits 0, a command-line
// mistake is one line and exit 2, any other failure exit 1.

// usageError is a mistake on the install command line.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

const installName = "egress-router install"

// exitCode reports err of the install command on w and returns the exit status.
func exitCode(w io.Writer, err error) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(w, "%s: %v (see %s -h)\n", installName, ue.err, installName)
		return 2
	}
	fmt.Fprintf(w, "%s: %v\n", installName, err)
	return 1
}

// parseFlags parses args into fs, which takes flags only; on -h it prints
// the usage and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, summary string, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(os.Stderr, "usage: %s [flags]\n\n%s\n\nflags:\n", fs.Name(), summary)
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		return flag.ErrHelp
	case err != nil:
		return &usageError{err}
	case fs.NArg() > 0:
		return &usageError{fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))}
	}
	return nil
}
