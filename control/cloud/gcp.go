package cloud

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"cloud.google.com/go/compute/metadata"
	"github.com/egret-gw/egret/control/cluster"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"k8s.io/apimachinery/pkg/util/wait"
)

// gcpLimit is how many alias IP ranges, IPv4 and IPv6 together, GCP lets
// one instance hold (the specification's "per node ... 100").
const gcpLimit = 100

// gcpAttempts bounds the tries of one call: throttled answers, and updates
// refused because the interface changed since it was read (a stale
// fingerprint).
const gcpAttempts = 4

// GCP attaches addresses as alias IP ranges (/32, /128) of an instance's
// network interface through the Compute Engine API: read the instance,
// then instances.updateNetworkInterface with the interface's fingerprint
// (a stale one is refused: read again and retry), then wait on the zone
// operation. GCP has no reassignment: a move removes the range from the
// old instance first.
type GCP struct {
	svc     *compute.Service
	backoff time.Duration // before the first retry of a throttled call; doubles
}

// NewGCP builds the Compute Engine client with Application Default
// Credentials (workload identity, the instance's service account through
// the metadata server, GOOGLE_APPLICATION_CREDENTIALS); opts add to the
// SDK's defaults (tests point it at a local server with
// option.WithEndpoint, nothing else).
func NewGCP(ctx context.Context, opts ...option.ClientOption) (*GCP, error) {
	svc, err := compute.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("building the Compute Engine client (Application Default Credentials): %w", err)
	}
	return &GCP{svc: svc, backoff: time.Second}, nil
}

// gceInstance is a node's instance, from its spec.providerID.
type gceInstance struct{ project, zone, name string }

func parseGCEProviderID(nic NIC) (gceInstance, error) {
	rest, ok := strings.CutPrefix(nic.Instance, "gce://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return gceInstance{}, fmt.Errorf("the node's spec.providerID %q does not name a GCE instance (gce://project/zone/instance); the kubelet or cloud controller manager sets it", nic.Instance)
	}
	return gceInstance{parts[0], parts[1], parts[2]}, nil
}

// Attach implements Provider.
func (g *GCP) Attach(ctx context.Context, nic NIC, ip netip.Addr, from NIC) error {
	ip = ip.Unmap()
	in, err := parseGCEProviderID(nic)
	if err != nil {
		return err
	}
	if from.Instance != "" && from != nic {
		err := g.Detach(ctx, from, ip)
		if ae, ok := errors.AsType[*APIError](err); ok && ae.Code == "notFound" {
			err = nil // that instance is gone, and its alias ranges with it
		}
		if err != nil {
			return fmt.Errorf("removing %s from its previous instance first (GCP cannot move an alias IP range): %w", ip, err)
		}
	}
	if err := g.change(ctx, in, nic.ID, ip, true); err != nil {
		return err
	}
	// Read once more: the operation being done does not promise the next
	// read shows the change.
	ni, err := g.nic(ctx, in, nic.ID)
	if err != nil {
		return err
	}
	if has, err := gceHolds(ni, ip); err != nil || has {
		return err
	}
	return fmt.Errorf("%s on %s of %s: %w", ip, nic.ID, in.name, ErrPending)
}

// Detach implements Provider.
func (g *GCP) Detach(ctx context.Context, nic NIC, ip netip.Addr) error {
	in, err := parseGCEProviderID(nic)
	if err != nil {
		return err
	}
	return g.change(ctx, in, nic.ID, ip.Unmap(), false)
}

