package gwagent

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/health"
)

// LeaseMode says which of the controller's leases the agent takes. A lease
// comes with each reachability probe (health.Lease): "keep the egress IPs I
// place on you for this long", shorter than the controller's own time to
// move them away from a node that stopped answering.
type LeaseMode int

const (
	// LeaseMutualTLS, the default, takes a lease only from a probe that
	// came over mutual TLS, i.e. from a holder of a client certificate
	// the health service's client CA signed: over plain gRPC anyone who
	// reaches the port could keep a cut-off gateway answering.
	LeaseMutualTLS LeaseMode = iota
	// LeaseAny also takes leases over plain gRPC: only where nothing but
	// the controller reaches the health port (the admission filter; a lab).
	LeaseAny
	// LeaseOff takes none: only the source's contact and FenceAfter.
	LeaseOff
)

// ParseLeaseMode reads the --controller-lease flag: tls, any or off.
func ParseLeaseMode(s string) (LeaseMode, error) {
	switch s {
	case "tls":
		return LeaseMutualTLS, nil
	case "any":
		return LeaseAny, nil
	case "off":
		return LeaseOff, nil
	}
	return 0, fmt.Errorf("%q is not a lease mode: use tls, any or off", s)
}

// String is the flag's spelling.
func (m LeaseMode) String() string {
	switch m {
	case LeaseMutualTLS:
		return "tls"
	case LeaseAny:
		return "any"
	case LeaseOff:
		return "off"
	}
	return fmt.Sprintf("LeaseMode(%d)", int(m))
}

// Why the agent fenced (State.FenceReason, the metric's reason label).
const (
	// FenceSourceLost: no contact with the source for FenceAfter, and no
	// controller lease ever taken in this run (an older controller, a
	// static setup, LeaseOff, or plain gRPC with LeaseMutualTLS).
	FenceSourceLost = "source_lost"
	// FenceLeaseExpired: no contact with the source, and the controller's
	// lease ran out (the controller cannot reach this node either, so it
	// may move the IPs once its own budget has passed).
	FenceLeaseExpired = "lease_expired"
)

// lease is the last controller lease the agent took.
type lease struct {
	taken bool          // a lease was taken in this run
	until time.Time     // when it runs out
	dur   time.Duration // its length
	ips   map[netip.Addr]bool
	gen   uint64 // bumped when ips change (not on a mere renewal)
}

// verdict is what the fence rule decides at one moment.
type verdict struct {
	// fenced: host nothing, report NOT_SERVING.
	fenced bool
	// leased: the source is out of contact and only the controller's
	// lease lets this node host, and only the IPs the lease names.
	leased bool
	// reason is why fenced (FenceSourceLost, FenceLeaseExpired).
	reason string
	// next is when the verdict may change without any new input: the
	// source's contact or the lease running out (zero: not before one).
	next time.Time
}

// fenceRule decides, at now, whether the agent may host egress IPs, from
// its last contact with the source, the controller's last lease and
// whether it is fenced already. It is the whole rule:
//
//   - Contact with the source no older than FenceAfter: host what the source
//     says. Once a lease was taken, the contact counts only for the lease's
//     length (at most FenceAfter): the controller moves the IPs of a node it
//     cannot reach after its own budget, of which the lease is a part, so a
//     node cut off from both sides must not keep answering on an older
//     contact than that. Contact keeps being renewed every CheckEvery while
//     the source answers, so this costs nothing while it does.
//   - Out of contact but within the lease: host only what the lease names
//     (the controller's placement when it sent the probe).
//   - Neither: fenced. A lease keeps a node unfenced, it does not unfence
//     one: a fenced node said NOT_SERVING, and the controller is moving its
//     IPs meanwhile; contact with the source unfences.
func fenceRule(now, lastOK time.Time, fenceAfter time.Duration, l lease, wasFenced bool) verdict {
	limit := fenceAfter
	if l.taken {
		limit = min(limit, l.dur)
	}
	if contactEnds := lastOK.Add(limit); !now.After(contactEnds) {
		// When the contact goes stale the lease may hold on, but only for
		// what it names: a change of verdict either way.
		return verdict{next: contactEnds}
	}
	if l.taken && !wasFenced && now.Before(l.until) {
		return verdict{leased: true, next: l.until}
	}
	if l.taken {
		return verdict{fenced: true, reason: FenceLeaseExpired}
	}
	return verdict{fenced: true, reason: FenceSourceLost}
}

// takeLease is the health service's lease handler: it records a grant the
// agent's LeaseMode accepts, and asks for a pass when what it covers
// changed.
func (a *Agent) takeLease(g health.Grant) {
	a.mu.Lock()
	switch {
	case g.Err != nil:
		a.state.LeasesMalformed++
		first := a.state.LeasesMalformed == 1
		a.mu.Unlock()
		if first {
			a.Log.Warn("gateway agent: a probe's lease did not parse; not taken", "err", g.Err)
		}
		return
	case !g.Authenticated && a.ControllerLease != LeaseAny:
		a.state.LeasesRefused++
		first := a.state.LeasesRefused == 1
		a.mu.Unlock()
		if first {
			a.Log.Warn("gateway agent: the controller's lease came over plain gRPC; not taken, --fence-after alone applies (mutual TLS on the health service, or --controller-lease=any where nothing else reaches it)")
		}
		return
	}
	ips := make(map[netip.Addr]bool, len(g.IPs))
	for _, ip := range g.IPs {
		ips[ip] = true
	}
	l := &a.lease
	first := !l.taken
	changed := !l.taken || !mapsEqual(l.ips, ips) || !g.At.Before(l.until)
	if !mapsEqual(l.ips, ips) {
		l.gen++
	}
	l.taken, l.until, l.dur, l.ips = true, g.At.Add(g.For), g.For, ips
	kick := a.rebuild
	a.mu.Unlock()
	if first {
		a.Log.Info("gateway agent: the controller's probes lease this node its egress IPs", "lease", g.For, "ips", len(ips))
	}
	if changed && kick != nil {
		kick()
	}
}

func mapsEqual(a, b map[netip.Addr]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// currentLease is a copy of the last lease taken.
func (a *Agent) currentLease() lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease
}

// leased keeps, of the status items that place an egress IP on node, those
// the lease names; the others' items stay (they concern other nodes).
func leased(eips []*egressv1.EgressIP, node string, ips map[netip.Addr]bool) []*egressv1.EgressIP {
	out := make([]*egressv1.EgressIP, 0, len(eips))
	for _, e := range eips {
		if e == nil {
			continue
		}
		items := slices.DeleteFunc(slices.Clone(e.Status.Items), func(it egressv1.EgressIPStatusItem) bool {
			if it.Node != node {
				return false
			}
			ip, err := netip.ParseAddr(it.EgressIP)
			return err != nil || !ips[ip.Unmap()]
		})
		if len(items) != len(e.Status.Items) {
			c := e.DeepCopy()
			c.Status.Items = items
			e = c
		}
		out = append(out, e)
	}
	return out
}
