package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func eip(name string, ips []string, nsSel, podSel map[string]string, status ...string) *egressv1.EgressIP {
	e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
	e.Spec.EgressIPs = ips
	e.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: nsSel}
	e.Spec.PodSelector = metav1.LabelSelector{MatchLabels: podSel}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
	}
	return e
}

func node(name string, ann map[string]string, podCIDRs []string, internal ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
	n.Spec.PodCIDRs = podCIDRs
	for _, a := range internal {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func pod(namespace, name, nodeName string, l map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l}}
	p.Spec.NodeName = nodeName
	p.Status.Phase = corev1.PodRunning
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func ns(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func hasProblem(p *Plan, sub string) bool {
	return slices.ContainsFunc(p.Problems, func(e error) bool { return strings.Contains(e.Error(), sub) })
}

// TestNodes: each node's endpoints come from its InternalIPs or its VTEP
// annotation (refused when it names an address that is not its own), one
// per family, and an endpoint two nodes claim belongs to the first by name.
func TestNodes(t *testing.T) {
	v := cluster.View{Nodes: []*corev1.Node{
		node("g1", nil, nil, "192.0.2.21"),
		node("g2", map[string]string{cluster.AnnotationVTEP: "192.0.2.122, 2001:db8::22, junk"}, nil, "192.0.2.22", "192.0.2.122", "2001:db8::22"),
		node("g3", map[string]string{cluster.AnnotationVTEP: "192.0.2.21"}, nil, "192.0.2.23"),
		node("g4", nil, []string{"10.128.4.0/24", "bogus"}, "192.0.2.21"),
		nil,
	}}
	p := Build(v, Options{})
	for name, want := range map[string][2]string{
		"g1": {"192.0.2.21", "invalid IP"}, "g2": {"192.0.2.122", "2001:db8::22"},
		"g3": {"192.0.2.23", "invalid IP"}, "g4": {"invalid IP", "invalid IP"},
	} {
		n := p.Nodes[name]
		if n == nil || n.VTEP4.String() != want[0] || n.VTEP6.String() != want[1] {
			t.Errorf("%s: %+v, want VTEPs %v", name, n, want)
		}
	}
	if !hasProblem(p, "node g3: annotation "+cluster.AnnotationVTEP) || !hasProblem(p, "node g4: VTEP 192.0.2.21 is also node g1's") ||
		!hasProblem(p, `Node g4: spec.podCIDRs entry "bogus"`) {
		t.Errorf("problems %v", p.Problems)
	}
	if got := p.Nodes["g4"].PodCIDRs; !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.128.4.0/24")}) {
		t.Errorf("g4 pod networks %v", got)
	}
}

// TestOwner: the first object by name owns a pod several select; the
// others are reported; unselected, host-network and finished pods.
func TestOwner(t *testing.T) {
	host := pod("prod", "host", "w1", map[string]string{"app": "web"}, "10.0.0.11")
	host.Spec.HostNetwork = true
	done := pod("prod", "done", "w1", map[string]string{"app": "web"}, "10.128.1.9")
	done.Status.Phase = corev1.PodFailed
	v := cluster.View{
		EgressIPs: []*egressv1.EgressIP{
			eip("b", []string{"192.0.2.20"}, nil, map[string]string{"app": "web"}, "g1", "192.0.2.20"),
			eip("a", []string{"192.0.2.10"}, map[string]string{"env": "prod"}, nil, "g1", "192.0.2.10"),
		},
		Nodes:      []*corev1.Node{node("w1", nil, []string{"10.128.1.0/24"}, "10.0.0.11"), node("g1", nil, nil, "10.0.0.21")},
		Namespaces: []*corev1.Namespace{ns("prod", map[string]string{"env": "prod"}), ns("dev", nil)},
		Pods: []*corev1.Pod{
			pod("prod", "web", "w1", map[string]string{"app": "web"}, "10.128.1.2"),
			pod("dev", "web", "w1", map[string]string{"app": "web"}, "10.128.1.3"),
			pod("dev", "db", "w1", nil, "10.128.1.4"),
			pod("gone", "x", "w1", nil, "10.128.1.5"), // namespace unknown
			host, done,
		},
	}
	p := Build(v, Options{})
	got := map[string]string{}
	for _, pd := range p.Pods {
		got[pd.Key()] = pd.Owner + " " + fmt.Sprint(pd.IPs)
	}
	want := map[string]string{"prod/web": "a [10.128.1.2]", "dev/web": "b [10.128.1.3]", "dev/db": " [10.128.1.4]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pods %v, want %v", got, want)
	}
	if !hasProblem(p, "pod prod/web is selected by EgressIP a and b; it uses a") {
		t.Errorf("problems %v", p.Problems)
	}
}

