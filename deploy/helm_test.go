package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/internal/kubetest"
)

// chart is the Helm chart, rendered beside kustomize's deploy/.
const chart = "helm/egret"

// helmBin returns the helm that hack/helm.sh builds; missing, it fails under
// CI=true and skips otherwise.
func helmBin(t *testing.T) string {
	t.Helper()
	return kubetest.Tool(t, "helm", "hack/helm.sh")
}

// helmTemplate renders the chart as release "egret" with the CRDs, extra
// arguments (--set, --namespace) appended, and decodes every object; each
// manifest's file is the template it came from.
func helmTemplate(t *testing.T, hb string, args ...string) []manifest {
	t.Helper()
	return helmTemplateOf(t, hb, chart, args...)
}

// helmTemplateOf is helmTemplate of the chart at ref: a directory or a
// packaged chart (`helm package`).
func helmTemplateOf(t *testing.T, hb, ref string, args ...string) []manifest {
	t.Helper()
	raw := run(t, nil, hb, append([]string{"template", "egret", ref, "--namespace", "egret-system", "--include-crds"}, args...)...)
	source := regexp.MustCompile(`(?m)^# Source: (\S+)`)
	var out []manifest
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		var o obj
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("helm template output: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		file := "helm"
		if m := source.FindStringSubmatch(doc); m != nil {
			file = m[1]
		}
		out = append(out, manifest{file: file, o: o})
	}
	return out
}

func objKey(o obj) string { return o.kind() + " " + o.ns() + "/" + o.name() }

// chartExtras are the ConfigMap keys the chart adds to kustomize's: the
// gateway gets the tunnel's VNI and port too, so one value sets both ends.
var chartExtras = map[string][]string{"egret-gateway/gateway.yaml": {"vni", "port"}}

// normalise strips o of what may differ between the chart and kustomize by
// design: metadata labels and annotations (Helm's own), the pod template's
// config checksums, the image tag and pull policy; ConfigMap data is decoded
// so that formatting does not count. It returns the image repositories and
// tags it removed.
func normalise(t *testing.T, o obj) (images []string) {
	t.Helper()
	md, _ := o["metadata"].(map[string]any)
	delete(md, "labels")
	delete(md, "annotations")
	if tmd, ok := get(o, "spec", "template", "metadata").(map[string]any); ok {
		if a, ok := tmd["annotations"].(map[string]any); ok {
			for k := range a {
				if strings.HasPrefix(k, "checksum/") {
					delete(a, k)
				}
			}
			if len(a) == 0 {
				delete(tmd, "annotations")
			}
		}
	}
	for _, field := range []string{"initContainers", "containers"} {
		cs, _ := get(o, "spec", "template", "spec", field).([]any)
		for _, c := range cs {
			cm := c.(map[string]any)
			img, _ := cm["image"].(string)
			images = append(images, img)
			if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
				cm["image"] = img[:i]
			}
			delete(cm, "imagePullPolicy")
		}
	}
	if o.kind() == "ConfigMap" {
		data, _ := o["data"].(map[string]any)
		for k, v := range data {
			var d any
			if err := yaml.Unmarshal([]byte(v.(string)), &d); err != nil {
				t.Fatalf("ConfigMap %s key %s: %v", o.name(), k, err)
			}
			data[k] = d
		}
	}
	return images
}

// diff lists the fields where a and b differ, one a line, as
// "path: value in a | value in b"; empty when they are equal.
func diff(a, b any) string {
	fa, fb := map[string]string{}, map[string]string{}
	flatten(fa, "", a)
	flatten(fb, "", b)
	var lines []string
	for k, va := range fa {
		if vb, ok := fb[k]; !ok || va != vb {
			lines = append(lines, fmt.Sprintf("  %s: %s | %s", k, va, orAbsent(vb, ok)))
		}
	}
	for k, vb := range fb {
		if _, ok := fa[k]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: (absent) | %s", k, vb))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func orAbsent(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return v
}

// flatten records every leaf of v (decoded JSON) in out under its path.
func flatten(out map[string]string, path string, v any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[path] = "{}"
		}
		for k, e := range x {
			flatten(out, strings.TrimPrefix(path+"."+k, "."), e)
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
		}
		for i, e := range x {
			flatten(out, fmt.Sprintf("%s[%d]", path, i), e)
		}
	default:
		b, _ := json.Marshal(x)
		out[path] = string(b)
	}
}

// TestHelmMatchesKustomize renders the chart with its default values and
// checks it yields exactly the objects of `kubectl kustomize deploy/`, field
// for field (container args, env, volumes, RBAC rules, ConfigMaps, the CRD),
// but for Helm's own labels, the image tag (the chart's appVersion) and the
// few keys the chart adds on purpose (chartExtras); with monitoring.enabled,
// those of deploy/monitoring/ too.
func TestHelmMatchesKustomize(t *testing.T) {
	hb, kc := helmBin(t), kubectl(t)
	var appVersion struct {
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &appVersion); err != nil || appVersion.AppVersion == "" {
		t.Fatalf("%s/Chart.yaml: no appVersion (%v)", chart, err)
	}
	// The chart's crds/ are deploy/crd/'s kustomization (--include-crds).
	_, core := build(t, kc, ".")
	_, crds := build(t, kc, "crd")
	core = append(core, crds...)
	_, mon := build(t, kc, "monitoring")
	t.Run("defaults", func(t *testing.T) {
		sameObjects(t, helmTemplate(t, hb), core, appVersion.AppVersion)
	})
	t.Run("monitoring", func(t *testing.T) {
		sameObjects(t, helmTemplate(t, hb, "--set", "monitoring.enabled=true"), append(core, mon...), appVersion.AppVersion)
	})
}