// change adds (or removes) ip's alias range on the interface unless it is
// there (or not) already, retrying when the fingerprint went stale.
func (g *GCP) change(ctx context.Context, in gceInstance, name string, ip netip.Addr, add bool) error {
	for attempt := 1; ; attempt++ {
		ni, err := g.nic(ctx, in, name)
		if err != nil {
			return err
		}
		has, err := gceHolds(ni, ip)
		if err != nil || has == add {
			return err
		}
		r := netip.PrefixFrom(ip, ip.BitLen()).String()
		up := &compute.NetworkInterface{Fingerprint: ni.Fingerprint}
		ranges, field := &ni.AliasIpRanges, "AliasIpRanges"
		if ip.Is6() {
			ranges, field = &ni.AliasIpv6Ranges, "AliasIpv6Ranges"
		}
		var next []*compute.AliasIpRange
		for _, a := range *ranges {
			if a.IpCidrRange != r {
				next = append(next, a)
			}
		}
		if add {
			next = append(next, &compute.AliasIpRange{IpCidrRange: r})
		}
		if ip.Is6() {
			up.AliasIpv6Ranges = next
		} else {
			up.AliasIpRanges = next
		}
		up.ForceSendFields = []string{field} // an empty list removes the last range
		var op *compute.Operation
		err = g.call(ctx, func() (err error) {
			op, err = g.svc.Instances.UpdateNetworkInterface(in.project, in.zone, in.name, name, up).Context(ctx).Do()
			return err
		})
		if ae, ok := errors.AsType[*googleapi.Error](err); ok && ae.Code == 412 && attempt < gcpAttempts {
			continue // the interface changed since it was read
		}
		if err != nil {
			return gcpError("instances.updateNetworkInterface", err)
		}
		return g.wait(ctx, in, op)
	}
}

// gcpWaits bounds the zoneOperations.wait calls for one operation (each
// answers after about two minutes at most): a longer one is left pending
// and the controller's retry reads the interface again.
const gcpWaits = 3

// wait waits for a zone operation to be done and returns its error.
func (g *GCP) wait(ctx context.Context, in gceInstance, op *compute.Operation) error {
	for n := 0; op.Status != "DONE"; n++ {
		if n == gcpWaits {
			return fmt.Errorf("operation %s on %s is still %s: %w", op.Name, in.name, op.Status, ErrPending)
		}
		name := op.Name
		err := g.call(ctx, func() (err error) {
			op, err = g.svc.ZoneOperations.Wait(in.project, in.zone, name).Context(ctx).Do()
			return err
		})
		if err != nil {
			return gcpError("zoneOperations.wait", err)
		}
	}
	if op.Error != nil && len(op.Error.Errors) > 0 {
		e := op.Error.Errors[0]
		return &APIError{Op: "instances.updateNetworkInterface", Code: e.Code, Message: e.Message}
	}
	return nil
}

// nic reads one network interface of an instance.
func (g *GCP) nic(ctx context.Context, in gceInstance, name string) (*compute.NetworkInterface, error) {
	var inst *compute.Instance
	err := g.call(ctx, func() (err error) {
		inst, err = g.svc.Instances.Get(in.project, in.zone, in.name).Context(ctx).Do()
		return err
	})
	if err != nil {
		return nil, gcpError("instances.get", err)
	}
	for _, ni := range inst.NetworkInterfaces {
		if ni.Name == name {
			return ni, nil
		}
	}
	return nil, fmt.Errorf("instance %s has no network interface %s", in.name, name)
}

// gceHolds reports whether ni has ip as an alias range of its own; its
// primary addresses are never egress IPs Egret may manage.
func gceHolds(ni *compute.NetworkInterface, ip netip.Addr) (bool, error) {
	if a, err := netip.ParseAddr(ni.NetworkIP); err == nil && a == ip {
		return false, fmt.Errorf("%s is the primary address of %s, not an egress IP Egret may manage", ip, ni.Name)
	}
	if a, err := netip.ParseAddr(ni.Ipv6Address); err == nil && a == ip {
		return false, fmt.Errorf("%s is the primary IPv6 address of %s, not an egress IP Egret may manage", ip, ni.Name)
	}
	for _, a := range append(ni.AliasIpRanges, ni.AliasIpv6Ranges...) {
		if p, err := netip.ParsePrefix(a.IpCidrRange); err == nil && p.Bits() == ip.BitLen() && p.Addr() == ip {
			return true, nil
		}
	}
	return false, nil
}

// call runs fn, retrying throttled answers (429 rateLimitExceeded, 403
// userRateLimitExceeded) with exponential backoff: the Compute client does
// not retry them itself. It returns fn's last error, or the context's if it
// ended during a wait.
func (g *GCP) call(ctx context.Context, fn func() error) error {
	var err error
	b := wait.Backoff{Duration: g.backoff, Factor: 2, Steps: gcpAttempts}
	werr := wait.ExponentialBackoffWithContext(ctx, b, func(context.Context) (bool, error) {
		err = fn()
		return err == nil || !gcpThrottled(err), nil
	})
	if werr != nil && ctx.Err() != nil {
		return werr
	}
	return err // nil, not throttled, or throttled gcpAttempts times
}

