// Package cni implements the egress-router CNI plugin: it gives a pod a second interface
// (macvlan or ipvlan) on a host network, with a static, user-chosen address, makes it the
// pod's default route and optionally limits where the pod may connect through it.
package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Type names the plugin answers to; the binary is installed under both.
const (
	TypeEgressRouter    = "egress-router"
	TypeOpenshiftEgress = "openshift-egress"
)

// Interface types of the spec.
const (
	InterfaceMacvlan      = "macvlan"
	InterfaceIPvlan       = "ipvlan"
	InterfaceAWSElasticIP = "aws-elastic-ip"
)

// NetConf is the network configuration exactly as the runtime hands it to the plugin.
type NetConf struct {
	types.NetConf

	InterfaceType string            `json:"interfaceType,omitempty"`
	InterfaceArgs *InterfaceArgs    `json:"interfaceArgs,omitempty"`
	IP            *IPSpec           `json:"ip,omitempty"`
	PodIP         map[string]IPSpec `json:"podIP,omitempty"`
	IPConfig      *IPConfigRef      `json:"ipConfig,omitempty"`

	// Kubeconfig is decoded only to be refused: the credentials the plugin reads
	// ConfigMaps with are the node's (HostConfig.Kubeconfig), not the network's author's.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// ClusterNetworks and ServiceNetworks stay routed through the pod's previous default
	// interface once the egress interface takes the default route (Egret extension).
	ClusterNetworks []string `json:"clusterNetworks,omitempty"`
	ServiceNetworks []string `json:"serviceNetworks,omitempty"`
}

