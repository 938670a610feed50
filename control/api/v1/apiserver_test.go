package v1_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	v1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
)

const (
	crdDir      = "../../../deploy/crd"
	examplesDir = "../../../deploy/examples"
)

// TestAgainstAPIServer installs the CRD in a real kube-apiserver and checks
// what users and the controller rely on. One control plane serves all
// subtests; each uses its own object names.
func TestAgainstAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, crdDir)
	c, err := v1.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("CRDShape", func(t *testing.T) { testCRDShape(t, env) })
	t.Run("ExamplesApplyUnchanged", func(t *testing.T) { testExamples(t, c, dyn) })
	t.Run("InvalidRefused", func(t *testing.T) { testInvalid(t, c, dyn) })
	t.Run("StatusByUpdate", func(t *testing.T) { testStatus(t, env, c) })
	t.Run("Informer", func(t *testing.T) { testInformer(t, c) })
	t.Run("Kubectl", func(t *testing.T) { testKubectl(t, env, c) })
	t.Run("TrafficRefused", func(t *testing.T) { testTrafficRefused(t, c.Traffic(), dyn) })
	t.Run("TrafficStatus", func(t *testing.T) { testTrafficStatus(t, c.Traffic()) })
	t.Run("TrafficKubectl", func(t *testing.T) { testTrafficKubectl(t, env, c) })
}

func testCRDShape(t *testing.T, env *kubetest.Env) {
	// Discovery: cluster scope, short name eip, and no status subresource.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := cs.Discovery().ServerResourcesForGroupVersion("k8s.ovn.org/v1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rl.APIResources {
		names = append(names, r.Name)
		if r.Name == "egressips" {
			if r.Namespaced || r.Kind != "EgressIP" || !slices.Equal(r.ShortNames, []string{"eip"}) {
				t.Errorf("egressips discovery = namespaced %v kind %q shortNames %v; want cluster-scoped EgressIP [eip]",
					r.Namespaced, r.Kind, r.ShortNames)
			}
		}
		if r.Name == v1.TrafficResource {
			if r.Namespaced || r.Kind != v1.TrafficKind || !slices.Equal(r.ShortNames, []string{v1.TrafficShortName}) {
				t.Errorf("egressiptraffics discovery = namespaced %v kind %q shortNames %v; want cluster-scoped EgressIPTraffic [eipt]",
					r.Namespaced, r.Kind, r.ShortNames)
			}
		}
	}
	slices.Sort(names)
	// EgressIP has no status subresource, as upstream; EgressIPTraffic has
	// one, for the controller's resolved DNS names.
	if want := []string{"egressips", "egressiptraffics", "egressiptraffics/status"}; !slices.Equal(names, want) {
		t.Errorf("k8s.ovn.org/v1 serves %v, want %v", names, want)
	}
}

// exampleEgressIPs returns the EgressIP documents among the examples.
func exampleEgressIPs(t *testing.T) map[string]*unstructured.Unstructured {
	objs, err := kubetest.ReadObjects(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == v1.Kind {
			out[o.GetName()] = o
		}
	}
	if len(out) < 4 {
		t.Fatalf("found %d EgressIP examples in %s, want the spec's 4", len(out), examplesDir)
	}
	return out
}

func testExamples(t *testing.T, c *v1.Client, dyn dynamic.Interface) {
	ctx := context.Background()
	for name, o := range exampleEgressIPs(t) {
		// Sent exactly as written in the file.
		if _, err := dyn.Resource(v1.GroupVersionResource).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Errorf("creating example %s: %v", name, err)
			continue
		}
		got, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("reading example %s back: %v", name, err)
			continue
		}
		// What was stored equals what the file says, field for field.
		var want v1.EgressIP
		b, _ := json.Marshal(o.Object)
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("example %s stored as %+v, file says %+v", name, got.Spec, want.Spec)
		}
		if len(got.Status.Items) != 0 {
			t.Errorf("example %s has status %+v before any controller ran", name, got.Status)
		}
	}
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 4 {
		t.Errorf("List returned %d EgressIPs, want at least the 4 examples", len(list.Items))
	}
}