func gcpThrottled(err error) bool {
	ae, ok := errors.AsType[*googleapi.Error](err)
	if !ok {
		return false
	}
	if ae.Code == 429 {
		return true
	}
	for _, e := range ae.Errors {
		if ae.Code == 403 && (e.Reason == "rateLimitExceeded" || e.Reason == "userRateLimitExceeded") {
			return true
		}
	}
	return false
}

// gcpError turns an SDK error into an *APIError when Compute Engine
// answered one (Code: the first error's reason, e.g. notFound).
func gcpError(op string, err error) error {
	if ae, ok := errors.AsType[*googleapi.Error](err); ok {
		code := fmt.Sprint(ae.Code)
		if len(ae.Errors) > 0 {
			code = ae.Errors[0].Reason
		}
		return &APIError{Op: op, Code: code, Message: ae.Message}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Local implements Provider: the instance (project, zone, name) and its
// first interface's IPv4 subnet from the metadata server; the interface's
// name, IPv6 prefix and alias ranges from instances.get. The limit is on
// alias ranges, so each range (not the primary address) is one in use.
func (g *GCP) Local(ctx context.Context) (Local, error) {
	var l Local
	var in gceInstance
	var err error
	if in.project, err = metadata.ProjectIDWithContext(ctx); err != nil {
		return l, fmt.Errorf("reading the project from the GCE metadata server: %w", err)
	}
	if in.zone, err = metadata.ZoneWithContext(ctx); err != nil {
		return l, fmt.Errorf("reading the zone from the GCE metadata server: %w", err)
	}
	if in.name, err = metadata.InstanceNameWithContext(ctx); err != nil {
		return l, fmt.Errorf("reading the instance name from the GCE metadata server: %w", err)
	}
	ipS, err := metadata.GetWithContext(ctx, "instance/network-interfaces/0/ip")
	if err != nil {
		return l, fmt.Errorf("reading the first interface's address from the GCE metadata server: %w", err)
	}
	maskS, err := metadata.GetWithContext(ctx, "instance/network-interfaces/0/subnetmask")
	if err != nil {
		return l, fmt.Errorf("reading the first interface's subnet mask from the GCE metadata server: %w", err)
	}
	ip, err1 := netip.ParseAddr(strings.TrimSpace(ipS))
	mask, err2 := netip.ParseAddr(strings.TrimSpace(maskS))
	bits := maskBits(mask)
	if err1 != nil || err2 != nil || !ip.Is4() || bits < 0 {
		return l, fmt.Errorf("the GCE metadata server's address %q and subnet mask %q of the first interface are not an IPv4 address and mask", ipS, maskS)
	}
	l.Subnets.IPv4 = netip.PrefixFrom(ip, bits).Masked()
	var inst *compute.Instance
	err = g.call(ctx, func() (err error) {
		inst, err = g.svc.Instances.Get(in.project, in.zone, in.name).Context(ctx).Do()
		return err
	})
	if err != nil {
		return l, gcpError("instances.get", err)
	}
	if len(inst.NetworkInterfaces) == 0 {
		return l, fmt.Errorf("instance %s has no network interface", in.name)
	}
	ni := inst.NetworkInterfaces[0]
	l.Interface = ni.Name
	if a, err := netip.ParseAddr(ni.Ipv6Address); err == nil && ni.InternalIpv6PrefixLength > 0 {
		l.Subnets.IPv6 = netip.PrefixFrom(a, int(ni.InternalIpv6PrefixLength)).Masked()
	}
	l.Limit = cluster.Capacity{Total: true, IP: gcpLimit}
	for _, a := range append(ni.AliasIpRanges, ni.AliasIpv6Ranges...) {
		if p, err := netip.ParsePrefix(a.IpCidrRange); err == nil {
			l.InUse = append(l.InUse, p.Addr())
		}
	}
	return l, nil
}

// maskBits is the length of a contiguous IPv4 netmask, or -1.
func maskBits(m netip.Addr) int {
	if !m.Is4() {
		return -1
	}
	b := m.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n := 0
	for v&(1<<31) != 0 {
		v <<= 1
		n++
	}
	if v != 0 {
		return -1
	}
	return n
}