// sameObjects checks that the chart's objects are kustomize's, as
// TestHelmMatchesKustomize says. It compares copies: the objects given stay
// as they are.
func sameObjects(t *testing.T, chartObjs []manifest, kust []obj, appVersion string) {
	t.Helper()
	want := map[string]obj{}
	for _, o := range kust {
		want[objKey(o)] = obj(jsonRound(t, o).(map[string]any))
	}
	got := map[string]obj{}
	for _, m := range chartObjs {
		k := objKey(m.o)
		if _, dup := got[k]; dup {
			t.Errorf("the chart renders %s twice", k)
		}
		got[k] = obj(jsonRound(t, m.o).(map[string]any))
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("kustomize has %s; the chart does not", k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart has %s; kustomize does not", k)
		}
	}

	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		// The chart adds Helm's labels; it must keep every one of kustomize's
		// (the CRDs, verbatim in both, have none).
		gl, _ := get(g, "metadata", "labels").(map[string]any)
		wl, _ := get(w, "metadata", "labels").(map[string]any)
		for l, v := range wl {
			if gl[l] != v {
				t.Errorf("%s: label %s=%v, want %v as kustomize", k, l, gl[l], v)
			}
		}
		// The repository is compared with the rest; the tag is the chart's
		// appVersion, which may lag or lead deploy/'s between releases.
		kustImages := normalise(t, w)
		for i, img := range normalise(t, g) {
			if !strings.HasSuffix(img, ":"+appVersion) {
				t.Errorf("%s: image %s, want tag %s (the chart's appVersion)", k, img, appVersion)
			}
			if i < len(kustImages) && !strings.HasSuffix(kustImages[i], ":"+appVersion) {
				t.Logf("%s: kustomize runs %s, the chart %s", k, kustImages[i], img)
			}
		}
		if g.kind() == "ConfigMap" {
			gd, _ := g["data"].(map[string]any)
			wd, _ := w["data"].(map[string]any)
			for file, extras := range chartExtras {
				name, key, _ := strings.Cut(file, "/")
				if g.name() != name {
					continue
				}
				gm, _ := gd[key].(map[string]any)
				wm, _ := wd[key].(map[string]any)
				for _, x := range extras {
					if _, ok := wm[x]; ok {
						t.Errorf("%s %s: kustomize now sets %s itself; drop it from chartExtras", k, key, x)
					}
					if _, ok := gm[x]; !ok {
						t.Errorf("%s %s: the chart no longer sets %s; drop it from chartExtras", k, key, x)
					}
					delete(gm, x)
				}
			}
		}
		if d := diff(jsonRound(t, g), jsonRound(t, w)); d != "" {
			t.Errorf("%s differs (field: chart | kustomize):\n%s", k, d)
		}
	}
}

// jsonRound returns v through JSON, so numbers and maps compare alike
// whichever decoder made them.
func jsonRound(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// otherValues are non-default values a real user would give: other
// interfaces, networks, image, namespace, placement, resources and logging.
var otherValues = []string{
	"--namespace", "egress",
	"--set", "image.repository=registry.example:5000/egret,image.tag=v9.8.7,image.pullPolicy=Always",
	"--set", "interfaces.gateway={ens5,ens6},interfaces.underlay=bond0",
	"--set", "networks.clusterCIDRs={10.128.0.0/14,fd00:10::/56},networks.serviceCIDRs={172.30.0.0/16}",
	"--set", "networks.nodeCIDRs={192.168.10.0/24},networks.vni=4242",
	"--set", "controller.reachabilityTimeoutSeconds=3,controller.replicas=3",
	"--set", "log.level=debug,log.format=text",
	"--set", "gateway.mode=afpacket,gateway.nodeSelector.egret/gateway=yes",
	"--set", "gatewayNodeLabel=node-restriction.kubernetes.io/egress-gateway",
	"--set", "gateway.resources.limits.memory=8Gi,steer.nodeSelector.kubernetes\\.io/os=linux",
	"--set", "controller.tolerations=null,imagePullSecrets[0].name=regcred",
	"--set", "createNamespace=false,cni.enabled=false",
	"--set", "monitoring.enabled=true,monitoring.interval.steer=1m",
	"--set", "gateway.conntrackMax=2097152,gateway.podFlowLimit=4096,gateway.egressIPFlowLimit=262144",
	"--set", "gateway.deniedDestinations={192.168.0.0/16},gateway.allowedDestinations={192.168.10.53/32}",
	"--set", "gateway.health.host=$(POD_IP),gateway.health.port=9207,gateway.publishInterfaces=false",
	"--set", "trustPodIPs=true,steer.procSysNet=,steer.noEgressIP=node,steer.allowCiliumHostRouting=true",
	"--set", "controller.egressNodeSelector=node-restriction.kubernetes.io/egress-gateway=true",
	"--set", "controller.priorityClassName=,gateway.priorityClassName=egret-gateways,priorityQuota.create=true",
	"--set", "monitoring.namespace=monitoring,monitoring.labels.release=kube-prometheus-stack",
	"--set", "gateway.admission.metricsAllow={10.9.0.0/16,192.0.2.7}",
	"--set", "gateway.admission.metricsScraper.namespace=monitoring,gateway.admission.metricsScraper.selector=app.kubernetes.io/name in (prometheus\\,vmagent)",
}

// monitoringKinds are the objects monitoring.namespace moves.
var monitoringKinds = map[string]bool{"PodMonitor": true, "PrometheusRule": true, "ConfigMap/egret-dashboard": true}

func isMonitoring(o obj) bool {
	return monitoringKinds[o.kind()] || monitoringKinds[o.kind()+"/"+o.name()]
}

// tlsValues turn on mutual TLS for the reachability probe from Secrets
// (instead of the nodes' own certificates). They are not in otherValues
// because --check-config loads the certificates, which only the cluster's
// Secrets hold.
var tlsValues = []string{
	"--namespace", "egress",
	"--set", "nodeIdentity=,healthTLS.gatewaySecret=gw-probe-tls,healthTLS.controllerSecret=ctl-probe-tls",
}

// cloudValues turn on cloud attachment with workload identity, as
// docs/cloud.md sets it up (the provider is added per test).
var cloudValues = []string{
	"--set", "cloud.serviceAccountAnnotations.controller.azure\\.workload\\.identity/client-id=00000000-0000-4000-8000-000000000001",
	"--set", "cloud.serviceAccountAnnotations.gateway.iam\\.gke\\.io/gcp-service-account=egret-gateway@proj.iam.gserviceaccount.com",
	"--set-string", "cloud.podLabels.azure\\.workload\\.identity/use=true",
}

// TestHelmArgsValidate runs every container the chart renders, with default
// and with other values, through the binary's own --check-config, as
// TestShippedArgsValidate does for deploy/.
func TestHelmArgsValidate(t *testing.T) {
	hb := helmBin(t)
	bins := buildBinaries(t)
	all := []string{"egret-gateway", "egret-steer", "egret-controller", "egress-router-cni"}
	for _, tc := range []struct {
		name   string
		family string // of the node addresses the downward API gives
		args   []string
		expect []string
	}{
		{"defaults", "ipv4", nil, all},
		{"defaults-ipv6", "ipv6", nil, all},
		{"other-values", "ipv4", otherValues, []string{"egret-gateway", "egret-steer", "egret-controller"}},
		{"other-values-ipv6", "ipv6", otherValues, []string{"egret-gateway", "egret-steer", "egret-controller"}},
		// What the end-to-end test installs on the cluster of make cluster-up.
		{"cluster-values", "ipv4", []string{"-f", "../hack/cluster/values.yaml"}, all},
		{"cluster-values-ipv6", "ipv6", []string{"-f", "../hack/cluster/values-ipv6.yaml"}, all},
		{"cloud-aws", "ipv4", append([]string{"--set", "cloud.provider=aws"}, cloudValues...), all},
		{"cloud-gcp", "ipv4", append([]string{"--set", "cloud.provider=gcp"}, cloudValues...), all},
		{"cloud-azure", "ipv6", append([]string{"--set", "cloud.provider=azure"}, cloudValues...), all},
		{"cloud-openstack", "ipv4", []string{"--set", "cloud.provider=openstack", "--set", "cloud.openstack.cloudsSecret=os-creds"}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := helmTemplate(t, hb, tc.args...)
			seen := validateContainers(t, bins, ms, func(string) bool { return true }, downward[tc.family])
			for _, w := range tc.expect {
				if !seen[w] {
					t.Errorf("no egret container checked for %s", w)
				}
			}
		})
	}
}

