package dnsres

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of the TTL floor and ceiling (--dns-min-ttl, --dns-max-ttl).
const (
	// DefaultMinTTL keeps a name with a TTL of 0 or 1 s from being asked
	// for many times a second.
	DefaultMinTTL = 5 * time.Second
	// DefaultMaxTTL makes a name with a day-long TTL followed anyway, as
	// OVN-Kubernetes' EgressFirewall does with its 30 minutes.
	DefaultMaxTTL = 30 * time.Minute
)

// TTLs are the floor and ceiling of the time an answer is kept.
type TTLs struct {
	Min, Max time.Duration
}

// Validate reports a floor or ceiling that cannot be applied.
func (t TTLs) Validate() error {
	if t.Min <= 0 {
		return fmt.Errorf("the DNS TTL floor is %v; it must be positive", t.Min)
	}
	if t.Max < t.Min {
		return fmt.Errorf("the DNS TTL ceiling %v is below the floor %v", t.Max, t.Min)
	}
	return nil
}

// clamp is how long an answer with TTL ttl is kept.
func (t TTLs) clamp(ttl time.Duration) time.Duration { return min(max(ttl, t.Min), t.Max) }

// Lookuper resolves one name; *Client is the production one.
type Lookuper interface {
	Lookup(ctx context.Context, name string) (Answer, error)
}

// Result is what Names knows of one name.
type Result struct {
	// Addrs are the addresses of the last successful resolution, sorted;
	// nil until one succeeds.
	Addrs []netip.Addr
	// ResolvedAt is when Addrs were read; zero until a resolution succeeds.
	ResolvedAt time.Time
	// Next is when the name is resolved again.
	Next time.Time
	// Err is why the last resolution failed, "" if it succeeded.
	Err string
}

// parallel bounds the lookups in flight, so that many names behind a
// server that does not answer do not take the timeout one after another.
const parallel = 8

// Names keeps a set of names resolved: each is resolved again when its
// answer's TTL, within the floor and ceiling, ends; a failed resolution is
// tried again after the floor and keeps the last good addresses.
type Names struct {
	lookup   Lookuper
	ttls     TTLs
	maxAddrs int

	mu    sync.Mutex
	names map[string]*Result // by Key
}

// NewNames resolves names with lookup, keeping answers within ttls. An
// answer with more than maxAddrs addresses (0: no limit) is a failure:
// where they go (a status the API server bounds) cannot hold them all,
// and part of an answer is not applied.
func NewNames(lookup Lookuper, ttls TTLs, maxAddrs int) (*Names, error) {
	if err := ttls.Validate(); err != nil {
		return nil, err
	}
	return &Names{lookup: lookup, ttls: ttls, maxAddrs: maxAddrs, names: map[string]*Result{}}, nil
}

// Key is the form of a name Names tracks it by: DNS names are case
// insensitive and the final dot is implied.
func Key(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// Track makes keys (Key of each name) the names kept resolved: new ones
// are due at once, the others are forgotten.
func (n *Names) Track(keys []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
		if _, ok := n.names[k]; !ok {
			n.names[k] = &Result{}
		}
	}
	for k := range n.names {
		if !want[k] {
			delete(n.names, k)
		}
	}
}

// Get returns what is known of the name with key k.
func (n *Names) Get(k string) (Result, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.names[k]
	if !ok {
		return Result{}, false
	}
	out := *r
	out.Addrs = slices.Clone(r.Addrs)
	return out, true
}

// Next is when the earliest name is due; zero when no name is tracked.
func (n *Names) Next() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	var next time.Time
	for _, r := range n.names {
		if next.IsZero() || r.Next.Before(next) {
			next = r.Next
		}
	}
	return next
}

// Refresh resolves every name due at now and returns the keys of those
// whose addresses or error changed. A name that resolves to the same
// addresses only gets a later Next.
func (n *Names) Refresh(ctx context.Context, now time.Time) []string {
	n.mu.Lock()
	var due []string
	for k, r := range n.names {
		if !r.Next.After(now) {
			due = append(due, k)
		}
	}
	n.mu.Unlock()
	slices.Sort(due)

	type outcome struct {
		a   Answer
		err error
	}
	got := make([]outcome, len(due))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, k := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a, err := n.lookup.Lookup(ctx, k)
			got[i] = outcome{a, err}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil // cancelled: not a failure of the names
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	var changed []string
	for i, k := range due {
		r, ok := n.names[k]
		if !ok {
			continue // untracked while it was resolved
		}
		o := got[i]
		if o.err == nil && len(o.a.Addrs) == 0 {
			o.err = fmt.Errorf("%s: %w", k, ErrNotFound) // never apply an empty answer
		}
		if o.err == nil && n.maxAddrs > 0 && len(o.a.Addrs) > n.maxAddrs {
			o.err = fmt.Errorf("%s has %d addresses, more than the %d kept for a name", k, len(o.a.Addrs), n.maxAddrs)
		}
		if o.err != nil {
			r.Next = now.Add(n.ttls.Min)
			if msg := o.err.Error(); msg != r.Err {
				r.Err = msg
				changed = append(changed, k)
			}
			continue
		}
		addrs := slices.Clone(o.a.Addrs)
		slices.SortFunc(addrs, netip.Addr.Compare)
		addrs = slices.Compact(addrs)
		if r.Err != "" || r.ResolvedAt.IsZero() || !slices.Equal(addrs, r.Addrs) {
			changed = append(changed, k)
		}
		r.Addrs, r.ResolvedAt, r.Next, r.Err = addrs, now, now.Add(n.ttls.clamp(o.a.TTL)), ""
	}
	return changed
}
