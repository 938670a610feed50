package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/nstest"
	corev1 "k8s.io/api/core/v1"
)

// annotatingMem is the in-memory source with the Kubernetes source's
// AnnotateNode: Nodes are replaced, never changed in place.
type annotatingMem struct{ *memSource }

func (m annotatingMem) AnnotateNode(_ context.Context, name string, set map[string]*string) error {
	m.mu.Lock()
	nodes := make([]*corev1.Node, len(m.nodes))
	for i, n := range m.nodes {
		if n.Name == name {
			n = n.DeepCopy()
			for k, v := range set {
				if v == nil {
					delete(n.Annotations, k)
				} else {
					n.Annotations[k] = *v
				}
			}
		}
		nodes[i] = n
	}
	m.nodes = nodes
	changed := m.changed
	m.mu.Unlock()
	changed(cluster.KindNode)
	return nil
}

func (m annotatingMem) annotation(node string) (string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.nodes {
		if n.Name == node {
			return n.Annotations[cluster.AnnotationEgressIPConfig], n.Annotations[cluster.AnnotationEgretCloudPublisher]
		}
	}
	return "", ""
}

// nodeCloud is a cloud whose nodes' egress-ipconfig the controller reads
// (as OpenStack's): a port per server, attachments in memory.
type nodeCloud struct {
	mu       sync.Mutex
	capacity map[string]int    // server → capacity left
	attached map[string]string // IP → port
	asked    []string          // providerIDs NodeConfig was asked for
}

func (p *nodeCloud) NodeConfig(_ context.Context, instance string, internal []netip.Addr, egress func(netip.Addr) bool) (cluster.CloudConfig, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, instance)
	server := strings.TrimPrefix(instance, "openstack:///")
	return cluster.CloudConfig{Interface: "port-" + server, IfAddr: cluster.IfAddr{IPv4: netip.MustParsePrefix("192.168.126.0/24")},
		Capacity: cluster.Capacity{Total: true, IP: p.capacity[server]}}, nil
}

func (p *nodeCloud) Attach(_ context.Context, nic cloud.NIC, ip netip.Addr, _ cloud.NIC) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if nic.ID != "port-"+strings.TrimPrefix(nic.Instance, "openstack:///") {
		return fmt.Errorf("interface %s is not %s's", nic.ID, nic.Instance)
	}
	p.attached[ip.String()] = nic.ID
	return nil
}

func (p *nodeCloud) Detach(_ context.Context, nic cloud.NIC, ip netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.attached, ip.String())
	return nil
}

func (p *nodeCloud) Local(context.Context) (cloud.Local, error) {
	return cloud.Local{}, fmt.Errorf("not on a node")
}

// TestCloudNodesPublish: on a cloud implementing cloud.NodeConfigs
// (OpenStack) the controller publishes the egress-ipconfig of every
// egress-assignable node of that cloud, marked as its own, leaves a
// foreign one alone, and the assignment then uses it: the egress IP is
// attached to the port the annotation names.
func TestCloudNodesPublish(t *testing.T) {
	m := annotatingMem{newMem(egressIP("g", "192.168.126.11"))}
	m.nodes = append(m.nodes, egressNode("n3", "", "192.168.126.4/24", true), egressNode("n4", "", "192.168.126.5/24", true))
	for i, id := range []string{"openstack:///vm-1", "openstack:///vm-2", "openstack:///vm-3", "aws:///eu-west-3a/i-4"} {
		m.nodes[i].Spec.ProviderID = id
		m.nodes[i].Status.Addresses[0].Address = fmt.Sprintf("192.168.126.%d", i+2)
	}
	const foreign = `[{"interface":"other","ifaddr":{"ipv4":"192.168.126.0/24"},"capacity":{"ip":3}}]`
	m.nodes[2].Annotations[cluster.AnnotationEgressIPConfig] = foreign
	p := &nodeCloud{capacity: map[string]int{"vm-1": 8, "vm-2": 8}, attached: map[string]string{}}
	off := 0
	c, err := controller.New(m, controller.Config{ReachabilityTotalTimeoutSeconds: &off}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c.SetCloud(p, &memCloudIPs{m: map[netip.Addr]cluster.CloudIP{}})
	t.Cleanup(runController(t, c.Run))

	nstest.Until(t, "published and attached", 20*time.Second, func() (bool, string) {
		cur, _ := m.EgressIP("g")
		a1, p1 := m.annotation("n1")
		a2, p2 := m.annotation("n2")
		p.mu.Lock()
		port := p.attached["192.168.126.11"]
		p.mu.Unlock()
		ok := p1 == "egret-controller" && p2 == "egret-controller" && len(cur.Status.Items) == 1 &&
			port == "port-vm-"+strings.TrimPrefix(cur.Status.Items[0].Node, "n")
		return ok, fmt.Sprint(a1, p1, " ", a2, p2, " ", cur.Status.Items, " ", port)
	})
	if a, _ := m.annotation("n1"); a != `[{"interface":"port-vm-1","ifaddr":{"ipv4":"192.168.126.0/24"},"capacity":{"ip":8}}]` {
		t.Errorf("n1's egress-ipconfig = %s", a)
	}
	if a, pub := m.annotation("n3"); a != foreign || pub != "" {
		t.Errorf("n3's foreign egress-ipconfig became %s (publisher %q)", a, pub)
	}
	if a, _ := m.annotation("n4"); a != "" {
		t.Errorf("n4, an AWS node, got egress-ipconfig %s", a)
	}
	// A Node change reads the ports again.
	p.mu.Lock()
	p.capacity["vm-1"] = 5
	p.mu.Unlock()
	m.changed(cluster.KindNode)
	nstest.Until(t, "n1's capacity republished", 20*time.Second, func() (bool, string) {
		a, _ := m.annotation("n1")
		return strings.Contains(a, `"capacity":{"ip":5}`), a
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.asked {
		if !strings.HasPrefix(id, "openstack:///vm-1") && !strings.HasPrefix(id, "openstack:///vm-2") {
			t.Errorf("NodeConfig asked for %s; want only the OpenStack nodes that are Egret's to publish", id)
		}
	}
}
