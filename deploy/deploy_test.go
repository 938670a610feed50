// Package deploy holds Egret's Kubernetes manifests; its tests build them with
// kustomize and apply them to a real kube-apiserver.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/control/access"
	"github.com/egret-gw/egret/internal/kubetest"
)

// obj is a manifest decoded generically.
type obj map[string]any

func (o obj) kind() string { s, _ := o["kind"].(string); return s }

func (o obj) name() string { return str(o, "metadata", "name") }

func (o obj) ns() string { return str(o, "metadata", "namespace") }

func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, ok2 := v.(obj); ok2 {
					m = o
				} else {
					return nil
				}
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string { s, _ := get(v, path...).(string); return s }

func kubectl(t *testing.T) string {
	t.Helper()
	return kubetest.Tool(t, "kubectl", "hack/k8s-bins.sh")
}

func run(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.Bytes()
}

// build runs kustomize on dir and decodes every object.
func build(t *testing.T, kc, dir string) ([]byte, []obj) {
	t.Helper()
	raw := run(t, nil, kc, "kustomize", dir)
	var objs []obj
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("kustomize %s output: %v", dir, err)
		}
		objs = append(objs, o)
	}
	return raw, objs
}

func find(t *testing.T, objs []obj, kind, name string) obj {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in the build", kind, name)
	return nil
}

func TestKustomizeBuild(t *testing.T) {
	kc := kubectl(t)
	_, objs := build(t, kc, ".")
	var kinds []string
	nsCount := 0
	sas := map[string]bool{}
	for _, o := range objs {
		kinds = append(kinds, o.kind()+"/"+o.name())
		if o.kind() == "Namespace" {
			nsCount++
		}
		if o.kind() == "ServiceAccount" {
			sas[o.ns()+"/"+o.name()] = true
		}
		if str(o, "metadata", "labels", "app.kubernetes.io/part-of") != "egret" {
			t.Errorf("%s/%s lacks the part-of label", o.kind(), o.name())
		}
	}
	sort.Strings(kinds)
	t.Logf("deploy/ builds %d objects: %v", len(objs), kinds)
	if nsCount != 1 {
		t.Errorf("%d Namespace objects, want 1", nsCount)
	}
	// The agents need the privileged PodSecurity level: on a cluster whose
	// default is baseline or restricted, the namespace's label admits them.
	ns := find(t, objs, "Namespace", "egret-system")
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if l := str(ns, "metadata", "labels", "pod-security.kubernetes.io/"+mode); l != "privileged" {
			t.Errorf("Namespace egret-system: label pod-security.kubernetes.io/%s=%q, want privileged", mode, l)
		}
	}

	// Every workload runs as a ServiceAccount the build creates.
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "DaemonSet" {
			continue
		}
		sa := str(o, "spec", "template", "spec", "serviceAccountName")
		if !sas[o.ns()+"/"+sa] {
			t.Errorf("%s %s runs as ServiceAccount %q, which deploy/ does not create", o.kind(), o.name(), sa)
		}
	}

	checkContainersConfined(t, objs)

	ctl := find(t, objs, "Deployment", "egret-controller")
	if r, _ := get(ctl, "spec", "replicas").(float64); r != 2 {
		t.Errorf("controller replicas %v, want 2", get(ctl, "spec", "replicas"))
	}
	if args := fmt.Sprint(get(ctl, "spec", "template", "spec", "containers", 0, "args")); !strings.Contains(args, "--leader-elect=true") {
		t.Errorf("controller args %s lack --leader-elect=true", args)
	}

	gw := find(t, objs, "DaemonSet", "egret-gateway")
	spec := get(gw, "spec", "template", "spec")
	if get(spec, "hostNetwork") != true {
		t.Error("gateway is not on the host network")
	}
	// An admin-owned label, which a kubelet cannot set on its own Node,
	// and the controller places egress IPs by the same one (issue 33).
	if sel := fmt.Sprint(get(spec, "nodeSelector")); sel != "map[node-restriction.kubernetes.io/egret-gateway:true]" {
		t.Errorf("gateway nodeSelector %v, want only node-restriction.kubernetes.io/egret-gateway: \"true\"", sel)
	}
	if args := fmt.Sprint(get(ctl, "spec", "template", "spec", "containers", 0, "args")); !strings.Contains(args, "--node-selector=node-restriction.kubernetes.io/egret-gateway=true") {
		t.Errorf("controller args %s lack the gateway nodes' --node-selector", args)
	}
	if get(spec, "tolerations") == nil {
		t.Error("gateway has no tolerations")
	}
	sc := get(spec, "containers", 0, "securityContext")
	if get(sc, "privileged") == true {
		t.Error("gateway is privileged")
	}
	var add []string
	for _, c := range get(sc, "capabilities", "add").([]any) {
		add = append(add, c.(string))
	}
	sort.Strings(add)
	if want := []string{"BPF", "IPC_LOCK", "NET_ADMIN", "NET_RAW", "PERFMON"}; !slices.Equal(add, want) {
		t.Errorf("gateway capabilities %v, want exactly %v", add, want)
	}
	if d := fmt.Sprint(get(sc, "capabilities", "drop")); d != "[ALL]" {
		t.Errorf("gateway drops %s, want [ALL]", d)
	}
	bpffs := false
	for _, v := range get(spec, "volumes").([]any) {
		if str(v, "hostPath", "path") == "/sys/fs/bpf/egret" {
			bpffs = true
		}
	}
	if !bpffs {
		t.Error("gateway does not mount its directory of the host's bpffs (/sys/fs/bpf/egret)")
	}
	steer := find(t, objs, "DaemonSet", "egret-steer")
	if c := fmt.Sprint(get(steer, "spec", "template", "spec", "containers", 0, "securityContext", "capabilities", "add")); c != "[NET_ADMIN]" {
		t.Errorf("steer capabilities %s, want [NET_ADMIN]", c)
	}

	// Metrics ports are the documented ones.
	for name, port := range map[string]float64{"egret-gateway": 9110, "egret-steer": 9112} {
		ds := find(t, objs, "DaemonSet", name)
		if p, _ := get(ds, "spec", "template", "spec", "containers", 0, "ports", 0, "containerPort").(float64); p != port {
			t.Errorf("%s metrics port %v, want %v", name, p, port)
		}
	}
}

