// Command egress-router is the egress-router CNI plugin. It is installed under both type
// names of the spec, egress-router and openshift-egress (a copy or a symlink).
package main

import (
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
	p := &cni.Plugin{}
	skel.PluginMainFuncs(p.Funcs(), cni.Versions, "CNI plugin egress-router "+version)
}
