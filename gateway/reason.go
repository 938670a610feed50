package gateway

import "sync/atomic"

// DropReason says why a frame was dropped. Its String names are stable and
// usable as Prometheus label values.
type DropReason uint8

// Drop reasons; docs/pipeline.md has the table of what each means.
const (
	DropNone              DropReason = iota // not dropped
	DropMalformed                           // truncated or invalid headers
	DropBadTunnel                           // VXLAN without the I flag, Geneve version/OAM/non-Ethernet payload
	DropGeneveCritical                      // Geneve critical option we do not understand
	DropUnsupportedProto                    // inner frame not IP, or a transport other than TCP/UDP/ICMP
	DropUnknownVTEP                         // tunnel packet from an address that is not a node VTEP
	DropSpoofedSource                       // inner source is not a pod of the sending node
	DropNotSelected                         // pod is not selected by any egress policy
	DropNoEgressIP                          // policy has no egress IP of the packet's family hosted here
	DropHairpin                             // pod traffic addressed to an egress IP hosted here
	DropTTLExpired                          // TTL/hop limit expired and no ICMP error could be sent
	DropTCPNoFlow                           // TCP segment without SYN from a pod, and no flow
	DropNoFlow                              // packet from outside to an egress IP matching no flow
	DropICMPType                            // ICMP type that is neither echo nor a translatable error
	DropConntrackFull                       // new flow refused: conntrack table full
	DropNATExhausted                        // new flow refused: no free port on the egress IP
	DropFragNoFirst                         // later fragment whose first fragment was not seen (or came after it: fragments are not buffered)
	DropNoRoute                             // no route or neighbour to the next hop
	DropMTUExceeded                         // larger than the egress MTU and no ICMP error could be sent
	DropOutBuffer                           // the output buffer is too small for the frame
	DropUnknownNode                         // reply for a flow whose pod's node left the configuration
	DropNoConfig                            // no configuration snapshot installed yet
	DropICMPRateLimited                     // an ICMP error to a pod was due but over the rate limit
	DropTunnelMismatch                      // tunnel packet of another type or VNI than configured
	DropBadAddress                          // special-purpose address that is never a packet source (RFC 6890), or an IPv6 header carrying ::/80
	DropFragTiny                            // first fragment too short to hold the whole transport header (RFC 1858)
	DropFragOverlap                         // later fragment overlapping the first fragment's bytes (RFC 1858, RFC 3128)
	DropFragQuota                           // first fragment from a source already holding its share of the fragment table
	DropFragTableFull                       // first fragment whose slots in the fragment table are all held by live datagrams
	DropPodFlowLimit                        // new flow refused: the pod holds its limit of flows (podFlowLimit)
	DropEgressIPFlowLimit                   // new flow refused: the egress IP holds its limit of flows (egressIPFlowLimit)
	DropDeniedDestination                   // new flow refused: the destination is on the deny-list (link-local, metadata, loopback, node networks...)
	DropTunnelChecksum                      // tunnel packet over IPv6 whose outer UDP checksum is zero or wrong (RFC 6935/6936)
	DropSourceRoute                         // IPv4 loose/strict source route option, or an IPv6 Routing header with Segments Left > 0
	DropDestNotOwned                        // new flow refused: the pod's destination rules give it to a policy with no egress IP hosted here, or to none (excluded, or no rule and no fallback)
	numDropReasons
)

var dropNames = [numDropReasons]string{
	DropNone:              "none",
	DropMalformed:         "malformed",
	DropBadTunnel:         "bad_tunnel",
	DropGeneveCritical:    "geneve_critical_option",
	DropUnsupportedProto:  "unsupported_protocol",
	DropUnknownVTEP:       "unknown_vtep",
	DropSpoofedSource:     "spoofed_source",
	DropNotSelected:       "not_selected",
	DropNoEgressIP:        "no_egress_ip",
	DropHairpin:           "hairpin",
	DropTTLExpired:        "ttl_expired",
	DropTCPNoFlow:         "tcp_no_flow",
	DropNoFlow:            "no_flow",
	DropICMPType:          "icmp_type",
	DropConntrackFull:     "conntrack_full",
	DropNATExhausted:      "nat_exhausted",
	DropFragNoFirst:       "fragment_no_first",
	DropNoRoute:           "no_route",
	DropMTUExceeded:       "mtu_exceeded",
	DropOutBuffer:         "out_buffer",
	DropUnknownNode:       "unknown_node",
	DropNoConfig:          "no_config",
	DropICMPRateLimited:   "icmp_rate_limited",
	DropTunnelMismatch:    "tunnel_mismatch",
	DropBadAddress:        "bad_address",
	DropFragTiny:          "fragment_tiny",
	DropFragOverlap:       "fragment_overlap",
	DropFragQuota:         "fragment_quota",
	DropFragTableFull:     "fragment_table_full",
	DropPodFlowLimit:      "pod_flow_limit",
	DropEgressIPFlowLimit: "egressip_flow_limit",
	DropDeniedDestination: "denied_destination",
	DropTunnelChecksum:    "tunnel_checksum",
	DropSourceRoute:       "source_route",
	DropDestNotOwned:      "dest_not_owned",
}

