package gateway

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// Destinations a pod may not reach through the gateway. Its packets leave
// from the gateway node, so without this a pod could read the node's cloud
// credentials (169.254.169.254), talk to the node's loopback-bound or
// link-local services, or to other nodes' kubelets as the gateway node.
//
// The check runs once per new flow (newFlow), not per packet: a flow to a
// denied destination is never created, so established traffic pays
// nothing. A snapshot that adds a destination to the list does not cut
// flows that exist already; they end when they expire.

// DefaultDeniedDestinations are the destinations every snapshot denies
// besides Config.DeniedDestinations and the nodes' and the gateway's own
// VTEPs: link-local (with the metadata address), the clouds' metadata
// services outside it, loopback, multicast, broadcast and the RFC 6890
// special-purpose ranges that are never a pod's egress destination.
// Config.AllowedDestinations overrides them.
func DefaultDeniedDestinations() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),          // "this network" (RFC 6890)
		netip.MustParsePrefix("127.0.0.0/8"),        // loopback
		netip.MustParsePrefix("169.254.0.0/16"),     // link-local, 169.254.169.254 metadata
		netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
		netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments (RFC 6890)
		netip.MustParsePrefix("224.0.0.0/4"),        // multicast
		netip.MustParsePrefix("240.0.0.0/4"),        // reserved, and 255.255.255.255 broadcast
		netip.MustParsePrefix("::/128"),             // unspecified
		netip.MustParsePrefix("::1/128"),            // loopback
		netip.MustParsePrefix("::ffff:0:0/96"),      // IPv4-mapped
		netip.MustParsePrefix("fe80::/10"),          // link-local
		netip.MustParsePrefix("fd00:ec2::/32"),      // AWS over IPv6: metadata ::254, DNS ::253, NTP ::123
		netip.MustParsePrefix("ff00::/8"),           // multicast
		netip.MustParsePrefix("100::/64"),           // discard-only (RFC 6666)
	}
}

// prefixSet is a set of prefixes of one family looked up without
// allocating: for each prefix length present (longest first), the sorted
// masked addresses, searched by binary search. A few lengths make a
// lookup a few short searches.
type prefixSet struct {
	lens [2][]prefixLen // by family index
}

type prefixLen struct {
	bits int
	keys [][2]uint64 // masked addresses, as 16 bytes in two words, sorted
}

func key16(a *[16]byte, bits int) [2]uint64 {
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	switch {
	case bits <= 0:
		return [2]uint64{}
	case bits < 64:
		return [2]uint64{hi &^ (1<<(64-bits) - 1), 0}
	case bits < 128:
		return [2]uint64{hi, lo &^ (1<<(128-bits) - 1)}
	}
	return [2]uint64{hi, lo}
}

func cmpKey(a, b [2]uint64) int {
	switch {
	case a[0] != b[0]:
		if a[0] < b[0] {
			return -1
		}
		return 1
	case a[1] != b[1]:
		if a[1] < b[1] {
			return -1
		}
		return 1
	}
	return 0
}

func newPrefixSet(ps []netip.Prefix) prefixSet {
	var s prefixSet
	for _, p := range ps {
		p = p.Masked()
		a := p.Addr().As16() // IPv4 as ::ffff:a.b.c.d, as the packet fields hold it
		bits := p.Bits()
		f := 1
		if p.Addr().Is4() {
			f, bits = 0, bits+96
		}
		i := slices.IndexFunc(s.lens[f], func(l prefixLen) bool { return l.bits == bits })
		if i < 0 {
			s.lens[f] = append(s.lens[f], prefixLen{bits: bits})
			i = len(s.lens[f]) - 1
		}
		s.lens[f][i].keys = append(s.lens[f][i].keys, key16(&a, bits))
	}
	for f := range s.lens {
		slices.SortFunc(s.lens[f], func(a, b prefixLen) int { return b.bits - a.bits })
		for i := range s.lens[f] {
			slices.SortFunc(s.lens[f][i].keys, cmpKey)
			s.lens[f][i].keys = slices.Compact(s.lens[f][i].keys)
		}
	}
	return s
}

// has reports whether address a (16 bytes, IPv4-mapped for IPv4) of family
// index f is in the set.
func (s *prefixSet) has(a *[16]byte, f uint8) bool {
	for i := range s.lens[f] {
		l := &s.lens[f][i]
		k := key16(a, l.bits)
		if _, ok := slices.BinarySearchFunc(l.keys, k, cmpKey); ok {
			return true
		}
	}
	return false
}

// destFilter is the deny-list as a snapshot checks it: the denied
// destinations and the allowed ones that override them.
type destFilter struct {
	deny  prefixSet // destinations no flow may be opened to
	allow prefixSet // exceptions to deny
}

