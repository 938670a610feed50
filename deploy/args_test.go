package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/internal/testbin"
)

// downward holds plausible values for the downward-API fields the manifests
// expand in their args ($(VAR)), on a node of each family: an address
// pasted before ":port" must work with both.
var downward = map[string]map[string]string{
	"ipv4": {
		"spec.nodeName":      "node-a",
		"status.podIP":       "10.0.0.5", // host network: the node's address
		"status.hostIP":      "10.0.0.5",
		"metadata.name":      "egret-controller-7d9f-abcde",
		"metadata.namespace": "egret-system",
	},
	"ipv6": {
		"spec.nodeName":      "node-a",
		"status.podIP":       "fd00::5",
		"status.hostIP":      "fd00::5",
		"metadata.name":      "egret-controller-7d9f-abcde",
		"metadata.namespace": "egret-system",
	},
}

// manifest is one object of a file under deploy/.
type manifest struct {
	file string
	o    obj
}

// shippedManifests decodes every YAML file under deploy/ except the examples,
// the test data and the Helm chart (templates, not YAML; helm_test.go renders
// it), and the resources deploy/kustomization.yaml lists.
func shippedManifests(t *testing.T) ([]manifest, []string) {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "examples" || path == "testdata" || path == "helm") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".yaml") || filepath.Base(path) == "kustomization.yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var o obj
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if o != nil {
				out = append(out, manifest{file: path, o: o})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	return out, k.Resources
}

// buildBinaries is the directory of the shipped binaries of this tree,
// built once per test process.
func buildBinaries(t *testing.T) string {
	t.Helper()
	testbin.Build(t, "egress-router")
	return filepath.Dir(testbin.Build(t, "egret"))
}

// TestShippedArgsValidate runs every egret container of every DaemonSet and
// Deployment in deploy/ with its exact arguments, its downward-API variables
// resolved and its ConfigMaps mounted, through the binary's own validation
// (--check-config): a manifest the binary would refuse to start with is a
// crash-looping agent on every node.
func TestShippedArgsValidate(t *testing.T) {
	bins := buildBinaries(t)
	ms, resources := shippedManifests(t)
	listed := func(file string) bool { return slices.Contains(resources, filepath.ToSlash(file)) }
	for _, fam := range []string{"ipv4", "ipv6"} {
		t.Run(fam, func(t *testing.T) {
			seen := validateContainers(t, bins, ms, listed, downward[fam])
			for _, want := range []string{"egret-gateway", "egret-steer", "egret-controller", "egress-router-cni"} {
				if !seen[want] {
					t.Errorf("no egret container checked for %s", want)
				}
			}
		})
	}
}

// validateContainers runs every egret container of the DaemonSets and
// Deployments in ms through its binary's --check-config (bins holds the
// binaries), with the ConfigMaps of ms mounted, each in a subtest. listed
// says whether a manifest's file is part of what users apply. It returns the
// names of the workloads it checked. dw gives the downward API's values.
func validateContainers(t *testing.T, bins string, ms []manifest, listed func(string) bool, dw map[string]string) map[string]bool {
	t.Helper()
	configMaps := map[string]manifest{}
	for _, m := range ms {
		if m.o.kind() == "ConfigMap" {
			configMaps[m.o.ns()+"/"+m.o.name()] = m
		}
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if m.o.kind() != "DaemonSet" && m.o.kind() != "Deployment" {
			continue
		}
		if !listed(m.file) {
			t.Errorf("%s %s (%s) is not in deploy/kustomization.yaml", m.o.kind(), m.o.name(), m.file)
		}
		spec := get(m.o, "spec", "template", "spec")
		volumes := map[string]string{} // volume name → ConfigMap name
		if vs, ok := get(spec, "volumes").([]any); ok {
			for _, v := range vs {
				if cm := str(v, "configMap", "name"); cm != "" {
					volumes[str(v, "name")] = cm
				}
			}
		}
		containers, _ := get(spec, "containers").([]any)
		for _, c := range containers {
			if !strings.Contains(str(c, "image"), "egret") {
				continue
			}
			name := m.o.kind() + "/" + m.o.name() + "/" + str(c, "name")
			seen[m.o.name()] = true
			t.Run(name, func(t *testing.T) {
				argv, env := containerArgv(t, m, c, volumes, configMaps, listed, dw)
				bin := "egret"
				if len(argv) > 0 && !strings.HasPrefix(argv[0], "-") && filepath.IsAbs(argv[0]) {
					bin, argv = filepath.Base(argv[0]), argv[1:]
				}
				argv = append(argv, "--check-config")
				cmd := exec.Command(filepath.Join(bins, bin), argv...)
				cmd.Env = env
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Run(); err != nil {
					t.Errorf("%s %s: %v\n%s", bin, strings.Join(argv, " "), err, out.String())
					return
				}
				t.Logf("%s %s: %s", bin, strings.Join(argv, " "), strings.TrimSpace(out.String()))
			})
		}
	}
	return seen
}

