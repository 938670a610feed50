package gwagent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/gateway/config"
)

// leaseRig runs an agent for g1 (egress IP 192.0.2.10 placed there) inside
// a synctest bubble, with the default FenceAfter (3 s) and CheckEvery.
type leaseRig struct {
	t   *testing.T
	src *fakeSource
	dp  *fakeDP
	a   *Agent
}

var leaseIP = netip.MustParseAddr("192.0.2.10")

func newLeaseRig(t *testing.T, mode LeaseMode) *leaseRig {
	r := &leaseRig{t: t, src: placedOnG1(), dp: &fakeDP{}}
	r.a = &Agent{Node: "g1", Base: base(), Source: r.src, ControllerLease: mode, Log: testLog(t),
		StartDataPlane: func(s *config.Settled) (DataPlane, error) {
			r.dp.Reload(s)
			return r.dp, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	after(100 * time.Millisecond) // the first check and the pass it asks for
	if !r.hosted() {
		t.Fatalf("not hosting %v at start: %v", leaseIP, r.dp.last())
	}
	return r
}

func (r *leaseRig) hosted() bool { return slices.Equal(r.dp.last(), []netip.Addr{leaseIP}) }

// grant is a probe of the controller arriving now with a lease of d on ips.
func (r *leaseRig) grant(d time.Duration, authenticated bool, ips ...netip.Addr) {
	r.a.takeLease(health.Grant{At: time.Now(), Lease: health.Lease{For: d, IPs: ips}, Authenticated: authenticated})
}

// after lets d of the bubble's time pass and every goroutine settle. Only
// for tests inside a testing/synctest bubble (every caller is one).
func after(d time.Duration) {
	// sleep: inside a testing/synctest bubble a sleep is how the fake clock
	// moves (synctest.Wait does not advance it): the lease's timers fire at
	// once, in order; nothing real is waited for
	time.Sleep(d)
	synctest.Wait()
}

// The controller's default settings: probes every 300 ms, a lease of
// leaseFor(300ms, 1s).
const (
	probeEvery = 300 * time.Millisecond
	leaseLen   = 975 * time.Millisecond
)

// TestAgentControllerLease: with the source gone, the controller's probes
// keep the node hosting what their lease names for as long as they come;
// an IP the lease stops naming is released at once; when they stop, the
// node fences as the lease runs out (not FenceAfter later), and a lease
// alone does not unfence it.
func TestAgentControllerLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLeaseRig(t, LeaseMutualTLS)
		r.grant(leaseLen, true, leaseIP)
		r.src.setDown(true) // the API server is gone from here on

		// 10 s, three times FenceAfter, on the probes alone.
		for range 10 * time.Second / probeEvery {
			after(probeEvery)
			r.grant(leaseLen, true, leaseIP)
			if st := r.a.State(); st.Fenced || !r.hosted() {
				t.Fatalf("fenced while the controller's probes renew the lease: %+v", st)
			}
		}
		synctest.Wait()
		if st := r.a.State(); !st.Leased || !st.Serving || st.LeaseLeft != leaseLen {
			t.Fatalf("state on the lease alone: %+v", st)
		}

		// The controller moves the IP elsewhere: its next probe's lease no
		// longer names it, and the node stops hosting it at once, while it
		// stays unfenced (SERVING) for what the lease names.
		r.grant(leaseLen, true)
		after(50 * time.Millisecond) // the pass the grant asks for
		if r.hosted() || r.a.State().Fenced {
			t.Fatalf("the lease stopped naming %v: hosting %v, state %+v", leaseIP, r.dp.last(), r.a.State())
		}
		r.grant(leaseLen, true, leaseIP)
		after(50 * time.Millisecond)
		if !r.hosted() {
			t.Fatalf("the lease names %v again: hosting %v", leaseIP, r.dp.last())
		}

		// The probes stop (the controller cannot reach the node either):
		// hosted until the lease runs out, not a moment past it.
		after(leaseLen - 50*time.Millisecond - time.Millisecond)
		if !r.hosted() {
			t.Fatalf("released %v before the lease ran out", leaseIP)
		}
		after(2 * time.Millisecond)
		st := r.a.State()
		if !st.Fenced || st.Serving || st.FenceReason != FenceLeaseExpired || st.Fences[FenceLeaseExpired] != 1 || r.hosted() {
			t.Fatalf("lease ran out without the source: hosting %v, state %+v", r.dp.last(), st)
		}

		// A probe arriving now does not unfence: the node said NOT_SERVING
		// and the controller is moving its IPs.
		r.grant(leaseLen, true, leaseIP)
		after(probeEvery)
		if !r.a.State().Fenced || r.hosted() {
			t.Fatalf("a lease unfenced a fenced node: hosting %v", r.dp.last())
		}
		// The source's contact does.
		r.src.setDown(false)
		// The next check (every CheckEvery) and the tick that sees it (as often).
		after(2*r.a.CheckEvery + 50*time.Millisecond)
		if st := r.a.State(); st.Fenced || !r.hosted() {
			t.Fatalf("contact returned: hosting %v, state %+v", r.dp.last(), st)
		}
	})
}