// randomCluster is a cluster of 3 gateways and 5 workers with random
// objects, placements, pods, duplicate and stray addresses.
func randomCluster(rng *rand.Rand) cluster.View {
	var v cluster.View
	for g := range 3 {
		v.Nodes = append(v.Nodes, node(fmt.Sprintf("g%d", g), nil, nil, fmt.Sprintf("10.0.0.%d", 21+g)))
	}
	for w := range 5 {
		n := node(fmt.Sprintf("w%d", w), nil, []string{fmt.Sprintf("10.128.%d.0/24", w)}, fmt.Sprintf("10.0.0.%d", 11+w))
		if rng.IntN(5) == 0 {
			n.Spec.PodCIDRs = nil
		}
		v.Nodes = append(v.Nodes, n)
	}
	teams := []string{"red", "blue", "green"}
	for _, t := range teams {
		v.Namespaces = append(v.Namespaces, ns(t, map[string]string{"team": t}))
	}
	for i := range 1 + rng.IntN(6) {
		var st []string
		ips := []string{fmt.Sprintf("192.0.2.%d", 10+i), fmt.Sprintf("2001:db8::%d", 10+i)}
		for _, ip := range ips {
			if rng.IntN(4) > 0 {
				st = append(st, fmt.Sprintf("g%d", rng.IntN(4)), ip) // g3 is unknown
			}
		}
		if rng.IntN(6) == 0 {
			st = append(st, "g0", "192.0.2.10") // another object's IP
		}
		var nsSel, podSel map[string]string
		if rng.IntN(2) == 0 {
			nsSel = map[string]string{"team": teams[rng.IntN(3)]}
		}
		if rng.IntN(2) == 0 {
			podSel = map[string]string{"app": fmt.Sprint(rng.IntN(3))}
		}
		v.EgressIPs = append(v.EgressIPs, eip(fmt.Sprintf("e%d", i), ips, nsSel, podSel, st...))
	}
	for i := range 40 {
		w := rng.IntN(6) // w5 is unknown
		ip := fmt.Sprintf("10.128.%d.%d", w, rng.IntN(30))
		if rng.IntN(10) == 0 {
			ip = fmt.Sprintf("10.128.%d.%d", rng.IntN(5), rng.IntN(30)) // maybe another node's network
		}
		p := pod(teams[rng.IntN(3)], fmt.Sprintf("p%d", i), fmt.Sprintf("w%d", w), map[string]string{"app": fmt.Sprint(rng.IntN(3))}, ip)
		if rng.IntN(3) == 0 {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: fmt.Sprintf("fd00:%d::%d", w, rng.IntN(30))})
		}
		if rng.IntN(15) == 0 {
			p.Spec.HostNetwork = true
		}
		v.Pods = append(v.Pods, p)
	}
	return v
}

