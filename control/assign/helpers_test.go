package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/egret-gw/egret/control/cluster"
)

// nd builds an eligible bare-metal node whose primary interface is the
// given address/prefix ("" for none); opts adjust it.
func nd(name, primary string, opts ...func(*Node)) Node {
	n := Node{Name: name, Assignable: true, Ready: true, Reachable: true}
	if primary != "" {
		p := netip.MustParsePrefix(primary)
		if p.Addr().Is4() {
			n.PrimaryIfAddr.IPv4 = p
		} else {
			n.PrimaryIfAddr.IPv6 = p
		}
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func v6(p string) func(*Node) {
	return func(n *Node) { n.PrimaryIfAddr.IPv6 = netip.MustParsePrefix(p) }
}

func hostCIDRs(l ...string) func(*Node) {
	return func(n *Node) {
		for _, s := range l {
			n.HostCIDRs = append(n.HostCIDRs, netip.MustParsePrefix(s))
		}
	}
}

func cloud(iface, v4, v6 string, c cluster.Capacity) func(*Node) {
	return func(n *Node) {
		cc := &cluster.CloudConfig{Interface: iface, Capacity: c}
		if v4 != "" {
			cc.IfAddr.IPv4 = netip.MustParsePrefix(v4)
		}
		if v6 != "" {
			cc.IfAddr.IPv6 = netip.MustParsePrefix(v6)
		}
		n.Cloud = cc
	}
}

func ob(name string, ips ...string) Object { return Object{Name: name, EgressIPs: ips} }

// st adds status items given as "ip@node".
func st(o Object, items ...string) Object {
	for _, it := range items {
		ip, node, _ := strings.Cut(it, "@")
		o.Status = append(o.Status, StatusItem{Node: node, EgressIP: ip})
	}
	return o
}

// placements flattens a result to "object ip@node" lines, sorted.
func placements(r Result) []string {
	var out []string
	for _, o := range r.Objects {
		for _, a := range o.Status {
			out = append(out, fmt.Sprintf("%s %s@%s", o.Name, a.EgressIP, a.Node))
		}
	}
	sort.Strings(out)
	return out
}

func nodeOf(r Result, obj, ip string) string {
	for _, o := range r.Objects {
		if o.Name != obj {
			continue
		}
		for _, a := range o.Status {
			if a.EgressIP == ip {
				return a.Node
			}
		}
	}
	return ""
}

func assignment(r Result, obj, ip string) (Assignment, bool) {
	for _, o := range r.Objects {
		if o.Name != obj {
			continue
		}
		for _, a := range o.Status {
			if a.EgressIP == ip {
				return a, true
			}
		}
	}
	return Assignment{}, false
}

// findEvent returns the first event matching object, reason and IP ("" matches any IP).
func findEvent(r Result, obj string, reason Reason, ip string) (Event, bool) {
	for _, e := range r.Events {
		if e.Object == obj && e.Reason == reason && (ip == "" || e.EgressIP == ip) {
			return e, true
		}
	}
	return Event{}, false
}

func mustAssign(t testing.TB, objs []Object, nodes []Node, opts Options) Result {
	t.Helper()
	r, err := Assign(objs, nodes, opts)
	if err != nil {
		t.Fatalf("Assign: %v", err)
	}
	return r
}

// loads counts assigned IPs per node name.
func loads(r Result) map[string]int {
	m := map[string]int{}
	for _, o := range r.Objects {
		for _, a := range o.Status {
			m[a.Node]++
		}
	}
	return m
}

func eventsText(r Result) string {
	var b strings.Builder
	for _, e := range r.Events {
		fmt.Fprintf(&b, "%s %s %s: %s\n", e.Object, e.Reason, e.EgressIP, e.Message)
	}
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}
