package gwagent

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// applyShipped creates the objects of deploy/<paths> (namespace first).
func applyShipped(t *testing.T, env *kubetest.Env, paths ...string) {
	t.Helper()
	var full []string
	for _, p := range paths {
		full = append(full, filepath.Join(testbin.Root(t), "deploy", p))
	}
	objs, err := kubetest.ReadObjects(full...)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		res := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
		if gvk.Kind == "ValidatingAdmissionPolicy" {
			res.Resource = "validatingadmissionpolicies"
		}
		var ri dynamic.ResourceInterface = dyn.Resource(res)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(res).Namespace(ns)
		}
		if _, err := ri.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", gvk.Kind, o.GetName(), err)
		}
	}
}

// asGateway is the gateway agent's identity as a pod on node would have
// it: the ServiceAccount, with its token's node binding.
func asGateway(env *kubetest.Env, node string) *rest.Config {
	c := rest.CopyConfig(env.Config)
	c.Impersonate = rest.ImpersonationConfig{UserName: gatewayUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:egret-system", "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/node-name": {node}}}
	return c
}

// TestFactsPublish runs Facts in a real network namespace against a real
// API server, as the gateway's ServiceAccount under the shipped RBAC and
// admission policy: the served interface's subnets appear on the Node under
// Egret's keys (claimed /32s and link-local left out), follow an address
// added and removed, are not patched again while nothing changes, and are
// not written while OVN-Kubernetes' annotations are there. The same
// identity may not change another node, nor another annotation.
func TestFactsPublish(t *testing.T) {
	nstest.Root(t)
	gw, _ := nstest.Pair(t, "eth0", netip.MustParsePrefix("192.0.2.11/24"), "peer", netip.MustParsePrefix("192.0.2.1/24"))
	gw.NS.AddAddr(t, "eth0", netip.MustParsePrefix("2001:db8:f::11/64"), netip.MustParsePrefix("192.0.2.200/32"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, admin := factsCluster(t, ctx, nil, node("g1", "192.0.2.11", nil), node("g2", "192.0.2.12", nil))
	gwCfg := asGateway(env, "g1")
	src, err := cluster.NewKube(gwCfg)
	if err != nil {
		t.Fatal(err)
	}
	var patches atomic.Int32
	looks := &lookCounter{Source: src}
	f := NewFacts(Facts{Node: "g1", Source: looks, NS: gw.NS.Handle, Debounce: 50 * time.Millisecond,
		Interfaces: func() []string { return []string{"eth0"} },
		Annotate: func(ctx context.Context, n string, set map[string]*string) error {
			patches.Add(1)
			return src.AnnotateNode(ctx, n, set)
		}})
	if err := src.Start(ctx, func(k cluster.Kind) {
		if k == cluster.KindNode {
			f.NodeChanged()
		}
	}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- f.Run(ctx) }()

	ann := func() map[string]string {
		n, err := admin.CoreV1().Nodes().Get(ctx, "g1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	wantHost := func(want string) {
		t.Helper()
		nstest.Eventually(t, "host-cidrs "+want, 10*time.Second, func() bool { return ann()[cluster.AnnotationEgretHostCIDRs] == want })
	}
	wantHost(`["192.0.2.11/24","2001:db8:f::11/64"]`)
	if got := ann()[cluster.AnnotationEgretPrimaryIfAddr]; got != `{"ipv4":"192.0.2.11/24","ipv6":"2001:db8:f::11/64"}` {
		t.Fatalf("primary ifaddr = %s", got)
	}
	// The controller's parser reads what the agent wrote.
	if p, h, found, err := cluster.NodeInterfaces(ann()); err != nil || !found || p.IPv4 != netip.MustParsePrefix("192.0.2.11/24") || len(h) != 2 {
		t.Fatalf("NodeInterfaces of the published node: %v %v %v %v", p, h, found, err)
	}

	gw.NS.AddAddr(t, "eth0", netip.MustParsePrefix("198.51.100.5/26"))
	wantHost(`["192.0.2.11/24","198.51.100.5/26","2001:db8:f::11/64"]`)
	l, err := gw.NS.NL.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := netlink.ParseAddr("198.51.100.5/26")
	if err := gw.NS.NL.AddrDel(l, a); err != nil {
		t.Fatal(err)
	}
	wantHost(`["192.0.2.11/24","2001:db8:f::11/64"]`)

	// Nothing changes: node updates and interface events that change no
	// subnet patch nothing. (The patch that wantHost saw was counted
	// before it was sent.)
	before := patches.Load()
	for range 5 {
		looks.after(t, f.NodeChanged)
	}
	looks.after(t, func() {
		if err := gw.NS.NL.LinkSetMTU(l, 1400); err != nil {
			t.Fatal(err)
		}
	})
	looks.settle(t, f)
	if n := patches.Load(); n != before {
		t.Errorf("%d patches without a change of subnets; want none", n-before)
	}

	// OVN-Kubernetes takes over: Egret's agent stops writing.
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "g1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"k8s.ovn.org/host-cidrs":"[\"192.0.2.11/24\"]"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, "OVN-Kubernetes' annotation in the agent's cache", 10*time.Second, func() bool {
		for _, n := range src.View().Nodes {
			if n.Name == "g1" {
				return cluster.OVNPublishesInterfaces(n.Annotations)
			}
		}
		return false
	})
	looks.settle(t, f) // a look that saw it has ended
	before = patches.Load()
	looks.after(t, func() { gw.NS.AddAddr(t, "eth0", netip.MustParsePrefix("198.51.100.5/26")) })
	looks.settle(t, f)
	if n := patches.Load(); n != before || strings.Contains(ann()[cluster.AnnotationEgretHostCIDRs], "198.51.100.5") {
		t.Errorf("wrote %d patches while OVN-Kubernetes publishes the node's subnets", n-before)
	}

	// The shipped policy: this identity may write only its own node's two keys.
	// The API server loads a new ValidatingAdmissionPolicy asynchronously:
	// wait until it refuses a dry run of the forbidden write (the waits on
	// events above no longer leave it the time fixed sleeps did).
	gwCS := kubernetes.NewForConfigOrDie(gwCfg)
	nstest.Eventually(t, "the shipped admission policy in force", 30*time.Second, func() bool {
		_, err := gwCS.CoreV1().Nodes().Patch(ctx, "g2", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+cluster.AnnotationEgretHostCIDRs+`":"[]"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})
	if err := src.AnnotateNode(ctx, "g2", map[string]*string{cluster.AnnotationEgretHostCIDRs: ptr(`["192.0.2.12/24"]`)}); err == nil {
		t.Error("the gateway of g1 annotated node g2")
	}
	if err := src.AnnotateNode(ctx, "g1", map[string]*string{"example.com/other": ptr("x")}); err == nil {
		t.Error("the gateway annotated its node with a key that is not Egret's interface subnets")
	}
	if _, err := kubernetes.NewForConfigOrDie(gwCfg).CoreV1().Nodes().Patch(ctx, "g1", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`), metav1.PatchOptions{}); err == nil {
		t.Error("the gateway labelled its own node")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func ptr(s string) *string { return &s }

// lookCounter is the Facts' real source, counting the looks: publish reads
// the source's view once per look, and Run looks one at a time.
type lookCounter struct {
	cluster.Source
	n atomic.Int32
}

func (c *lookCounter) View() cluster.View {
	c.n.Add(1)
	return c.Source.View()
}

// after runs change and waits for a look that begins after it: the one
// the change causes (an interface event, a Node update), or a later one.
func (c *lookCounter) after(t *testing.T, change func()) {
	t.Helper()
	seen := c.n.Load()
	change()
	nstest.Eventually(t, "a look after the change", 10*time.Second, func() bool { return c.n.Load() > seen })
}

// settle asks for two looks in a row and waits for each to begin: once
// the second begins, the first, and every look before it, has ended.
func (c *lookCounter) settle(t *testing.T, f *Facts) {
	t.Helper()
	c.after(t, f.NodeChanged)
	c.after(t, f.NodeChanged)
}

// A Facts without NS works in the agent's own namespace: the zero handle
// (fd 0) must not be taken for a namespace to setns into, which needs
// CAP_SYS_ADMIN the gateway's container lacks (found on the real cluster:
// "failed to set into network namespace 0 ... operation not permitted").
func TestFactsZeroNSIsOwnNamespace(t *testing.T) {
	f := NewFacts(Facts{Node: "g1"})
	if f.NS.IsOpen() {
		t.Fatalf("NS %v is taken for an open namespace", f.NS)
	}
	h, err := f.handle()
	if err != nil {
		t.Fatalf("netlink handle in the own namespace: %v", err)
	}
	h.Close()
}

// TestReadInterfacesSecondNIC: a served interface that does not exist yet
// is skipped, not an error that would keep the node's subnets
// unpublished; once it appears its subnets are read with the others'.
func TestReadInterfacesSecondNIC(t *testing.T) {
	nstest.Root(t)
	gw, _ := nstest.Pair(t, "eth0", netip.MustParsePrefix("10.77.0.13/24"), "peer", netip.MustParsePrefix("10.77.0.1/24"))
	h, err := netlink.NewHandleAt(gw.NS.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	names := []string{"eth0", "eth1"}
	primary, host, err := readInterfaces(h, names, nil)
	if err != nil || primary.IPv4 != netip.MustParsePrefix("10.77.0.13/24") || len(host) != 1 {
		t.Fatalf("without eth1: primary %v host %v err %v", primary, host, err)
	}
	nstest.VethPair(t, gw.NS, "eth1", netip.MustParsePrefix("10.81.0.13/24"), nstest.New(t), "out", netip.MustParsePrefix("10.81.0.1/24"))
	primary, host, err = readInterfaces(h, names, nil)
	want := []netip.Prefix{netip.MustParsePrefix("10.77.0.13/24"), netip.MustParsePrefix("10.81.0.13/24")}
	if err != nil || primary.IPv4 != want[0] || len(host) != 2 || host[0] != want[0] || host[1] != want[1] {
		t.Fatalf("with eth1: primary %v host %v err %v; want host %v", primary, host, err, want)
	}
}
