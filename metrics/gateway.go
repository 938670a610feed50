package metrics

import (
	"net/netip"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/nat"
)

// WorkerStats is one data-plane worker's counters as last published.
type WorkerStats struct {
	// Pipeline is the worker's gateway.Processor counters (Processor.Stats).
	Pipeline gateway.Stats
	// BusyNanos is the time the worker spent handling received frames
	// (from receive to transmit), cumulative.
	BusyNanos uint64
	// NoBuffer, NoPort and PassDropped are the I/O loop's own drops: no free
	// output buffer, routed out of an interface not served, and frames the
	// pipeline passes that AF_XDP cannot give back to the kernel.
	NoBuffer, NoPort, PassDropped uint64
}

// InterfaceStats is one served interface's I/O counters, summed over its
// queues by the source or, when it lists one entry per queue with the same
// Name, by the collector.
type InterfaceStats struct {
	Name                 string
	RxPackets, TxPackets uint64
	// RxBytes and TxBytes are reported iff HasBytes.
	RxBytes, TxBytes uint64
	HasBytes         bool
	// TxDrops: transmit queue full, no buffer or frame too big.
	TxDrops            uint64
	RxErrors, TxErrors uint64
	// XDP holds the AF_XDP socket statistics (ReadXDPRingStats); valid iff HasXDP.
	XDP    XDPRingStats
	HasXDP bool
}

// GatewaySource is what the data-plane collector reads at scrape time.
// Every field may be nil except Workers (or Pipeline).
type GatewaySource struct {
	// Workers appends each worker's counters to dst, in worker order.
	Workers func(dst []WorkerStats) []WorkerStats
	// Pipeline is used when Workers is nil: its summed Stats, no busy time.
	Pipeline *gateway.Pipeline
	// Interfaces appends each served interface's counters to dst.
	Interfaces func(dst []InterfaceStats) []InterfaceStats
	// Conntrack is the flow table (Len, Cap); from Pipeline when nil.
	Conntrack *conntrack.Table
	// NAT is the port allocator; from Pipeline when nil.
	NAT *nat.Allocator
	// EgressIPs appends the egress IPs this gateway hosts now.
	EgressIPs func(dst []netip.Addr) []netip.Addr
	// TunnelPeers is the number of worker nodes allowed to send tunnel traffic.
	TunnelPeers func() int
	// Claims is the egress-IP claimer's counters (announcements, ARP/ND
	// answers); nil when the gateway claims nothing itself.
	Claims func() claim.Stats
}

// extra drop reasons of the I/O loop, beside gateway.DropReason names.
const (
	reasonNoBuffer    = "no_buffer"
	reasonNoPort      = "no_port"
	reasonPassDropped = "pass_dropped"
)

type natProto struct {
	name  string
	proto uint8
}

var natProtos = [...]natProto{{"tcp", 6}, {"udp", 17}, {"icmp", 1}}

// GatewayCollector is a prometheus.Collector over a GatewaySource. It keeps
// nothing between scrapes but reused scratch space.
type GatewayCollector struct {
	src GatewaySource

	mu      sync.Mutex // one scrape at a time owns the scratch slices
	workers []WorkerStats
	ifaces  []InterfaceStats
	ips     []netip.Addr

	rxPkts, rxBytes, txPkts, txBytes, txDrops, rxErr, txErr              *prometheus.Desc
	xdpRxDropped, xdpRxRingFull, xdpFillEmpty, xdpTxEmpty, xdpInvalid    *prometheus.Desc
	plRx, plPass, plFwd, plReplied, icmpSent, icmpXlated, drops          *prometheus.Desc
	flows, flowsMax, flowsCreated, flowsExpired, flowsMoved              *prometheus.Desc
	flowsEarlyDropped, tcpResetsSent, flowsPickedUp                      *prometheus.Desc
	announcements, neighborAnswers                                       *prometheus.Desc
	portsInUse, portsMax, exhausted, egressIPs, peers, workersDesc, busy *prometheus.Desc
}

