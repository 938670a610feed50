package main

import (
	"math"
	"math/bits"
	"time"
)

// trial is one trial's outcome: what the generator sent, what the receiver
// counted, and the gateway core's CPU meanwhile.
type trial struct {
	Target   float64       `json:"target_pps"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"` // how long sending took
	Sent     uint64        `json:"sent"`
	// Received frames reached the router with the egress IP as source;
	// WrongSource reached it with another (the router counts both).
	Received    uint64 `json:"received"`
	WrongSource uint64 `json:"wrong_source"`
	// Sampled is how many of them the receiver read (one in 32: latency
	// and order come from these); among them, Reordered arrived after one
	// with a higher sequence number and Duplicates twice.
	Sampled    uint64 `json:"sampled"`
	Reordered  uint64 `json:"reordered_in_sample"`
	Duplicates uint64 `json:"duplicates_in_sample"`
	// ReceiverDrops are sampled frames the receiver's socket dropped
	// (not loss: the router counted them; latency misses them).
	ReceiverDrops uint64 `json:"receiver_drops"`
	// InputDrops are frames the gateway's receive ring had no room for
	// (part of the loss: the gateway did not keep up).
	InputDrops uint64 `json:"gateway_input_drops"`
	// GatewayCores is the gateway core's busy time over the trial (see
	// cpuNote); NsPerPacket is that per frame forwarded.
	GatewayCores float64 `json:"gateway_cores"`
	NsPerPacket  float64 `json:"gateway_ns_per_packet"`
	// TaskCores is the part of it charged to the gateway's own tasks
	// (egret's threads, the NAPI thread of its interface).
	TaskCores       float64    `json:"gateway_task_cores"`
	TaskNsPerPacket float64    `json:"gateway_task_ns_per_packet"`
	Latency         *histogram `json:"-"`
}

// Offered is the rate the generator achieved.
func (t trial) Offered() float64 {
	if t.Seconds == 0 {
		return 0
	}
	return float64(t.Sent) / t.Seconds
}

// Loss is the fraction of sent frames that did not arrive.
func (t trial) Loss() float64 {
	if t.Sent == 0 {
		return 1
	}
	if t.Received >= t.Sent {
		return 0
	}
	return float64(t.Sent-t.Received) / float64(t.Sent)
}

// histogram counts latencies in log-linear buckets: 64 per power of two,
// so a percentile is within 1.6 % of the true value.
type histogram struct {
	n      uint64
	counts [64 * 64]uint64
}

const subBits = 6

func bucketOf(ns int64) int {
	if ns < 1<<subBits {
		if ns < 0 {
			ns = 0
		}
		return int(ns)
	}
	e := bits.Len64(uint64(ns)) - subBits // ≥ 1
	return e<<subBits | int(uint64(ns)>>(e-1))&(1<<subBits-1)
}

// bucketValue is the middle of bucket i, in ns.
func bucketValue(i int) float64 {
	e := i >> subBits
	if e == 0 {
		return float64(i)
	}
	lo := float64(uint64(1<<subBits|i&(1<<subBits-1)) << (e - 1))
	return lo + float64(uint64(1)<<(e-1))/2
}

func (h *histogram) add(ns int64) {
	b := bucketOf(ns)
	if b >= len(h.counts) {
		b = len(h.counts) - 1
	}
	h.counts[b]++
	h.n++
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, v := range o.counts {
		h.counts[i] += v
	}
	h.n += o.n
}

// quantile returns the q-quantile in ns (NaN when empty).
func (h *histogram) quantile(q float64) float64 {
	if h == nil || h.n == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var c uint64
	for i, v := range h.counts {
		c += v
		if c >= rank {
			return bucketValue(i)
		}
	}
	return bucketValue(len(h.counts) - 1)
}

// cdf returns (latency µs, fraction ≤) points for a plot.
func (h *histogram) cdf() (xs, ys []float64) {
	if h == nil || h.n == 0 {
		return nil, nil
	}
	var c uint64
	for i, v := range h.counts {
		if v == 0 {
			continue
		}
		c += v
		xs = append(xs, bucketValue(i)/1e3)
		ys = append(ys, float64(c)/float64(h.n))
	}
	return xs, ys
}