// TestCRDsApart: the CRDs are deploy/crd/'s kustomization and nothing else's
// that users apply and delete: `kubectl delete -k` of deploy/ or of the
// cluster's overlays would delete a CRD with every object of it.
func TestCRDsApart(t *testing.T) {
	kc := kubectl(t)
	_, crds := build(t, kc, "crd")
	var names []string
	for _, o := range crds {
		if o.kind() != "CustomResourceDefinition" {
			t.Errorf("deploy/crd/ builds %s %s; it holds only CRDs", o.kind(), o.name())
		}
		names = append(names, o.name())
	}
	sort.Strings(names)
	if want := []string{"cloudprivateipconfigs.cloud.network.openshift.io", "egressips.k8s.ovn.org", "egressiptraffics.k8s.ovn.org"}; !slices.Equal(names, want) {
		t.Errorf("deploy/crd/ builds %v, want %v", names, want)
	}
	for _, dir := range []string{".", "monitoring", "../hack/cluster/overlay", "../hack/cluster/overlay-ipv6"} {
		_, objs := build(t, kc, dir)
		for _, o := range objs {
			if o.kind() == "CustomResourceDefinition" {
				t.Errorf("%s builds CRD %s: kubectl delete -k %s would delete it and every object of it", dir, o.name(), dir)
			}
		}
	}
}

