// Package conntrack is Egret's flow table: pointer-free, sharded, sized up
// front, with a TCP state machine, RFC-grade timeouts and incremental expiry.
//
// This file is the contract the data plane (package gateway) codes against.
// The exported names and their meaning are fixed; the storage behind them is
// free to change.
package conntrack

import (
	"errors"
	"time"
)

// Addr is an IP address in 16 bytes; an IPv4 address is stored IPv4-mapped
// (::ffff:a.b.c.d), as netip.Addr.As16 returns it.
type Addr [16]byte

// Tuple identifies one direction of a flow. For ICMP queries (echo) the
// identifier stands in for the port of the local side (the pod, or the egress
// IP) and the remote side's port is 0.
type Tuple struct {
	Src, Dst         Addr
	SrcPort, DstPort uint16
	Proto            uint8
}

// Flow is one tracked connection and its NAT binding.
type Flow struct {
	Orig    Tuple  // as the pod sent it: pod → server
	NATAddr Addr   // the egress IP the pod side is rewritten to
	NATPort uint16 // the port (or ICMP identifier) the pod side is rewritten to
	Aux     uint32 // opaque to conntrack: the caller's return-path data (32 bits keep an entry in one cache line)
	State   State
}

// Reply returns the tuple of packets from the server back to the egress IP:
// server → NATAddr:NATPort.
func (f *Flow) Reply() Tuple {
	var r Tuple
	f.replyTo(&r)
	return r
}

// replyTo writes f's reply tuple into r field by field (see entry.toFlow
// for why not through a composite literal).
func (f *Flow) replyTo(r *Tuple) {
	r.Src, r.Dst = f.Orig.Dst, f.NATAddr
	r.SrcPort, r.DstPort, r.Proto = f.Orig.DstPort, f.NATPort, f.Orig.Proto
}

// State is a flow's protocol state (TCP states, UDP unreplied/replied,
// ICMP); the constants are in state.go.
type State uint8

// Dir is the side of a flow a packet came from.
type Dir uint8

const (
	// Original is the pod's side: packets pod → server.
	Original Dir = 0
	// Reply is the outside: packets server → egress IP.
	Reply Dir = 1
)

// TCP flag bits as they appear in the TCP header's flags byte.
const (
	FlagFIN uint8 = 0x01
	FlagSYN uint8 = 0x02
	FlagRST uint8 = 0x04
	FlagPSH uint8 = 0x08
	FlagACK uint8 = 0x10
)

// Protocol numbers conntrack knows timeouts for.
const (
	ProtoICMP   uint8 = 1
	ProtoTCP    uint8 = 6
	ProtoUDP    uint8 = 17
	ProtoICMPv6 uint8 = 58
)

// Errors returned by Insert.
var (
	// ErrFull means the table holds its configured maximum; the new flow was
	// not added and no existing flow was touched.
	ErrFull = errors.New("conntrack: table full")
	// ErrExists means the original or the reply tuple is already tracked.
	ErrExists = errors.New("conntrack: flow exists")
)

// Timeouts are the idle timeouts per protocol and state. The defaults are no
// shorter than RFC 5382 (TCP established 2 h 4 min, transitory 4 min),
// RFC 4787 (UDP ≥ 2 min, 5 min recommended) and RFC 5508 (ICMP query 60 s).
type Timeouts struct {
	TCPEstablished time.Duration
	TCPTransitory  time.Duration // SYN_SENT, SYN_RECV, FIN_WAIT, CLOSE_WAIT, LAST_ACK, PICKED_UP
	TCPTimeWait    time.Duration
	TCPClose       time.Duration // after RST
	UDP            time.Duration
	ICMP           time.Duration
}

// Config sizes a Table.
type Config struct {
	MaxFlows int      // hard limit; memory is allocated for this many up front
	Shards   int      // power of two; 0 picks a default
	Timeouts Timeouts // zero fields take DefaultTimeouts

	// SourceLimit caps the flows of one original source address (one pod),
	// NATLimit those bound to one NAT address (one egress IP), so that no
	// one pod or egress IP can fill the table for the others; 0 is no
	// limit. Insert refuses a flow over either (ErrSourceLimit,
	// ErrNATLimit); Import counts its flows but refuses none for them.
	SourceLimit int
	NATLimit    int
}

// The Table's methods (table.go, batch.go) are safe for concurrent use by
// many workers, allocate nothing, and take now as monotonic nanoseconds from
// the caller's clock (the data plane reads it once a batch); each documents
// its own contract where it is defined.