// TestAgentCutFromBothFencesWithinTheLease: a node that held leases and
// loses the source and the controller at once fences within one lease
// length, not after FenceAfter: the controller may move its IPs after its
// own budget (probe interval + timeout), which the lease is below.
func TestAgentCutFromBothFencesWithinTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLeaseRig(t, LeaseMutualTLS)
		for range 5 {
			r.grant(leaseLen, true, leaseIP)
			after(probeEvery)
		}
		r.grant(leaseLen, true, leaseIP)
		r.src.setDown(true)
		after(leaseLen + time.Millisecond)
		if st := r.a.State(); !st.Fenced || st.FenceReason != FenceLeaseExpired || r.hosted() {
			t.Fatalf("cut from both for the lease's length: hosting %v, state %+v", r.dp.last(), st)
		}
	})
}

// TestAgentWithoutLeaseFencesAfter: a gateway that never took a lease (here
// the controller's came over plain gRPC, which the default mode refuses)
// keeps --fence-after: unfenced at 2 s without the source, fenced by 3 s.
func TestAgentWithoutLeaseFencesAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLeaseRig(t, LeaseMutualTLS)
		r.grant(leaseLen, false, leaseIP)
		r.src.setDown(true)
		after(2 * time.Second)
		if st := r.a.State(); st.Fenced || !r.hosted() || st.LeasesRefused != 1 || st.LeaseLeft != 0 {
			t.Fatalf("2 s without the source, no lease taken: hosting %v, state %+v", r.dp.last(), st)
		}
		after(DefaultFenceAfter - 2*time.Second + time.Millisecond)
		if st := r.a.State(); !st.Fenced || st.FenceReason != FenceSourceLost || r.hosted() {
			t.Fatalf("FenceAfter without the source: hosting %v, state %+v", r.dp.last(), st)
		}
	})

	// The same lease over plain gRPC is taken when the mode says so.
	synctest.Test(t, func(t *testing.T) {
		r := newLeaseRig(t, LeaseAny)
		r.src.setDown(true)
		for range 4 * time.Second / probeEvery {
			r.grant(leaseLen, false, leaseIP)
			after(probeEvery)
		}
		if st := r.a.State(); st.Fenced || !r.hosted() {
			t.Fatalf("LeaseAny: fenced with plain-gRPC leases renewing: %+v", st)
		}
	})
}

// TestFenceRule is the rule on plain values: each row one situation.
func TestFenceRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const fa = 3 * time.Second
	held := lease{taken: true, until: t0.Add(time.Second), dur: time.Second}
	for _, c := range []struct {
		name      string
		now       time.Time
		lastOK    time.Time
		l         lease
		wasFenced bool
		want      verdict
	}{
		{"contact, no lease", t0.Add(2 * time.Second), t0, lease{}, false, verdict{next: t0.Add(fa)}},
		{"contact stale, no lease: fence-after", t0.Add(fa + 1), t0, lease{}, false, verdict{fenced: true, reason: FenceSourceLost}},
		{"no contact, lease runs", t0.Add(time.Second - 1), t0.Add(-time.Hour), held, false, verdict{leased: true, next: held.until}},
		{"no contact, lease ran out", t0.Add(time.Second), t0.Add(-time.Hour), held, false, verdict{fenced: true, reason: FenceLeaseExpired}},
		{"contact counts for the lease's length once leased", t0.Add(1500 * time.Millisecond), t0, held, false, verdict{fenced: true, reason: FenceLeaseExpired}},
		{"contact within the lease's length", t0.Add(900 * time.Millisecond), t0, held, false, verdict{next: t0.Add(time.Second)}},
		{"a lease does not unfence", t0.Add(500 * time.Millisecond), t0.Add(-time.Hour), held, true, verdict{fenced: true, reason: FenceLeaseExpired}},
		{"contact unfences", t0.Add(500 * time.Millisecond), t0.Add(400 * time.Millisecond), held, true, verdict{next: t0.Add(1400 * time.Millisecond)}},
	} {
		if got := fenceRule(c.now, c.lastOK, fa, c.l, c.wasFenced); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
