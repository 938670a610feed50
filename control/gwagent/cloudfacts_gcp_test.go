package gwagent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/gcetest"
	"github.com/egret-gw/egret/internal/nstest"
	"google.golang.org/api/option"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFactsPublishCloudGCP: on a GCE instance (the local metadata and
// Compute Engine servers), the agent writes its node's egress-ipconfig in
// GCP's shape: interface nic0, the subnet, and one capacity for both
// families, 100 alias ranges minus those in use that are not egress IPs (a
// pod range counts as one).
func TestFactsPublishCloudGCP(t *testing.T) {
	nstest.Root(t)
	gw, _ := nstest.Pair(t, "eth0", netip.MustParsePrefix("10.0.1.10/24"), "peer", netip.MustParsePrefix("10.0.1.1/24"))
	srv := gcetest.Start(gcetest.Instance{Project: "p", Zone: "us-central1-a", Name: "g1", NIC: "nic0", IP: "10.0.1.10",
		Aliases: []string{"10.0.1.20/32", "10.0.1.50/32", "10.8.0.0/24"}})
	t.Cleanup(srv.Close)
	gcetest.StartMetadata(t, gcetest.Identity{Project: "p", Zone: "us-central1-a", Name: "g1", IP: "10.0.1.10", SubnetMask: "255.255.255.0"})
	p, err := cloud.NewGCP(context.Background(), option.WithEndpoint(srv.Endpoint))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, admin := factsCluster(t, ctx, []string{"10.0.1.50"}, node("g1", "10.0.1.10", nil))
	src, err := cluster.NewKube(asGateway(env, "g1"))
	if err != nil {
		t.Fatal(err)
	}
	f := NewFacts(Facts{Node: "g1", Source: src, NS: gw.NS.Handle, Debounce: 50 * time.Millisecond,
		Interfaces: func() []string { return []string{"eth0"} }, Annotate: src.AnnotateNode, Cloud: p})
	if err := src.Start(ctx, func(k cluster.Kind) {
		if k == cluster.KindNode {
			f.NodeChanged()
		}
	}); err != nil {
		t.Fatal(err)
	}
	go f.Run(ctx)
	want := `[{"interface":"nic0","ifaddr":{"ipv4":"10.0.1.0/24"},"capacity":{"ip":98}}]`
	var got string
	nstest.Eventually(t, "g1's egress-ipconfig", 20*time.Second, func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, "g1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = n.Annotations[cluster.AnnotationEgressIPConfig]
		return got == want
	})
	if c, err := cluster.ParseEgressIPConfig(got); err != nil || !c.Capacity.Total || c.Capacity.IP != 98 || c.Interface != "nic0" {
		t.Fatalf("the controller's parser reads %+v, %v", c, err)
	}
}