// InterfaceArgs are the interfaceType-specific arguments.
type InterfaceArgs struct {
	Master string `json:"master,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// MTU is a number, or a string holding one as upstream's plugin (whose
	// interfaceArgs are all strings) reads it.
	MTU json.RawMessage `json:"mtu,omitempty"`

	// AllocationID or PublicIP names the Elastic IP of aws-elastic-ip;
	// NetworkInterfaceID its ENI (default: the master's, from the instance
	// metadata service).
	AllocationID       string `json:"allocationId,omitempty"`
	PublicIP           string `json:"publicIp,omitempty"`
	NetworkInterfaceID string `json:"networkInterfaceId,omitempty"`
}

// IPSpec is the "ip" dictionary of the spec (also each podIP value and ipConfig.overrides).
type IPSpec struct {
	Addresses    []string `json:"addresses,omitempty"`
	Gateway      string   `json:"gateway,omitempty"`
	Destinations []string `json:"destinations,omitempty"`
}

// IPConfigRef points at a ConfigMap holding the IP configuration.
type IPConfigRef struct {
	Namespace string  `json:"namespace,omitempty"`
	Name      string  `json:"name,omitempty"`
	Overrides *IPSpec `json:"overrides,omitempty"`
}

// IPSettings is a validated IP configuration.
type IPSettings struct {
	// Addresses hold each address with its subnet length. An address written without
	// one (see Bare) holds its full length until WithLengths gives it the master's.
	Addresses []netip.Prefix
	// Bare lists the addresses written without a prefix length, as upstream configs and
	// the OpenShift network operator write them.
	Bare         []netip.Addr
	Gateway      netip.Addr     // invalid when not given
	Destinations []netip.Prefix // the CIDR entries, masked
	Redirects    []Redirect     // the redirect entries
}

// Redirect is a destinations entry of the form "<port> <proto> <ip>[/<len>] [<port>]":
// connections arriving at the pod's cluster-side interface, addressed to the pod, with
// protocol Proto and destination port Port are DNATed to To.Addr() (port ToPort) and
// leave through the egress interface with the egress address as their source.
type Redirect struct {
	Port   uint16
	Proto  string       // tcp, udp or sctp
	To     netip.Prefix // as written; its block joins the allowed destinations
	ToPort uint16       // the port at the target; Port when not given
}

// Allowed is where the pod may connect through the egress interface: the CIDR entries
// and the redirect targets' blocks. Empty means any destination.
func (s IPSettings) Allowed() []netip.Prefix {
	out := slices.Clone(s.Destinations)
	for _, r := range s.Redirects {
		if p := r.To.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// PodEntry is one validated podIP entry.
type PodEntry struct {
	Key      string // as written, possibly ending in "*"
	Prefix   string // the key without its trailing "*"
	Wildcard bool
	IP       IPSettings
}

// IPConfigSource is the validated ipConfig.
type IPConfigSource struct {
	Namespace string // empty: the pod's namespace
	Name      string
	Overrides *IPSettings // nil when not given; fields are optional
}

// Config is a validated network configuration.
type Config struct {
	Raw *NetConf

	InterfaceType string
	Master        string   // empty: inferred from the pod's address
	Mode          string   // normalised; aws-elastic-ip's link is ipvlan l2
	MTU           int      // 0: inherit the master's
	EIP           *EIPArgs // aws-elastic-ip only

	Static   *IPSettings     // from "ip"
	PodIP    []PodEntry      // from "podIP", in key order
	IPConfig *IPConfigSource // from "ipConfig"

	ClusterNetworks []netip.Prefix
	ServiceNetworks []netip.Prefix
}

// FieldError says which configuration field is wrong and why.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %v", e.Field, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

var macvlanModes = []string{"bridge", "private", "vepa", "passthru"}
var ipvlanModes = []string{"l2", "l3", "l3s"}

// ParseConfig decodes and validates the whole configuration before anything is touched.
func ParseConfig(stdin []byte) (*Config, error) {
	var raw NetConf
	if err := json.Unmarshal(stdin, &raw); err != nil {
		return nil, jsonError(stdin, err)
	}
	return validate(&raw)
}

// CheckJSON reports JSON that does not parse, saying where: the CNI library's own
// message, which a runtime shows before the plugin's code runs, names no position.
func CheckJSON(stdin []byte) error {
	var v any
	if err := json.Unmarshal(stdin, &v); err != nil {
		return jsonError(stdin, err)
	}
	return nil
}

// jsonError says where in b decoding failed, as a line and column.
func jsonError(b []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	off := int64(-1)
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off <= 0 || off > int64(len(b)) {
		return fmt.Errorf("network configuration is not valid JSON: %w", err)
	}
	// The offset is just past the byte that failed.
	before := b[:off-1]
	line := 1 + bytes.Count(before, []byte("\n"))
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Errorf("network configuration is not valid JSON: line %d, column %d: %w", line, col, err)
}

func validate(raw *NetConf) (*Config, error) {
	c := &Config{Raw: raw}
	if raw.Kubeconfig != "" {
		// Whoever may write a NetworkAttachmentDefinition could otherwise make the
		// plugin, which runs as root on the node, use any credentials file there.
		return nil, fieldErr("kubeconfig", "a network configuration may not name a kubeconfig; remove it: the plugin reads ipConfig ConfigMaps with the kubeconfig of the node's %s, which egress-router install --kubeconfig-dir sets", HostConfigName)
	}
	if raw.Name == "" {
		return nil, fieldErr("name", "is required")
	}
	if raw.Type != TypeEgressRouter && raw.Type != TypeOpenshiftEgress {
		return nil, fieldErr("type", "must be %q or %q, not %q", TypeEgressRouter, TypeOpenshiftEgress, raw.Type)
	}

	c.InterfaceType = raw.InterfaceType
	if c.InterfaceType == "" {
		c.InterfaceType = InterfaceMacvlan
	}
	var args InterfaceArgs
	if raw.InterfaceArgs != nil {
		args = *raw.InterfaceArgs
	}
	c.Master = args.Master
	switch c.InterfaceType {
	case InterfaceMacvlan:
		c.Mode = strings.ToLower(args.Mode)
		if c.Mode == "" {
			c.Mode = "bridge"
		}
		if !slices.Contains(macvlanModes, c.Mode) {
			return nil, fieldErr("interfaceArgs.mode", "%q is not a macvlan mode (one of %s)", args.Mode, strings.Join(macvlanModes, ", "))
		}
	case InterfaceIPvlan:
		c.Mode = strings.ToLower(args.Mode)
		if c.Mode == "" {
			c.Mode = "l2"
		}
		if !slices.Contains(ipvlanModes, c.Mode) {
			return nil, fieldErr("interfaceArgs.mode", "%q is not an ipvlan mode (one of %s)", args.Mode, strings.Join(ipvlanModes, ", "))
		}
	case InterfaceAWSElasticIP:
		// The VPC drops frames from MAC addresses it did not give out, so the pod's
		// link shares the master's MAC: an ipvlan in l2 mode.
		if m := strings.ToLower(args.Mode); m != "" && m != "l2" {
			return nil, fieldErr("interfaceArgs.mode", "%q: aws-elastic-ip always makes an ipvlan in l2 mode (the VPC drops frames from MAC addresses it did not assign); remove mode", args.Mode)
		}
		c.Mode = "l2"
		var err error
		if c.EIP, err = parseEIPArgs(args); err != nil {
			return nil, err
		}
	default:
		return nil, fieldErr("interfaceType", "%q is not supported (use %s, %s or %s)", raw.InterfaceType, InterfaceMacvlan, InterfaceIPvlan, InterfaceAWSElasticIP)
	}
	if c.EIP == nil && (args.AllocationID != "" || args.PublicIP != "" || args.NetworkInterfaceID != "") {
		return nil, fieldErr("interfaceArgs", "allocationId, publicIp and networkInterfaceId belong to interfaceType %s, not %s", InterfaceAWSElasticIP, c.InterfaceType)
	}
	if c.Master != "" && (len(c.Master) > 15 || strings.ContainsAny(c.Master, "/ \t\n")) {
		return nil, fieldErr("interfaceArgs.master", "%q is not a valid interface name", c.Master)
	}
	mtu, err := parseMTU(args.MTU)
	if err != nil {
		return nil, err
	}
	if mtu != 0 && (mtu < 68 || mtu > 65535) {
		return nil, fieldErr("interfaceArgs.mtu", "%d is out of range 68-65535", mtu)
	}
	c.MTU = mtu

	forms := 0
	if raw.IP != nil {
		forms++
	}
	if raw.PodIP != nil {
		forms++
	}
	if raw.IPConfig != nil {
		forms++
	}
	if forms != 1 {
		return nil, fieldErr("ip/podIP/ipConfig", "exactly one of ip, podIP or ipConfig must be given (found %d)", forms)
	}
	switch {
	case raw.IP != nil:
		var s IPSettings
		if s, err = parseIPSpec("ip", raw.IP, true); err != nil {
			return nil, err
		}
		c.Static = &s
		if c.EIP != nil {
			if err := checkEIPAddrs("ip.addresses", s); err != nil {
				return nil, err
			}
		}
	case raw.PodIP != nil:
		if c.PodIP, err = parsePodIP("podIP", raw.PodIP); err != nil {
			return nil, err
		}
		for _, e := range c.PodIP {
			if c.EIP == nil {
				break
			}
			if err := checkEIPAddrs(fmt.Sprintf("podIP[%q].addresses", e.Key), e.IP); err != nil {
				return nil, err
			}
		}
	default:
		ref := raw.IPConfig
		if ref.Name == "" {
			return nil, fieldErr("ipConfig.name", "is required")
		}
		src := &IPConfigSource{Namespace: ref.Namespace, Name: ref.Name}
		if ref.Overrides != nil {
			ov, err := parseIPSpec("ipConfig.overrides", ref.Overrides, false)
			if err != nil {
				return nil, err
			}
			src.Overrides = &ov
		}
		c.IPConfig = src
	}
	if c.MTU != 0 && c.MTU < 1280 && c.hasIPv6() {
		return nil, fieldErr("interfaceArgs.mtu", "%d is below 1280, the IPv6 minimum, and an IPv6 address is configured", c.MTU)
	}

	if c.ClusterNetworks, err = parsePrefixes("clusterNetworks", raw.ClusterNetworks); err != nil {
		return nil, err
	}
	if c.ServiceNetworks, err = parsePrefixes("serviceNetworks", raw.ServiceNetworks); err != nil {
		return nil, err
	}
	return c, nil
}

// parseMTU reads interfaceArgs.mtu: absent, a number, or a string holding a number.
func parseMTU(raw json.RawMessage) (int, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return n, nil
		}
	}
	return 0, fieldErr("interfaceArgs.mtu", "%s is not a number (or a string holding one, like \"1400\")", raw)
}

func (c *Config) hasIPv6() bool {
	check := func(s *IPSettings) bool {
		return s != nil && slices.ContainsFunc(s.Addresses, func(p netip.Prefix) bool { return p.Addr().Is6() })
	}
	if check(c.Static) {
		return true
	}
	for i := range c.PodIP {
		if check(&c.PodIP[i].IP) {
			return true
		}
	}
	return false
}

// parseIPSpec validates one ip-shaped dictionary; field prefixes every error.
func parseIPSpec(field string, spec *IPSpec, requireAddresses bool) (IPSettings, error) {
	var s IPSettings
	if requireAddresses && len(spec.Addresses) == 0 {
		return s, fieldErr(field+".addresses", "is required and must list at least one address")
	}
	for i, a := range spec.Addresses {
		name := fmt.Sprintf("%s.addresses[%d]", field, i)
		text := strings.TrimSpace(a)
		p, err := netip.ParsePrefix(text)
		bare := false
		if err != nil && !strings.Contains(text, "/") {
			// Upstream writes addresses without a length; the master's subnet gives it.
			var ad netip.Addr
			if ad, err = netip.ParseAddr(text); err == nil {
				p, bare = netip.PrefixFrom(ad, ad.BitLen()), true
			}
		}
		if err != nil {
			return s, fieldErr(name, "%q is not an address like 192.168.1.99/24 or 192.168.1.99", a)
		}
		ad := p.Addr()
		if ad.Zone() != "" || ad.IsUnspecified() || ad.IsLoopback() || ad.IsMulticast() || ad.IsLinkLocalUnicast() {
			return s, fieldErr(name, "%q is not a usable unicast address", a)
		}
		if err := checkHostAddr(p); err != nil {
			return s, &FieldError{Field: name, Err: err}
		}
		if slices.ContainsFunc(s.Addresses, func(q netip.Prefix) bool { return q.Addr() == ad }) {
			return s, fieldErr(name, "%q is listed twice", a)
		}
		s.Addresses = append(s.Addresses, p)
		if bare {
			s.Bare = append(s.Bare, ad)
		}
	}
	if spec.Gateway != "" {
		gw, err := netip.ParseAddr(strings.TrimSpace(spec.Gateway))
		if err != nil || gw.Zone() != "" || gw.IsUnspecified() || gw.IsMulticast() || gw.IsLoopback() {
			return s, fieldErr(field+".gateway", "%q is not a usable unicast IP address", spec.Gateway)
		}
		if len(s.Addresses) > 0 && !slices.ContainsFunc(s.Addresses, func(p netip.Prefix) bool { return p.Addr().Is4() == gw.Is4() }) {
			return s, fieldErr(field+".gateway", "%s has no address of its IP family in %s.addresses", gw, field)
		}
		s.Gateway = gw
	}
	var err error
	if s.Destinations, s.Redirects, err = parseDestinations(field+".destinations", spec.Destinations); err != nil {
		return s, err
	}
	return s, nil
}

// checkHostAddr refuses the network and broadcast address of an IPv4 subnet; /31 and
// /32 have neither (RFC 3021).
func checkHostAddr(p netip.Prefix) error {
	if ad := p.Addr(); ad.Is4() && p.Bits() < 31 && (ad == p.Masked().Addr() || ad == lastAddr(p)) {
		return fmt.Errorf("%s is the network or broadcast address of its subnet", p)
	}
	return nil
}

// WithLengths gives each address written without a prefix length the length of the
// master's subnet that contains it. No such subnet, or several of different lengths,
// is an error that says what to write instead.
func (s IPSettings) WithLengths(master HostLink) (IPSettings, error) {
	if len(s.Bare) == 0 {
		return s, nil
	}
	out := s
	out.Addresses = slices.Clone(s.Addresses)
	for i, p := range out.Addresses {
		ad := p.Addr()
		if !slices.Contains(s.Bare, ad) {
			continue
		}
		var lengths []int
		for _, m := range master.Prefixes {
			if m.Addr().Is4() == ad.Is4() && m.Masked().Contains(ad) && !slices.Contains(lengths, m.Bits()) {
				lengths = append(lengths, m.Bits())
			}
		}
		switch len(lengths) {
		case 0:
			return IPSettings{}, fieldErr("addresses", "%s has no prefix length and no subnet of the master %s (%s) contains it; write it with its length, like %s/24",
				ad, master.Name, orNone(prefixStrings(master.Prefixes)), ad)
		case 1:
			out.Addresses[i] = netip.PrefixFrom(ad, lengths[0])
		default:
			slices.Sort(lengths)
			return IPSettings{}, fieldErr("addresses", "%s has no prefix length and the master %s has several subnets containing it (lengths %v); write it with the length you mean",
				ad, master.Name, lengths)
		}
		if err := checkHostAddr(out.Addresses[i]); err != nil {
			return IPSettings{}, &FieldError{Field: "addresses", Err: fmt.Errorf("%w (the length comes from the master %s)", err, master.Name)}
		}
	}
	out.Bare = nil
	return out, nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// redirectProtos are the protocols a redirect entry may name, as upstream accepts them.
var redirectProtos = []string{"tcp", "udp", "sctp"}

// parseDestinations splits destinations into CIDR blocks (a bare address is its /32 or
// /128) and redirect rules "<port> <proto> <ip>[/<len>] [<port>]".
func parseDestinations(field string, in []string) ([]netip.Prefix, []Redirect, error) {
	var cidrs []netip.Prefix
	var redirects []Redirect
	for i, d := range in {
		name := fmt.Sprintf("%s[%d]", field, i)
		words := strings.Fields(d)
		switch len(words) {
		case 1:
			p, err := parseBlock(words[0])
			if err != nil {
				return nil, nil, fieldErr(name, "%q is not a CIDR block like 10.1.2.0/24 or an address like 10.1.2.3", d)
			}
			cidrs = append(cidrs, p.Masked())
		case 3, 4:
			r, err := parseRedirect(words)
			if err != nil {
				return nil, nil, fieldErr(name, "%q is not a redirect rule \"<port> <proto> <ip>[/<len>] [<port>]\": %v", d, err)
			}
			redirects = append(redirects, r)
		default:
			return nil, nil, fieldErr(name, "%q is neither a CIDR block (10.1.2.0/24), an address (10.1.2.3), nor a redirect rule \"<port> <proto> <ip>[/<len>] [<port>]\" (\"8080 TCP 203.0.113.26 80\")", d)
		}
	}
	return cidrs, redirects, nil
}

// parseBlock reads a CIDR block or a bare address, which is its /32 or /128.
func parseBlock(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil && !strings.Contains(s, "/") {
		var a netip.Addr
		if a, err = netip.ParseAddr(s); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil || p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("not a CIDR block or address")
	}
	return p, nil
}

func parseRedirect(words []string) (Redirect, error) {
	var r Redirect
	port, err := parsePort(words[0])
	if err != nil {
		return r, err
	}
	r.Port, r.ToPort = port, port
	r.Proto = strings.ToLower(words[1])
	if !slices.Contains(redirectProtos, r.Proto) {
		return r, fmt.Errorf("protocol %q is not one of TCP, UDP, SCTP", words[1])
	}
	if r.To, err = parseBlock(words[2]); err != nil {
		return r, fmt.Errorf("%q is not an address", words[2])
	}
	if a := r.To.Addr(); a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
		return r, fmt.Errorf("%s is not a unicast address", a)
	}
	if len(words) == 4 {
		if r.ToPort, err = parsePort(words[3]); err != nil {
			return r, err
		}
	}
	return r, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

func parsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, d := range in {
		p, err := netip.ParsePrefix(strings.TrimSpace(d))
		if err != nil || p.Addr().Zone() != "" {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "%q is not a CIDR block like 10.1.2.0/24", d)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// parsePodIP validates the podIP map; keys may end in "*" to match a name prefix.
func parsePodIP(field string, m map[string]IPSpec) ([]PodEntry, error) {
	if len(m) == 0 {
		return nil, fieldErr(field, "has no entries")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]PodEntry, 0, len(keys))
	for _, k := range keys {
		name := fmt.Sprintf("%s[%q]", field, k)
		e := PodEntry{Key: k, Prefix: k}
		if strings.HasSuffix(k, "*") {
			e.Wildcard, e.Prefix = true, strings.TrimSuffix(k, "*")
		}
		if k == "" || strings.Contains(e.Prefix, "*") {
			return nil, fieldErr(name, "pod name key must be a name, optionally ending in a single trailing \"*\"")
		}
		spec := m[k]
		ip, err := parseIPSpec(name, &spec, true)
		if err != nil {
			return nil, err
		}
		e.IP = ip
		out = append(out, e)
	}
	return out, nil
}

// ErrNoPodMatch means no podIP entry matches the pod's name.
var ErrNoPodMatch = errors.New("no podIP entry matches the pod")

// MatchPod picks the entry for a pod: an exact name wins, otherwise the longest "*" prefix.
func MatchPod(entries []PodEntry, pod string) (*PodEntry, error) {
	var best *PodEntry
	for i := range entries {
		e := &entries[i]
		if !e.Wildcard {
			if e.Prefix == pod {
				return e, nil
			}
			continue
		}
		if strings.HasPrefix(pod, e.Prefix) && (best == nil || len(e.Prefix) > len(best.Prefix)) {
			best = e
		}
	}
	if best == nil {
		keys := make([]string, len(entries))
		for i := range entries {
			keys[i] = entries[i].Key
		}
		return nil, fmt.Errorf("%w %q (keys: %s)", ErrNoPodMatch, pod, strings.Join(keys, ", "))
	}
	return best, nil
}

// PodArgs are the Kubernetes keys of CNI_ARGS.
type PodArgs struct {
	Name      string
	Namespace string
}

// ParseArgs reads K8S_POD_NAME and K8S_POD_NAMESPACE from CNI_ARGS; other keys are ignored.
func ParseArgs(s string) (PodArgs, error) {
	var a PodArgs
	if s == "" {
		return a, nil
	}
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return a, fmt.Errorf("CNI_ARGS: %q is not a KEY=VALUE pair", pair)
		}
		switch k {
		case "K8S_POD_NAME":
			a.Name = v
		case "K8S_POD_NAMESPACE":
			a.Namespace = v
		}
	}
	return a, nil
}
