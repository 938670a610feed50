package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/control/dnsres"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeDNS answers from a table and counts the lookups of each name. The
// resolver itself is tested against a real server in package dnsres; here
// the clock is synctest's, which a socket would not let advance.
type fakeDNS struct {
	mu      sync.Mutex
	answers map[string]dnsres.Answer
	errs    map[string]error
	calls   map[string]int
}

func (f *fakeDNS) set(name string, ttl time.Duration, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := dnsres.Answer{TTL: ttl}
	for _, s := range addrs {
		a.Addrs = append(a.Addrs, netip.MustParseAddr(s))
	}
	f.answers[name] = a
	delete(f.errs, name)
}

func (f *fakeDNS) fail(name string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[name] = err
}

func (f *fakeDNS) lookups(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeDNS) Lookup(_ context.Context, name string) (dnsres.Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[name]++
	if err := f.errs[name]; err != nil {
		return dnsres.Answer{}, err
	}
	a, ok := f.answers[name]
	if !ok {
		return dnsres.Answer{}, fmt.Errorf("%s: %w (NXDOMAIN)", name, dnsres.ErrNotFound)
	}
	return a, nil
}

func newFakeDNS() *fakeDNS {
	return &fakeDNS{answers: map[string]dnsres.Answer{}, errs: map[string]error{}, calls: map[string]int{}}
}

func traffic(name string, dnsNames ...string) *egressv1.EgressIPTraffic {
	return &egressv1.EgressIPTraffic{
		TypeMeta:   metav1.TypeMeta{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.TrafficKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       egressv1.EgressIPTrafficSpec{DNSNames: dnsNames},
	}
}

// startDNS runs a controller on m that resolves with f.
func startDNS(t *testing.T, m *memSource, f *fakeDNS) {
	t.Helper()
	off := 0
	c, err := controller.New(m, controller.Config{ReachabilityTotalTimeoutSeconds: &off}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	controller.SetDNSLookup(c, f)
	t.Cleanup(runController(t, c.Run))
}

func (m *memSource) trafficWritten() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.trafficWrites
}

func dnsEvents(m *memSource) []recorded {
	_, evs := m.snapshot()
	var out []recorded
	for _, e := range evs {
		if e.reason == controller.ReasonDNSResolutionFailed {
			out = append(out, e)
		}
	}
	return out
}

func addressesOf(t *egressv1.EgressIPTraffic, name string) ([]string, string, bool) {
	for _, r := range t.Status.DNSNames {
		if r.Name == name {
			return r.Addresses, r.Error, true
		}
	}
	return nil, "", false
}

// TestDNSNamesStatus: names are resolved at start, written once, asked
// again at each TTL's end; an unchanged answer writes nothing, a changed
// one writes once.
func TestDNSNamesStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		m := newMem(egressIP("g", "192.168.126.11"))
		// The same name twice (case, final dot) is one entry.
		m.setTraffic(traffic("db", "db.example.com", "DB.example.com.", "api.example.com"))
		f := newFakeDNS()
		f.set("db.example.com", 10*time.Minute, "192.0.2.1")
		f.set("api.example.com", time.Hour, "2001:db8::1", "192.0.2.5") // above the 30 min ceiling
		startDNS(t, m, f)
		synctest.Wait()

		tr := m.getTraffic("db")
		want := []egressv1.ResolvedName{
			{Name: "db.example.com", Addresses: []string{"192.0.2.1"}, ResolvedAt: metav1.NewTime(start), NextResolution: metav1.NewTime(start.Add(10 * time.Minute))},
			{Name: "api.example.com", Addresses: []string{"192.0.2.5", "2001:db8::1"}, ResolvedAt: metav1.NewTime(start), NextResolution: metav1.NewTime(start.Add(30 * time.Minute))},
		}
		if !slices.EqualFunc(tr.Status.DNSNames, want, func(a, b egressv1.ResolvedName) bool {
			return a.Name == b.Name && slices.Equal(a.Addresses, b.Addresses) && a.Error == b.Error &&
				a.ResolvedAt.Equal(&b.ResolvedAt) && a.NextResolution.Equal(&b.NextResolution)
		}) {
			t.Fatalf("status %+v\nwant %+v", tr.Status.DNSNames, want)
		}
		if n := m.trafficWritten(); n != 1 {
			t.Errorf("%d status writes at start, want 1", n)
		}

		// In the synctest bubble the sleep moves the fake clock past the
		// TTL at once; synctest.Wait then waits for the controller to act.
		time.Sleep(10*time.Minute + time.Second) // sleep: synctest's fake clock, advanced at once (no real wait), past the TTL
		synctest.Wait()
		if n := f.lookups("db.example.com"); n != 2 {
			t.Errorf("db.example.com looked up %d times after its TTL, want 2", n)
		}
		if n := m.trafficWritten(); n != 1 {
			t.Errorf("%d status writes after an unchanged answer, want 1", n)
		}

		f.set("db.example.com", 10*time.Minute, "192.0.2.2", "192.0.2.1")
		time.Sleep(10 * time.Minute) // sleep: synctest's fake clock, as above
		synctest.Wait()
		if n := m.trafficWritten(); n != 2 {
			t.Errorf("%d status writes after a changed answer, want 2", n)
		}
		if got, _, _ := addressesOf(m.getTraffic("db"), "db.example.com"); !slices.Equal(got, []string{"192.0.2.1", "192.0.2.2"}) {
			t.Errorf("addresses %v after the change", got)
		}

		// A second object with a name already resolved is written from
		// what is known, without asking again.
		before := f.lookups("db.example.com")
		m.setTraffic(traffic("web", "db.example.com"))
		synctest.Wait()
		if got, _, _ := addressesOf(m.getTraffic("web"), "db.example.com"); !slices.Equal(got, []string{"192.0.2.1", "192.0.2.2"}) {
			t.Errorf("second object: %v", m.getTraffic("web").Status.DNSNames)
		}
		if f.lookups("db.example.com") != before {
			t.Error("a name already resolved was asked again for a new object")
		}
		if len(dnsEvents(m)) != 0 {
			t.Errorf("events without a failure: %v", dnsEvents(m))
		}
	})
}