// NewGatewayCollector returns the data-plane collector for src.
func NewGatewayCollector(src GatewaySource) *GatewayCollector {
	if src.Pipeline != nil {
		if src.Conntrack == nil {
			src.Conntrack = src.Pipeline.Conntrack()
		}
		if src.NAT == nil {
			src.NAT = src.Pipeline.NAT()
		}
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("egret_gateway_"+name, help, labels, nil)
	}
	ifl := "interface"
	return &GatewayCollector{
		src:     src,
		rxPkts:  d("interface_received_packets_total", "Frames received on the interface by the gateway's sockets.", ifl),
		rxBytes: d("interface_received_bytes_total", "Bytes of the frames received on the interface by the gateway's sockets.", ifl),
		txPkts:  d("interface_sent_packets_total", "Frames queued for transmission on the interface.", ifl),
		txBytes: d("interface_sent_bytes_total", "Bytes of the frames queued for transmission on the interface.", ifl),
		txDrops: d("interface_send_drops_total", "Frames not sent: transmit queue full, no buffer or frame too big.", ifl),
		rxErr:   d("interface_receive_errors_total", "Receive system calls that failed.", ifl),
		txErr:   d("interface_send_errors_total", "Transmit system calls that failed.", ifl),

		xdpRxDropped:  d("xdp_socket_rx_dropped_total", "Frames the kernel dropped before an AF_XDP socket got them (XDP_STATISTICS rx_dropped).", ifl),
		xdpRxRingFull: d("xdp_socket_rx_ring_full_total", "Frames dropped because an AF_XDP RX ring was full.", ifl),
		xdpFillEmpty:  d("xdp_socket_fill_ring_empty_total", "Times the kernel found an AF_XDP fill ring empty.", ifl),
		xdpTxEmpty:    d("xdp_socket_tx_ring_empty_total", "Times the kernel found an AF_XDP TX ring empty.", ifl),
		xdpInvalid:    d("xdp_socket_invalid_descriptors_total", "Invalid descriptors the kernel saw on an AF_XDP ring.", ifl, "direction"),

		plRx:          d("pipeline_received_packets_total", "Frames the pipeline examined."),
		plPass:        d("passed_packets_total", "Frames handed to the kernel untouched (not for the gateway)."),
		plFwd:         d("forwarded_packets_total", "Pod packets decapsulated, translated and sent to the outside."),
		plReplied:     d("replied_packets_total", "Outside packets translated back and encapsulated to a pod's node."),
		icmpSent:      d("icmp_errors_sent_total", "ICMP errors the gateway generated (time exceeded, too big)."),
		icmpXlated:    d("icmp_errors_translated_total", "ICMP errors from outside translated back to a pod."),
		tcpResetsSent: d("tcp_resets_sent_total", "RSTs sent to pods for TCP segments of connections the gateway holds no flow for (after a restart, an expiry or a move); each such segment is also a tcp_no_flow drop."),
		drops:         d("dropped_packets_total", "Frames dropped, by reason (docs/pipeline.md).", "reason"),

		flows:             d("flows", "Flows in the connection-tracking table now."),
		flowsMax:          d("flows_max", "Capacity of the connection-tracking table."),
		flowsCreated:      d("flows_created_total", "Flows created."),
		flowsExpired:      d("flows_expired_total", "Flows expired and their NAT port released."),
		flowsPickedUp:     d("flows_picked_up_total", "TCP flows picked up mid-stream: a pod's segment of a connection this gateway held no flow for (its egress IP moved here, or the gateway restarted), on the pod's own source port, so the server sees the same 5-tuple. Also counted in flows_created_total."),
		flowsEarlyDropped: d("flows_early_dropped_total", "Unanswered or closing flows removed to make room for a new flow (early drop), their NAT port released: in a full table, or among a pod's or egress IP's own flows at its podFlowLimit or egressIPFlowLimit."),
		announcements:     d("claim_announcements_total", "Gratuitous ARPs and unsolicited neighbour advertisements for claimed egress IPs, by result (sent, failed).", "result"),
		neighborAnswers:   d("neighbor_answers_total", "ARP replies and neighbour advertisements the gateway sent for its claimed egress IPs (the kernel is fenced from answering), by result (sent, failed).", "result"),
		flowsMoved:        d("flows_moved_total", "Flows removed because their egress IP left this gateway or their pod's policy; the pod's next packet opens a flow on a current egress IP (UDP, ICMP) or is dropped as tcp_no_flow (TCP)."),

		portsInUse:  d("nat_ports_in_use", "NAT ports (ICMP identifiers) with at least one live flow, per egress IP and protocol.", "egress_ip", "protocol"),
		portsMax:    d("nat_ports_max", "Size of the NAT port range for unprivileged source ports, per egress IP and protocol.", "egress_ip", "protocol"),
		exhausted:   d("nat_port_exhaustion_total", "New flows refused because the egress IP had no free port.", "egress_ip"),
		egressIPs:   d("egress_ips", "Egress IPs hosted by this gateway now."),
		peers:       d("tunnel_peers", "Worker nodes allowed to send tunnel traffic to this gateway."),
		workersDesc: d("workers", "Data-plane workers (receive queues)."),
		busy:        d("worker_busy_seconds_total", "Time a worker spent handling frames; its rate is the worker's busy ratio.", "worker"),
	}
}

