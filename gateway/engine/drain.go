package engine

import (
	"github.com/egret-gw/egret/gateway/config"
	"net/netip"
	"time"

	"github.com/egret-gw/egret/nat"
)

// drainEvery paces the retries of forgetting the NAT state of egress IPs
// that left the configuration: their flows end on their own time (moved on
// their next packet, or expired).
const drainEvery = time.Second

// retire notes the egress IPs that old hosts and set does not, and forgets
// those already drained. The NAT allocator keeps an egress IP's port
// tables (up to 768 KiB) until its last flow ends; without this every
// egress IP ever hosted would keep them. An IP hosted again is no longer
// retired. e.mu must be held.
func (e *Engine) retire(old, set *config.Settled) {
	for _, a := range set.Hosted {
		delete(e.retired, a)
	}
	hosted := make(map[netip.Addr]bool, len(set.Hosted))
	for _, a := range set.Hosted {
		hosted[a] = true
	}
	for _, a := range old.Hosted {
		if !hosted[a] {
			e.retired[a] = true
		}
	}
	e.forgetDrained()
}

// forgetDrained drops the allocator's state of every retired egress IP
// whose flows have all ended. e.mu must be held.
func (e *Engine) forgetDrained() {
	for a := range e.retired {
		if e.pipe.NAT().Forget(nat.Addr(a.As16())) {
			delete(e.retired, a)
			e.log.Debug("engine: egress IP drained; its NAT state is freed", "ip", a)
		}
	}
}

// drainLoop retries forgetDrained every drainEvery until Close.
func (e *Engine) drainLoop() {
	t := time.NewTicker(drainEvery)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-t.C:
			e.mu.Lock()
			if !e.closed {
				e.forgetDrained()
			}
			e.mu.Unlock()
		}
	}
}