func testInvalid(t *testing.T, c *v1.Client, dyn dynamic.Interface) {
	ctx := context.Background()
	base := func(name string, ips ...string) *v1.EgressIP {
		return &v1.EgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.EgressIPSpec{
				EgressIPs:         ips,
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "qa"}},
			},
		}
	}
	for _, bad := range []string{"192.168.1.300", "not-an-ip", "10.0.0.1/24", "fe80::1%eth0", "::ffff:192.0.2.1", "192.168.001.1", ""} {
		_, err := c.Create(ctx, base("bad-ip", "192.0.2.10", bad), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("egress IP %q: err = %v, want Invalid", bad, err)
			continue
		}
		msg := err.Error()
		if bad == "192.168.1.300" {
			t.Logf("refusal as users see it: %s", msg)
		}
		if !strings.Contains(msg, "spec.egressIPs[1]") || !strings.Contains(msg, "must be a valid IPv4 or IPv6 address") {
			t.Errorf("egress IP %q refused with %q: want it to name spec.egressIPs[1] and say it must be a valid IP", bad, msg)
		}
	}
	// Good ones in both families are accepted.
	if _, err := c.Create(ctx, base("good-ips", "192.0.2.10", "2001:db8::10"), metav1.CreateOptions{}); err != nil {
		t.Errorf("valid IPv4+IPv6 refused: %v", err)
	}

	// namespaceSelector is required (sent without it, as raw YAML would).
	noSel := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.ovn.org/v1", "kind": "EgressIP",
		"metadata": map[string]any{"name": "no-selector"},
		"spec":     map[string]any{"egressIPs": []any{"192.0.2.20"}},
	}}
	_, err := dyn.Resource(v1.GroupVersionResource).Create(ctx, noSel, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.namespaceSelector: Required value") {
		t.Errorf("EgressIP without namespaceSelector: err = %v, want spec.namespaceSelector: Required value", err)
	}
	noIPs := noSel.DeepCopy()
	noIPs.Object["spec"] = map[string]any{"namespaceSelector": map[string]any{}}
	_, err = dyn.Resource(v1.GroupVersionResource).Create(ctx, noIPs, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.egressIPs: Required value") {
		t.Errorf("EgressIP without egressIPs: err = %v, want spec.egressIPs: Required value", err)
	}

	badOp := base("bad-operator", "192.0.2.30")
	badOp.Spec.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
	_, err = c.Create(ctx, badOp, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.podSelector.matchExpressions[0].operator") {
		t.Errorf("selector operator Near: err = %v, want Invalid naming the operator", err)
	}

	// A bad IP in status is refused too.
	st := base("bad-status", "192.0.2.40")
	st.Status.Items = []v1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.0.2.400"}}
	_, err = c.Create(ctx, st, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.items[0].egressIP") {
		t.Errorf("status with a bad IP: err = %v, want Invalid naming status.items[0].egressIP", err)
	}
	for _, n := range []string{"bad-ip", "no-selector", "bad-operator", "bad-status"} {
		if _, err := c.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("refused object %s exists anyway (err %v)", n, err)
		}
	}
}