func TestMonitoringBuild(t *testing.T) {
	kc := kubectl(t)
	_, objs := build(t, kc, "monitoring")
	cm := find(t, objs, "ConfigMap", "egret-dashboard")
	if l := str(cm, "metadata", "labels", "grafana_dashboard"); l != "1" {
		t.Errorf("dashboard ConfigMap label grafana_dashboard=%q, want \"1\"", l)
	}
	want, err := os.ReadFile("monitoring/egret-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := str(cm, "data", "egret-dashboard.json"); got != string(want) {
		t.Error("dashboard ConfigMap differs from monitoring/egret-dashboard.json")
	}
	var d map[string]any
	if err := json.Unmarshal(want, &d); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}

	rule := find(t, objs, "PrometheusRule", "egret")
	raw, err := os.ReadFile("monitoring/egret-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(map[string]any(get(rule, "spec").(map[string]any)), file) {
		t.Error("PrometheusRule spec differs from monitoring/egret-rules.yaml; regenerate it")
	}
	for _, name := range []string{"egret-gateway", "egret-controller", "egret-steer"} {
		pm := find(t, objs, "PodMonitor", name)
		if p := str(pm, "spec", "podMetricsEndpoints", 0, "port"); p != "metrics" {
			t.Errorf("PodMonitor %s scrapes port %q, want metrics", name, p)
		}
		// An overlay may move the PodMonitors to Prometheus' namespace: they
		// name the pods' own.
		if m := fmt.Sprint(get(pm, "spec", "namespaceSelector", "matchNames")); m != "[egret-system]" {
			t.Errorf("PodMonitor %s selects pods in namespaces %s, want [egret-system]", name, m)
		}
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (hack/deps.sh installs prometheus; CI=true demands it)")
		}
		t.Skip("promtool is not installed; run hack/deps.sh")
	}
	out := run(t, nil, p, "check", "rules", "monitoring/egret-rules.yaml")
	if !bytes.Contains(out, []byte("SUCCESS")) {
		t.Fatalf("promtool: %s", out)
	}
}

