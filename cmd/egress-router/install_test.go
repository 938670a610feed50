package main

import (
	"bytes"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/egret-gw/egret/cni"

	"k8s.io/client-go/tools/clientcmd"
)

func TestInstallBinary(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(src, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"binary v1", "binary v2"} { // the second run upgrades in place
		if err := os.WriteFile(src, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := installBinary(src, dir); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"egress-router", "openshift-egress"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(b, []byte(content)) {
				t.Errorf("%s: %q %v, want %q", name, b, err, content)
			}
		}
		fi, err := os.Stat(filepath.Join(dir, "egress-router"))
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("installed plugin not executable: %v %v", fi, err)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
	if err := installBinary(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("installing a missing binary succeeded")
	}
}

func TestWriteHostConfig(t *testing.T) {
	dir := t.TempDir()
	want := cni.HostConfig{AllowMasterTypes: []string{"veth"}, AllowCrossNamespaceConfigMaps: true, AllowElasticIPs: []string{"eipalloc-0123456789abcdef0", "203.0.113.10"}}
	if err := writeHostConfig(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := cni.LoadHostConfig(filepath.Join(dir, cni.HostConfigName))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v %v, want %+v", got, err, want)
	}
	// The defaults replace what an earlier start allowed.
	if err := writeHostConfig(dir, cni.HostConfig{}); err != nil {
		t.Fatal(err)
	}
	if got, err := cni.LoadHostConfig(filepath.Join(dir, cni.HostConfigName)); err != nil || !reflect.DeepEqual(got, cni.HostConfig{}) {
		t.Errorf("after defaults: %+v %v", got, err)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	sa, out := t.TempDir(), t.TempDir()
	for f, v := range map[string]string{"ca.crt": "CA", "token": "TOKEN"} {
		if err := os.WriteFile(filepath.Join(sa, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeKubeconfig(out, "/etc/cni/net.d/egress-router.d", sa, "https://"+net.JoinHostPort("fd00::1", "443")); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(out, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil || kc.Clusters[ctx.Cluster].Server != "https://[fd00::1]:443" || kc.AuthInfos[ctx.AuthInfo].TokenFile != "/etc/cni/net.d/egress-router.d/token" {
		t.Errorf("kubeconfig %+v", kc)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "token")); string(b) != "TOKEN" {
		t.Errorf("token copy %q", b)
	}
	if err := writeKubeconfig(out, "/x", t.TempDir(), "https://a:1"); err == nil {
		t.Error("missing service account files accepted")
	}
}

func TestInstallFlagStyle(t *testing.T) {
	if err := install([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	var b bytes.Buffer
	if code := exitCode(&b, install([]string{"--no-such-flag"})); code != 2 ||
		b.String() != "egress-router install: flag provided but not defined: -no-such-flag (see egress-router install -h)\n" {
		t.Errorf("unknown flag: exit %d, %q", code, b.String())
	}
}

// TestInstallNamesTheKubeconfig checks that the installer, asked to keep a kubeconfig
// for ipConfig, names it in the node-side settings, where the plugin takes it from, by
// the path the node sees; without --kubeconfig-dir the settings name none.
func TestInstallNamesTheKubeconfig(t *testing.T) {
	sa := t.TempDir()
	for f, v := range map[string]string{"ca.crt": "CA", "token": "TOKEN"} {
		if err := os.WriteFile(filepath.Join(sa, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	bin, kc := t.TempDir(), t.TempDir()
	if err := install([]string{"--cni-bin-dir=" + bin, "--kubeconfig-dir=" + kc, "--kubeconfig-host-dir=/etc/cni/net.d/egress-router.d", "--service-account-dir=" + sa}); err != nil {
		t.Fatal(err)
	}
	hc, err := cni.LoadHostConfig(filepath.Join(bin, cni.HostConfigName))
	if err != nil || hc.Kubeconfig != "/etc/cni/net.d/egress-router.d/kubeconfig" {
		t.Errorf("settings %+v %v, want kubeconfig /etc/cni/net.d/egress-router.d/kubeconfig", hc, err)
	}
	if _, err := os.Stat(filepath.Join(kc, "kubeconfig")); err != nil {
		t.Errorf("no kubeconfig written: %v", err)
	}
	if err := install([]string{"--cni-bin-dir=" + bin}); err != nil {
		t.Fatal(err)
	}
	if hc, err := cni.LoadHostConfig(filepath.Join(bin, cni.HostConfigName)); err != nil || hc.Kubeconfig != "" {
		t.Errorf("without --kubeconfig-dir: %+v %v, want no kubeconfig", hc, err)
	}
}

// TestInstallNetworkNamespaces: -network-namespaces, repeated per network,
// reaches the node-side settings; a bad namespace name or a network given
// twice is refused, --check-config included.
func TestInstallNetworkNamespaces(t *testing.T) {
	bin := t.TempDir()
	if err := install([]string{"--cni-bin-dir=" + bin, "--network-namespaces=egress-router-1=ns1,ns2", "--network-namespaces=db=payments",
		"--network-namespaces=*=*"}); err != nil {
		t.Fatal(err)
	}
	hc, err := cni.LoadHostConfig(filepath.Join(bin, cni.HostConfigName))
	want := map[string][]string{"egress-router-1": {"ns1", "ns2"}, "db": {"payments"}, "*": {"*"}}
	if err != nil || !reflect.DeepEqual(hc.NetworkNamespaces, want) {
		t.Errorf("settings %+v %v, want networkNamespaces %v", hc, err, want)
	}
	for _, bad := range [][]string{
		{"--network-namespaces=db=Payments"},
		{"--network-namespaces=db=pay*"},
		{"--network-namespaces=db="},
		{"--network-namespaces=db=a", "--network-namespaces=db=b"},
		{"--network-namespaces=ns1"},
	} {
		args := append([]string{"--cni-bin-dir=" + t.TempDir(), "--check-config"}, bad...)
		if err := install(args); err == nil {
			t.Errorf("install %v accepted", bad)
		}
	}
}
