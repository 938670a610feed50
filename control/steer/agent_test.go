package steer

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/nstest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memSource is an in-memory cluster.Source for the agent tests; the agent
// only reads, so the writing methods are left to the nil embedded Source.
type memSource struct {
	cluster.Source
	mu      sync.Mutex
	o       cluster.View
	changed func(cluster.Kind)
}

func (m *memSource) Start(_ context.Context, changed func(cluster.Kind)) error {
	m.mu.Lock()
	m.changed = changed
	m.mu.Unlock()
	return nil
}

func (m *memSource) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.o
}

func (m *memSource) set(f func(o *cluster.View)) {
	m.mu.Lock()
	f(&m.o)
	ch := m.changed
	m.mu.Unlock()
	if ch != nil {
		ch(cluster.KindPod)
	}
}

func k8sPod(ns, name, node string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

// TestAgentInNetns runs the agent loop against a real namespace: a pod
// appearing, its EgressIP getting gateways, and the pod going away.
func TestAgentInNetns(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	k, err := NewKernel(testConfig(), l.nodeH, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	src := &memSource{o: cluster.View{
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "blue", Labels: map[string]string{"team": "blue"}}}},
		Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "g1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: g1VTEP.String()}}}}},
		EgressIPs: []*egressv1.EgressIP{eip("blue", match("team", "blue"), metav1.LabelSelector{}, []string{"192.0.2.101"})},
	}}
	a := &Agent{Node: "w1", Source: src, Kernel: k, Resync: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor := func(what string, ok func(State) bool) {
		t.Helper()
		var st State
		if !nstest.Soon(5*time.Second, func() bool { st, err = k.Actual(); return err == nil && ok(st) }) {
			t.Fatalf("%s: kernel state %+v (%v)", what, st, err)
		}
	}
	src.set(func(o *cluster.View) { o.Pods = []*corev1.Pod{k8sPod("blue", "p1", "w1", podIP4.String())} })
	waitFor("pod selected, no gateway", func(st State) bool {
		return len(st.Rules) == 1 && len(st.Routes) > 0 && st.Routes[0].Type == RouteBlackhole && len(st.Selected) == 1
	})
	src.set(func(o *cluster.View) {
		e := o.EgressIPs[0].DeepCopy()
		e.Status.Items = []egressv1.EgressIPStatusItem{{Node: "g1", EgressIP: "192.0.2.101"}}
		o.EgressIPs = []*egressv1.EgressIP{e}
	})
	waitFor("gateway assigned", func(st State) bool {
		return len(st.FDB) == 1 && slicesContainsUnicast(st.Routes)
	})
	src.set(func(o *cluster.View) { o.Pods = nil })
	// g1 still hosts the object's IP: it stays a tunnel peer, nothing else remains.
	waitFor("pod gone", func(st State) bool { return st.Equal(State{TunnelPeers: []netip.Addr{g1VTEP}}) })
}

func slicesContainsUnicast(rs []Route) bool {
	for _, r := range rs {
		if r.Type == RouteUnicast && len(r.NextHops) == 1 && r.NextHops[0].Addr == g1VTEP {
			return true
		}
	}
	return false
}

// BenchmarkDesired: 10k pods cluster-wide (200 on this node, in 10 namespaces), 500 EgressIP
// objects with two gateways each out of 50.
func BenchmarkDesired(b *testing.B) {
	in := Inputs{Node: "w0", Namespaces: map[string]map[string]string{}, VTEPs: map[string][]netip.Addr{}}
	for g := range 50 {
		in.VTEPs[fmt.Sprintf("g%d", g)] = []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, byte(g + 1)})}
	}
	for n := range 500 {
		ns := fmt.Sprintf("ns%d", n)
		in.Namespaces[ns] = map[string]string{"tenant": ns}
		in.EgressIPs = append(in.EgressIPs, eip(fmt.Sprintf("e%d", n), match("tenant", ns), metav1.LabelSelector{},
			[]string{fmt.Sprintf("203.0.%d.%d", n/250, n%250+1), fmt.Sprintf("203.1.%d.%d", n/250, n%250+1)},
			fmt.Sprintf("g%d", n%50), fmt.Sprintf("203.0.%d.%d", n/250, n%250+1),
			fmt.Sprintf("g%d", (n+1)%50), fmt.Sprintf("203.1.%d.%d", n/250, n%250+1)))
	}
	for i := range 10000 {
		in.Pods = append(in.Pods, Pod{Namespace: fmt.Sprintf("ns%d", i%500), Name: fmt.Sprint(i), Node: fmt.Sprintf("w%d", i%50),
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}})
	}
	p := params
	p.LocalVTEP = addr("192.0.2.200")
	v := in.view()
	b.ReportAllocs()
	var st State
	for b.Loop() {
		st = DesiredFrom(v, in.Node, p)
	}
	if len(st.Rules) != 200 || len(st.Objects) != 10 {
		b.Fatalf("%d rules, %d objects; want 200 and 10", len(st.Rules), len(st.Objects))
	}
}