// String returns the reason's label value.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "unknown"
}

// DropReasons lists every reason except DropNone, for metric registration.
func DropReasons() []DropReason {
	rs := make([]DropReason, 0, numDropReasons-1)
	for r := DropNone + 1; r < numDropReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// Counter indexes the non-drop counters.
type Counter uint8

// Counters a processor keeps besides drops.
const (
	CounterRx                Counter = iota // frames seen
	CounterPass                             // frames passed to the kernel
	CounterForwarded                        // pod packets sent to the outside
	CounterReplied                          // outside packets encapsulated to a node
	CounterICMPSent                         // ICMP errors generated (time exceeded, too big)
	CounterICMPXlated                       // ICMP errors from outside translated to a pod
	CounterFlowsNew                         // flows created
	CounterFlowsExpired                     // flows expired and their port released
	CounterFlowsMoved                       // flows removed because their egress IP left the pod's policy here
	CounterFlowsEarlyDropped                // unanswered or closing flows removed to make room in a full table, or under a pod's or egress IP's own limit
	CounterTCPResetsSent                    // RSTs sent to pods for TCP segments of flows the gateway does not know (also counted as tcp_no_flow)
	CounterFlowsPickedUp                    // TCP flows picked up mid-stream (also counted in flows_created)
	numCounters
)

var counterNames = [numCounters]string{
	CounterRx:                "rx",
	CounterPass:              "pass",
	CounterForwarded:         "forwarded",
	CounterReplied:           "replied",
	CounterICMPSent:          "icmp_errors_sent",
	CounterICMPXlated:        "icmp_errors_translated",
	CounterFlowsNew:          "flows_created",
	CounterFlowsExpired:      "flows_expired",
	CounterFlowsMoved:        "flows_moved",
	CounterFlowsEarlyDropped: "flows_early_dropped",
	CounterTCPResetsSent:     "tcp_resets_sent",
	CounterFlowsPickedUp:     "flows_picked_up",
}

// String returns the counter's label value.
func (c Counter) String() string {
	if c < numCounters {
		return counterNames[c]
	}
	return "unknown"
}

// Stats is a copy of counters, per processor or summed.
type Stats struct {
	Drops    [numDropReasons]uint64
	Counters [numCounters]uint64
}

// Drop returns the count for reason r.
func (s *Stats) Drop(r DropReason) uint64 { return s.Drops[r] }

// Count returns the value of counter c.
func (s *Stats) Count(c Counter) uint64 { return s.Counters[c] }

// Add adds o into s.
func (s *Stats) Add(o *Stats) {
	for i := range s.Drops {
		s.Drops[i] += o.Drops[i]
	}
	for i := range s.Counters {
		s.Counters[i] += o.Counters[i]
	}
}

// processorStats is owned by one processor: it counts into local with plain
// increments and publishes into pub with atomic stores once per batch, so a
// scrape reads consistent-enough values without any atomic read-modify-write
// on the packet path. Padding keeps two processors' blocks off one cache line.
type processorStats struct {
	_     [64]byte
	local Stats
	pub   [int(numDropReasons) + int(numCounters)]atomic.Uint64
	_     [64]byte
}

// publish stores only the counters that changed: an atomic store is a
// locked instruction on amd64 and most batches move two or three counters;
// the load is a plain one, and only this processor stores into pub.
func (w *processorStats) publish() {
	for i, v := range w.local.Drops {
		if p := &w.pub[i]; p.Load() != v {
			p.Store(v)
		}
	}
	for i, v := range w.local.Counters {
		if p := &w.pub[int(numDropReasons)+i]; p.Load() != v {
			p.Store(v)
		}
	}
}

func (w *processorStats) read(s *Stats) {
	for i := range s.Drops {
		s.Drops[i] = w.pub[i].Load()
	}
	for i := range s.Counters {
		s.Counters[i] = w.pub[int(numDropReasons)+i].Load()
	}
}
