package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egret-gw/egret/internal/nstest"

	"github.com/vishvananda/netlink"
	"k8s.io/client-go/tools/clientcmd"
)

// cnitoolPath finds the cnitool that hack/cnitool.sh builds.
func cnitoolPath(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("EGRET_TOOLS_DIR")
	if dir == "" {
		dir = "/var/cache/egret/bin"
	}
	p := filepath.Join(dir, "cnitool")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cnitool missing at %s: run hack/cnitool.sh (%v)", p, err)
		}
		t.Skipf("cnitool missing at %s: run hack/cnitool.sh", p)
	}
	return p
}

type cnitool struct {
	t       *testing.T
	lab     *lab
	bin     string
	confDir string
	args    string
	dir     string // the plugin directory; empty: the shared one
}

func (c *cnitool) run(verb, network string) (string, error) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	var runErr error
	if err := c.lab.Node.Do(func() error {
		dir := c.dir
		if dir == "" {
			dir = pluginDir(c.t)
		}
		cmd := exec.Command(c.bin, verb, network, c.lab.Pod.Path())
		cmd.Env = append(os.Environ(), "NETCONFPATH="+c.confDir, "CNI_PATH="+dir, "CNI_IFNAME=net1", "CNI_ARGS="+c.args)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		runErr = cmd.Run()
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	if runErr != nil {
		return out.String(), fmt.Errorf("cnitool %s: %v: %s%s", verb, runErr, out.String(), errOut.String())
	}
	return out.String(), nil
}

func (c *cnitool) writeConf(name, version, body string) {
	c.t.Helper()
	s := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[{"type":"openshift-egress",%s}]}`, version, name, body)
	if err := os.WriteFile(filepath.Join(c.confDir, name+".conflist"), []byte(s), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// TestCnitool drives the plugin with the reference runtime tool for every spec version.
func TestCnitool(t *testing.T) {
	nstest.Root(t)
	bin := cnitoolPath(t)
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			l := newLab(t, true)
			c := &cnitool{t: t, lab: l, bin: bin, confDir: t.TempDir(), args: "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=db-router"}
			c.writeConf("egrt-test-egress", v, `"podIP":{"db-*":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"],"destinations":["198.51.100.10/32"]}},"clusterNetworks":["10.128.0.0/14"],"serviceNetworks":["172.30.0.0/16"]`)
			before := routesOf(t, l.Pod, netlink.FAMILY_V4)

			out, err := c.run("add", "egrt-test-egress")
			if err != nil {
				t.Fatal(err)
			}
			var res map[string]any
			if err := json.Unmarshal([]byte(out), &res); err != nil || res["cniVersion"] != v {
				t.Fatalf("add printed %q (%v), want a %s result", out, err, v)
			}
			if !strings.Contains(out, `"net1"`) || !strings.Contains(out, "192.0.2.99/24") {
				t.Errorf("result lacks net1 or its address: %s", out)
			}
			assertPlumbed(t, l, true, true)
			if !hasRoute(routesOf(t, l.Pod, netlink.FAMILY_V4), "172.30.0.0/16 via "+podGW4+" dev eth0") {
				t.Error("service network not kept on the pod network")
			}
			if src, ok := udpProbe(t, l, allowed4, reachable); !ok || src != netip.MustParseAddr(egress4) {
				t.Errorf("allowed destination: received=%v from %v", ok, src)
			}
			if _, ok := udpProbe(t, l, denied4, unreachable); ok {
				t.Error("denied destination reachable")
			}

			_, err = c.run("check", "egrt-test-egress")
			if v == "0.3.0" || v == "0.3.1" {
				if err == nil {
					t.Errorf("check succeeded on %s, which has no CHECK", v)
				}
			} else if err != nil {
				t.Error(err)
			}
			if v == "1.1.0" {
				if _, err := c.run("status", "egrt-test-egress"); err != nil {
					t.Error(err)
				}
			}

			if _, err := c.run("del", "egrt-test-egress"); err != nil {
				t.Fatal(err)
			}
			assertClean(t, l, before)
			if _, err := c.run("del", "egrt-test-egress"); err != nil {
				t.Errorf("second del: %v", err)
			}
			if v == "1.1.0" {
				if _, err := c.run("gc", "egrt-test-egress"); err != nil {
					t.Error(err)
				}
			}

			// A refused config: the tool reports the plugin's error and nothing changes.
			c.writeConf("egrt-test-bad", v, `"ipConfig":{"name":"x"},"ip":{"addresses":["192.0.2.99/24"]}`)
			if _, err := c.run("add", "egrt-test-bad"); err == nil || !strings.Contains(err.Error(), "exactly one of ip, podIP or ipConfig") {
				t.Errorf("bad config: %v", err)
			}
			if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
				t.Error("refused ADD left net1")
			}
		})
	}
}

