package dnsres_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/dnsres"
	"golang.org/x/net/dns/dnsmessage"
)

// The clock of these tests is the now each Refresh is given: no test waits
// for a TTL to pass.
var t0 = time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)

func names(t *testing.T, s *server, ttls dnsres.TTLs, keys ...string) *dnsres.Names {
	t.Helper()
	n, err := dnsres.NewNames(client(t, s.addr()), ttls, 4)
	if err != nil {
		t.Fatal(err)
	}
	n.Track(keys)
	return n
}

func refresh(n *dnsres.Names, now time.Time) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Refresh(ctx, now)
}

func get(t *testing.T, n *dnsres.Names, k string) dnsres.Result {
	t.Helper()
	r, ok := n.Get(k)
	if !ok {
		t.Fatalf("%s is not tracked", k)
	}
	return r
}

func TestTTLFloorAndCeiling(t *testing.T) {
	s := newServer(t)
	s.set("short.example.com", record{ttl: 1, addrs: addrs("192.0.2.1")})
	s.set("long.example.com", record{ttl: 86400, addrs: addrs("192.0.2.2")})
	s.set("mid.example.com", record{ttl: 60, addrs: addrs("192.0.2.3")})
	n := names(t, s, dnsres.TTLs{Min: 5 * time.Second, Max: 30 * time.Minute}, "short.example.com", "long.example.com", "mid.example.com")
	if got := refresh(n, t0); len(got) != 3 {
		t.Fatalf("first resolution changed %v, want all three", got)
	}
	for k, want := range map[string]time.Duration{"short.example.com": 5 * time.Second, "long.example.com": 30 * time.Minute, "mid.example.com": time.Minute} {
		if r := get(t, n, k); r.Next.Sub(t0) != want || !r.ResolvedAt.Equal(t0) {
			t.Errorf("%s: next in %v (resolved at %v), want %v", k, r.Next.Sub(t0), r.ResolvedAt, want)
		}
	}
	if next := n.Next(); !next.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("Next %v, want the floor", next)
	}
}

