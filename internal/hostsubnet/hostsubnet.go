// Package hostsubnet decides which of a node's interface subnets carries an
// egress IP. The controller places an IP on a node with it (control/assign)
// and the gateway agent tells the data plane on which interface to claim
// the IP with it (control/gwagent): one function, so that the two can only
// agree. It imports nothing, so that both sides, and the engine for a
// configuration without the controller's choice, may use it.
package hostsubnet

import (
	"encoding/binary"
	"net/netip"
)

// Pick returns the subnet, as an interface address with its mask, that
// carries a: the primary interface's of a's family (primary4 or primary6)
// when a is a usable host address of it, else the longest of host that
// holds a as one; of equally long ones (two interfaces on one subnet) the
// lowest address, so that the choice never depends on the order of host.
// The spec's rule: the primary interface first, then the longest prefix
// match over the other interfaces' subnets. ok is false when no subnet
// holds a.
func Pick(primary4, primary6 netip.Prefix, host []netip.Prefix, a netip.Addr) (p netip.Prefix, ok bool) {
	a = a.Unmap()
	primary := primary4
	if a.Is6() {
		primary = primary6
	}
	if Hostable(primary, a) {
		return primary, true
	}
	for _, h := range host {
		if !Hostable(h, a) {
			continue
		}
		if !ok || h.Bits() > p.Bits() || (h.Bits() == p.Bits() && h.Addr().Less(p.Addr())) {
			p, ok = h, true
		}
	}
	return p, ok
}

// Hostable reports whether a is a usable host address of p: inside it, and
// not the network or broadcast address of an IPv4 subnet of /30 and wider,
// nor the Subnet-Router anycast address (RFC 4291 2.6.1) of an IPv6 subnet.
func Hostable(p netip.Prefix, a netip.Addr) bool {
	if !p.IsValid() || !p.Contains(a) {
		return false
	}
	if a.Is6() && p.Bits() < 127 && a == p.Masked().Addr() {
		return false
	}
	if a.Is4() && p.Bits() <= 30 {
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:])
		mask := ^uint32(0) << (32 - p.Bits())
		if v&^mask == 0 || v|mask == ^uint32(0) {
			return false
		}
	}
	return true
}
