package assign

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The EgressIP objects: their parsed egress IPs and who owns a contested IP.

type placed struct {
	addr  netip.Addr
	node  int32
	iface Interface
	// standby is the node that takes addr over (-1: none).
	standby int32
}

type objState struct {
	name    string
	created time.Time
	addrs   []netip.Addr // valid, unique, sorted
	raw     []string     // as written, parallel to addrs
	static  []Event      // InvalidEgressIP and node-address conflicts
	placed  []placed     // sorted by addr
	// status is what ownership ranking treats as "already in status": the
	// input status while loading, the placed addresses afterwards.
	status  []netip.Addr
	reasons []Event // NoMatchingNodeFound of the last placement
	// standbys are the recorded standby nodes by IP (Object.Standbys).
	standbys map[netip.Addr]string
}

func (o *objState) placedOn(node int32) bool {
	for i := range o.placed {
		if o.placed[i].node == node {
			return true
		}
	}
	return false
}

func (o *objState) placedIdx(a netip.Addr) int {
	for i := range o.placed {
		if o.placed[i].addr == a {
			return i
		}
	}
	return -1
}

func (o *objState) hasStatus(a netip.Addr) bool {
	_, ok := slices.BinarySearchFunc(o.status, a, netip.Addr.Compare)
	return ok
}

func (o *objState) rawOf(a netip.Addr) string {
	if i, ok := slices.BinarySearchFunc(o.addrs, a, netip.Addr.Compare); ok {
		return o.raw[i]
	}
	return a.String()
}

// parseObject validates spec.egressIPs.
func (a *assigner) parseObject(o Object) *objState {
	s := &objState{name: o.Name, created: o.Created}
	type entry struct {
		addr netip.Addr
		raw  string
	}
	var ok []entry
	for _, raw := range o.EgressIPs {
		ip, msg := parseEgressIP(raw)
		if msg != "" {
			s.static = append(s.static, Event{Object: o.Name, Reason: ReasonInvalidEgressIP, EgressIP: raw,
				Message: fmt.Sprintf("spec.egressIPs entry %q is not usable: %s; fix or remove it (the other egress IPs are assigned)", raw, msg)})
			continue
		}
		if node, isNode := a.nodeAddrs[ip]; isNode {
			s.static = append(s.static, Event{Object: o.Name, Reason: ReasonEgressIPConflict, EgressIP: raw,
				Message: fmt.Sprintf("egress IP %s is the address of node %s and cannot also be an egress IP; choose a free address", ip, node)})
			continue
		}
		ok = append(ok, entry{ip, raw})
	}
	slices.SortFunc(ok, func(x, y entry) int { return cmp.Or(x.addr.Compare(y.addr), strings.Compare(x.raw, y.raw)) })
	for i, e := range ok {
		if i > 0 && ok[i-1].addr == e.addr {
			s.static = append(s.static, Event{Object: o.Name, Reason: ReasonInvalidEgressIP, EgressIP: e.raw,
				Message: fmt.Sprintf("spec.egressIPs lists %s more than once; the duplicate is ignored", e.addr)})
			continue
		}
		s.addrs = append(s.addrs, e.addr)
		s.raw = append(s.raw, e.raw)
	}
	return s
}

// parseEgressIP returns the address, or a message saying why it is unusable.
func parseEgressIP(raw string) (netip.Addr, string) {
	ip, err := netip.ParseAddr(raw)
	switch {
	case err != nil:
		return ip, "it is not an IPv4 or IPv6 address"
	case ip.Zone() != "":
		return ip, "an egress IP cannot carry an IPv6 zone"
	case ip.Is4In6():
		return ip, "IPv4-mapped IPv6 addresses are ambiguous; write the IPv4 address"
	case ip.IsUnspecified():
		return ip, "the unspecified address cannot be a source address"
	case ip.IsLoopback():
		return ip, "a loopback address never leaves the node"
	case ip.IsMulticast():
		return ip, "a multicast address cannot be a source address"
	case ip.IsLinkLocalUnicast():
		return ip, "a link-local address is not routable beyond its link"
	case ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return ip, "the broadcast address cannot be a source address"
	}
	return ip, ""
}

// better reports whether x ranks above y for keeping a contested IP: the
// object that already has it in status, then the older, then the first name.
func better(x, y *objState, ip netip.Addr) bool {
	hx, hy := x.hasStatus(ip), y.hasStatus(ip)
	if hx != hy {
		return hx
	}
	if !x.created.Equal(y.created) {
		return x.created.Before(y.created)
	}
	return x.name < y.name
}

func (a *assigner) addClaims(o *objState) {
	for _, ip := range o.addrs {
		c := append(a.claims[ip], o)
		a.claims[ip] = c
		if len(c) > 1 {
			a.multi[ip] = struct{}{}
		}
	}
}

// decideOwner recomputes who may use ip; a previous owner that loses it
// gives up its placement. It returns the claimants.
func (a *assigner) decideOwner(ip netip.Addr) []*objState {
	c := a.claims[ip]
	if len(c) == 0 {
		return nil
	}
	best := c[0]
	for _, o := range c[1:] {
		if better(o, best, ip) {
			best = o
		}
	}
	if prev := a.owner[ip]; prev != nil && prev != best {
		if i := prev.placedIdx(ip); i >= 0 {
			a.unplace(prev, i)
		}
	}
	a.owner[ip] = best
	return c
}