// TestDNSFailureKeepsAddresses: a failure keeps the last good addresses
// in the status, writes the error once and records one Warning Event per
// change of error, however often the failing name is retried.
func TestDNSFailureKeepsAddresses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem(egressIP("g", "192.168.126.11"))
		m.setTraffic(traffic("db", "db.example.com"))
		f := newFakeDNS()
		f.set("db.example.com", time.Minute, "192.0.2.1")
		startDNS(t, m, f)
		synctest.Wait()

		timeout := errors.New("server 10.96.0.10:53: reading the answer: no answer in time")
		f.fail("db.example.com", timeout)
		time.Sleep(time.Minute + time.Second) // sleep: synctest's fake clock (see TestDNSNamesStatus)
		synctest.Wait()
		check := func(step string, writes, events int, errText string) {
			t.Helper()
			addrs, e, _ := addressesOf(m.getTraffic("db"), "db.example.com")
			if !slices.Equal(addrs, []string{"192.0.2.1"}) || e != errText {
				t.Errorf("%s: status %v error %q, want the last good address and %q", step, addrs, e, errText)
			}
			if n := m.trafficWritten(); n != writes {
				t.Errorf("%s: %d status writes, want %d", step, n, writes)
			}
			if evs := dnsEvents(m); len(evs) != events {
				t.Errorf("%s: %d DNSResolutionFailed Events, want %d: %v", step, len(evs), events, evs)
			}
		}
		check("failure", 2, 1, timeout.Error())
		if evs := dnsEvents(m); len(evs) == 1 && (evs[0].kind != egressv1.TrafficKind || evs[0].name != "db") {
			t.Errorf("event on %s %s, want EgressIPTraffic db", evs[0].kind, evs[0].name)
		}

		// Retried at the floor (5 s) a dozen times: nothing new to say.
		time.Sleep(time.Minute) // sleep: synctest's fake clock
		synctest.Wait()
		if n := f.lookups("db.example.com"); n < 12 {
			t.Errorf("a failing name was looked up %d times in a minute, want a retry every 5s", n)
		}
		check("same failure", 2, 1, timeout.Error())

		refused := errors.New("server 10.96.0.10:53: reading the answer: connection refused")
		f.fail("db.example.com", refused)
		time.Sleep(6 * time.Second) // sleep: synctest's fake clock
		synctest.Wait()
		check("another failure", 3, 2, refused.Error())

		f.set("db.example.com", time.Minute, "192.0.2.1")
		time.Sleep(6 * time.Second) // sleep: synctest's fake clock
		synctest.Wait()
		check("recovered", 4, 2, "")

		f.fail("db.example.com", refused)     // the same error again after a recovery is news
		time.Sleep(time.Minute + time.Second) // sleep: synctest's fake clock
		synctest.Wait()
		check("failed again", 5, 3, refused.Error())
	})
}