func TestTTLsValidate(t *testing.T) {
	for _, bad := range []dnsres.TTLs{{Min: 0, Max: time.Minute}, {Min: -time.Second, Max: time.Minute}, {Min: time.Minute, Max: time.Second}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (dnsres.TTLs{Min: time.Second, Max: time.Second}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestReresolvedAtExpiry: a name is asked again when its TTL ends, not
// before; a changed answer is one change, the same answer none.
func TestReresolvedAtExpiry(t *testing.T) {
	s := newServer(t)
	s.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.1")})
	n := names(t, s, dnsres.TTLs{Min: 5 * time.Second, Max: time.Hour}, "db.example.com")
	refresh(n, t0)
	s.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.9", "2001:db8::9")})
	before, _ := s.queries()
	if got := refresh(n, t0.Add(59*time.Second)); got != nil {
		t.Errorf("resolved before the TTL ended: %v", got)
	}
	if after, _ := s.queries(); after != before {
		t.Errorf("%d queries before the TTL ended", after-before)
	}
	if got := refresh(n, t0.Add(60*time.Second)); !slices.Equal(got, []string{"db.example.com"}) {
		t.Errorf("at expiry: changed %v, want db.example.com", got)
	}
	if r := get(t, n, "db.example.com"); !slices.Equal(r.Addrs, addrs("192.0.2.9", "2001:db8::9")) {
		t.Errorf("addresses %v after the change", r.Addrs)
	}
	// The same answer again: asked, not a change.
	before, _ = s.queries()
	if got := refresh(n, t0.Add(120*time.Second)); got != nil {
		t.Errorf("the same answer is a change: %v", got)
	}
	if after, _ := s.queries(); after == before {
		t.Error("not resolved again at the second expiry")
	}
	if r := get(t, n, "db.example.com"); !r.Next.Equal(t0.Add(180 * time.Second)) {
		t.Errorf("next %v, want a TTL after the last resolution", r.Next)
	}
}

// TestFailureKeepsLastGood: a failure keeps the addresses, records the
// error once, is tried again after the floor; recovery clears it.
func TestFailureKeepsLastGood(t *testing.T) {
	s := newServer(t)
	s.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.1")})
	n := names(t, s, dnsres.TTLs{Min: 5 * time.Second, Max: time.Hour}, "db.example.com")
	refresh(n, t0)
	for _, fail := range []struct {
		name string
		set  func()
	}{
		{"SERVFAIL", func() { s.set("db.example.com", record{rcode: dnsmessage.RCodeServerFailure}) }},
		{"NXDOMAIN", func() { s.remove("db.example.com") }},
		{"no address", func() { s.set("db.example.com", record{ttl: 60}) }},
	} {
		t.Run(fail.name, func(t *testing.T) {
			if r := get(t, n, "db.example.com"); r.Err != "" {
				t.Fatalf("starts failed: %q", r.Err)
			}
			fail.set()
			now := get(t, n, "db.example.com").Next
			if got := refresh(n, now); !slices.Equal(got, []string{"db.example.com"}) {
				t.Errorf("the failure is not a change: %v", got)
			}
			r := get(t, n, "db.example.com")
			if !slices.Equal(r.Addrs, addrs("192.0.2.1")) || r.Err == "" {
				t.Errorf("after a failure: %+v, want the last good addresses and an error", r)
			}
			if !r.Next.Equal(now.Add(5 * time.Second)) {
				t.Errorf("retried in %v, want the floor", r.Next.Sub(now))
			}
			// The same failure again is no change.
			if got := refresh(n, r.Next); got != nil {
				t.Errorf("the same failure again is a change: %v", got)
			}
			s.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.1")})
			r = get(t, n, "db.example.com")
			if got := refresh(n, r.Next); !slices.Equal(got, []string{"db.example.com"}) {
				t.Errorf("recovery is not a change: %v", got)
			}
			if r := get(t, n, "db.example.com"); r.Err != "" {
				t.Errorf("error kept after recovery: %q", r.Err)
			}
		})
	}
}

func TestFirstFailureHasNoAddresses(t *testing.T) {
	s := newServer(t)
	n := names(t, s, dnsres.TTLs{Min: 5 * time.Second, Max: time.Hour}, "gone.example.com")
	refresh(n, t0)
	r := get(t, n, "gone.example.com")
	if r.Addrs != nil || !r.ResolvedAt.IsZero() || !strings.Contains(r.Err, "NXDOMAIN") {
		t.Errorf("got %+v, want no addresses and the NXDOMAIN error", r)
	}
}

func TestTrackForgets(t *testing.T) {
	s := newServer(t)
	s.set("a.example.com", record{ttl: 60, addrs: addrs("192.0.2.1")})
	n := names(t, s, dnsres.TTLs{Min: 5 * time.Second, Max: time.Hour}, "a.example.com")
	refresh(n, t0)
	n.Track(nil)
	if _, ok := n.Get("a.example.com"); ok || !n.Next().IsZero() {
		t.Error("an untracked name is kept")
	}
	if dnsres.Key("DB.Example.COM.") != "db.example.com" {
		t.Error("Key does not fold case and the final dot")
	}
}

// TestTooManyAddresses: an answer larger than the status can hold is a
// failure that keeps the last good addresses, not a truncated answer.
func TestTooManyAddresses(t *testing.T) {
	s := newServer(t)
	s.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.1", "192.0.2.2")})
	n := names(t, s, dnsres.TTLs{Min: 5 * time.Second, Max: time.Hour}, "db.example.com") // at most 4
	refresh(n, t0)
	s.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5")})
	refresh(n, t0.Add(time.Minute))
	r := get(t, n, "db.example.com")
	if !slices.Equal(r.Addrs, addrs("192.0.2.1", "192.0.2.2")) || !strings.Contains(r.Err, "5 addresses, more than the 4") {
		t.Errorf("got %v %q, want the last good addresses and an error", r.Addrs, r.Err)
	}
}
