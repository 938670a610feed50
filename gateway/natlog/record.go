// Package natlog is the gateway's NAT log: every binding the data plane
// creates, adopts (flow sync, a previous process's state file) and ends,
// written off the packet path as JSON lines to rotated, size-bounded files
// and optionally as IPFIX NAT events (RFC 8158) to a collector, and read
// back to answer "which pod was egress IP:port at time T" (Query).
//
// Workers push fixed-size records into a ring of their own (Ring, single
// producer, single consumer); a full ring drops the record and counts it,
// it never blocks a worker. One writer goroutine (Log.Run) drains the
// rings, turns pod addresses into pod identities with a table swapped with
// the configuration (SetPods), and writes. docs/natlog.md describes it.
package natlog

import (
	"net/netip"

	"github.com/egret-gw/egret/conntrack"
)

// Event is what happened to a binding.
type Event uint8

// Events of a Record.
const (
	// EventCreate is a binding this gateway made for a pod's new flow.
	EventCreate Event = iota + 1
	// EventAdopt is a binding this gateway took over: a standby's copy of
	// its peer's flow, or a flow resumed from the previous process's
	// state file. Its time is when it was adopted here.
	EventAdopt
	// EventEnd is a binding removed: expired, early-dropped, replaced or
	// ended by the peer that made it.
	EventEnd
)

var eventNames = [...]string{EventCreate: "create", EventAdopt: "adopt", EventEnd: "end"}

// String is the event's name in the log ("create", "adopt", "end").
func (e Event) String() string {
	if int(e) < len(eventNames) && eventNames[e] != "" {
		return eventNames[e]
	}
	return "unknown"
}

func parseEvent(s string) Event {
	for e, n := range eventNames {
		if n == s && n != "" {
			return Event(e)
		}
	}
	return 0
}

// Record is one event of one binding as a worker pushes it: fixed size, no
// pointers, copied into the ring.
type Record struct {
	// Mono is the pipeline's monotonic clock (nanoseconds) at the event;
	// the writer turns it into wall time.
	Mono  int64
	Flow  conntrack.Flow
	Event Event
}

// Pod is who a pod address belonged to when a record was written.
type Pod struct {
	Namespace, Name, UID string
}

// PodTable maps pod addresses to pods; it is replaced whole (SetPods),
// never modified.
type PodTable map[netip.Addr]Pod

func protoName(p uint8) string {
	switch p {
	case conntrack.ProtoTCP:
		return "tcp"
	case conntrack.ProtoUDP:
		return "udp"
	case conntrack.ProtoICMP:
		return "icmp"
	case conntrack.ProtoICMPv6:
		return "icmpv6"
	}
	return "unknown"
}

func addr(a conntrack.Addr) netip.Addr { return netip.AddrFrom16(a).Unmap() }
