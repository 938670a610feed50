// Package labexamples holds the EgressIP manifests the lab's managed mode
// and `egret demo` apply: plain k8s.ovn.org/v1 YAML, as a user would write
// it for `kubectl apply`, embedded so the binary needs no source tree.
package labexamples

import "embed"

// Manifests are the *.yaml files of this folder.
//
//go:embed *.yaml
var Manifests embed.FS

// IPv6 holds ipv6/*.yaml: the manifests of the IPv6-only lab (egret lab up
// --underlay ipv6, egret demo --underlay ipv6), whose egress IPs are IPv6.
//
//go:embed ipv6/*.yaml
var IPv6 embed.FS
