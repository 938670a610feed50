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
	"github.com/egret-gw/egret/internal/azuretest"
	"github.com/egret-gw/egret/internal/gcetest"
	"github.com/egret-gw/egret/internal/nstest"
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

// cloudVM is one instance of a cloud test: its node's providerID and
// egress-ipconfig interface, and what the local server says it holds.
type cloudVM struct {
	providerID, iface string
	holds             func() []string
}

// TestCloudMove runs the controller with the real GCP and Azure providers
// against their local servers (credentials from the metadata server or the
// managed identity endpoint): status names a node only once its instance
// holds the egress IP, and a move removes it from the old instance before
// adding it to the new one, as neither cloud can reassign; the attachment
// follows the node named by spec.providerID (GCP) or the NIC of the
// annotation (Azure).
func TestCloudMove(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (cloud.Provider, map[string]cloudVM)
	}{
		{"gcp", startGCE},
		{"azure", startAzure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, vms := tc.start(t)
			testCloudMove(t, p, vms)
		})
	}
}

func startGCE(t *testing.T) (cloud.Provider, map[string]cloudVM) {
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
	vm := func(name string) cloudVM {
		return cloudVM{"gce://p/europe-west1-b/" + name, "nic0", func() []string { return srv.Instance("p", "europe-west1-b", name).Aliases }}
	}
	return p, map[string]cloudVM{"n1": vm("vm-1"), "n2": vm("vm-2")}
}

func startAzure(t *testing.T) (cloud.Provider, map[string]cloudVM) {
	const rg = "/subscriptions/00000000-0000-4000-8000-0000000e9e70/resourceGroups/egret"
	subnet := rg + "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
	nic := func(vm, ip string) azuretest.NIC {
		return azuretest.NIC{ID: rg + "/providers/Microsoft.Network/networkInterfaces/" + vm + "-nic", VM: rg + "/providers/Microsoft.Compute/virtualMachines/" + vm,
			Primary: true, Subnet: subnet, IPConfigs: []azuretest.IPConfig{{Name: "ipconfig1", IP: ip, Primary: true}}}
	}
	n1, n2 := nic("vm-1", "192.168.126.2"), nic("vm-2", "192.168.126.3")
	srv := azuretest.Start(n1, n2)
	t.Cleanup(srv.Close)
	azuretest.StartIdentity(t, azuretest.VM{Subscription: "00000000-0000-4000-8000-0000000e9e70", ResourceGroup: "egret", Name: "vm-1", IP: "192.168.126.2", Subnet: netip.MustParsePrefix("192.168.126.0/24")})
	p, err := cloud.NewAzure(context.Background(), srv.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	vm := func(n azuretest.NIC) cloudVM {
		return cloudVM{"azure://" + n.VM, n.ID, func() []string {
			var out []string
			for _, ip := range srv.Secondary(n.ID) {
				out = append(out, ip+"/32")
			}
			return out
		}}
	}
	return p, map[string]cloudVM{"n1": vm(n1), "n2": vm(n2)}
}

func testCloudMove(t *testing.T, p cloud.Provider, vms map[string]cloudVM) {
	m := newMem(egressIP("g", "192.168.126.11"))
	cloudNode := func(name string, ready bool) {
		for i, n := range m.nodes {
			if n.Name == name {
				n = egressNode(name, "", map[string]string{"n1": "192.168.126.2/24", "n2": "192.168.126.3/24"}[name], ready)
				n.Spec.ProviderID = vms[name].providerID
				n.Annotations[cluster.AnnotationEgressIPConfig] = `[{"interface":"` + vms[name].iface + `","ifaddr":{"ipv4":"192.168.126.0/24"},"capacity":{"ip":100}}]`
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

	var from string
	nstest.Until(t, "attached and in status", 20*time.Second, func() (bool, string) {
		cur, _ := m.EgressIP("g")
		if len(cur.Status.Items) != 1 {
			return false, fmt.Sprint(cur.Status.Items)
		}
		from = cur.Status.Items[0].Node
		// Attach before claim: the instance holds it whenever status names it.
		if got := vms[from].holds(); !slices.Equal(got, []string{"192.168.126.11/32"}) {
			t.Fatalf("status names %s while its instance holds %v", from, got)
		}
		return true, ""
	})
	to := map[string]string{"n1": "n2", "n2": "n1"}[from]
	m.mu.Lock()
	cloudNode(from, false) // no longer Ready: the IP moves
	m.mu.Unlock()
	m.changed(cluster.KindNode)
	nstest.Until(t, "moved to "+to, 30*time.Second, func() (bool, string) {
		cur, _ := m.EgressIP("g")
		ok := len(cur.Status.Items) == 1 && cur.Status.Items[0].Node == to
		return ok, fmt.Sprint(cur.Status.Items, " ", from, vms[from].holds(), " ", to, vms[to].holds())
	})
	if a, b := vms[from].holds(), vms[to].holds(); len(a) != 0 || !slices.Equal(b, []string{"192.168.126.11/32"}) {
		t.Fatalf("after the move %s holds %v, %s holds %v", from, a, to, b)
	}
	store.mu.Lock()
	st := store.m[netip.MustParseAddr("192.168.126.11")]
	store.mu.Unlock()
	if st.StatusNode != to {
		t.Errorf("CloudPrivateIPConfig status.node %q, want %s", st.StatusNode, to)
	}
}