func testStatus(t *testing.T, env *kubetest.Env, c *v1.Client) {
	ctx := context.Background()
	e := &v1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "status-test"},
		Spec: v1.EgressIPSpec{
			EgressIPs:         []string{"192.0.2.50", "2001:db8::50"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		},
	}
	created, err := c.Create(ctx, e, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating with a Go client and zero status: %v", err)
	}
	created.Status.Items = []v1.EgressIPStatusItem{
		{Node: "gw-a", EgressIP: "192.0.2.50"},
		{Node: "gw-b", EgressIP: "2001:db8::50"},
	}
	if _, err := c.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing status with a plain update: %v", err)
	}
	got, err := c.Get(ctx, "status-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Status.Items, created.Status.Items) {
		t.Fatalf("status after update = %+v, want %+v", got.Status.Items, created.Status.Items)
	}
	// There is no /status endpoint to write through, as upstream.
	err = c.RESTClient().Get().Resource(v1.Resource).Name("status-test").SubResource("status").Do(ctx).Error()
	if !apierrors.IsNotFound(err) {
		t.Errorf("GET .../status: err = %v, want NotFound (no status subresource)", err)
	}
	// A merge patch on the main resource can change status too.
	patched, err := c.Patch(ctx, "status-test", types.MergePatchType,
		[]byte(`{"status":{"items":[{"node":"gw-c","egressIP":"192.0.2.50"}]}}`), metav1.PatchOptions{})
	if err != nil || len(patched.Status.Items) != 1 || patched.Status.Items[0].Node != "gw-c" {
		t.Fatalf("merge-patching status: %v, %+v", err, patched.Status)
	}
	// Clearing: nil items leaves status out entirely, which the CRD accepts.
	patched.Status.Items = nil
	cleared, err := c.Update(ctx, patched, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("clearing status: %v", err)
	}
	if len(cleared.Status.Items) != 0 {
		t.Errorf("status after clearing = %+v", cleared.Status)
	}
	// Optimistic concurrency still guards status writes.
	_, err = c.Update(ctx, created, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: err = %v, want Conflict", err)
	}
	if err := c.Delete(ctx, "status-test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "status-test", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after Delete: err = %v, want NotFound", err)
	}
}

