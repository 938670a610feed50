package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/dnsres"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReasonDNSResolutionFailed is the reason of the Warning Event on an
// EgressIPTraffic one of whose spec.dnsNames failed to resolve; it is
// recorded once per change of the error.
const ReasonDNSResolutionFailed = "DNSResolutionFailed"

// resolvConf is where the DNS servers are read from without --dns-server.
const resolvConf = "/etc/resolv.conf"

// maxStatusAddresses is the CRD's bound on status.dnsNames[].addresses
// (deploy/crd: the CEL cost budget needs it); a name with more is a
// resolution failure rather than a status the API server refuses.
const maxStatusAddresses = 256

// dnsRetry is when a status write that failed for another reason than a
// conflict (which the newer object's arrival retries) is tried again.
const dnsRetry = time.Second

// trafficStatusWriter stores an EgressIPTraffic's status: cluster.Source's
// method, apart so that tests can make writes fail.
type trafficStatusWriter interface {
	// UpdateTrafficStatus stores t's status (t is the caller's own copy);
	// it fails with an error IsConflict recognises when t.ResourceVersion
	// is not the stored one, and IsNotFound when t is gone.
	UpdateTrafficStatus(ctx context.Context, t *egressv1.EgressIPTraffic) error
}

// dnsLookup builds the resolver cfg names: its DNS server, else those of
// /etc/resolv.conf.
func dnsLookup(cfg Config) (*dnsres.Client, error) {
	var servers []netip.AddrPort
	if cfg.DNSServer != "" {
		s, err := dnsres.ParseServer(cfg.DNSServer)
		if err != nil {
			return nil, err // Validate caught it
		}
		servers = []netip.AddrPort{s}
	} else {
		var err error
		servers, err = dnsres.ResolvConfServers(resolvConf)
		if errors.Is(err, os.ErrNotExist) {
			// As the C library does without the file.
			servers, err = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53"), netip.MustParseAddrPort("[::1]:53")}, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return dnsres.NewClient(servers, 0)
}

// dnsStatus resolves the spec.dnsNames of every EgressIPTraffic and
// writes what they resolve to into the objects' status. It runs on the
// leader, in one goroutine: a pass when an EgressIPTraffic changes and
// when a name's answer expires.
type dnsStatus struct {
	src   cluster.Source
	w     trafficStatusWriter
	names *dnsres.Names
	log   *slog.Logger
	now   func() time.Time
	// kick asks for a pass (an EgressIPTraffic changed).
	kick chan struct{}
	// written is the status this controller stored per object, with the
	// resourceVersion it replaced, until the cache shows the write: the
	// same status is not written twice.
	written map[string]writtenTraffic
	// reported is the error last recorded as an Event, per object and
	// name key, so that an error is reported once, not at every retry.
	reported map[[2]string]string
}

// writtenTraffic is a status write not yet seen in the cache.
type writtenTraffic struct {
	fromRV string
	status []egressv1.ResolvedName
}

func newDNSStatus(src cluster.Source, w trafficStatusWriter, lookup dnsres.Lookuper, ttls dnsres.TTLs, log *slog.Logger, now func() time.Time) (*dnsStatus, error) {
	names, err := dnsres.NewNames(lookup, ttls, maxStatusAddresses)
	if err != nil {
		return nil, err
	}
	return &dnsStatus{src: src, w: w, names: names, log: log, now: now,
		kick: make(chan struct{}, 1), written: map[string]writtenTraffic{}, reported: map[[2]string]string{}}, nil
}

// changed asks for a pass; it never blocks.
func (d *dnsStatus) changed() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// run makes passes until ctx ends, the first at once.
func (d *dnsStatus) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-timer.C:
		}
		retry := d.pass(ctx)
		now := d.now()
		wait := time.Duration(-1)
		if next := d.names.Next(); !next.IsZero() {
			wait = max(next.Sub(now), 0)
		}
		if retry && (wait < 0 || wait > dnsRetry) {
			wait = dnsRetry
		}
		timer.Stop()
		if wait >= 0 {
			timer.Reset(wait)
		}
	}
}

