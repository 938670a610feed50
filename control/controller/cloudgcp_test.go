package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/gcetest"
	"google.golang.org/api/option"
)

// memCloudIPs keeps CloudPrivateIPConfigs in memory.
type memCloudIPs struct {
	mu sync.Mutex
	m  map[netip.Addr]cluster.CloudIP
}

func (s *memCloudIPs) ListCloudIPs(context.Context) ([]cluster.CloudIP, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []cluster.CloudIP
	for _, c := range s.m {
		out = append(out, c)
	}
	return out, nil
}

func (s *memCloudIPs) StoreCloudIP(_ context.Context, c cluster.CloudIP) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[c.IP] = c
	return nil
}

func (s *memCloudIPs) DeleteCloudIP(_ context.Context, ip netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, ip)
	return nil
}

// TestCloudMoveGCP: the controller attaches through the real GCP provider
// (the local Compute Engine server, credentials from the metadata server)
// to the instance named by the node's spec.providerID, and a move removes
// the alias range from the old instance before adding it to the new one,
// as GCP has no reassignment; status names a node only once its instance
// holds the range.
func TestCloudMoveGCP(t *testing.T) {
	srv := gcetest.Start(
		gcetest.Instance{Project: "p", Zone: "europe-west1-b", Name: "vm-1", NIC: "nic0", IP: "192.168.126.2"},
		gcetest.Instance{Project: "p", Zone: "europe-west1-b", Name: "vm-2", NIC: "nic0", IP: "192.168.126.3"},
	)
	t.Cleanup(srv.Close)
	gcetest.StartMetadata(t, gcetest.Identity{Project: "p", Zone: "europe-west1-b", Name: "vm-1", IP: "192.168.126.2", SubnetMask: "255.255.255.0"})
	p, err := cloud.NewGCP(context.Background(), option.WithEndpoint(srv.Endpoint))
	if err != nil {
		t.Fatal(err)
	}
	m := newMem(egressIP("g", "192.168.126.11"))
	vm := map[string]string{"n1": "vm-1", "n2": "vm-2"}
	cloudNode := func(name string, ready bool) {
		for i, n := range m.nodes {
			if n.Name == name {
				n = egressNode(name, "", map[string]string{"n1": "192.168.126.2/24", "n2": "192.168.126.3/24"}[name], ready)
				n.Spec.ProviderID = "gce://p/europe-west1-b/" + vm[name]
				n.Annotations[cluster.AnnotationEgressIPConfig] = `[{"interface":"nic0","ifaddr":{"ipv4":"192.168.126.0/24"},"capacity":{"ip":100}}]`
				m.nodes[i] = n
			}
		}
	}
	cloudNode("n1", true)
	cloudNode("n2", true)
	store := &memCloudIPs{m: map[netip.Addr]cluster.CloudIP{}}
	off := 0
	c, err := controller.New(m, controller.Config{ReachabilityTotalTimeoutSeconds: &off}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	c.SetCloud(p, store)
	t.Cleanup(runController(t, c.Run))

	aliases := func(name string) []string { return srv.Instance("p", "europe-west1-b", name).Aliases }
	var from string
	eventually(t, 20*time.Second, "attached and in status", func() (bool, string) {
		cur, _ := m.EgressIP("g")
		if len(cur.Status.Items) != 1 {
			return false, fmt.Sprint(cur.Status.Items)
		}
		from = cur.Status.Items[0].Node
		// Attach before claim: the instance holds it whenever status names it.
		if got := aliases(vm[from]); !slices.Equal(got, []string{"192.168.126.11/32"}) {
			t.Fatalf("status names %s while %s has alias ranges %v", from, vm[from], got)
		}
		return true, ""
	})
	to := map[string]string{"n1": "n2", "n2": "n1"}[from]
	m.mu.Lock()
	cloudNode(from, false) // no longer Ready: the IP moves
	m.mu.Unlock()
	m.changed(cluster.KindNode)
	eventually(t, 20*time.Second, "moved to "+to, func() (bool, string) {
		cur, _ := m.EgressIP("g")
		ok := len(cur.Status.Items) == 1 && cur.Status.Items[0].Node == to
		return ok, fmt.Sprint(cur.Status.Items, " ", vm[from], aliases(vm[from]), " ", vm[to], aliases(vm[to]))
	})
	if a, b := aliases(vm[from]), aliases(vm[to]); len(a) != 0 || !slices.Equal(b, []string{"192.168.126.11/32"}) {
		t.Fatalf("after the move %s has %v, %s has %v", vm[from], a, vm[to], b)
	}
	store.mu.Lock()
	st := store.m[netip.MustParseAddr("192.168.126.11")]
	store.mu.Unlock()
	if st.StatusNode != to {
		t.Errorf("CloudPrivateIPConfig status.node %q, want %s", st.StatusNode, to)
	}
}