func testInformer(t *testing.T, c *v1.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := cache.NewSharedIndexInformer(c.ListWatch(), &v1.EgressIP{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}
	if _, err := c.Create(ctx, &v1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "watched"},
		Spec:       v1.EgressIPSpec{EgressIPs: []string{"192.0.2.60"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var o any
	nstest.Eventually(t, "the informer seeing the created EgressIP through Watch", 30*time.Second, func() bool {
		var ok bool
		o, ok, _ = inf.GetStore().GetByKey("watched")
		return ok
	})
	if got := o.(*v1.EgressIP).Spec.EgressIPs; !slices.Equal(got, []string{"192.0.2.60"}) {
		t.Fatalf("informer has egressIPs %v", got)
	}
}

// table asks the apiserver for the server-side table kubectl prints.
func table(t *testing.T, c *v1.Client, name string) *metav1.Table {
	t.Helper()
	raw, err := c.RESTClient().Get().Resource(v1.Resource).Name(name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("table for %s: %v", name, err)
	}
	var tb metav1.Table
	if err := json.Unmarshal(raw, &tb); err != nil {
		t.Fatalf("decoding table: %v: %s", err, raw)
	}
	return &tb
}

func testKubectl(t *testing.T, env *kubetest.Env, c *v1.Client) {
	ctx := context.Background()
	e := &v1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "columns"},
		Spec: v1.EgressIPSpec{
			EgressIPs:         []string{"192.0.2.70", "192.0.2.71"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "qa"}},
		},
		Status: v1.EgressIPStatus{Items: []v1.EgressIPStatusItem{{Node: "gw-a", EgressIP: "192.0.2.70"}, {Node: "gw-b", EgressIP: "192.0.2.71"}}},
	}
	if _, err := c.Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The printer columns, as the API serves them to any client.
	tb := table(t, c, "columns")
	var cols []string
	for _, cd := range tb.ColumnDefinitions {
		cols = append(cols, cd.Name)
	}
	// Exactly upstream's: declaring printer columns drops the default Age.
	if want := []string{"Name", "EgressIPs", "Assigned Node", "Assigned EgressIPs"}; !slices.Equal(cols, want) {
		t.Errorf("table columns = %q, want %q", cols, want)
	}
	if len(tb.Rows) != 1 || len(tb.Rows[0].Cells) != 4 {
		t.Fatalf("table rows = %+v", tb.Rows)
	}
	// Like upstream, a [*] column prints the first element only.
	if cells := tb.Rows[0].Cells[:4]; cells[0] != "columns" || cells[1] != "192.0.2.70" || cells[2] != "gw-a" || cells[3] != "192.0.2.70" {
		t.Errorf("table cells = %v, want [columns 192.0.2.70 gw-a 192.0.2.70]", cells)
	}

	t.Run("apply", func(t *testing.T) {
		// kubectl apply of the examples, unchanged, next to the objects the
		// dynamic client already created: apply must take them over cleanly.
		files, _ := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
		for _, f := range files {
			out, err := env.Kubectl(t, "apply", "-f", f)
			if err != nil {
				t.Fatalf("kubectl apply -f %s: %v", f, err)
			}
			if !strings.Contains(out, "configured") && !strings.Contains(out, "created") && !strings.Contains(out, "unchanged") {
				t.Errorf("kubectl apply -f %s said %q", f, out)
			}
		}
		b, _ := os.ReadFile(filepath.Join(examplesDir, "egress-project1.yaml"))
		var want v1.EgressIP
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		out, err := env.Kubectl(t, "get", "eip", "egress-project1", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var got v1.EgressIP
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("kubectl get eip egress-project1: spec %+v, want %+v", got.Spec, want.Spec)
		}
	})

	t.Run("server-side apply", func(t *testing.T) {
		f := filepath.Join(examplesDir, "egressip-dual.yaml")
		if _, err := env.Kubectl(t, "delete", "--ignore-not-found", "-f", f); err != nil {
			t.Fatal(err)
		}
		out, err := env.Kubectl(t, "apply", "--server-side", "-f", f)
		if err != nil || !strings.Contains(out, "serverside-applied") {
			t.Fatalf("kubectl apply --server-side: %q, %v", out, err)
		}
		got, err := c.Get(context.Background(), "egressip-dual", metav1.GetOptions{})
		if err != nil || !slices.Equal(got.Spec.EgressIPs, []string{"192.168.118.30", "2600:52:7:94::30"}) {
			t.Fatalf("after server-side apply: %v, %+v", err, got.Spec)
		}
	})

	t.Run("explain", func(t *testing.T) {
		// The published OpenAPI schema carries the CRD's descriptions.
		out, err := env.Kubectl(t, "explain", "eip.spec.namespaceSelector")
		if err != nil || !strings.Contains(out, "Selects the namespaces") || !strings.Contains(out, "matchExpressions") {
			t.Errorf("kubectl explain eip.spec.namespaceSelector: %q, %v", out, err)
		}
	})

	t.Run("get eip", func(t *testing.T) {
		out, err := env.Kubectl(t, "get", "eip", "columns")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get eip columns printed %q", out)
		}
		if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"NAME", "EGRESSIPS", "ASSIGNED", "NODE", "ASSIGNED", "EGRESSIPS"}) {
			t.Errorf("header %q, want NAME EGRESSIPS ASSIGNED NODE ASSIGNED EGRESSIPS", lines[0])
		}
		if f := strings.Fields(lines[1]); !slices.Equal(f, []string{"columns", "192.0.2.70", "gw-a", "192.0.2.70"}) {
			t.Errorf("row %q, want columns 192.0.2.70 gw-a 192.0.2.70", lines[1])
		}
		// The long name and the short name list the same objects.
		long, err1 := env.Kubectl(t, "get", "egressips.k8s.ovn.org", "-o", "name")
		short, err2 := env.Kubectl(t, "get", "eip", "-o", "name")
		if err1 != nil || err2 != nil || long != short || !strings.Contains(short, "egressip.k8s.ovn.org/columns") {
			t.Errorf("get egressips vs eip: %q (%v) / %q (%v)", long, err1, short, err2)
		}
	})
}

func trafficObj(name string, nets []string, names ...string) *v1.EgressIPTraffic {
	return &v1.EgressIPTraffic{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.EgressIPTrafficSpec{DestinationNetworks: nets, DNSNames: names},
	}
}