// TestDNSStatusWriteRetried: a failed write is tried again; a name never
// resolved is written with its error and no address.
func TestDNSStatusWriteRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem(egressIP("g", "192.168.126.11"))
		m.setTraffic(traffic("gone", "gone.example.com"))
		m.failTraffic = []error{apierrors.NewServiceUnavailable("apiserver restarting")}
		f := newFakeDNS()
		startDNS(t, m, f)
		synctest.Wait()
		if n := m.trafficWritten(); n != 1 {
			t.Fatalf("%d writes before the retry, want 1 (failed)", n)
		}
		time.Sleep(2 * time.Second) // sleep: synctest's fake clock, past the 1 s retry
		synctest.Wait()
		addrs, e, ok := addressesOf(m.getTraffic("gone"), "gone.example.com")
		if !ok || addrs != nil || e == "" || m.trafficWritten() != 2 {
			t.Errorf("after the retry: %v %q (%d writes), want the NXDOMAIN error, no address, 2 writes", addrs, e, m.trafficWritten())
		}
		if evs := dnsEvents(m); len(evs) != 1 {
			t.Errorf("events %v, want one DNSResolutionFailed", evs)
		}
	})
}

// TestDNSStatusNotRewrittenWhileCacheLags: a pass that runs before the
// cache shows this controller's own write does not write the same status
// again (it would be a conflict, and a wasted round trip per object).
func TestDNSStatusNotRewrittenWhileCacheLags(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem(egressIP("g", "192.168.126.11"))
		m.lagTraffic = true
		m.setTraffic(traffic("db", "db.example.com"))
		f := newFakeDNS()
		f.set("db.example.com", time.Hour, "192.0.2.1")
		f.set("api.example.com", time.Hour, "192.0.2.2")
		startDNS(t, m, f)
		synctest.Wait()
		m.setTraffic(traffic("api", "api.example.com")) // another pass, db still stale in the cache
		synctest.Wait()
		if n := m.trafficWritten(); n != 2 {
			t.Errorf("%d status writes, want 2 (db once, api once)", n)
		}
		m.catchUp()
		synctest.Wait()
		if n := m.trafficWritten(); n != 2 {
			t.Errorf("%d status writes once the cache caught up, want 2", n)
		}
		if got, _, _ := addressesOf(m.getTraffic("db"), "db.example.com"); !slices.Equal(got, []string{"192.0.2.1"}) {
			t.Errorf("db status %v", got)
		}
	})
}

// TestDNSRefusedStatusNotRewritten: a status the API server refuses as
// invalid is not written again until something changes.
func TestDNSRefusedStatusNotRewritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem(egressIP("g", "192.168.126.11"))
		m.setTraffic(traffic("db", "db.example.com"))
		m.failTraffic = []error{apierrors.NewInvalid(egressv1.SchemeGroupVersion.WithKind(egressv1.TrafficKind).GroupKind(), "db", nil)}
		f := newFakeDNS()
		f.set("db.example.com", time.Hour, "192.0.2.1")
		f.set("api.example.com", time.Hour, "192.0.2.2")
		startDNS(t, m, f)
		synctest.Wait()
		m.setTraffic(traffic("api", "api.example.com")) // another pass
		time.Sleep(time.Minute)                         // sleep: synctest's fake clock, past any retry
		synctest.Wait()
		if n := m.trafficWritten(); n != 2 {
			t.Errorf("%d status writes, want 2 (db refused once, api once)", n)
		}
		f.set("db.example.com", time.Hour, "192.0.2.3")
		time.Sleep(time.Hour) // sleep: synctest's fake clock, past the TTL
		synctest.Wait()
		if got, _, _ := addressesOf(m.getTraffic("db"), "db.example.com"); !slices.Equal(got, []string{"192.0.2.3"}) {
			t.Errorf("after a change, db status %v, want it written", got)
		}
	})
}
