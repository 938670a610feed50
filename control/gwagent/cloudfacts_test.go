package gwagent

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/ec2test"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestFactsPublishCloud: on an AWS instance (AWS's metadata emulator and
// the local EC2 server), the agent writes its node's egress-ipconfig as
// the gateway's ServiceAccount under the shipped policy: the ENI, the
// subnets, and the capacity left (instance-type limit minus the addresses
// in use that are not egress IPs), which the controller's parser reads;
// a node whose egress-ipconfig another component wrote is left alone.
func TestFactsPublishCloud(t *testing.T) {
	nstest.Root(t)
	gw, _ := nstest.Pair(t, "eth0", netip.MustParsePrefix("10.0.1.10/24"), "peer", netip.MustParsePrefix("10.0.1.1/24"))
	srv := ec2test.Start(ec2test.ENI{ID: "eni-g1", Primary: "10.0.1.10",
		IPv4: []string{"10.0.1.20", "10.0.1.50"}, IPv6: []string{"2600:1f18::20"}})
	t.Cleanup(srv.Close)
	srv.InstanceType("m5.large", 10, 10)
	srv.Env(t, ec2test.StartIMDS(t, "us-east-1", map[string]string{
		"mac-network-interface-id":    "eni-g1",
		"mac-subnet-ipv4-cidr-block":  "10.0.1.0/24",
		"mac-subnet-ipv6-cidr-blocks": "2600:1f18::/64",
		"instance-type":               "m5.large",
	}))
	p, err := cloud.New(context.Background(), cloud.Config{Provider: cloud.ProviderAWS})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	foreign := `[{"interface":"eni-other","ifaddr":{"ipv4":"10.9.0.0/16"},"capacity":{"ipv4":3}}]`
	env, admin := factsCluster(t, ctx, []string{"10.0.1.50"}, node("g1", "10.0.1.10", nil), node("g2", "10.0.1.11", map[string]string{cluster.AnnotationEgressIPConfig: foreign}))
	run := func(name string) *cluster.Kube {
		src, err := cluster.NewKube(asGateway(env, name))
		if err != nil {
			t.Fatal(err)
		}
		f := NewFacts(Facts{Node: name, Source: src, NS: gw.NS.Handle, Debounce: 50 * time.Millisecond,
			Interfaces: func() []string { return []string{"eth0"} }, Annotate: src.AnnotateNode, Cloud: p})
		if err := src.Start(ctx, func(k cluster.Kind) {
			if k == cluster.KindNode {
				f.NodeChanged()
			}
		}); err != nil {
			t.Fatal(err)
		}
		go f.Run(ctx)
		return src
	}
	run("g1")
	ann := func(name string) map[string]string {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	// Capacity: IPv4 10 - 2 in use (10.0.1.50 is an egress IP), IPv6 10 - 1.
	want := `[{"interface":"eni-g1","ifaddr":{"ipv4":"10.0.1.0/24","ipv6":"2600:1f18::/64"},"capacity":{"ipv4":8,"ipv6":9}}]`
	nstest.Eventually(t, "g1's egress-ipconfig", 20*time.Second, func() bool { return ann("g1")[cluster.AnnotationEgressIPConfig] == want })
	if got, err := cluster.ParseEgressIPConfig(ann("g1")[cluster.AnnotationEgressIPConfig]); err != nil || got.Interface != "eni-g1" || got.Capacity.IPv4 != 8 {
		t.Fatalf("the controller's parser reads %+v, %v", got, err)
	}
	if ann("g1")[cluster.AnnotationEgretHostCIDRs] != `["10.0.1.10/24"]` {
		t.Errorf("interface subnets not published beside the cloud facts: %v", ann("g1"))
	}

	// Another address on the ENI: one less left, at the next look.
	if err := p.Attach(ctx, cloud.NIC{ID: "eni-g1"}, netip.MustParseAddr("10.0.1.21"), cloud.NIC{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "g1", types.MergePatchType, []byte(`{"metadata":{"labels":{"poke":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	want = `[{"interface":"eni-g1","ifaddr":{"ipv4":"10.0.1.0/24","ipv6":"2600:1f18::/64"},"capacity":{"ipv4":7,"ipv6":9}}]`
	nstest.Eventually(t, "g1's capacity down by one", 20*time.Second, func() bool { return ann("g1")[cluster.AnnotationEgressIPConfig] == want })

	// g2's annotation is another component's: left as it is.
	run("g2")
	nstest.Eventually(t, "g2's interface subnets", 20*time.Second, func() bool { return ann("g2")[cluster.AnnotationEgretHostCIDRs] != "" })
	if got := ann("g2"); got[cluster.AnnotationEgressIPConfig] != foreign || got[cluster.AnnotationEgretCloudPublisher] != "" {
		t.Fatalf("g2's foreign egress-ipconfig was overwritten: %v", got)
	}
}

// factsCluster is a real API server with the CRDs and the gateway's RBAC,
// the given nodes and, with egressIPs, EgressIP e1 with them (the cloud
// tests' 10.0.1.50: an egress IP, attached to its node by the controller,
// which does not use up cloud capacity).
func factsCluster(t *testing.T, ctx context.Context, egressIPs []string, nodes ...*corev1.Node) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	env := kubetest.Start(t)
	env.InstallCRDs(t, filepath.Join(testbin.Root(t), "deploy", "crd"))
	applyShipped(t, env, "namespace.yaml", "gateway/rbac.yaml")
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(egressIPs) > 0 {
		eipc, err := egressv1.NewForConfig(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eipc.Create(ctx, &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e1"},
			Spec: egressv1.EgressIPSpec{EgressIPs: egressIPs}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return env, admin
}
