package gwagent

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cluster"
)

// TestPlacedSubnetsAgreeWithController: for random interface subnets
// (overlapping, both families, some nodes on a cloud) and random egress
// IPs, the subnet the agent hands the engine for an IP is the one the
// controller placed it by (assign's Interface.Subnet), and the agent finds
// a subnet exactly for the IPs the controller could place.
func TestPlacedSubnetsAgreeWithController(t *testing.T) {
	r := rand.New(rand.NewPCG(28, 2))
	pick := func(l []string) string { return l[r.IntN(len(l))] }
	v4 := []string{"10.0.0.%d/8", "10.81.0.%d/16", "10.81.0.%d/24", "10.81.0.%d/25", "10.81.1.%d/24", "192.0.2.%d/24"}
	v6 := []string{"fd81::%d/48", "fd81::%d/64", "fd81:0:0:1::%d/64", "2001:db8::%d/64"}
	ips := []string{"10.0.0.%d", "10.81.0.%d", "10.81.1.%d", "10.81.2.%d", "10.81.0.%d", "192.0.2.%d", "198.51.100.%d",
		"fd81::%d", "fd81:0:0:1::%d", "fd81:0:0:2::%d", "2001:db8::%d", "2001:db8:1::%d"}
	checked := 0
	for round := range 300 {
		var host []netip.Prefix
		for range 1 + r.IntN(5) {
			f := pick(append(v4, v6...))
			host = append(host, netip.MustParsePrefix(fmt.Sprintf(f, 1+r.IntN(120))))
		}
		var primary cluster.IfAddr
		for _, h := range host {
			if h.Addr().Is4() && !primary.IPv4.IsValid() && r.IntN(2) == 0 {
				primary.IPv4 = h
			}
			if h.Addr().Is6() && !primary.IPv6.IsValid() && r.IntN(2) == 0 {
				primary.IPv6 = h
			}
		}
		ann := map[string]string{cluster.AnnotationEgretHostCIDRs: cluster.FormatHostCIDRs(host)}
		if primary.IPv4.IsValid() || primary.IPv6.IsValid() {
			ann[cluster.AnnotationEgretPrimaryIfAddr] = cluster.FormatPrimaryIfAddr(primary)
		}
		if r.IntN(5) == 0 {
			c := cluster.CloudConfig{Interface: "eni-1", IfAddr: cluster.IfAddr{IPv4: netip.MustParsePrefix("10.81.0.0/24"), IPv6: netip.MustParsePrefix("fd81::/64")},
				Capacity: cluster.Capacity{IPv4: 100, IPv6: 100}}
			ann[cluster.AnnotationEgressIPConfig] = cluster.FormatEgressIPConfig(c)
		}
		n := assign.NodeFromObject("g1", map[string]string{cluster.LabelEgressAssignable: ""}, ann)
		if n.AnnotationErr != nil {
			t.Fatalf("round %d: annotations %v: %v", round, ann, n.AnnotationErr)
		}
		n.Ready, n.Reachable = true, true
		var objs []assign.Object
		var addrs []netip.Addr
		for i := range 6 {
			a := netip.MustParseAddr(fmt.Sprintf(pick(ips), 2+r.IntN(250)))
			addrs = append(addrs, a)
			objs = append(objs, assign.Object{Name: fmt.Sprintf("o%d", i), EgressIPs: []string{a.String()}})
		}
		res, err := assign.Assign(objs, []assign.Node{n}, assign.Options{})
		if err != nil {
			t.Fatal(err)
		}
		placed := map[netip.Addr]netip.Prefix{}
		for _, o := range res.Objects {
			for _, s := range o.Status {
				placed[s.Addr] = s.Interface.Subnet
			}
		}
		got, _ := placedSubnets(ann, addrs)
		for _, a := range addrs {
			want, ok := placed[a]
			if !ok && isNodeAddr(a, primary, host) {
				continue // the node's own address: the controller refuses it, the agent never hosts it
			}
			if g, has := got[a]; has != ok || g != want {
				t.Fatalf("round %d: %v on host-cidrs %v primary %v cloud %q: agent %v (%v), controller %v (%v)",
					round, a, host, primary, ann[cluster.AnnotationEgressIPConfig], g, has, want, ok)
			}
			checked++
		}
	}
	t.Logf("%d egress IPs compared", checked)
}

func isNodeAddr(a netip.Addr, primary cluster.IfAddr, host []netip.Prefix) bool {
	if a == primary.IPv4.Addr() || a == primary.IPv6.Addr() {
		return true
	}
	for _, h := range host {
		if h.Addr() == a {
			return true
		}
	}
	return false
}
