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

// Pod names the pod behind a pod address, as the configuration gave it
// (the gateway agent fills it from the cluster; a config file names no
// pods).
type Pod struct {
	Namespace, Name, UID string
}

// Pods names the pods behind pod addresses. One is built per configuration
// (gateway.NewSnapshot) and read by the NAT log's writer and by the drop
// samples; it is never modified after NewPods.
type Pods struct {
	m map[conntrack.Addr]namedPod
}

type namedPod struct {
	Pod
	// json is the pod's fields of a log line, rendered once per
	// configuration instead of once per record.
	json []byte
}

// NewPods returns the table of m; pods without a name are left out.
func NewPods(m map[netip.Addr]Pod) *Pods {
	t := &Pods{m: make(map[conntrack.Addr]namedPod, len(m))}
	for a, p := range m {
		if p.Name == "" {
			continue
		}
		b := appendString(nil, "namespace", p.Namespace)
		b = appendString(b, "pod", p.Name)
		if p.UID != "" {
			b = appendString(b, "podUID", p.UID)
		}
		t.m[a.As16()] = namedPod{Pod: p, json: b}
	}
	return t
}

// Lookup returns the pod at a, or the zero Pod; a nil table names none.
func (t *Pods) Lookup(a netip.Addr) Pod {
	if t == nil {
		return Pod{}
	}
	return t.m[a.As16()].Pod
}

// lookup16 is Lookup for the writer, with its rendered fields.
func (t *Pods) lookup16(a conntrack.Addr) namedPod {
	if t == nil {
		return namedPod{}
	}
	return t.m[a]
}

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