// TestStepsMatchAccepts is the plan's promise on random clusters: every pod
// address a worker steers through a gateway is one that gateway accepts
// from that worker's endpoint for the same object, and a gateway accepts
// nothing a worker does not steer for that object.
func TestStepsMatchAccepts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		v := randomCluster(rng)
		trust := rng.IntN(4) == 0
		p := Build(v, Options{TrustPodIPs: trust})
		type key struct {
			vtep netip.Addr
			pod  netip.Addr
		}
		// What each worker steers, and to which gateways.
		steered := map[key]string{}
		via := map[key][]string{}
		for w := range 6 {
			name := fmt.Sprintf("w%d", w)
			n := p.Nodes[name]
			if n == nil {
				continue // an unknown node's pods are no gateway's
			}
			part := p.Worker(name, n.VTEP4)
			routes := map[string]Route{}
			for _, r := range part.Objects {
				routes[r.Name] = r
			}
			for _, pod := range part.Pods {
				if pod.Owner == "" {
					continue
				}
				for _, ip := range pod.IPs {
					k := key{n.VTEP4, ip}
					if prev, dup := steered[k]; dup {
						t.Fatalf("iteration %d: %v steered twice (%s, %s)", iter, ip, prev, pod.Owner)
					}
					steered[k] = pod.Owner
					for _, h := range routes[pod.Owner].Gateways[Family(ip)] {
						via[k] = append(via[k], h.Node)
					}
				}
			}
		}
		for g := range 3 {
			name := fmt.Sprintf("g%d", g)
			part := p.Gateway(name, []netip.Addr{p.Nodes[name].VTEP4})
			accepted := map[key]string{}
			for _, w := range part.Workers {
				for _, pa := range w.Pods {
					accepted[key{w.VTEP, pa.Addr}] = pa.Owner
				}
			}
			for k, owner := range steered {
				if slices.Contains(via[k], name) && accepted[k] != owner {
					t.Fatalf("iteration %d: %v is steered to %s for %s, which accepts it for %q", iter, k, name, owner, accepted[k])
				}
			}
			for k, owner := range accepted {
				if steered[k] != owner {
					t.Fatalf("iteration %d: %s accepts %v for %s, which its worker steers for %q", iter, name, k, owner, steered[k])
				}
			}
			// Every egress IP hosted here is placed here by one object.
			for _, ip := range part.Hosted {
				n := 0
				for _, o := range p.Objects {
					for _, pl := range o.Placements {
						if pl.IP == ip && pl.Node == name {
							n++
						}
					}
				}
				if n != 1 {
					t.Fatalf("iteration %d: %s hosts %v placed %d times", iter, name, ip, n)
				}
			}
		}
		// No selected address is used outside its node's pod networks
		// (unless trusted) or when it is an egress IP.
		for _, pod := range p.Pods {
			n := p.Nodes[pod.Node]
			for _, ip := range pod.IPs {
				if pod.Owner != "" && n != nil && !trust && !cluster.InPodCIDRs(n.PodCIDRs, ip) {
					t.Fatalf("iteration %d: %s uses %v outside %v", iter, pod.Key(), ip, n.PodCIDRs)
				}
				for _, o := range p.Objects {
					if slices.ContainsFunc(o.Placements, func(pl Placement) bool { return pl.IP == ip }) {
						t.Fatalf("iteration %d: %s uses egress IP %v as its own", iter, pod.Key(), ip)
					}
				}
			}
		}
	}
}

// TestPure: building twice gives the same plan and leaves the view as it was.
func TestPure(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	v := randomCluster(rng)
	before := fmt.Sprint(v.EgressIPs, v.Nodes, v.Pods)
	a, b := Build(v, Options{}), Build(v, Options{})
	if fmt.Sprint(a.Pods, a.Objects, a.NodeNetworks) != fmt.Sprint(b.Pods, b.Objects, b.NodeNetworks) {
		t.Fatal("two builds differ")
	}
	if fmt.Sprint(v.EgressIPs, v.Nodes, v.Pods) != before {
		t.Fatal("Build modified its input")
	}
}
