package assign

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Explaining what could not be assigned, as Events.

// explain says why ip found no node for o.
func (a *assigner) explain(o *objState, ip netip.Addr) string {
	var inSubnet, hostsOwn, full int
	is4 := ip.Is4()
	for _, ni := range a.candidateNodes(ip, false) {
		n := &a.nodes[ni]
		if _, ok := n.match(ip); !ok {
			continue
		}
		inSubnet++
		switch {
		case o.placedOn(ni):
			hostsOwn++
		case !n.hasRoom(is4, 0, 0):
			full++
		}
	}
	f := 0
	if !is4 {
		f = 1
	}
	switch {
	case inSubnet == 0 && len(a.unannotated) > 0:
		return fmt.Sprintf("none of the %d eligible nodes has an interface subnet containing it (their subnets of this family: %s); the labelled nodes %s cannot host it either: each %s",
			len(a.eligible), a.subnetList[f], listSome(a.unannotated, 5), unannotated)
	case inSubnet == 0:
		return fmt.Sprintf("none of the %d eligible nodes has an interface subnet containing it (their subnets of this family: %s); use an address from one of them or label a node on its subnet",
			len(a.eligible), a.subnetList[f])
	case hostsOwn == inSubnet:
		return fmt.Sprintf("all %d eligible nodes on its subnet already host another egress IP of %s, and a node hosts at most one IP of an EgressIP; label more nodes on that subnet or list fewer IPs",
			inSubnet, o.name)
	case full == inSubnet:
		return fmt.Sprintf("all %d eligible nodes on its subnet are at their cloud IP capacity (cloud.network.openshift.io/egress-ipconfig); add nodes or free egress IPs", inSubnet)
	default:
		return fmt.Sprintf("of the %d eligible nodes on its subnet, %d already host another egress IP of %s (a node hosts at most one IP of an EgressIP) and %d are at their cloud IP capacity; add nodes on that subnet",
			inSubnet, hostsOwn, o.name, full)
	}
}

func (a *assigner) events(s *objState, out []Event) []Event {
	out = append(out, s.static...)
	for i, ip := range s.addrs {
		c := a.claims[ip]
		if len(c) < 2 {
			continue
		}
		own := a.owner[ip]
		var others []string
		for _, o := range c {
			if o != s {
				others = append(others, o.name)
			}
		}
		slices.Sort(others)
		var msg string
		if own == s {
			msg = fmt.Sprintf("egress IP %s is also listed by EgressIP %s; it stays with this object (an IP stays with the object that already has it in status, else the oldest, else the first by name); remove it from the others",
				ip, strings.Join(others, ", "))
		} else {
			msg = fmt.Sprintf("egress IP %s is also listed by EgressIP %s, which keeps it (an IP stays with the object that already has it in status, else the oldest, else the first by name); remove it from this object or from %s",
				ip, strings.Join(others, ", "), own.name)
		}
		out = append(out, Event{Object: s.name, Reason: ReasonEgressIPConflict, EgressIP: s.raw[i], Message: msg})
	}
	return append(out, s.reasons...)
}

func sortEvents(ev []Event) {
	slices.SortFunc(ev, func(x, y Event) int {
		return cmp.Or(strings.Compare(x.Object, y.Object), strings.Compare(x.EgressIP, y.EgressIP),
			strings.Compare(string(x.Reason), string(y.Reason)), strings.Compare(x.Message, y.Message))
	})
}
