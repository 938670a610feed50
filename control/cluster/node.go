package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Label and annotation keys read from Node objects: the first four as
// OVN-Kubernetes and the OpenShift cloud network config controller write
// them, the egret.io ones for the tunnel and the interface subnets.
const (
	LabelEgressAssignable    = "k8s.ovn.org/egress-assignable"
	AnnotationPrimaryIfAddr  = "k8s.ovn.org/node-primary-ifaddr"
	AnnotationHostCIDRs      = "k8s.ovn.org/host-cidrs"
	AnnotationEgressIPConfig = "cloud.network.openshift.io/egress-ipconfig"
	// AnnotationVTEP lists a node's tunnel addresses (comma-separated, at
	// most one per family). Without it, the node's InternalIP addresses
	// are its VTEPs.
	AnnotationVTEP = "egret.io/vtep"
	// AnnotationTunnelMAC gives the MAC of a node's tunnel device when the
	// steer agent there is configured with tunnelMAC; without it the
	// device has VTEPMAC(node VTEP). A gateway sends replies to this inner
	// destination MAC, so it must match the device.
	AnnotationTunnelMAC = "egret.io/tunnel-mac"
	// AnnotationEgretPrimaryIfAddr and AnnotationEgretHostCIDRs are
	// Egret's own copies of k8s.ovn.org/node-primary-ifaddr and
	// k8s.ovn.org/host-cidrs, in the same formats: the gateway agent
	// writes them from its served interfaces on clusters where
	// OVN-Kubernetes does not publish its own. NodeInterfaces reads
	// OVN-Kubernetes' when either of those is present, these otherwise.
	AnnotationEgretPrimaryIfAddr = "egret.io/node-primary-ifaddr"
	AnnotationEgretHostCIDRs     = "egret.io/host-cidrs"
	// AnnotationEgretCloudPublisher marks a Node whose
	// cloud.network.openshift.io/egress-ipconfig the gateway agent writes
	// (value "egret-gateway"); without it, an egress-ipconfig already on
	// the Node belongs to another component (OpenShift's cloud network
	// config controller) and the agent leaves it alone.
	AnnotationEgretCloudPublisher = "egret.io/egress-ipconfig-publisher"
)

// OVNPublishesInterfaces reports whether OVN-Kubernetes owns a node's
// interface facts: one of its two annotations is on the node.
func OVNPublishesInterfaces(annotations map[string]string) bool {
	_, p := annotations[AnnotationPrimaryIfAddr]
	_, h := annotations[AnnotationHostCIDRs]
	return p || h
}

// NodeInterfaces reads a node's interface subnets: the primary interface
// address per family and all host interface addresses, both with masks.
// They come from OVN-Kubernetes' annotations when either is present, else
// from Egret's (written by the gateway agent). found is false when the
// chosen pair has neither annotation. Errors name the annotation; what
// parsed is still returned.
func NodeInterfaces(annotations map[string]string) (primary IfAddr, host []netip.Prefix, found bool, err error) {
	pk, hk := AnnotationEgretPrimaryIfAddr, AnnotationEgretHostCIDRs
	if OVNPublishesInterfaces(annotations) {
		pk, hk = AnnotationPrimaryIfAddr, AnnotationHostCIDRs
	}
	var errs []error
	if s, ok := annotations[pk]; ok {
		found = true
		primary, err = parsePrimaryIfAddr(pk, s)
		errs = append(errs, err)
	}
	if s, ok := annotations[hk]; ok {
		found = true
		host, err = parseHostCIDRs(hk, s)
		errs = append(errs, err)
	}
	return primary, host, found, errors.Join(errs...)
}

// FormatPrimaryIfAddr is the annotation value NodeInterfaces reads back as
// the primary interface address, for example {"ipv4":"192.168.111.23/24"}.
func FormatPrimaryIfAddr(a IfAddr) string {
	var j ifAddrJSON
	if a.IPv4.IsValid() {
		s := a.IPv4.String()
		j.IPv4 = &s
	}
	if a.IPv6.IsValid() {
		s := a.IPv6.String()
		j.IPv6 = &s
	}
	b, _ := json.Marshal(j) // strings only: cannot fail
	return string(b)
}

