package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxEgressIPs is the CRD's maxItems for spec.egressIPs and status.items.
const MaxEgressIPs = 1024

// ParseEgressIP parses one spec.egressIPs entry with the same rules as the
// CRD's isIP() check (no zone, no IPv4-mapped IPv6, no leading zeros), and
// additionally refuses addresses that can never be a source: unspecified,
// loopback, multicast and link-local.
func ParseEgressIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	switch {
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%q has an IPv6 zone; egress IPs take none", s)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write the IPv4 address", s)
	case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast(),
		a.IsLinkLocalUnicast(), a.IsInterfaceLocalMulticast():
		return netip.Addr{}, fmt.Errorf("%q cannot be a source address (unspecified, loopback, multicast or link-local)", s)
	}
	return a, nil
}

// EntryError is a problem with one spec.egressIPs entry: unusable or a
// repeat. The controller's assignment reports these per address itself.
type EntryError struct {
	Index int
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("spec.egressIPs[%d]: %v", e.Index, e.Err) }

// Unwrap returns the problem with the entry.
func (e *EntryError) Unwrap() error { return e.Err }

// Validate checks an EgressIP the way the controller must before using it:
// every problem is reported, each naming its field. The apiserver already
// refuses most of these through the CRD; objects from the file source
// (clusterless mode) are only checked here.
func (e *EgressIP) Validate() error {
	errs := e.Problems()
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("EgressIP %q is invalid: %w", e.Name, errors.Join(errs...))
}

// Problems lists what Validate reports, one error per problem, each
// starting with its field; problems of single spec.egressIPs entries are
// *EntryError.
func (e *EgressIP) Problems() []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if e.Name == "" {
		fail("metadata.name: must be set")
	}
	if len(e.Spec.EgressIPs) == 0 {
		fail("spec.egressIPs: must list at least one IP address")
	}
	if len(e.Spec.EgressIPs) > MaxEgressIPs {
		fail("spec.egressIPs: %d addresses, at most %d allowed", len(e.Spec.EgressIPs), MaxEgressIPs)
	}
	seen := make(map[netip.Addr]int, len(e.Spec.EgressIPs))
	for i, s := range e.Spec.EgressIPs {
		a, err := ParseEgressIP(s)
		if err != nil {
			errs = append(errs, &EntryError{Index: i, Err: err})
			continue
		}
		if j, dup := seen[a]; dup {
			errs = append(errs, &EntryError{Index: i, Err: fmt.Errorf("%q repeats spec.egressIPs[%d]", s, j)})
			continue
		}
		seen[a] = i
	}
	if _, err := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector); err != nil {
		fail("spec.namespaceSelector: %w", err)
	}
	if _, err := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector); err != nil {
		fail("spec.podSelector: %w", err)
	}
	if ts := e.Spec.TrafficSelector; ts != nil {
		if _, err := metav1.LabelSelectorAsSelector(ts); err != nil {
			fail("spec.trafficSelector: %w", err)
		}
	}
	if len(e.Status.Items) > MaxEgressIPs {
		fail("status.items: %d items, at most %d allowed", len(e.Status.Items), MaxEgressIPs)
	}
	for i, it := range e.Status.Items {
		if it.Node == "" {
			fail("status.items[%d].node: must be set", i)
		}
		if _, err := netip.ParseAddr(it.EgressIP); err != nil {
			fail("status.items[%d].egressIP: %q is not an IP address", i, it.EgressIP)
		}
	}
	return errs
}

// Standbys returns the standby node of each egress IP recorded in e's
// egret.io/standby annotation: nil without one, an error when it is not a
// JSON object of addresses to node names.
func Standbys(e *EgressIP) (map[netip.Addr]string, error) {
	raw, ok := e.Annotations[AnnotationStandby]
	if !ok || raw == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("annotation %s of EgressIP %s is not a JSON object of egress IPs to nodes: %w", AnnotationStandby, e.Name, err)
	}
	out := make(map[netip.Addr]string, len(m))
	for ip, node := range m {
		a, err := netip.ParseAddr(ip)
		if err != nil || node == "" {
			return nil, fmt.Errorf("annotation %s of EgressIP %s: entry %q: %q is not an address and a node name", AnnotationStandby, e.Name, ip, node)
		}
		out[a] = node
	}
	return out, nil
}

// FormatStandbys is the egret.io/standby annotation value for m (keys in
// sorted order, so an unchanged assignment writes the same bytes).
func FormatStandbys(m map[netip.Addr]string) string {
	b, _ := json.Marshal(standbyJSON(m)) // a map of strings always marshals
	return string(b)
}

// SetStandbyAnnotation sets e's egret.io/standby annotation to value (a
// FormatStandbys result), or removes it when value is empty.
func SetStandbyAnnotation(e *EgressIP, value string) {
	if value == "" {
		delete(e.Annotations, AnnotationStandby)
		return
	}
	if e.Annotations == nil {
		e.Annotations = map[string]string{}
	}
	e.Annotations[AnnotationStandby] = value
}

func standbyJSON(m map[netip.Addr]string) map[string]string {
	out := make(map[string]string, len(m))
	for a, n := range m {
		out[a.String()] = n
	}
	return out
}

// ParseDestinationNetwork parses one spec.destinationNetworks entry with the
// CRD's rules (isCIDR, written masked, no zone, no IPv4-mapped IPv6).
func ParseDestinationNetwork(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return netip.Prefix{}, fmt.Errorf("%q is not a network in CIDR notation", s)
	case p.Addr().Is4In6():
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 network; write the IPv4 network", s)
	case p.Masked() != p:
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; write %v", s, p.Masked())
	}
	return p, nil
}

// Problems lists what is wrong with t, one error per problem, each naming
// its field. Bad entries are left out of the plan; the rest is used.
func (t *EgressIPTraffic) Problems() []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(t.Spec.DestinationNetworks) == 0 && len(t.Spec.DNSNames) == 0 {
		fail("spec: set destinationNetworks or dnsNames")
	}
	if n := len(t.Spec.DestinationNetworks); n > MaxDestinations {
		fail("spec.destinationNetworks: %d entries, at most %d allowed", n, MaxDestinations)
	}
	if n := len(t.Spec.DNSNames); n > MaxDestinations {
		fail("spec.dnsNames: %d entries, at most %d allowed", n, MaxDestinations)
	}
	for i, s := range t.Spec.DestinationNetworks {
		if _, err := ParseDestinationNetwork(s); err != nil {
			fail("spec.destinationNetworks[%d]: %w", i, err)
		}
	}
	for i, s := range t.Spec.DNSNames {
		if err := CheckDNSName(s); err != nil {
			fail("spec.dnsNames[%d]: %w", i, err)
		}
	}
	if v, ok := t.Annotations[AnnotationExclude]; ok && v != "true" && v != "false" {
		fail("metadata.annotations[%s]: %q, want \"true\" or \"false\"", AnnotationExclude, v)
	}
	return errs
}

// CheckDNSName checks a spec.dnsNames entry: a DNS name of at most 253
// characters, labels of letters, digits and hyphens, at least two labels,
// an optional final dot; no wildcards (a wildcard has no addresses to
// resolve).
func CheckDNSName(s string) error {
	name := strings.TrimSuffix(s, ".")
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q is not a DNS name (1 to 253 characters)", s)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return fmt.Errorf("%q is not fully qualified (write the whole name, e.g. db.example.com)", s)
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q has an empty, too long or hyphen-edged label %q", s, l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%q has a character %q a DNS name cannot have", s, c)
			}
		}
	}
	return nil
}
