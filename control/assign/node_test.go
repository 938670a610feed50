package assign

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/egret-gw/egret/control/cluster"
)

func TestNodeFromObject(t *testing.T) {
	good := NodeFromObject("n1", map[string]string{cluster.LabelEgressAssignable: ""}, map[string]string{
		cluster.AnnotationPrimaryIfAddr:  `{"ipv4":"192.168.111.23/24"}`,
		cluster.AnnotationHostCIDRs:      `["192.168.111.23/24","10.20.0.5/16"]`,
		cluster.AnnotationEgressIPConfig: `[{"interface":"nic0","ifaddr":{"ipv4":"192.168.111.0/24"},"capacity":{"ip":10}}]`,
	})
	if !good.Assignable || good.AnnotationErr != nil || good.PrimaryIfAddr.IPv4 != netip.MustParsePrefix("192.168.111.23/24") ||
		len(good.HostCIDRs) != 2 || good.Cloud == nil || good.Cloud.Capacity.IP != 10 {
		t.Errorf("good node = %+v", good)
	}
	if n := NodeFromObject("n0", nil, nil); n.Assignable || n.AnnotationErr != nil {
		t.Errorf("bare node = %+v", n)
	}
	bad := NodeFromObject("n2", map[string]string{cluster.LabelEgressAssignable: ""}, map[string]string{
		cluster.AnnotationPrimaryIfAddr: `{"ipv4":"192.168.111.23/24"}`,
		cluster.AnnotationHostCIDRs:     `["garbage"]`,
	})
	if bad.AnnotationErr == nil || !strings.Contains(bad.AnnotationErr.Error(), cluster.AnnotationHostCIDRs) {
		t.Fatalf("bad node AnnotationErr = %v", bad.AnnotationErr)
	}
	bad.Ready, bad.Reachable = true, true
	r := mustAssign(t, []Object{ob("x", "192.168.111.50")}, []Node{bad}, Options{})
	if len(placements(r)) != 0 {
		t.Errorf("a node with a broken annotation got %v", placements(r))
	}
	if len(r.NodeProblems) != 1 || r.NodeProblems[0].Object != "n2" || !strings.Contains(r.NodeProblems[0].Message, "garbage") {
		t.Errorf("node problems = %+v", r.NodeProblems)
	}
	if e, ok := findEvent(r, "x", ReasonNoMatchingNodeFound, "192.168.111.50"); !ok || !strings.Contains(e.Message, "broken annotation") {
		t.Errorf("event = %+v, want NoMatchingNodeFound naming the broken annotation", e)
	}
}

func FuzzAssign(f *testing.F) {
	f.Add("10.0.0.10", "10.0.0.10", "a", "fd00::1")
	f.Add("", "::", "", "1.1.1.1")
	f.Fuzz(func(t *testing.T, ip1, ip2, statusNode, ip3 string) {
		nodes := []Node{nd("a", "10.0.0.1/24", v6("fd00::1/64")), nd("b", "10.0.0.2/24")}
		objs := []Object{
			st(ob("x", ip1, ip2), ip1+"@"+statusNode, ip3+"@b"),
			ob("y", ip3, ip1),
		}
		// Recorded standbys naming any node, the owner or none.
		objs[0].Standbys = map[netip.Addr]string{}
		for _, sb := range [][2]string{{ip1, statusNode}, {ip2, "a"}, {ip3, "b"}} {
			if a, err := netip.ParseAddr(sb[0]); err == nil {
				objs[0].Standbys[a] = sb[1]
			}
		}
		r := mustAssign(t, objs, nodes, Options{})
		checkInvariants(t, nodes, objs, r)
		checkStandbys(t, nodes, r)
	})
}