// FormatHostCIDRs is the annotation value NodeInterfaces reads back as the
// host interface addresses, for example ["192.168.111.23/24"].
func FormatHostCIDRs(l []netip.Prefix) string {
	s := make([]string, len(l))
	for i, p := range l {
		s[i] = p.String()
	}
	b, _ := json.Marshal(s) // strings only: cannot fail
	return string(b)
}

// FormatEgressIPConfig is the annotation value ParseEgressIPConfig reads
// back as c, for example [{"interface":"eni-0a1b","ifaddr":{"ipv4":"10.0.128.0/18"},
// "capacity":{"ipv4":14,"ipv6":15}}].
func FormatEgressIPConfig(c CloudConfig) string {
	type capJSON struct {
		IP   *int `json:"ip,omitempty"`
		IPv4 *int `json:"ipv4,omitempty"`
		IPv6 *int `json:"ipv6,omitempty"`
	}
	var capa capJSON
	if c.Capacity.Total {
		capa.IP = &c.Capacity.IP
	} else {
		capa.IPv4, capa.IPv6 = &c.Capacity.IPv4, &c.Capacity.IPv6
	}
	var ifa json.RawMessage = []byte(FormatPrimaryIfAddr(c.IfAddr))
	b, _ := json.Marshal([]struct {
		Interface string          `json:"interface"`
		IfAddr    json.RawMessage `json:"ifaddr"`
		Capacity  capJSON         `json:"capacity"`
	}{{c.Interface, ifa, capa}}) // strings and numbers only: cannot fail
	return string(b)
}

// IfAddr is an interface address with its mask, per family; a zero (invalid)
// prefix means the family is absent.
type IfAddr struct {
	IPv4 netip.Prefix
	IPv6 netip.Prefix
}

// CloudConfig is the single entry of the egress-ipconfig annotation.
type CloudConfig struct {
	// Interface is the cloud's interface ID (AWS ENI, Azure NIC) or name (GCP).
	Interface string
	// IfAddr holds the subnets egress IPs may come from.
	IfAddr IfAddr
	// Capacity is how many egress IPs the cloud lets this node hold.
	Capacity Capacity
}

// Capacity is a node's cloud IP capacity. AWS limits each family
// (capacity.ipv4 / capacity.ipv6); GCP and Azure limit the total (capacity.ip).
type Capacity struct {
	// Total is true when IP limits both families together (GCP, Azure).
	Total bool
	IP    int // total limit, valid iff Total
	IPv4  int // IPv4 limit, valid iff !Total
	IPv6  int // IPv6 limit, valid iff !Total
}

// NodeVTEPs returns a node's tunnel addresses: those of the egret.io/vtep
// annotation that are among its InternalIP addresses, else its InternalIP
// addresses. A kubelet may write any annotation on its own Node, so the
// annotation only chooses among the addresses the node already has: an
// annotation address that is not an InternalIP would let a node claim
// another's tunnel source. Such addresses are refused and named in the
// error; the addresses returned are still usable.
func NodeVTEPs(n *corev1.Node) ([]netip.Addr, error) {
	var internal []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			internal = append(internal, ip.Unmap())
		}
	}
	s, ok := n.Annotations[AnnotationVTEP]
	if !ok {
		return internal, nil
	}
	var out, refused []netip.Addr
	for _, f := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil {
			continue
		}
		if a = a.Unmap(); slices.Contains(internal, a) {
			out = append(out, a)
		} else {
			refused = append(refused, a)
		}
	}
	var err error
	if len(refused) > 0 {
		err = fmt.Errorf("node %s: annotation %s address %v is not one of the node's InternalIP addresses; refused", n.Name, AnnotationVTEP, refused)
	}
	if len(out) == 0 {
		return internal, err
	}
	return out, err
}