// TestStatusChecksNodeSettings runs STATUS through cnitool against plugin directories
// whose node-side settings file is missing, unreadable, invalid or complete: STATUS
// must refuse exactly what ADD would, naming the file, and take ipConfig's kubeconfig
// from that file, never from the network configuration.
func TestStatusChecksNodeSettings(t *testing.T) {
	nstest.Root(t)
	bin := cnitoolPath(t)
	l := newLab(t, true)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*clientcmdapiConfig("https://127.0.0.1:1"), kc); err != nil {
		t.Fatal(err)
	}
	unreadable := pluginDirWith(t, "")
	if err := os.Mkdir(filepath.Join(unreadable, HostConfigName), 0o755); err != nil { // root reads any file; a directory it cannot
		t.Fatal(err)
	}
	const static = `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["192.0.2.99/24"]}`
	const ipConfig = `"interfaceArgs":{"master":"ext0"},"ipConfig":{"name":"x"}`
	cases := []struct {
		name, dir, body string
		words           string // "" for success
	}{
		{"no settings file: the defaults", pluginDirWith(t, ""), static, ""},
		{"valid settings", pluginDirWith(t, `{"allowMasterTypes":["veth"],"networkNamespaces":{"*":["ns1"]}}`), static, ""},
		{"unreadable settings", unreadable, static, "reading the host settings"},
		{"misspelt setting", pluginDirWith(t, `{"allowPasthru":true}`), static, `unknown field "allowPasthru"`},
		{"not JSON", pluginDirWith(t, `{"allowPassthru":`), static, HostConfigName + " are invalid"},
		{"relative kubeconfig", pluginDirWith(t, `{"kubeconfig":"kubeconfig"}`), static, `kubeconfig "kubeconfig": give an absolute path`},
		{"passthru not allowed", pluginDirWith(t, `{"allowMasterTypes":["veth"],"networkNamespaces":{"*":["ns1"]}}`), `"interfaceArgs":{"master":"ext0","mode":"passthru"},"ip":{"addresses":["192.0.2.99/24"]}`, "passthru is not allowed"},
		{"ipConfig without a node kubeconfig", pluginDirWith(t, `{"networkNamespaces":{"*":["ns1"]}}`), ipConfig, "names none"},
		{"ipConfig with a missing node kubeconfig", pluginDirWith(t, `{"kubeconfig":"/nonexistent/kubeconfig","networkNamespaces":{"*":["ns1"]}}`), ipConfig, "/nonexistent/kubeconfig"},
		{"ipConfig with the node kubeconfig", pluginDirWith(t, `{"kubeconfig":`+quote(kc)+`,"networkNamespaces":{"*":["ns1"]}}`), ipConfig, ""},
		{"kubeconfig in the network config", pluginDirWith(t, `{"kubeconfig":`+quote(kc)+`,"networkNamespaces":{"*":["ns1"]}}`), `"kubeconfig":` + quote(kc) + `,` + ipConfig, "a network configuration may not name a kubeconfig"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &cnitool{t: t, lab: l, bin: bin, confDir: t.TempDir(), dir: tc.dir, args: "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=db"}
			c.writeConf("egrt-status", "1.1.0", tc.body)
			_, err := c.run("status", "egrt-status")
			switch {
			case tc.words == "" && err != nil:
				t.Errorf("STATUS: %v", err)
			case tc.words != "" && (err == nil || !strings.Contains(err.Error(), tc.words)):
				t.Errorf("STATUS: %v, want an error containing %q", err, tc.words)
			}
		})
	}
}

// TestCnitoolSpecExample1 hands the spec's first example, as printed (no cniVersion), to
// the reference runtime tool as a network configuration file of its own.
func TestCnitoolSpecExample1(t *testing.T) {
	nstest.Root(t)
	bin := cnitoolPath(t)
	l := newUpstreamLab(t)
	c := &cnitool{t: t, lab: l, bin: bin, confDir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(c.confDir, "egress-router-1.conf"), []byte(specExample1), 0o644); err != nil {
		t.Fatal(err)
	}
	before := routesOf(t, l.Pod, netlink.FAMILY_V4)
	out, err := c.run("add", "egress-router-1")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IP4        struct{ IP string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.CNIVersion != "0.1.0" || res.IP4.IP != "192.168.1.99/24" {
		t.Errorf("add printed %q (%v), want a 0.1.0 result with 192.168.1.99/24", out, err)
	}
	if src, ok := udpProbe(t, l, upTarget, reachable); !ok || src != netip.MustParseAddr("192.168.1.99") {
		t.Errorf("received=%v from %v, want from 192.168.1.99", ok, src)
	}
	if _, err := c.run("del", "egress-router-1"); err != nil {
		t.Fatal(err)
	}
	assertClean(t, l, before)
}