func testTrafficRefused(t *testing.T, c *v1.TrafficClient, dyn dynamic.Interface) {
	ctx := context.Background()
	for _, tc := range []struct{ net, want string }{
		{"192.0.2.1/24", "must be written masked"},
		{"2001:db8::1/64", "must be written masked"},
		{"192.0.2.0", "CIDR must be in valid IPv4 or IPv6 CIDR format"},
		{"192.0.2.0/33", "CIDR must be in valid IPv4 or IPv6 CIDR format"},
		{"not-a-network", "CIDR must be in valid IPv4 or IPv6 CIDR format"},
		{"", "CIDR must be in valid IPv4 or IPv6 CIDR format"},
	} {
		_, err := c.Create(ctx, trafficObj("bad-net", []string{"198.51.100.0/24", tc.net}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.destinationNetworks[1]") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("destination network %q: err = %v, want Invalid naming spec.destinationNetworks[1]: %s", tc.net, err, tc.want)
		}
		// The Go check the Dir source uses agrees with the CRD.
		if _, err := v1.ParseDestinationNetwork(tc.net); err == nil {
			t.Errorf("ParseDestinationNetwork(%q) accepts what the CRD refuses", tc.net)
		}
	}
	for _, bad := range []string{"localhost", "-db.example.com", "db..example.com", "*.example.com", "db_1.example.com", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 62)} {
		_, err := c.Create(ctx, trafficObj("bad-name", nil, "db.example.com", bad), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.dnsNames[1]") {
			t.Errorf("DNS name %q: err = %v, want Invalid naming spec.dnsNames[1]", bad, err)
		}
		if v1.CheckDNSName(bad) == nil {
			t.Errorf("CheckDNSName(%q) accepts what the CRD refuses", bad)
		}
	}
	// An empty spec, or one with empty lists, names no destination.
	for name, spec := range map[string]map[string]any{
		"empty-spec":  {},
		"empty-lists": {"destinationNetworks": []any{}, "dnsNames": []any{}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8s.ovn.org/v1", "kind": v1.TrafficKind,
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}
		_, err := dyn.Resource(v1.TrafficGroupVersionResource).Create(ctx, u, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec") {
			t.Errorf("EgressIPTraffic with spec %v: err = %v, want Invalid", spec, err)
		}
	}
	// Too many entries.
	many := make([]string, v1.MaxDestinations+1)
	for i := range many {
		many[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24).String()
	}
	if _, err := c.Create(ctx, trafficObj("too-many", many), metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.destinationNetworks: Too many") {
		t.Errorf("%d destination networks: err = %v, want Invalid: Too many", len(many), err)
	}
	for _, n := range []string{"bad-net", "bad-name", "empty-spec", "empty-lists", "too-many"} {
		if _, err := c.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("refused object %s exists anyway (err %v)", n, err)
		}
	}

	// Good objects: either list alone, both, both families, the longest
	// name, and the most entries.
	good := []*v1.EgressIPTraffic{
		trafficObj("good-nets", []string{"192.0.2.0/24", "2001:db8::/32", "198.51.100.7/32", "0.0.0.0/0"}),
		trafficObj("good-names", nil, "db.example.com", "DB-2.Example.COM.", strings.Repeat("a", 63)+"."+strings.Repeat("b", 63)+"."+strings.Repeat("c", 63)+"."+strings.Repeat("d", 61)),
		trafficObj("good-both", []string{"203.0.113.0/24"}, "api.example.org"),
		trafficObj("good-max", many[:v1.MaxDestinations]),
	}
	for _, g := range good {
		if errs := g.Problems(); len(errs) != 0 {
			t.Fatalf("test object %s has problems: %v", g.Name, errs)
		}
		got, err := c.Create(ctx, g, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("valid EgressIPTraffic %s refused: %v", g.Name, err)
			continue
		}
		if !reflect.DeepEqual(got.Spec, g.Spec) {
			t.Errorf("%s stored as %+v, sent %+v", g.Name, got.Spec, g.Spec)
		}
	}
	l, err := c.List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != len(good) {
		t.Errorf("List: %v, %d items, want %d", err, len(l.Items), len(good))
	}
}