// VTEPMAC is the tunnel MAC of the node with VTEP vtep unless its
// configuration names one: the inner destination MAC of frames towards a
// gateway, and the MAC of a worker's tunnel device (the inner destination
// a gateway uses for replies). Locally administered, 02:65 followed by the
// IPv4 address, or 02:66 followed by the last four bytes of an IPv6
// address.
func VTEPMAC(vtep netip.Addr) [6]byte {
	vtep = vtep.Unmap()
	if vtep.Is4() {
		b := vtep.As4()
		return [6]byte{0x02, 0x65, b[0], b[1], b[2], b[3]}
	}
	b := vtep.As16()
	return [6]byte{0x02, 0x66, b[12], b[13], b[14], b[15]}
}

// NodeTunnelMAC is the MAC of node n's tunnel device when its VTEP is vtep:
// the egret.io/tunnel-mac annotation, else VTEPMAC(vtep). An annotation
// that is not an Ethernet MAC is an error, with VTEPMAC(vtep) returned.
func NodeTunnelMAC(n *corev1.Node, vtep netip.Addr) ([6]byte, error) {
	mac := VTEPMAC(vtep)
	s, ok := n.Annotations[AnnotationTunnelMAC]
	if !ok {
		return mac, nil
	}
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return mac, fmt.Errorf("annotation %s=%q is not an Ethernet MAC", AnnotationTunnelMAC, s)
	}
	copy(mac[:], hw)
	return mac, nil
}

// The labels that mark a control-plane node: the current one, and the
// one clusters installed before Kubernetes 1.20 (and OpenShift) still set.
const (
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	LabelMaster       = "node-role.kubernetes.io/master"
)

// ControlPlane reports whether a node carries either control-plane label.
func ControlPlane(n *corev1.Node) bool {
	_, cp := n.Labels[LabelControlPlane]
	_, m := n.Labels[LabelMaster]
	return cp || m
}

// OnAWS reports whether a node is an AWS instance: the AWS cloud provider
// sets spec.providerID to aws:///<zone>/<instance-id>, and the OpenShift
// cloud network config controller names an ENI (eni-...) as the interface
// of cloud.network.openshift.io/egress-ipconfig.
func OnAWS(n *corev1.Node) bool {
	if strings.HasPrefix(n.Spec.ProviderID, "aws://") {
		return true
	}
	var list []cloudJSON
	if s, ok := n.Annotations[AnnotationEgressIPConfig]; ok && json.Unmarshal([]byte(s), &list) == nil {
		for _, c := range list {
			if strings.HasPrefix(c.Interface, "eni-") {
				return true
			}
		}
	}
	return false
}

// NodeReady reports the node's Ready condition.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeAddress is where the node's services (the gateway health check)
// listen: its InternalIP, else the primary interface address
// (NodeInterfaces).
func NodeAddress(n *corev1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return ip, true
			}
		}
	}
	if ifa, _, _, err := NodeInterfaces(n.Annotations); err == nil {
		if ifa.IPv4.IsValid() {
			return ifa.IPv4.Addr(), true
		}
		if ifa.IPv6.IsValid() {
			return ifa.IPv6.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// maxAnnotationLen bounds what the parsers accept; real annotations are a few
// hundred bytes and the API server caps all annotations at 256 KiB anyway.
const maxAnnotationLen = 256 << 10

type ifAddrJSON struct {
	IPv4 *string `json:"ipv4,omitempty"`
	IPv6 *string `json:"ipv6,omitempty"`
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

// parsePrimaryIfAddr parses annotation key in the format of
// k8s.ovn.org/node-primary-ifaddr, for example
// {"ipv4":"192.168.111.23/24","ipv6":"fd00::23/64"}.
func parsePrimaryIfAddr(key, s string) (IfAddr, error) {
	var j ifAddrJSON
	if err := decodeJSON(key, s, &j); err != nil {
		return IfAddr{}, err
	}
	return parseIfAddr("annotation "+key, j)
}

// parseHostCIDRs parses annotation key in the format of
// k8s.ovn.org/host-cidrs, a JSON list of interface addresses with masks
// such as ["192.168.111.23/24","10.20.0.5/16"].
func parseHostCIDRs(key, s string) ([]netip.Prefix, error) {
	var list []string
	if err := decodeJSON(key, s, &list); err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(list))
	for i, c := range list {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Is4In6() {
			return nil, fmt.Errorf("annotation %s entry %d (%q) is not an address with a prefix length such as 10.20.0.5/16", key, i, c)
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
