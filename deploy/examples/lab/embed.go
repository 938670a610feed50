// Package labexamples holds the EgressIP manifests the lab's managed mode
// and `egret demo` apply: plain k8s.ovn.org/v1 YAML, as a user would write
// it for `kubectl apply`, embedded so the binary needs no source tree.
package labexamples

import "embed"

// Manifests are the *.yaml files of this folder.
//
//go:embed *.yaml
var Manifests embed.FS
