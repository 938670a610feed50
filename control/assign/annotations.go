package assign

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
)

// maxAnnotationLen bounds what the parsers accept; real annotations are a few
// hundred bytes and the API server caps all annotations at 256 KiB anyway.
const maxAnnotationLen = 256 << 10

// NodeFromObject builds a Node from a Node object's name, labels and
// annotations. Ready, Reachable, Cordoned and HoldDownUntil come from
// elsewhere (conditions, the prober, spec) and are left for the caller.
// Annotation errors are joined into AnnotationErr; the node is then never
// assignable.
func NodeFromObject(name string, labels, annotations map[string]string) Node {
	n := Node{Name: name}
	_, n.Assignable = labels[LabelEgressAssignable]
	var errs []error
	if s, ok := annotations[AnnotationPrimaryIfAddr]; ok {
		a, err := ParsePrimaryIfAddr(s)
		if err != nil {
			errs = append(errs, err)
		}
		n.PrimaryIfAddr = a
	}
	if s, ok := annotations[AnnotationHostCIDRs]; ok {
		c, err := ParseHostCIDRs(s)
		if err != nil {
			errs = append(errs, err)
		}
		n.HostCIDRs = c
	}
	if s, ok := annotations[AnnotationEgressIPConfig]; ok {
		c, err := ParseEgressIPConfig(s)
		if err != nil {
			errs = append(errs, err)
		}
		n.Cloud = c
	}
	n.AnnotationErr = errors.Join(errs...)
	return n
}

type ifAddrJSON struct {
	IPv4 *string `json:"ipv4"`
	IPv6 *string `json:"ipv6"`
}

func decodeJSON(key, s string, v any) error {
	if len(s) > maxAnnotationLen {
		return fmt.Errorf("annotation %s is %d bytes long, more than the %d a node annotation can be", key, len(s), maxAnnotationLen)
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("annotation %s is not the expected JSON: %w", key, err)
	}
	return nil
}

// parseIfAddr checks an {"ipv4": "a.b.c.d/n", "ipv6": "x::y/n"} object;
// what names the annotation and field in messages.
func parseIfAddr(what string, j ifAddrJSON) (IfAddr, error) {
	var a IfAddr
	if j.IPv4 == nil && j.IPv6 == nil {
		return a, fmt.Errorf("%s has neither an ipv4 nor an ipv6 address", what)
	}
	if j.IPv4 != nil {
		p, err := netip.ParsePrefix(*j.IPv4)
		if err != nil || !p.Addr().Is4() {
			return IfAddr{}, fmt.Errorf("%s ipv4 %q is not an IPv4 address with a prefix length such as 192.168.111.23/24", what, *j.IPv4)
		}
		a.IPv4 = p
	}
	if j.IPv6 != nil {
		p, err := netip.ParsePrefix(*j.IPv6)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return IfAddr{}, fmt.Errorf("%s ipv6 %q is not an IPv6 address with a prefix length such as fd00::23/64", what, *j.IPv6)
		}
		a.IPv6 = p
	}
	return a, nil
}

// ParsePrimaryIfAddr parses k8s.ovn.org/node-primary-ifaddr, for example
// {"ipv4":"192.168.111.23/24","ipv6":"fd00::23/64"}.
func ParsePrimaryIfAddr(s string) (IfAddr, error) {
	var j ifAddrJSON
	if err := decodeJSON(AnnotationPrimaryIfAddr, s, &j); err != nil {
		return IfAddr{}, err
	}
	return parseIfAddr("annotation "+AnnotationPrimaryIfAddr, j)
}

// ParseHostCIDRs parses k8s.ovn.org/host-cidrs, a JSON list of interface
// addresses with masks such as ["192.168.111.23/24","10.20.0.5/16"].
func ParseHostCIDRs(s string) ([]netip.Prefix, error) {
	var list []string
	if err := decodeJSON(AnnotationHostCIDRs, s, &list); err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(list))
	for i, c := range list {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Is4In6() {
			return nil, fmt.Errorf("annotation %s entry %d (%q) is not an address with a prefix length such as 10.20.0.5/16", AnnotationHostCIDRs, i, c)
		}
		out = append(out, p)
	}
	return out, nil
}

type cloudJSON struct {
	Interface string      `json:"interface"`
	IfAddr    *ifAddrJSON `json:"ifaddr"`
	Capacity  *struct {
		IP   *int `json:"ip"`
		IPv4 *int `json:"ipv4"`
		IPv6 *int `json:"ipv6"`
	} `json:"capacity"`
}

// ParseEgressIPConfig parses cloud.network.openshift.io/egress-ipconfig, an
// array with one object: {"interface":"eni-0a1b","ifaddr":{"ipv4":"10.0.128.0/18"},
// "capacity":{"ipv4":14,"ipv6":15}} on AWS, capacity {"ip":14} on GCP and
// Azure. On AWS a family missing from capacity has capacity 0.
func ParseEgressIPConfig(s string) (*CloudConfig, error) {
	var list []cloudJSON
	if err := decodeJSON(AnnotationEgressIPConfig, s, &list); err != nil {
		return nil, err
	}
	if len(list) != 1 {
		return nil, fmt.Errorf("annotation %s holds %d entries; it must hold exactly one (the primary interface)", AnnotationEgressIPConfig, len(list))
	}
	j := list[0]
	if j.Interface == "" {
		return nil, fmt.Errorf("annotation %s has no interface", AnnotationEgressIPConfig)
	}
	if j.IfAddr == nil {
		return nil, fmt.Errorf("annotation %s has no ifaddr with the interface's subnets", AnnotationEgressIPConfig)
	}
	ifa, err := parseIfAddr("annotation "+AnnotationEgressIPConfig+" ifaddr", *j.IfAddr)
	if err != nil {
		return nil, err
	}
	c := &CloudConfig{Interface: j.Interface, IfAddr: ifa}
	if j.Capacity == nil {
		return nil, fmt.Errorf("annotation %s has no capacity", AnnotationEgressIPConfig)
	}
	capa := j.Capacity
	switch {
	case capa.IP != nil && (capa.IPv4 != nil || capa.IPv6 != nil):
		return nil, fmt.Errorf("annotation %s capacity has both a total (ip) and a per-family limit (ipv4/ipv6); it must have one kind", AnnotationEgressIPConfig)
	case capa.IP != nil:
		c.Capacity = Capacity{Total: true, IP: *capa.IP}
	case capa.IPv4 != nil || capa.IPv6 != nil:
		if capa.IPv4 != nil {
			c.Capacity.IPv4 = *capa.IPv4
		}
		if capa.IPv6 != nil {
			c.Capacity.IPv6 = *capa.IPv6
		}
	default:
		return nil, fmt.Errorf("annotation %s capacity has neither ip nor ipv4/ipv6", AnnotationEgressIPConfig)
	}
	if c.Capacity.IP < 0 || c.Capacity.IPv4 < 0 || c.Capacity.IPv6 < 0 {
		return nil, fmt.Errorf("annotation %s capacity is negative", AnnotationEgressIPConfig)
	}
	return c, nil
}