func testTrafficStatus(t *testing.T, c *v1.TrafficClient) {
	ctx := context.Background()
	withStatus := trafficObj("status-traffic", nil, "db.example.com")
	withStatus.Status.DNSNames = []v1.ResolvedName{{Name: "db.example.com", Addresses: []string{"192.0.2.9"}}}
	created, err := c.Create(ctx, withStatus, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// With a status subresource the main resource ignores status.
	if len(created.Status.DNSNames) != 0 {
		t.Errorf("Create stored status %+v; the status subresource should drop it", created.Status)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st := created.DeepCopy()
	st.Status.DNSNames = []v1.ResolvedName{{Name: "db.example.com", Addresses: []string{"192.0.2.10", "2001:db8::10"},
		ResolvedAt: now, NextResolution: metav1.NewTime(now.Add(30 * time.Second))}}
	st.Spec.DNSNames = []string{"changed.example.com"} // ignored by /status
	updated, err := c.UpdateStatus(ctx, st, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("UpdateStatus: %v", err)
	}
	if !reflect.DeepEqual(updated.Status, st.Status) || !slices.Equal(updated.Spec.DNSNames, []string{"db.example.com"}) {
		t.Errorf("after UpdateStatus: spec %+v status %+v; want spec unchanged and status %+v", updated.Spec, updated.Status, st.Status)
	}
	// A spec update keeps the status the controller wrote.
	spec := updated.DeepCopy()
	spec.Spec.DestinationNetworks = []string{"192.0.2.0/24"}
	spec.Status = v1.EgressIPTrafficStatus{}
	after, err := c.Update(ctx, spec, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if !reflect.DeepEqual(after.Status, st.Status) {
		t.Errorf("a spec update changed status to %+v", after.Status)
	}
	// A bad address in status is refused.
	bad := after.DeepCopy()
	bad.Status.DNSNames[0].Addresses = []string{"192.0.2.300"}
	if _, err := c.UpdateStatus(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.dnsNames[0].addresses[0]") {
		t.Errorf("status with a bad address: err = %v, want Invalid naming status.dnsNames[0].addresses[0]", err)
	}
	// Optimistic concurrency guards status writes; a deleted object is gone.
	if _, err := c.UpdateStatus(ctx, st, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("UpdateStatus with a stale resourceVersion: err = %v, want Conflict", err)
	}
	if err := c.Delete(ctx, "status-traffic", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateStatus(ctx, after, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("UpdateStatus after Delete: err = %v, want NotFound", err)
	}

	// An informer built on ListWatch sees objects come.
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	inf := cache.NewSharedIndexInformer(c.ListWatch(), &v1.EgressIPTraffic{}, 0, cache.Indexers{})
	go inf.RunWithContext(ictx)
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}
	if _, err := c.Create(ctx, trafficObj("watched-traffic", []string{"192.0.2.0/25"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, "the informer seeing the created EgressIPTraffic through Watch", 30*time.Second, func() bool {
		_, ok, _ := inf.GetStore().GetByKey("watched-traffic")
		return ok
	})
}

func testTrafficKubectl(t *testing.T, env *kubetest.Env, c *v1.Client) {
	if _, err := c.Traffic().Create(context.Background(), trafficObj("columns-traffic", []string{"192.0.2.0/24", "198.51.100.0/24"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := env.Kubectl(t, "get", "eipt", "columns-traffic")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get eipt printed %q", out)
	}
	if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"NAME", "DESTINATIONNETWORKS", "AGE"}) {
		t.Errorf("header %q, want NAME DESTINATIONNETWORKS AGE (the enhancement's columns)", lines[0])
	}
	if f := strings.Fields(lines[1]); len(f) != 3 || f[0] != "columns-traffic" || f[1] != `["192.0.2.0/24","198.51.100.0/24"]` {
		t.Errorf("row %q, want columns-traffic [\"192.0.2.0/24\",\"198.51.100.0/24\"] AGE", lines[1])
	}
}
