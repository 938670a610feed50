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

// The package's functions and methods (implemented beside this file):
//
//	// Config: PortMin..PortMax is the range random ports come from
//	// (default 1024–65535); PreservePort keeps the pod's source port when free
//	// (default true via DefaultConfig); UDPEndpointIndependent selects
//	// endpoint-independent mapping for UDP (RFC 4787 REQ-1) instead of the
//	// default address-and-port-dependent mapping with port reuse.
//	type Config struct{ PortMin, PortMax uint16; PreservePort, UDPEndpointIndependent bool; ... }
//	func DefaultConfig() Config
//	func NewAllocator(cfg Config, inUse InUse) (*Allocator, error)
//
//	// Allocate picks the NAT port for a new flow src:sport → dst:dport of
//	// proto on egress IP natAddr, such that the reply 5-tuple is unique.
//	// rnd is a per-worker random value. ErrExhausted when none is free.
//	func (a *Allocator) Allocate(proto uint8, src Addr, sport uint16, dst Addr, dport uint16, natAddr Addr, rnd uint64) (uint16, error)
//
//	// Release returns the port of a flow that ended (the data plane calls it
//	// for every flow conntrack expires or deletes, and when Insert fails).
//	func (a *Allocator) Release(proto uint8, src Addr, sport uint16, dst Addr, dport uint16, natAddr Addr, natPort uint16)
//
//	// PortsInUse and Exhausted feed the metrics per egress IP.
//	func (a *Allocator) PortsInUse(natAddr Addr, proto uint8) int
//	func (a *Allocator) Exhausted(natAddr Addr) uint64
//
//	// Pick chooses, for a flow with hash h, one of ips by rendezvous hashing:
//	// a flow keeps its IP while that IP stays in the set, and removing an IP
//	// moves only the flows that had it. -1 when ips is empty.
//	func Pick(ips []Addr, h uint64) int
//
//	// FlowHash is a fixed-seed hash of a flow's pod-side 5-tuple (stable
//	// across restarts and gateways, so every gateway picks alike).
//	func FlowHash(proto uint8, src Addr, sport uint16, dst Addr, dport uint16) uint64
