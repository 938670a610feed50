package engine

import (
	"net/netip"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/claim"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/gateway/xdp"
)

// PortStats are one port's counters.
type PortStats struct {
	Name string
	nic.Stats
}

// XDPStats are one interface's XDP program counters.
type XDPStats struct {
	Interface string
	xdp.Stats
}

// Stats is everything the engine counts, for a metrics collector.
type Stats struct {
	Pipeline gateway.Stats
	Engine   Counters
	Ports    []PortStats
	XDP      []XDPStats
	Kernel   route.CacheStats
	Flows    int
}

// Stats reads all counters; safe from any goroutine.
func (e *Engine) Stats() Stats {
	s := Stats{Pipeline: e.pipe.Stats(), Flows: e.ct.Len()}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.loops {
		c := l.pub.read()
		s.Engine.add(&c)
	}
	if e.closed {
		return s
	}
	s.Kernel = e.cache.Stats()
	for _, ifc := range e.ifcs {
		for _, p := range ifc.Queues {
			s.Ports = append(s.Ports, PortStats{Name: p.Name(), Stats: p.Stats()})
		}
		if ifc.Program != nil {
			if x, err := ifc.Program.Stats(); err == nil {
				s.XDP = append(s.XDP, XDPStats{Interface: ifc.Name, Stats: x})
			}
		}
	}
	return s
}

// WorkerStats are one queue's counters (its pipeline worker's and its
// loop's) as last published (once per batch).
type WorkerStats struct {
	Pipeline gateway.Stats
	Engine   Counters
}

// Workers appends each queue's counters to dst, in queue order; safe from
// any goroutine and allocation-free once dst has room.
func (e *Engine) Workers(dst []WorkerStats) []WorkerStats {
	for _, l := range e.loops {
		dst = append(dst, WorkerStats{Pipeline: l.gw.Stats(), Engine: l.pub.read()})
	}
	return dst
}

// EachPort calls fn for every open port with its interface's name, under
// the engine's lock: the port's socket stays open during fn (so fn may
// read its kernel statistics), and nothing is called once Close began.
func (e *Engine) EachPort(fn func(iface string, p nic.Queue)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	for _, ifc := range e.ifcs {
		for _, p := range ifc.Queues {
			fn(ifc.Name, p)
		}
	}
}

// Hosted appends the egress IPs of the running configuration that the
// gateway answers for to dst: not those refused because no served
// interface holds their subnet (served.go).
func (e *Engine) Hosted(dst []netip.Addr) []netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set == nil {
		return dst
	}
	for _, a := range e.set.Hosted {
		if _, refused := e.unplaced[a]; !refused {
			dst = append(dst, a)
		}
	}
	return dst
}

// TunnelPeers is the number of worker nodes the running configuration
// accepts tunnel traffic from.
func (e *Engine) TunnelPeers() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.set == nil {
		return 0
	}
	return len(e.set.Nodes)
}

// ClaimStats is the egress-IP claimer's counters; zero when the engine
// claims nothing itself.
func (e *Engine) ClaimStats() claim.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.claimer == nil {
		return claim.Stats{}
	}
	return e.claimer.Stats()
}

// Modes reports each served interface's mode (afxdp or afpacket).
func (e *Engine) Modes() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[string]string{}
	for _, ifc := range e.ifcs {
		m[ifc.Name] = ifc.Mode()
	}
	return m
}