// deniedList is every destination a gateway configured with cfg denies
// before AllowedDestinations: the built-in ones, cfg's, and the gateway's
// and its nodes' VTEPs.
func deniedList(cfg *Config) []netip.Prefix {
	deny := append(DefaultDeniedDestinations(), cfg.DeniedDestinations...)
	for _, v := range cfg.VTEPs {
		deny = append(deny, netip.PrefixFrom(v.Unmap(), v.Unmap().BitLen()))
	}
	for _, n := range cfg.Nodes {
		deny = append(deny, netip.PrefixFrom(n.VTEP.Unmap(), n.VTEP.Unmap().BitLen()))
	}
	return deny
}

func newDestFilter(cfg *Config) destFilter {
	return destFilter{deny: newPrefixSet(deniedList(cfg)), allow: newPrefixSet(cfg.AllowedDestinations)}
}

// DestinationVerdict is what the deny-list decides for new flows to one
// destination (CheckDestination).
type DestinationVerdict struct {
	// Denied says no flow to the destination is created
	// (DropDeniedDestination).
	Denied bool
	// Entry is the entry that decides, the longest that matches: the
	// denied one (Denied), or the allowed one that overrides the
	// deny-list; invalid when none matches (allowed: not on the list).
	Entry netip.Prefix
	// Allowed says Entry is one of Config.AllowedDestinations.
	Allowed bool
	// Via is the IPv4 address an IPv6 destination in a NAT64 prefix was
	// judged by; invalid otherwise.
	Via netip.Addr
	// VTEP says Entry is the gateway's or a node's VTEP (always denied).
	VTEP bool
}

// CheckDestination reports what a gateway configured with cfg decides for
// a pod's new flow to dst: the same check on the same lists as the data
// plane's (Snapshot.denied), and the entry that decides, for
// `egret trace`. cfg need not be complete; only its VTEPs, its nodes'
// VTEPs and its denied and allowed destinations are read.
func CheckDestination(cfg *Config, dst netip.Addr) DestinationVerdict {
	dst = dst.WithZone("") // an IPv4-mapped address stays IPv6, as in a packet
	d := newDestFilter(cfg)
	a, f := dst.As16(), famOf(dst)
	v := DestinationVerdict{Denied: d.denied(&a, f)}
	judged := dst
	var v4 [16]byte
	if f == 1 && !d.allow.has(&a, f) && !d.deny.has(&a, f) && nat64Embedded(&a, &v4) {
		v.Via = netip.AddrFrom16(v4).Unmap()
		judged = v.Via
	}
	longest := func(list []netip.Prefix) netip.Prefix {
		var best netip.Prefix
		for _, p := range list {
			if p.Contains(judged) && (!best.IsValid() || p.Bits() > best.Bits()) {
				best = p.Masked()
			}
		}
		return best
	}
	if allow := longest(cfg.AllowedDestinations); !v.Denied && allow.IsValid() {
		v.Entry, v.Allowed = allow, true
		return v
	}
	if v.Denied {
		v.Entry = longest(deniedList(cfg))
		v.VTEP = v.Entry.IsSingleIP() && !slices.Contains(DefaultDeniedDestinations(), v.Entry) && !slices.Contains(cfg.DeniedDestinations, v.Entry)
	}
	return v
}

// denied reports whether a pod may not open a flow to dst (16 bytes) of
// family index f. An IPv6 destination in a NAT64 prefix (nat64Embedded)
// that is not denied or allowed itself is judged by the IPv4 address it
// embeds: the NAT64 translator sends it there, from the gateway node's
// network, so 64:ff9b::a9fe:a9fe reaches 169.254.169.254 as well as the
// IPv4 address does. One that embeds an allowed IPv4 address stays
// allowed: NAT64 is how IPv6-only pods reach the IPv4 internet.
func (s *destFilter) denied(dst *[16]byte, f uint8) bool {
	if s.allow.has(dst, f) {
		return false
	}
	if s.deny.has(dst, f) {
		return true
	}
	var v4 [16]byte
	if f == 1 && nat64Embedded(dst, &v4) {
		return s.deny.has(&v4, 0) && !s.allow.has(&v4, 0)
	}
	return false
}

// nat64Embedded reports whether IPv6 address a is in one of the NAT64
// prefixes, the well-known 64:ff9b::/96 (RFC 6052) or the local-use
// 64:ff9b:1::/48 (RFC 8215), and if so stores the IPv4 address it embeds
// into v4, IPv4-mapped. RFC 6052 §2.2 lays it out by prefix length: after
// a /96 it is the last 32 bits; after a /48 it is bits 48..63 and 72..87,
// around the u-octet (bits 64..71), which is skipped whatever it holds.
// Operator-chosen network-specific prefixes are not known here; they go
// on Config.DeniedDestinations.
func nat64Embedded(a *[16]byte, v4 *[16]byte) bool {
	hi := binary.BigEndian.Uint64(a[:8])
	switch {
	case hi == 0x0064_ff9b_0000_0000 && binary.BigEndian.Uint32(a[8:12]) == 0:
		setMapped(v4, [4]byte(a[12:16]))
	case hi>>16 == 0x0064_ff9b_0001:
		setMapped(v4, [4]byte{a[6], a[7], a[9], a[10]})
	default:
		return false
	}
	return true
}