// TestHelmNamespaceKept: the chart's Namespace holds Helm's own release
// record, so it must outlive `helm uninstall` (which otherwise fails to
// purge the release, as the cluster end-to-end test found).
func TestHelmNamespaceKept(t *testing.T) {
	hb := helmBin(t)
	n := 0
	for _, m := range helmTemplate(t, hb) {
		if m.o.kind() != "Namespace" {
			continue
		}
		n++
		if a, _ := get(m.o, "metadata", "annotations").(map[string]any); a["helm.sh/resource-policy"] != "keep" {
			t.Errorf("Namespace %s: annotations %v, want helm.sh/resource-policy: keep", m.o.name(), a)
		}
	}
	if n != 1 {
		t.Fatalf("%d Namespaces rendered, want 1", n)
	}
}

// TestHelmValues renders the chart with other values and checks each lands
// where the binaries read it.
func TestHelmValues(t *testing.T) {
	hb := helmBin(t)
	ms := helmTemplate(t, hb, otherValues...)
	objs := map[string]obj{}
	for _, m := range ms {
		objs[m.o.kind()+"/"+m.o.name()] = m.o
		if isMonitoring(m.o) {
			if m.o.ns() != "monitoring" {
				t.Errorf("%s: namespace %s, want monitoring.namespace's, monitoring", objKey(m.o), m.o.ns())
			}
		} else if m.o.ns() == "kube-system" && m.o.name() == "egret-steer-cilium-config" {
			// Where Cilium keeps its ConfigMap, which steer reads at start.
		} else if m.o.ns() != "" && m.o.ns() != "egress" {
			t.Errorf("%s: namespace %s, want the release's, egress", objKey(m.o), m.o.ns())
		}
		if m.o.kind() == "Namespace" {
			t.Errorf("createNamespace=false still renders Namespace %s", m.o.name())
		}
		if strings.Contains(m.o.name(), "egress-router") {
			t.Errorf("cni.enabled=false still renders %s", objKey(m.o))
		}
		subjects, _ := get(m.o, "subjects").([]any)
		for _, s := range subjects {
			if ns := str(s, "namespace"); ns != "egress" {
				t.Errorf("%s: subject %s in namespace %s, want egress", objKey(m.o), str(s, "name"), ns)
			}
		}
	}
	must := func(key string) obj {
		t.Helper()
		o, ok := objs[key]
		if !ok {
			t.Fatalf("no %s rendered", key)
		}
		return o
	}
	config := func(name, key string) map[string]any {
		t.Helper()
		var m map[string]any
		if err := yaml.Unmarshal([]byte(str(must("ConfigMap/"+name), "data", key)), &m); err != nil {
			t.Fatalf("ConfigMap %s %s: %v", name, key, err)
		}
		return m
	}
	eq := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(jsonRound(t, got), jsonRound(t, want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}

	gw := config("egret-gateway", "gateway.yaml")
	eq("gateway.yaml interfaces", gw["interfaces"], []string{"ens5", "ens6"})
	eq("gateway.yaml mode", gw["mode"], "afpacket")
	eq("gateway.yaml vni", gw["vni"], 4242)
	eq("gateway.yaml logFormat", gw["logFormat"], "text")
	st := config("egret-steer", "steer.yaml")
	eq("steer.yaml underlay", st["underlay"], "bond0")
	eq("steer.yaml clusterCIDRs", st["clusterCIDRs"], []string{"10.128.0.0/14", "fd00:10::/56"})
	eq("steer.yaml serviceCIDRs", st["serviceCIDRs"], []string{"172.30.0.0/16"})
	eq("steer.yaml nodeCIDRs", st["nodeCIDRs"], []string{"192.168.10.0/24"})
	eq("steer.yaml vni", st["vni"], 4242)
	eq("steer.yaml port", st["port"], 4789)
	eq("steer.yaml logFormat", st["logFormat"], "text")
	eq("steer.yaml trustPodIPs", st["trustPodIPs"], true)
	eq("steer.yaml noEgressIP", st["noEgressIP"], "node")
	eq("steer.yaml allowCiliumHostRouting", st["allowCiliumHostRouting"], true)
	eq("gateway.yaml conntrackMax", gw["conntrackMax"], 2097152)
	eq("gateway.yaml podFlowLimit", gw["podFlowLimit"], 4096)
	eq("gateway.yaml egressIPFlowLimit", gw["egressIPFlowLimit"], 262144)
	eq("gateway.yaml deniedDestinations", gw["deniedDestinations"], []string{"192.168.0.0/16"})
	eq("gateway.yaml allowedDestinations", gw["allowedDestinations"], []string{"192.168.10.53/32"})

	container := func(key string) (obj, map[string]any) {
		t.Helper()
		o := must(key)
		c, _ := get(o, "spec", "template", "spec", "containers", 0).(map[string]any)
		if c == nil {
			t.Fatalf("%s has no container", key)
		}
		return o, c
	}
	args := func(c map[string]any) []string {
		var out []string
		for _, a := range c["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	ctl, ctlC := container("Deployment/egret-controller")
	eq("controller replicas", get(ctl, "spec", "replicas"), 3)
	eq("controller tolerations", get(ctl, "spec", "template", "spec", "tolerations"), nil)
	for _, a := range []string{"--reachability-total-timeout-seconds=3", "--log-level=debug", "--log-format=text", "--lease-namespace=egress",
		"--node-selector=node-restriction.kubernetes.io/egress-gateway=true", "--health-port=9207"} {
		if !slices.Contains(args(ctlC), a) {
			t.Errorf("controller args %q lack %s", args(ctlC), a)
		}
	}
	gwD, gwC := container("DaemonSet/egret-gateway")
	eq("gateway nodeSelector", get(gwD, "spec", "template", "spec", "nodeSelector"),
		map[string]string{"egret/gateway": "yes", "node-restriction.kubernetes.io/egress-gateway": "true"})
	eq("gateway memory limit", get(gwC, "resources", "limits", "memory"), "8Gi")
	eq("gateway cpu request", get(gwC, "resources", "requests", "cpu"), "1")
	for _, a := range []string{"--health-addr=[$(POD_IP)]:9207", "--trust-pod-ips", "--publish-interfaces=false"} {
		if !slices.Contains(args(gwC), a) {
			t.Errorf("gateway args %q lack %s", args(gwC), a)
		}
	}
	eq("gateway health port", get(gwC, "ports", 1), map[string]any{"name": "health", "containerPort": 9207, "hostPort": 9207, "protocol": "TCP"})
	for _, r := range get(must("ClusterRole/egret-gateway"), "rules").([]any) {
		// Patching nodes goes with publishing; the Events' patch stays.
		res, _ := get(r, "resources").([]any)
		if verbs, _ := get(r, "verbs").([]any); slices.Contains(verbs, any("patch")) && slices.Contains(res, any("nodes")) {
			t.Errorf("gateway.publishInterfaces=false: ClusterRole egret-gateway still grants %v", r)
		}
	}
	for _, k := range []string{"ValidatingAdmissionPolicy/egret-gateway-node-facts", "ValidatingAdmissionPolicyBinding/egret-gateway-node-facts"} {
		if _, ok := objs[k]; ok {
			t.Errorf("gateway.publishInterfaces=false still renders %s", k)
		}
	}
	stD, stC := container("DaemonSet/egret-steer")
	eq("steer nodeSelector", get(stD, "spec", "template", "spec", "nodeSelector"), map[string]string{"kubernetes.io/os": "linux"})
	for _, a := range args(stC) {
		if strings.HasPrefix(a, "--proc-sys-net") {
			t.Errorf("steer.procSysNet empty: steer still gets %s", a)
		}
	}
	eq("steer volumes with steer.procSysNet empty", get(stD, "spec", "template", "spec", "volumes"), []map[string]any{{"name": "config", "configMap": map[string]any{"name": "egret-steer"}}})
	for _, c := range []map[string]any{ctlC, gwC, stC} {
		eq(c["name"].(string)+" image", c["image"], "registry.example:5000/egret:v9.8.7")
		eq(c["name"].(string)+" pull policy", c["imagePullPolicy"], "Always")
		if !slices.Contains(args(c), "--log-level=debug") {
			t.Errorf("%s args %q lack --log-level=debug", c["name"], args(c))
		}
	}
	for _, key := range []string{"Deployment/egret-controller", "DaemonSet/egret-gateway", "DaemonSet/egret-steer"} {
		eq(key+" imagePullSecrets", get(must(key), "spec", "template", "spec", "imagePullSecrets"), []map[string]string{{"name": "regcred"}})
	}

	eq("steer PodMonitor interval", get(must("PodMonitor/egret-steer"), "spec", "podMetricsEndpoints", 0, "interval"), "1m")
	for _, key := range []string{"PodMonitor/egret-gateway", "PodMonitor/egret-controller", "PodMonitor/egret-steer", "PrometheusRule/egret"} {
		eq(key+" release label", get(must(key), "metadata", "labels", "release"), "kube-prometheus-stack")
	}
	for _, key := range []string{"PodMonitor/egret-gateway", "PodMonitor/egret-controller", "PodMonitor/egret-steer"} {
		eq(key+" namespaceSelector", get(must(key), "spec", "namespaceSelector"), map[string]any{"matchNames": []string{"egress"}})
	}

	// Priority classes: a value per role, and the quota admitting the
	// critical ones still in use (steer and the CNI installer keep theirs).
	eq("controller priorityClassName", get(ctl, "spec", "template", "spec", "priorityClassName"), nil)
	eq("gateway priorityClassName", get(gwD, "spec", "template", "spec", "priorityClassName"), "egret-gateways")
	eq("steer priorityClassName", get(stD, "spec", "template", "spec", "priorityClassName"), "system-node-critical")
	eq("ResourceQuota scope", get(must("ResourceQuota/egret-critical-pods"), "spec", "scopeSelector"),
		map[string]any{"matchExpressions": []map[string]any{{"scopeName": "PriorityClass", "operator": "In", "values": []string{"system-node-critical"}}}})
	eq("dashboard ConfigMap label", get(must("ConfigMap/egret-dashboard"), "metadata", "labels", "grafana_dashboard"), "1")

	// Probe mutual TLS: each side mounts its Secret and names the files in it.
	tls := map[string]obj{}
	for _, m := range helmTemplate(t, hb, tlsValues...) {
		tls[m.o.kind()+"/"+m.o.name()] = m.o
	}
	for _, tc := range []struct {
		key, secret string
		flags       map[string]string // flag → file in the Secret
	}{
		{"DaemonSet/egret-gateway", "gw-probe-tls", map[string]string{"--health-tls-cert": "tls.crt", "--health-tls-key": "tls.key", "--health-tls-client-ca": "ca.crt"}},
		{"Deployment/egret-controller", "ctl-probe-tls", map[string]string{"--health-tls-cert": "tls.crt", "--health-tls-key": "tls.key", "--health-tls-ca": "ca.crt"}},
	} {
		o, ok := tls[tc.key]
		if !ok {
			t.Fatalf("healthTLS: no %s rendered", tc.key)
		}
		spec := get(o, "spec", "template", "spec")
		vol := ""
		for _, v := range get(spec, "volumes").([]any) {
			if str(v, "secret", "secretName") == tc.secret {
				vol = str(v, "name")
			}
		}
		if vol == "" {
			t.Errorf("healthTLS: %s mounts no Secret %s (volumes %v)", tc.key, tc.secret, get(spec, "volumes"))
			continue
		}
		dir := ""
		vms, _ := get(spec, "containers", 0, "volumeMounts").([]any)
		for _, vm := range vms {
			if str(vm, "name") == vol {
				dir = str(vm, "mountPath")
			}
		}
		if dir == "" {
			t.Errorf("healthTLS: %s has volume %s but does not mount it", tc.key, vol)
			continue
		}
		var got []string
		for _, a := range get(spec, "containers", 0, "args").([]any) {
			got = append(got, a.(string))
		}
		for flag, file := range tc.flags {
			if want := flag + "=" + dir + "/" + file; !slices.Contains(got, want) {
				t.Errorf("healthTLS: %s args %q lack %s", tc.key, got, want)
			}
		}
	}
	// Node identity (the default): both sides are told, and the controller
	// signs for the gateway ServiceAccount of the release namespace; the
	// gateway still reads the shared key if its Secret exists (an
	// upgrade's transition), and only it with nodeIdentity "".
	argsOf := func(o obj) []string {
		return args(get(o, "spec", "template", "spec", "containers", 0).(map[string]any))
	}
	mountsKey := func(o obj) bool {
		for _, v := range get(o, "spec", "template", "spec", "volumes").([]any) {
			if str(v, "secret", "secretName") == "egret-flow-sync" {
				return true
			}
		}
		return false
	}
	byName := map[string]obj{}
	for _, m := range helmTemplate(t, hb, "--namespace", "egress") {
		byName[m.o.kind()+"/"+m.o.name()] = m.o
	}
	gwArgs, ctlArgs := argsOf(byName["DaemonSet/egret-gateway"]), argsOf(byName["Deployment/egret-controller"])
	for _, want := range []string{"--node-identity=csr"} {
		if !slices.Contains(gwArgs, want) {
			t.Errorf("default gateway args %q lack %s", gwArgs, want)
		}
		if !slices.Contains(ctlArgs, want) {
			t.Errorf("default controller args %q lack %s", ctlArgs, want)
		}
	}
	if want := "--gateway-service-account=egress:egret-gateway"; !slices.Contains(ctlArgs, want) {
		t.Errorf("default controller args %q lack %s", ctlArgs, want)
	}
	if !slices.Contains(gwArgs, "--sync-key-file=/etc/egret-sync/key") || !mountsKey(byName["DaemonSet/egret-gateway"]) {
		t.Errorf("with node identity the gateway does not read the previous release's key: args %q", gwArgs)
	}
	if g := tls["DaemonSet/egret-gateway"]; !slices.Contains(argsOf(g), "--sync-key-file=/etc/egret-sync/key") || !mountsKey(g) || slices.Contains(argsOf(g), "--node-identity=csr") {
		t.Errorf("nodeIdentity=\"\": the gateway does not read the shared key: args %q", argsOf(g))
	}
	// The node-facts policy names the gateway's ServiceAccount in the release namespace.
	if e := str(tls["ValidatingAdmissionPolicy/egret-gateway-node-facts"], "spec", "matchConditions", 0, "expression"); !strings.Contains(e, "system:serviceaccount:egress:egret-gateway") {
		t.Errorf("ValidatingAdmissionPolicy egret-gateway-node-facts in release namespace egress matches %q", e)
	}

	// A changed ConfigMap rolls its DaemonSet: the checksum follows the data.
	def := helmTemplate(t, hb)
	for _, m := range def {
		if m.o.kind() != "DaemonSet" || m.o.name() == "egress-router-cni" {
			continue
		}
		before := str(m.o, "spec", "template", "metadata", "annotations", "checksum/config")
		after := str(objs["DaemonSet/"+m.o.name()], "spec", "template", "metadata", "annotations", "checksum/config")
		if before == "" || before == after {
			t.Errorf("DaemonSet %s: checksum/config %q with defaults, %q with other values: want both set and different", m.o.name(), before, after)
		}
	}
}

// TestHelmCloud: cloud.provider reaches the controller and the gateway
// agents as --cloud-provider, the workload identity annotations their
// ServiceAccounts, the pod labels their pods; off, none of it is rendered.
func TestHelmCloud(t *testing.T) {
	hb := helmBin(t)
	objs := map[string]obj{}
	for _, m := range helmTemplate(t, hb, append([]string{"--set", "cloud.provider=azure"}, cloudValues...)...) {
		objs[m.o.kind()+"/"+m.o.name()] = m.o
	}
	for _, role := range []string{"controller", "gateway"} {
		key := map[string]string{"controller": "Deployment/egret-controller", "gateway": "DaemonSet/egret-gateway"}[role]
		var args []string
		for _, a := range get(objs[key], "spec", "template", "spec", "containers", 0, "args").([]any) {
			args = append(args, a.(string))
		}
		if !slices.Contains(args, "--cloud-provider=azure") {
			t.Errorf("%s args %q lack --cloud-provider=azure", key, args)
		}
		if l := str(objs[key], "spec", "template", "metadata", "labels", "azure.workload.identity/use"); l != "true" {
			t.Errorf("%s pod label azure.workload.identity/use = %q, want true", key, l)
		}
	}
	if a := str(objs["ServiceAccount/egret-controller"], "metadata", "annotations", "azure.workload.identity/client-id"); a != "00000000-0000-4000-8000-000000000001" {
		t.Errorf("controller ServiceAccount client-id annotation %q", a)
	}
	if a := str(objs["ServiceAccount/egret-gateway"], "metadata", "annotations", "iam.gke.io/gcp-service-account"); a != "egret-gateway@proj.iam.gserviceaccount.com" {
		t.Errorf("gateway ServiceAccount gcp-service-account annotation %q", a)
	}
	if a := get(objs["ServiceAccount/egret-steer"], "metadata", "annotations"); a != nil {
		t.Errorf("steer ServiceAccount got annotations %v; it calls no cloud API", a)
	}
	for _, m := range helmTemplate(t, hb) {
		if c, ok := get(m.o, "spec", "template", "spec", "containers", 0, "args").([]any); ok {
			for _, a := range c {
				if strings.HasPrefix(a.(string), "--cloud-provider") {
					t.Errorf("defaults: %s gets %s", objKey(m.o), a)
				}
			}
		}
	}
}

// TestHelmCloudOpenStack: on OpenStack the controller gets the provider,
// its clouds.yaml from the Secret, and the right to patch Nodes narrowed by
// its own admission policy to the egress-ipconfig; the gateway agents get
// no --cloud-provider (they would refuse it). Off, none of it renders.
func TestHelmCloudOpenStack(t *testing.T) {
	hb := helmBin(t)
	objs := map[string]obj{}
	for _, m := range helmTemplate(t, hb, "--set", "cloud.provider=openstack", "--set", "cloud.openstack.cloudsSecret=os-creds", "--set", "cloud.openstack.cloud=prod") {
		objs[m.o.kind()+"/"+m.o.name()] = m.o
	}
	argsOf := func(key string) []string {
		var out []string
		for _, a := range get(objs[key], "spec", "template", "spec", "containers", 0, "args").([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	if a := argsOf("Deployment/egret-controller"); !slices.Contains(a, "--cloud-provider=openstack") {
		t.Errorf("controller args %q lack --cloud-provider=openstack", a)
	}
	for _, a := range argsOf("DaemonSet/egret-gateway") {
		if strings.HasPrefix(a, "--cloud-provider") {
			t.Errorf("gateway gets %s; on OpenStack the controller publishes the egress-ipconfig", a)
		}
	}
	ctl := get(objs["Deployment/egret-controller"], "spec", "template", "spec").(map[string]any)
	env := map[string]string{}
	for _, e := range get(ctl, "containers", 0, "env").([]any) {
		if v, ok := get(e, "value").(string); ok {
			env[get(e, "name").(string)] = v
		}
	}
	if env["OS_CLIENT_CONFIG_FILE"] != "/etc/openstack/clouds.yaml" || env["OS_CLOUD"] != "prod" {
		t.Errorf("controller env %v; want OS_CLIENT_CONFIG_FILE=/etc/openstack/clouds.yaml and OS_CLOUD=prod", env)
	}
	if v := str(ctl, "volumes", 0, "secret", "secretName"); v != "os-creds" {
		t.Errorf("controller's first volume's Secret %q; want os-creds", v)
	}
	if m := str(ctl, "containers", 0, "volumeMounts", 0, "mountPath"); m != "/etc/openstack" {
		t.Errorf("controller mounts %q; want /etc/openstack", m)
	}
	patch := false
	for _, r := range get(objs["ClusterRole/egret-controller"], "rules").([]any) {
		res, _ := get(r, "resources").([]any)
		verbs, _ := get(r, "verbs").([]any)
		patch = patch || (slices.Contains(res, any("nodes")) && slices.Contains(verbs, any("patch")))
	}
	if !patch {
		t.Error("ClusterRole egret-controller cannot patch nodes on OpenStack")
	}
	if e := str(objs["ValidatingAdmissionPolicy/egret-controller-node-facts"], "spec", "matchConditions", 0, "expression"); !strings.Contains(e, "system:serviceaccount:egret-system:egret-controller") {
		t.Errorf("ValidatingAdmissionPolicy egret-controller-node-facts matches %q", e)
	}
	if _, ok := objs["ValidatingAdmissionPolicyBinding/egret-controller-node-facts"]; !ok {
		t.Error("no ValidatingAdmissionPolicyBinding egret-controller-node-facts")
	}
	for _, m := range helmTemplate(t, hb, "--set", "cloud.provider=aws") {
		if strings.Contains(m.o.name(), "controller-node-facts") {
			t.Errorf("cloud.provider=aws renders %s", objKey(m.o))
		}
		if m.o.kind() == "ClusterRole" && m.o.name() == "egret-controller" {
			for _, r := range get(m.o, "rules").([]any) {
				if verbs, _ := get(r, "verbs").([]any); slices.Contains(verbs, any("patch")) && slices.Contains(get(r, "resources").([]any), any("nodes")) {
					t.Errorf("cloud.provider=aws: the controller may patch nodes (%v)", r)
				}
			}
		}
	}
}

// TestHelmRefusesBadValues: values without the interfaces or networks Egret
// cannot run without, misspelt keys and out-of-range values fail at render
// time, naming the value.
func TestHelmRefusesBadValues(t *testing.T) {
	hb := helmBin(t)
	for _, tc := range []struct{ set, want string }{
		{"interfaces.underlay=", "interfaces.underlay"},
		{"interfaces.gateway=null", "interfaces.gateway"},
		{"networks.clusterCIDRs=null", "networks.clusterCIDRs"},
		{"networks.serviceCIDRs=null", "networks.serviceCIDRs"},
		{"interface.gateway={eth1}", "interface"},
		{"networks.clusterCIDRs={10.244.0.0}", "clusterCIDRs"},
		{"controller.reachabilityTimeoutSeconds=61", "reachabilityTimeoutSeconds"},
		{"gateway.mode=dpdk", "mode"},
		{"gateway.conntrackMax=100", "conntrackMax"},
		{"gateway.podFlowLimit=-1", "podFlowLimit"},
		{"gateway.deniedDestinations={169.254.169.254}", "deniedDestinations"},
		{"gateway.health.port=0", "port"},
		{"steer.procSysNet=host/proc/sys/net", "procSysNet"},
		{"trustPodIPs=yes", "trustPodIPs"},
		{"steer.noEgressIP=fallback", "noEgressIP"},
		{"steer.allowCiliumHostRouting=yes", "allowCiliumHostRouting"},
		// One side with TLS and the other without would move every egress IP.
		{"healthTLS.gatewaySecret=gw-probe-tls", "healthTLS"},
		{"healthTLS.controllerSecret=ctl-probe-tls", "healthTLS"},
		// Two authentications of the probe at once.
		{"healthTLS.gatewaySecret=gw-probe-tls,healthTLS.controllerSecret=ctl-probe-tls", "nodeIdentity"},
		{"nodeIdentity=spiffe", "nodeIdentity"},
		{"cloud.provider=vsphere", "provider"},
		// The controller has no credentials without it.
		{"cloud.provider=openstack", "cloudsSecret"},
		// The gateway agent refuses --cloud-provider without it.
		{"cloud.provider=gcp,gateway.publishInterfaces=false", "publishInterfaces"},
		{"gateway.priorityClassName=Node Critical", "priorityClassName"},
		{"monitoring.namespace=Monitoring", "namespace"},
		{"monitoring.labels.release=null,monitoring.labels.team=1", "team"},
		// A quota that admits no class the chart uses is a mistake.
		{"priorityQuota.create=true,controller.priorityClassName=,gateway.priorityClassName=,steer.priorityClassName=,cni.priorityClassName=", "priorityQuota"},
	} {
		out, err := execOut(hb, "template", "egret", chart, "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s rendered without error", tc.set)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: error does not name %s:\n%s", tc.set, tc.want, out)
		}
	}
}

// TestHelmLint lints the chart, strictly, with default and with other values.
func TestHelmLint(t *testing.T) {
	hb := helmBin(t)
	t.Log(string(run(t, nil, hb, "lint", "--strict", chart)))
	var sets []string
	for i := 0; i < len(otherValues); i += 2 {
		if otherValues[i] == "--set" {
			sets = append(sets, "--set", otherValues[i+1])
		}
	}
	t.Log(string(run(t, nil, hb, append([]string{"lint", "--strict", chart, "--namespace", "egress"}, sets...)...)))
}

// execOut runs name with args and returns its combined output.
func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	return string(out), err
}

// TestHelmInstall installs the chart into a real kube-apiserver the way
// docs/operations.md says, upgrades it with other values and uninstalls it.
func TestHelmInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	hb, kc := helmBin(t), kubectl(t)
	env := kubetest.Start(t)
	h := func(args ...string) []byte {
		t.Helper()
		return run(t, nil, hb, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	}
	k := func(args ...string) []byte {
		t.Helper()
		return run(t, nil, kc, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	}
	t.Logf("install:\n%s", h("install", "egret", chart, "-n", "egret-system", "--create-namespace",
		"--set", "interfaces.gateway={eth1},interfaces.underlay=eth0,image.tag=0.0.1-test,priorityQuota.create=true"))
	if got := string(k("get", "namespace", "egret-system", "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`)); got != "privileged" {
		t.Errorf("the release namespace's pod-security.kubernetes.io/enforce label after install: %q, want privileged", got)
	}
	if got := string(k("-n", "egret-system", "get", "resourcequota", "egret-critical-pods", "-o", "jsonpath={.spec.scopeSelector.matchExpressions[0].values}")); got != `["system-cluster-critical","system-node-critical"]` {
		t.Errorf("ResourceQuota egret-critical-pods admits %s", got)
	}
	allInstalled(t, kc, env.Kubeconfig, helmTemplate(t, hb))
	if got := string(k("-n", "egret-system", "get", "configmap", "egret-gateway", "-o", "jsonpath={.data.gateway\\.yaml}")); !strings.Contains(got, `interfaces: ["eth1"]`) {
		t.Errorf("gateway ConfigMap after install:\n%s", got)
	}
	if got := string(k("-n", "egret-system", "get", "ds", "egret-steer", "-o", "jsonpath={.spec.template.spec.containers[0].image}")); got != "ghcr.io/egret-gw/egret:0.0.1-test" {
		t.Errorf("steer image after install: %q", got)
	}

	// Monitoring needs the Prometheus Operator's CRDs: TestApply's minimal copy.
	crds, err := os.ReadFile("testdata/monitoring-crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run(t, crds, kc, "--kubeconfig", env.Kubeconfig, "apply", "--server-side", "-f", "-")
	k("wait", "--for=condition=established", "--timeout=60s", "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	h("upgrade", "egret", chart, "-n", "egret-system", "--reuse-values", "--set", "networks.serviceCIDRs={172.30.0.0/16},monitoring.enabled=true")
	k("-n", "egret-system", "get", "podmonitor/egret-gateway", "prometheusrule/egret", "configmap/egret-dashboard", "-o", "name")
	if got := string(k("-n", "egret-system", "get", "configmap", "egret-steer", "-o", "jsonpath={.data.steer\\.yaml}")); !strings.Contains(got, `serviceCIDRs: ["172.30.0.0/16"]`) || !strings.Contains(got, "underlay: eth0") {
		t.Errorf("steer ConfigMap after upgrade:\n%s", got)
	}

	run(t, []byte(`{"apiVersion": "k8s.ovn.org/v1", "kind": "EgressIP", "metadata": {"name": "kept"},
"spec": {"egressIPs": ["192.0.2.10"], "namespaceSelector": {"matchLabels": {"env": "prod"}}}}`),
		kc, "--kubeconfig", env.Kubeconfig, "apply", "--server-side", "-f", "-")
	h("uninstall", "egret", "-n", "egret-system")
	if out, err := execOut(kc, "--kubeconfig", env.Kubeconfig, "-n", "egret-system", "get", "deployment", "egret-controller"); err == nil {
		t.Errorf("the controller Deployment survived helm uninstall:\n%s", out)
	}
	// Helm never deletes a CRD it installed from crds/: EgressIPs outlive the release.
	k("get", "crd", "egressips.k8s.ovn.org", "cloudprivateipconfigs.cloud.network.openshift.io", "-o", "name")
	if got := string(k("get", "eip", "kept", "-o", "jsonpath={.spec.egressIPs} {.spec.namespaceSelector.matchLabels}")); got != `["192.0.2.10"] {"env":"prod"}` {
		t.Errorf("after helm uninstall, EgressIP kept reads %q", got)
	}
}

// allInstalled checks that every object of ms is in the API server.
func allInstalled(t *testing.T, kc, kubeconfig string, ms []manifest) {
	t.Helper()
	for _, m := range ms {
		args := []string{"--kubeconfig", kubeconfig, "get", strings.ToLower(m.o.kind()), m.o.name(), "-o", "name"}
		if m.o.ns() != "" {
			args = append(args, "-n", m.o.ns())
		}
		run(t, nil, kc, args...)
	}
}

// TestHelmHealthHost: the health host goes in brackets (an IPv6 InternalIP
// works; one given in brackets gets no second pair), and an empty one
// leaves none, listening on every address.
func TestHelmHealthHost(t *testing.T) {
	hb := helmBin(t)
	for host, want := range map[string]string{"": "--health-addr=:9107", "fd00::5": "--health-addr=[fd00::5]:9107", "[fd00::5]": "--health-addr=[fd00::5]:9107", "10.0.0.5": "--health-addr=[10.0.0.5]:9107"} {
		found := false
		for _, m := range helmTemplate(t, hb, "--set", "gateway.health.host="+host) {
			if m.o.kind() != "DaemonSet" || m.o.name() != "egret-gateway" {
				continue
			}
			c := get(m.o, "spec", "template", "spec", "containers", 0)
			args, _ := get(c, "args").([]any)
			found = slices.Contains(args, any(want))
			if !found {
				t.Errorf("gateway.health.host=%q: args %v lack %s", host, args, want)
			}
		}
		if !found {
			t.Errorf("gateway.health.host=%q: no gateway DaemonSet with %s", host, want)
		}
	}
}

// TestHelmGatewayNodeLabel: one value makes a node a gateway node for both
// the DaemonSet and the controller; emptied, the egress-assignable label
// alone does, as before (and any kubelet can then make its node one).
func TestHelmGatewayNodeLabel(t *testing.T) {
	hb := helmBin(t)
	for _, c := range []struct {
		set      []string
		selector map[string]string
		arg      string // the controller's --node-selector, "" for none
	}{
		{nil, map[string]string{"node-restriction.kubernetes.io/egret-gateway": "true"}, "--node-selector=node-restriction.kubernetes.io/egret-gateway=true"},
		{[]string{"--set", "gatewayNodeLabel=node-restriction.kubernetes.io/egress"}, map[string]string{"node-restriction.kubernetes.io/egress": "true"}, "--node-selector=node-restriction.kubernetes.io/egress=true"},
		{[]string{"--set", "gatewayNodeLabel="}, map[string]string{"k8s.ovn.org/egress-assignable": ""}, ""},
		{[]string{"--set", "gatewayNodeLabel=,controller.egressNodeSelector=pool=egress"}, map[string]string{"k8s.ovn.org/egress-assignable": ""}, "--node-selector=pool=egress"},
	} {
		objs := map[string]obj{}
		for _, m := range helmTemplate(t, hb, c.set...) {
			objs[m.o.kind()+"/"+m.o.name()] = m.o
		}
		sel := get(objs["DaemonSet/egret-gateway"], "spec", "template", "spec", "nodeSelector")
		if fmt.Sprint(sel) != fmt.Sprint(c.selector) {
			t.Errorf("%v: gateway nodeSelector %v, want %v", c.set, sel, c.selector)
		}
		var got string
		for _, a := range get(objs["Deployment/egret-controller"], "spec", "template", "spec", "containers", 0, "args").([]any) {
			if s, _ := a.(string); strings.HasPrefix(s, "--node-selector=") {
				got = s
			}
		}
		if got != c.arg {
			t.Errorf("%v: controller %q, want %q", c.set, got, c.arg)
		}
	}
}