// TestApply applies deploy/ and deploy/monitoring/ to a real kube-apiserver:
// server-side dry-run first, then for real, and checks the RBAC grants.
func TestApply(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	kc := kubectl(t)
	env := kubetest.Start(t)
	k := func(stdin []byte, args ...string) []byte {
		return run(t, stdin, kc, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	}
	crds, _ := build(t, kc, "crd")
	core, coreObjs := build(t, kc, ".")
	mon, _ := build(t, kc, "monitoring")

	// The CRDs first, as docs/operations.md says: once, apart from deploy/.
	k(crds, "apply", "--server-side", "--dry-run=server", "-f", "-")
	k(crds, "apply", "--server-side", "-f", "-")
	k(nil, "wait", "--for=condition=established", "--timeout=60s", "crd/egressips.k8s.ovn.org", "crd/egressiptraffics.k8s.ovn.org", "crd/cloudprivateipconfigs.cloud.network.openshift.io")

	// Cluster-scoped objects and the namespace dry-run on an empty cluster;
	// namespaced ones need the namespace, so the whole set dry-runs after
	// the real apply of those.
	var first []byte
	for _, doc := range strings.Split(string(core), "\n---\n") {
		if strings.Contains(doc, "namespace: egret-system") {
			continue
		}
		first = append(first, []byte("---\n"+doc+"\n")...)
	}
	k(first, "apply", "--server-side", "--dry-run=server", "-f", "-")
	k(first, "apply", "--server-side", "-f", "-")
	k(core, "apply", "--server-side", "--dry-run=server", "-f", "-")
	out := k(core, "apply", "--server-side", "-f", "-")
	t.Logf("apply deploy/:\n%s", out)
	for _, o := range coreObjs {
		args := []string{"get", strings.ToLower(o.kind()), o.name(), "-o", "name"}
		if o.ns() != "" {
			args = append(args, "-n", o.ns())
		}
		k(nil, args...)
	}

	// Monitoring needs the Prometheus Operator's CRDs: a minimal copy.
	crds, err := os.ReadFile("testdata/monitoring-crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k(crds, "apply", "--server-side", "-f", "-")
	k(nil, "wait", "--for=condition=established", "--timeout=60s", "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	k(mon, "apply", "--server-side", "--dry-run=server", "-f", "-")
	t.Logf("apply deploy/monitoring/:\n%s", k(mon, "apply", "--server-side", "-f", "-"))
	if got := string(k(nil, "get", "configmap", "-n", "egret-system", "-l", "grafana_dashboard=1", "-o", "name")); strings.TrimSpace(got) != "configmap/egret-dashboard" {
		t.Errorf("dashboard ConfigMaps by label: %q", got)
	}

	// Least privilege, asked of the API server's authorizer.
	can := func(sa, verb, res string) bool {
		args := []string{"--kubeconfig", env.Kubeconfig, "auth", "can-i", verb}
		if r, ok := strings.CutSuffix(res, "/status"); ok {
			args = append(args, r, "--subresource=status")
		} else {
			args = append(args, res)
		}
		cmd := exec.Command(kc, append(args, "--as=system:serviceaccount:egret-system:"+sa, "-n", "egret-system")...)
		out, _ := cmd.Output() // exit status 1 means "no"
		return strings.TrimSpace(string(out)) == "yes"
	}
	grants := []struct {
		sa, verb, res string
		want          bool
	}{
		{"egret-controller", "update", "egressips.k8s.ovn.org", true},
		{"egret-controller", "update", "leases.coordination.k8s.io", true},
		{"egret-controller", "get", "secrets", false},
		{"egret-controller", "delete", "egressips.k8s.ovn.org", false},
		{"egret-controller", "watch", "egressiptraffics.k8s.ovn.org", true},
		{"egret-controller", "update", "egressiptraffics.k8s.ovn.org/status", true},
		{"egret-controller", "update", "egressiptraffics.k8s.ovn.org", false},
		{"egret-gateway", "watch", "egressiptraffics.k8s.ovn.org", true},
		{"egret-gateway", "update", "egressiptraffics.k8s.ovn.org/status", false},
		{"egret-steer", "list", "egressiptraffics.k8s.ovn.org", true},
		{"egret-steer", "update", "egressiptraffics.k8s.ovn.org/status", false},
		{"egret-controller", "create", "cloudprivateipconfigs.cloud.network.openshift.io", true},
		{"egret-gateway", "update", "cloudprivateipconfigs.cloud.network.openshift.io", false},
		{"egret-gateway", "watch", "egressips.k8s.ovn.org", true},
		{"egret-gateway", "list", "pods", true},
		{"egret-gateway", "update", "egressips.k8s.ovn.org", false},
		{"egret-gateway", "get", "secrets", false},
		{"egret-gateway", "create", "pods", false},
		{"egret-steer", "list", "nodes", true},
		{"egret-steer", "update", "nodes", false},
		{"egret-steer", "get", "secrets", false},
	}
	for _, g := range grants {
		if got := can(g.sa, g.verb, g.res); got != g.want {
			t.Errorf("%s can %s %s: %v, want %v", g.sa, g.verb, g.res, got, g.want)
		}
	}
	// In kube-system, the steer agent reads Cilium's ConfigMap, and only it.
	for res, want := range map[string]bool{"configmaps/cilium-config": true, "configmaps/kube-proxy": false, "configmaps": false} {
		verb := "get"
		if res == "configmaps" {
			verb = "list"
		}
		out, _ := exec.Command(kc, "--kubeconfig", env.Kubeconfig, "auth", "can-i", verb, res,
			"--as=system:serviceaccount:egret-system:egret-steer", "-n", "kube-system").Output()
		if got := strings.TrimSpace(string(out)) == "yes"; got != want {
			t.Errorf("egret-steer can %s %s in kube-system: %v, want %v", verb, res, got, want)
		}
	}
	checkUserRoles(t, kc, env.Kubeconfig)

	// Applying again changes no workload's spec (its generation stays).
	gens := func() string {
		return string(k(nil, "get", "deployment,daemonset", "-n", "egret-system", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.metadata.generation} {end}`))
	}
	before := gens()
	k(core, "apply", "--server-side", "-f", "-")
	if after := gens(); after != before || !strings.Contains(before, "egret-gateway=1") {
		t.Errorf("workload generations %q before a second apply, %q after", before, after)
	}

	checkPodSecurity(t, kc, env.Kubeconfig, coreObjs)

	// Uninstalling deploy/ keeps the CRDs, and with them users' EgressIPs.
	eip := []byte(`{"apiVersion": "k8s.ovn.org/v1", "kind": "EgressIP", "metadata": {"name": "kept"},
"spec": {"egressIPs": ["192.0.2.10"], "namespaceSelector": {"matchLabels": {"env": "prod"}}}}`)
	k(eip, "apply", "--server-side", "-f", "-")
	// No namespace controller here: the namespace stays Terminating, so no wait.
	k(core, "delete", "--wait=false", "-f", "-")
	if got := string(k(nil, "get", "eip", "kept", "-o", "jsonpath={.spec.egressIPs} {.spec.namespaceSelector.matchLabels}")); got != `["192.0.2.10"] {"env":"prod"}` {
		t.Errorf("after deleting deploy/, EgressIP kept reads %q", got)
	}
	k(nil, "get", "crd", "egressips.k8s.ovn.org", "cloudprivateipconfigs.cloud.network.openshift.io", "-o", "name")
}

// checkUserRoles binds the roles of deploy/rbac/users.yaml to one user per
// command, as docs/operations.md says to (ClusterRole egret-viewer
// cluster-wide, egret-checker in a checked namespace, Role egret-natlog in
// egret-system), and asks the API server's authorizer whether each request
// control/access lists for the command is allowed where the command makes
// it, and refused where it does not (exec and probe pods elsewhere).
func checkUserRoles(t *testing.T, kc, kubeconfig string) {
	t.Helper()
	k := func(args ...string) { run(t, nil, kc, append([]string{"--kubeconfig", kubeconfig}, args...)...) }
	const probed, other = "shop", "elsewhere"
	k("create", "namespace", probed)
	k("create", "namespace", other)
	can := func(user, verb, res, sub, ns string) bool {
		args := []string{"--kubeconfig", kubeconfig, "auth", "can-i", verb, res, "--as=" + user}
		if sub != "" {
			args = append(args, "--subresource="+sub)
		}
		if ns == "" {
			args = append(args, "--all-namespaces")
		} else {
			args = append(args, "-n", ns)
		}
		out, _ := exec.Command(kc, args...).Output() // exit status 1 means "no"
		return strings.TrimSpace(string(out)) == "yes"
	}
	for _, name := range slices.Sorted(maps.Keys(access.Commands)) {
		c := access.Commands[name]
		user := "user-" + name
		for _, role := range c.Roles {
			switch role {
			case access.Viewer:
				k("create", "clusterrolebinding", role+"-"+user, "--clusterrole", role, "--user", user)
			case access.Checker:
				k("create", "rolebinding", role+"-"+user, "-n", probed, "--clusterrole", role, "--user", user)
			case access.NATLog:
				k("create", "rolebinding", role+"-"+user, "-n", "egret-system", "--role", role, "--user", user)
			default:
				t.Fatalf("egret %s: role %s is not in deploy/rbac/users.yaml's test", name, role)
			}
		}
		for _, r := range c.Requests {
			res := r.Resource
			if r.Group != "" {
				res += "." + r.Group
			}
			ns, elsewhere := "", ""
			switch r.Where {
			case access.Egret:
				ns, elsewhere = "egret-system", probed
			case access.Probed:
				ns, elsewhere = probed, other
			}
			names := r.Names
			if len(names) == 0 {
				names = []string{""}
			}
			for _, v := range r.Verbs {
				for _, n := range names {
					obj := res
					if n != "" {
						obj += "/" + n
					}
					if !can(user, v, obj, r.Subresource, ns) {
						t.Errorf("egret %s as %s (roles %v): may not %s %s %s in %q", name, user, c.Roles, v, obj, r.Subresource, ns)
					}
					// Elsewhere egret-viewer still reads: only writes,
					// logs and exec are confined.
					read := r.Subresource == "" && (v == "get" || v == "list" || v == "watch") && slices.Contains(c.Roles, access.Viewer)
					if elsewhere != "" && !read && can(user, v, obj, r.Subresource, elsewhere) {
						t.Errorf("egret %s as %s (roles %v): may %s %s %s in %s too", name, user, c.Roles, v, obj, r.Subresource, elsewhere)
					}
				}
			}
		}
	}
	// The viewer reads the agents' ConfigMaps, no other.
	if can("user-trace", "get", "configmaps/kube-proxy", "", "egret-system") {
		t.Error("egret-viewer may read any ConfigMap")
	}
}

// checkPodSecurity shows the PodSecurity labels of deploy/'s namespace are
// what admits its pods, and needed: the pod of every workload's template,
// created (server-side dry run) in egret-system, is admitted; in a namespace
// enforcing baseline, as a cluster-wide default does (make cluster-up's
// does, and e2e/ installs under it), the host-network agents are refused.
func checkPodSecurity(t *testing.T, kc, kubeconfig string, objs []obj) {
	t.Helper()
	k := func(stdin []byte, args ...string) ([]byte, error) {
		cmd := exec.Command(kc, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		return cmd.CombinedOutput()
	}
	if out, err := k([]byte(`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "baseline",
"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}`), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("namespace baseline: %v\n%s", err, out)
	}
	refused := 0
	for _, o := range objs {
		if o.kind() != "DaemonSet" && o.kind() != "Deployment" {
			continue
		}
		tmpl, _ := get(o, "spec", "template").(map[string]any)
		spec, _ := tmpl["spec"].(map[string]any)
		// The ServiceAccount admission wants the account to exist, which it
		// does only in egret-system.
		spec = maps.Clone(spec)
		delete(spec, "serviceAccountName")
		for _, ns := range []string{"egret-system", "baseline"} {
			pod, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
				"metadata": map[string]any{"name": o.name() + "-pss", "namespace": ns, "labels": get(tmpl, "metadata", "labels")},
				"spec":     spec})
			if err != nil {
				t.Fatal(err)
			}
			out, err := k(pod, "create", "--dry-run=server", "-f", "-")
			switch {
			case ns == "egret-system" && err != nil:
				t.Errorf("%s %s: its pod is refused in egret-system: %v\n%s", o.kind(), o.name(), err, out)
			case ns == "baseline" && err == nil && get(spec, "hostNetwork") == true:
				t.Errorf("%s %s: its host-network pod is admitted under PodSecurity baseline; the test shows nothing", o.kind(), o.name())
			case ns == "baseline" && err != nil:
				if !strings.Contains(string(out), "violates PodSecurity") {
					t.Errorf("%s %s in namespace baseline: refused for another reason: %s", o.kind(), o.name(), out)
				}
				refused++
			}
		}
	}
	// gateway, steer and the CNI installer: host network, hostPath, NET_ADMIN.
	if refused < 3 {
		t.Errorf("%d workloads refused under baseline, want at least the 3 host-level agents", refused)
	}
}

// checkContainersConfined: every container of every workload drops every
// capability it does not add back, runs under the runtime's default seccomp
// profile (its own or its pod's), cannot gain privileges and is not
// privileged. The CNI installer once ran with the runtime's default
// capabilities and no seccomp profile (issue 33).
func checkContainersConfined(t *testing.T, objs []obj) {
	t.Helper()
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "DaemonSet" {
			continue
		}
		pod := get(o, "spec", "template", "spec")
		var containers []any
		for _, key := range []string{"initContainers", "containers"} {
			if l, ok := get(pod, key).([]any); ok {
				containers = append(containers, l...)
			}
		}
		for _, c := range containers {
			where := fmt.Sprintf("%s %s container %s", o.kind(), o.name(), str(c, "name"))
			sc := get(c, "securityContext")
			if d := fmt.Sprint(get(sc, "capabilities", "drop")); d != "[ALL]" {
				t.Errorf("%s: capabilities.drop %s, want [ALL]", where, d)
			}
			if get(sc, "allowPrivilegeEscalation") != false {
				t.Errorf("%s: allowPrivilegeEscalation is not false", where)
			}
			if get(sc, "privileged") == true {
				t.Errorf("%s: privileged", where)
			}
			profile := str(sc, "seccompProfile", "type")
			if profile == "" {
				profile = str(pod, "securityContext", "seccompProfile", "type")
			}
			if profile != "RuntimeDefault" {
				t.Errorf("%s: seccomp profile %q, want RuntimeDefault", where, profile)
			}
		}
	}
}