// pass resolves the names that are due and writes every status that
// differs from what they resolve to; it reports whether a write failed
// and must be tried again.
func (d *dnsStatus) pass(ctx context.Context) (retry bool) {
	traffic := d.src.View().Traffic
	var keys []string
	for _, t := range traffic {
		for _, n := range validNames(t) {
			keys = append(keys, dnsres.Key(n))
		}
	}
	d.names.Track(keys)
	for _, k := range d.names.Refresh(ctx, d.now()) {
		r, _ := d.names.Get(k)
		if r.Err != "" {
			d.log.Warn("DNS name did not resolve; its last good addresses are kept", "name", k, "addresses", r.Addrs, "err", r.Err)
		} else {
			d.log.Info("DNS name resolved; its addresses or error changed", "name", k, "addresses", r.Addrs, "next", r.Next)
		}
	}
	if ctx.Err() != nil {
		return false
	}

	live := map[string]bool{}
	for _, t := range traffic {
		live[t.Name] = true
		want := d.status(t)
		if resolvedEqual(t.Status.DNSNames, want) {
			delete(d.written, t.Name)
			continue
		}
		if w, ok := d.written[t.Name]; ok && w.fromRV == t.ResourceVersion && resolvedEqual(w.status, want) {
			continue // written; the cache has not shown it yet
		}
		cp := t.DeepCopy() // never modify the cache's object
		cp.Status.DNSNames = want
		if err := d.w.UpdateTrafficStatus(ctx, cp); err != nil {
			switch {
			case apierrors.IsInvalid(err):
				// Refused as it is: writing it again is refused again; the
				// next change of the object or of its names tries anew.
				d.log.Error("the API server refused an EgressIPTraffic status", "object", t.Name, "err", err)
				d.written[t.Name] = writtenTraffic{fromRV: t.ResourceVersion, status: want}
			case apierrors.IsNotFound(err):
			case apierrors.IsConflict(err):
				// The cache is behind: the newer object's arrival is a change
				// that brings another pass.
				d.log.Debug("EgressIPTraffic status conflict; retrying with the newer object", "object", t.Name)
			default:
				d.log.Warn("writing the EgressIPTraffic status failed; retrying", "object", t.Name, "err", err)
				retry = true
			}
			continue
		}
		d.written[t.Name] = writtenTraffic{fromRV: t.ResourceVersion, status: want}
	}
	for name := range d.written {
		if !live[name] {
			delete(d.written, name)
		}
	}
	for k := range d.reported {
		if !live[k[0]] {
			delete(d.reported, k)
		}
	}
	return retry
}

// status is the status t should have, with an Event for each name whose
// error changed.
func (d *dnsStatus) status(t *egressv1.EgressIPTraffic) []egressv1.ResolvedName {
	var out []egressv1.ResolvedName
	for _, n := range validNames(t) {
		k := dnsres.Key(n)
		r, ok := d.names.Get(k)
		if !ok || r.Next.IsZero() {
			continue // not resolved yet (the pass was cancelled)
		}
		rn := egressv1.ResolvedName{Name: n, NextResolution: metav1.NewTime(r.Next), Error: r.Err}
		for _, a := range r.Addrs {
			rn.Addresses = append(rn.Addresses, a.String())
		}
		if !r.ResolvedAt.IsZero() {
			rn.ResolvedAt = metav1.NewTime(r.ResolvedAt)
		}
		out = append(out, rn)

		rk := [2]string{t.Name, k}
		if r.Err == "" {
			delete(d.reported, rk)
			continue
		}
		if d.reported[rk] == r.Err {
			continue
		}
		d.reported[rk] = r.Err
		kept := "no address of it is known yet, so it is no destination of this object"
		if len(rn.Addresses) > 0 {
			kept = "its last good addresses are kept: " + strings.Join(rn.Addresses, ", ")
		}
		d.src.Event(&corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.TrafficKind, Name: t.Name, UID: t.UID},
			corev1.EventTypeWarning, ReasonDNSResolutionFailed, fmt.Sprintf("resolving %s failed: %s; %s", n, r.Err, kept))
	}
	return out
}

// validNames are t's spec.dnsNames that are DNS names, each once (as
// first written); the others are the object's validation's to report.
func validNames(t *egressv1.EgressIPTraffic) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range t.Spec.DNSNames {
		if egressv1.CheckDNSName(n) != nil || seen[dnsres.Key(n)] {
			continue
		}
		seen[dnsres.Key(n)] = true
		out = append(out, n)
	}
	return out
}

// resolvedEqual compares what two statuses say, not when they said it: a
// resolution that gives the same addresses and error writes nothing.
func resolvedEqual(a, b []egressv1.ResolvedName) bool {
	return slices.EqualFunc(a, b, func(x, y egressv1.ResolvedName) bool {
		return x.Name == y.Name && x.Error == y.Error && slices.Equal(x.Addresses, y.Addresses)
	})
}
