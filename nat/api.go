// Package nat chooses the source address and port of a new connection:
// egress-IP choice by consistent hashing, and port allocation with RFC 4787 /
// RFC 5382 behaviour (port preservation, 5-tuple uniqueness, counted exhaustion).
//
// This file is the contract the data plane (package gateway) codes against.
package nat

import "errors"

// Addr is an IP address in 16 bytes, IPv4-mapped for IPv4 (same layout as
// conntrack.Addr and netip.Addr.As16).
type Addr [16]byte

// ErrExhausted means no port on the egress IP is free towards that
// destination; the new connection must be dropped and counted.
var ErrExhausted = errors.New("nat: no free port on the egress IP towards this destination")

// InUse reports whether the reply 5-tuple remote:remotePort → natAddr:natPort
// of protocol proto is already taken by a tracked flow. The data plane backs
// it with the conntrack table.
type InUse interface {
	ReplyInUse(proto uint8, remote Addr, remotePort uint16, natAddr Addr, natPort uint16) bool
}
