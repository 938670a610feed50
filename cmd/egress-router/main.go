// Command egress-router is the egress-router CNI plugin. It is installed under both type
// names of the spec, egress-router and openshift-egress (a copy or a symlink).
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"

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
		if err := install(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "egress-router install:", err)
			os.Exit(1)
		}
		return
	}
	p := &cni.Plugin{}
	skel.PluginMainFuncs(p.Funcs(), cni.Versions, "CNI plugin egress-router "+version)
}