// containerArgv returns container c's command and args with $(VAR) resolved,
// ConfigMap mount paths rewritten to files written from the shipped
// ConfigMaps, and the environment the container would get.
func containerArgv(t *testing.T, m manifest, c any, volumes map[string]string, configMaps map[string]manifest, listed func(string) bool, dw map[string]string) ([]string, []string) {
	t.Helper()
	vars := map[string]string{}
	if es, ok := get(c, "env").([]any); ok {
		for _, e := range es {
			n := str(e, "name")
			switch fp := str(e, "valueFrom", "fieldRef", "fieldPath"); {
			case fp != "":
				v, ok := dw[fp]
				if !ok {
					t.Fatalf("env %s: no plausible value for fieldPath %s in this test", n, fp)
				}
				vars[n] = v
			case get(e, "valueFrom") == nil:
				vars[n] = str(e, "value")
			}
		}
	}
	mounts := map[string]string{} // mount path → local directory
	if vms, ok := get(c, "volumeMounts").([]any); ok {
		for _, vm := range vms {
			cmName, ok := volumes[str(vm, "name")]
			if !ok {
				continue
			}
			cm, ok := configMaps[m.o.ns()+"/"+cmName]
			if !ok {
				t.Fatalf("volume %s mounts ConfigMap %s/%s, which no manifest defines", str(vm, "name"), m.o.ns(), cmName)
			}
			if !listed(cm.file) {
				t.Errorf("ConfigMap %s (%s) is not in deploy/kustomization.yaml", cmName, cm.file)
			}
			dir := t.TempDir()
			data, _ := get(cm.o, "data").(map[string]any)
			for k, v := range data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v.(string)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			mounts[strings.TrimSuffix(str(vm, "mountPath"), "/")] = dir
		}
	}
	expand := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var argv []string
	for _, field := range []string{"command", "args"} {
		l, _ := get(c, field).([]any)
		for _, a := range l {
			s := expand.ReplaceAllStringFunc(a.(string), func(v string) string {
				name := v[2 : len(v)-1]
				val, ok := vars[name]
				if !ok {
					t.Errorf("arg %q: $(%s) is not set in the container's env", a, name)
				}
				return val
			})
			for mp, dir := range mounts {
				s = strings.ReplaceAll(s, "="+mp+"/", "="+dir+"/")
			}
			argv = append(argv, s)
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return argv, env
}

// TestSteerConfigMissingNetworks: a steer ConfigMap without the cluster's
// networks is refused at start with the key and where to set it.
func TestSteerConfigMissingNetworks(t *testing.T) {
	bins := buildBinaries(t)
	path := filepath.Join(t.TempDir(), "steer.yaml")
	if err := os.WriteFile(path, []byte("underlay: eth0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bins, "egret"), "steer", "--node=node-a", "--config="+path, "--check-config").CombinedOutput()
	if err == nil {
		t.Fatalf("steer accepted a config without clusterCIDRs/serviceCIDRs:\n%s", out)
	}
	for _, want := range []string{"clusterCIDRs", "serviceCIDRs", "egret-steer ConfigMap", path} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error lacks %q:\n%s", want, out)
		}
	}
}
