package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/gateway/flowsync"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// versions is what `egret version -o json` prints: the binary's version
// and the versions of the formats it shares with other Egret processes
// (docs/operations.md, "Version skew").
type versions struct {
	Version      string `json:"version"`      // the release, from VERSION
	API          string `json:"api"`          // the EgressIP API group/version served and read
	SyncProtocol int    `json:"syncProtocol"` // the flow sync protocol version spoken
	StateFile    int    `json:"stateFile"`    // the state file format version written
}

func currentVersions() versions {
	return versions{Version: version, API: egressv1.SchemeGroupVersion.String(),
		SyncProtocol: flowsync.SyncVersion, StateFile: flowsync.StateVersion}
}

func init() {
	register("version", "print the version", func(args []string) error {
		fs := newFlagSet("version")
		output := fs.String("o", "text", "output format: text (one line: version, VCS revision, Go version) or json (the version and the API, flow sync protocol and state file versions)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		return printVersion(os.Stdout, *output)
	})
}

// printVersion writes the version to w in the format -o names.
func printVersion(w io.Writer, output string) error {
	switch output {
	case "text":
		rev := ""
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = s.Value
				}
			}
		}
		_, err := fmt.Fprintf(w, "egret %s %s %s\n", version, rev, runtime.Version())
		return err
	case "json":
		return json.NewEncoder(w).Encode(currentVersions())
	}
	return &usageError{cmd: "egret version", err: fmt.Errorf("-o %q: want text or json", output)}
}
