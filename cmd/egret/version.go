package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

func init() {
	register("version", "print the version", func(args []string) error {
		if err := parseFlags(newFlagSet("version"), args); err != nil {
			return err
		}
		rev := ""
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = s.Value
				}
			}
		}
		fmt.Printf("egret %s %s %s\n", version, rev, runtime.Version())
		return nil
	})
}