// Describe implements prometheus.Collector.
func (c *GatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rxPkts, c.rxBytes, c.txPkts, c.txBytes, c.txDrops, c.rxErr, c.txErr,
		c.xdpRxDropped, c.xdpRxRingFull, c.xdpFillEmpty, c.xdpTxEmpty, c.xdpInvalid,
		c.plRx, c.plPass, c.plFwd, c.plReplied, c.icmpSent, c.icmpXlated, c.tcpResetsSent, c.drops,
		c.flows, c.flowsMax, c.flowsCreated, c.flowsExpired, c.flowsMoved, c.flowsEarlyDropped, c.flowsPickedUp,
		c.announcements, c.neighborAnswers,
		c.portsInUse, c.portsMax, c.exhausted, c.egressIPs, c.peers, c.workersDesc, c.busy} {
		ch <- d
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// Collect implements prometheus.Collector.
func (c *GatewayCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()

	var sum gateway.Stats
	var io WorkerStats
	switch {
	case c.src.Workers != nil:
		c.workers = c.src.Workers(c.workers[:0])
		for i := range c.workers {
			w := &c.workers[i]
			sum.Add(&w.Pipeline)
			io.NoBuffer += w.NoBuffer
			io.NoPort += w.NoPort
			io.PassDropped += w.PassDropped
			counterSeconds(ch, c.busy, w.BusyNanos, strconv.Itoa(i))
		}
		gauge(ch, c.workersDesc, float64(len(c.workers)))
	case c.src.Pipeline != nil:
		sum = c.src.Pipeline.Stats()
	}
	counter(ch, c.plRx, sum.Count(gateway.CounterRx))
	counter(ch, c.plPass, sum.Count(gateway.CounterPass))
	counter(ch, c.plFwd, sum.Count(gateway.CounterForwarded))
	counter(ch, c.plReplied, sum.Count(gateway.CounterReplied))
	counter(ch, c.icmpSent, sum.Count(gateway.CounterICMPSent))
	counter(ch, c.icmpXlated, sum.Count(gateway.CounterICMPXlated))
	counter(ch, c.tcpResetsSent, sum.Count(gateway.CounterTCPResetsSent))
	counter(ch, c.flowsCreated, sum.Count(gateway.CounterFlowsNew))
	counter(ch, c.flowsExpired, sum.Count(gateway.CounterFlowsExpired))
	counter(ch, c.flowsMoved, sum.Count(gateway.CounterFlowsMoved))
	counter(ch, c.flowsEarlyDropped, sum.Count(gateway.CounterFlowsEarlyDropped))
	counter(ch, c.flowsPickedUp, sum.Count(gateway.CounterFlowsPickedUp))
	if c.src.Claims != nil {
		cs := c.src.Claims()
		counter(ch, c.announcements, cs.Announced, "sent")
		counter(ch, c.announcements, cs.AnnounceFailures, "failed")
		counter(ch, c.neighborAnswers, cs.Answered, "sent")
		counter(ch, c.neighborAnswers, cs.AnswerFailures, "failed")
	}
	for _, r := range gateway.DropReasons() {
		counter(ch, c.drops, sum.Drop(r), r.String())
	}
	counter(ch, c.drops, io.NoBuffer, reasonNoBuffer)
	counter(ch, c.drops, io.NoPort, reasonNoPort)
	counter(ch, c.drops, io.PassDropped, reasonPassDropped)

	if c.src.Conntrack != nil {
		gauge(ch, c.flows, float64(c.src.Conntrack.Len()))
		gauge(ch, c.flowsMax, float64(c.src.Conntrack.Cap()))
	}
	if c.src.TunnelPeers != nil {
		gauge(ch, c.peers, float64(c.src.TunnelPeers()))
	}
	if c.src.EgressIPs != nil {
		c.ips = c.src.EgressIPs(c.ips[:0])
		gauge(ch, c.egressIPs, float64(len(c.ips)))
		if a := c.src.NAT; a != nil {
			cfg := a.Config()
			unpriv := float64(int(cfg.PortMax) - int(cfg.PortMin) + 1)
			for _, ip := range c.ips {
				ip = ip.Unmap()
				k := nat.Addr(ip.As16())
				s := ip.String()
				for _, p := range natProtos {
					proto := p.proto
					if p.name == "icmp" && !ip.Is4() {
						proto = 58
					}
					gauge(ch, c.portsInUse, float64(a.PortsInUse(k, proto)), s, p.name)
					if p.name == "icmp" {
						gauge(ch, c.portsMax, 65535, s, p.name)
					} else {
						gauge(ch, c.portsMax, unpriv, s, p.name)
					}
				}
				counter(ch, c.exhausted, a.Exhausted(k), s)
			}
		}
	}

	if c.src.Interfaces != nil {
		c.ifaces = mergeInterfaces(c.src.Interfaces(c.ifaces[:0]))
		for i := range c.ifaces {
			f := &c.ifaces[i]
			counter(ch, c.rxPkts, f.RxPackets, f.Name)
			counter(ch, c.txPkts, f.TxPackets, f.Name)
			if f.HasBytes {
				counter(ch, c.rxBytes, f.RxBytes, f.Name)
				counter(ch, c.txBytes, f.TxBytes, f.Name)
			}
			counter(ch, c.txDrops, f.TxDrops, f.Name)
			counter(ch, c.rxErr, f.RxErrors, f.Name)
			counter(ch, c.txErr, f.TxErrors, f.Name)
			if f.HasXDP {
				counter(ch, c.xdpRxDropped, f.XDP.RxDropped, f.Name)
				counter(ch, c.xdpRxRingFull, f.XDP.RxRingFull, f.Name)
				counter(ch, c.xdpFillEmpty, f.XDP.FillRingEmpty, f.Name)
				counter(ch, c.xdpTxEmpty, f.XDP.TxRingEmpty, f.Name)
				counter(ch, c.xdpInvalid, f.XDP.RxInvalidDescs, f.Name, "rx")
				counter(ch, c.xdpInvalid, f.XDP.TxInvalidDescs, f.Name, "tx")
			}
		}
	}
}

func counterSeconds(ch chan<- prometheus.Metric, d *prometheus.Desc, ns uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(ns)/1e9, labels...)
}

// mergeInterfaces sums entries with the same Name into the first of them,
// in place, keeping first-seen order. Interfaces are few: quadratic is fine.
func mergeInterfaces(in []InterfaceStats) []InterfaceStats {
	out := in[:0]
	for _, f := range in {
		j := -1
		for k := range out {
			if out[k].Name == f.Name {
				j = k
				break
			}
		}
		if j < 0 {
			out = append(out, f)
			continue
		}
		o := &out[j]
		o.RxPackets += f.RxPackets
		o.TxPackets += f.TxPackets
		o.RxBytes += f.RxBytes
		o.TxBytes += f.TxBytes
		o.HasBytes = o.HasBytes || f.HasBytes
		o.TxDrops += f.TxDrops
		o.RxErrors += f.RxErrors
		o.TxErrors += f.TxErrors
		o.XDP.add(&f.XDP)
		o.HasXDP = o.HasXDP || f.HasXDP
	}
	return out
}
