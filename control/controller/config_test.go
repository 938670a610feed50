package controller

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "controller.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	c, err := LoadConfig(writeFile(t, "reachabilityTotalTimeoutSeconds: 5\nholdDown: 45s\ndrainCordoned: true\nprobeInterval: 250ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *c.ReachabilityTotalTimeoutSeconds != 5 || c.HoldDown.Duration != 45*time.Second || !c.DrainCordoned || c.ProbeInterval.Duration != 250*time.Millisecond {
		t.Errorf("parsed %+v", c)
	}
	d := Config{}.withDefaults()
	if *d.ReachabilityTotalTimeoutSeconds != 1 || d.HealthPort != 9107 || d.HoldDown.Duration != DefaultHoldDown ||
		d.KubeAPIQPS != DefaultKubeAPIQPS || d.KubeAPIBurst != DefaultKubeAPIBurst {
		t.Errorf("defaults %+v", d)
	}
	zero, err := LoadConfig(writeFile(t, "reachabilityTotalTimeoutSeconds: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *zero.withDefaults().ReachabilityTotalTimeoutSeconds != 0 {
		t.Error("0 must disable the check, not mean the default")
	}
}

func TestLoadConfigRefuses(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"reachabilityTotalTimeoutSeconds: 61\n", "between 0 and 60"},
		{"reachabilityTotalTimeoutSeconds: -1\n", "between 0 and 60"},
		{"reachabilityTotalTimeoutSeconds: one\n", "reachabilityTotalTimeoutSeconds"},
		{"reachabilityTimeout: 5\n", "unknown field"},
		{"holdDown: -3s\n", "holdDown"},
		{"healthPort: 70000\n", "healthPort"},
		{"probeInterval: soon\n", `invalid duration "soon"`},
		{"kubeAPIQPS: -1\n", "kubeAPIQPS"},
		{"[not a map", "controller configuration"},
		{"cloud: {provider: vsphere}\n", `cloud provider "vsphere" is not supported`},
		{"cloud: {provider: aws, region: x}\n", "unknown field"},
	} {
		_, err := LoadConfig(writeFile(t, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one mentioning %q", tc.body, err, tc.want)
		}
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing file is not an error")
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	file := writeFile(t, "reachabilityTotalTimeoutSeconds: 5\nholdDown: 45s\n")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := BindFlags(fs)
	if err := fs.Parse([]string{"--config", file, "--reachability-total-timeout-seconds", "0", "--leader-elect=false", "--source", "dir:/tmp/x", "--kube-api-qps", "50"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if *c.ReachabilityTotalTimeoutSeconds != 0 || c.HoldDown.Duration != 45*time.Second || !c.LeaderElection.Disabled || c.KubeAPIQPS != 50 {
		t.Errorf("merged %+v", c)
	}
	if d, ok, err := f.SourceDir(); err != nil || !ok || d != "/tmp/x" {
		t.Errorf("SourceDir = %q %v %v", d, ok, err)
	}

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	f = BindFlags(fs)
	if err := fs.Parse([]string{"--reachability-total-timeout-seconds", "90", "--source", "cluster"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(); err == nil || !strings.Contains(err.Error(), "between 0 and 60") {
		t.Errorf("out-of-range flag: %v", err)
	}
	if _, _, err := f.SourceDir(); err == nil {
		t.Error(`--source cluster accepted`)
	}
}

// TestCloudSetting: cloud attachment is off unless the file or the flag
// names a provider, and the flag wins.
func TestCloudSetting(t *testing.T) {
	c, err := LoadConfig(writeFile(t, "workers: 1\n"))
	if err != nil || c.Cloud.Provider != "" {
		t.Fatalf("default cloud provider %q (%v); want off", c.Cloud.Provider, err)
	}
	file := writeFile(t, "cloud:\n  provider: aws\n")
	if c, err = LoadConfig(file); err != nil || c.Cloud.Provider != "aws" {
		t.Fatalf("cloud.provider from the file = %q (%v)", c.Cloud.Provider, err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := BindFlags(fs)
	if err := fs.Parse([]string{"--config", file, "--cloud-provider", ""}); err != nil {
		t.Fatal(err)
	}
	if c, err = f.Config(); err != nil || c.Cloud.Provider != "" {
		t.Errorf("--cloud-provider '' over the file: %q (%v)", c.Cloud.Provider, err)
	}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	f = BindFlags(fs)
	if err := fs.Parse([]string{"--cloud-provider", "vsphere"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(); err == nil || !strings.Contains(err.Error(), "vsphere") {
		t.Errorf("--cloud-provider vsphere: %v", err)
	}
	for _, p := range []string{"aws", "gcp", "azure", "openstack"} {
		fs = flag.NewFlagSet("t", flag.ContinueOnError)
		f = BindFlags(fs)
		if err := fs.Parse([]string{"--cloud-provider", p}); err != nil {
			t.Fatal(err)
		}
		if c, err := f.Config(); err != nil || c.Cloud.Provider != p {
			t.Errorf("--cloud-provider %s: %q, %v", p, c.Cloud.Provider, err)
		}
	}
}

// TestNodeSelectorValidated: a nodeSelector that is no label selector
// stops the controller at start, naming the key.
func TestNodeSelectorValidated(t *testing.T) {
	if err := (Config{NodeSelector: "node-restriction.kubernetes.io/egress-gateway=true"}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{NodeSelector: "a=b=c"}.Validate()
	if err == nil || !strings.Contains(err.Error(), "nodeSelector") {
		t.Fatalf("Validate(nodeSelector a=b=c) = %v; want an error naming nodeSelector", err)
	}
}

// TestDNSSettings: the TTL floor and ceiling default to 5s and 30m, come
// from the file or the flags (which win), and are refused when they cannot
// be applied; so is a DNS server that is no address.
func TestDNSSettings(t *testing.T) {
	d := Config{}.withDefaults()
	if d.DNSMinTTL.Duration != 5*time.Second || d.DNSMaxTTL.Duration != 30*time.Minute {
		t.Errorf("defaults %v %v, want 5s 30m", d.DNSMinTTL.Duration, d.DNSMaxTTL.Duration)
	}
	file := writeFile(t, "dnsMinTTL: 10s\ndnsMaxTTL: 1h\ndnsServer: 10.96.0.10\n")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := BindFlags(fs)
	if err := fs.Parse([]string{"--config", file, "--dns-max-ttl", "2h", "--dns-server", "[2001:db8::53]:5353"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.DNSMinTTL.Duration != 10*time.Second || c.DNSMaxTTL.Duration != 2*time.Hour || c.DNSServer != "[2001:db8::53]:5353" {
		t.Errorf("merged %v %v %q", c.DNSMinTTL.Duration, c.DNSMaxTTL.Duration, c.DNSServer)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dns-min-ttl", "-1s"}, "floor is -1s"},
		{[]string{"--dns-min-ttl", "1h"}, "ceiling 30m0s is below the floor 1h0m0s"},
		{[]string{"--dns-max-ttl", "1s"}, "ceiling 1s is below the floor 5s"},
		{[]string{"--dns-server", "dns.example.com"}, "dnsServer"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f := BindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Config(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestNodeIdentitySettings: --node-identity=csr and its companions from the
// file and the flags, and what is refused.
func TestNodeIdentitySettings(t *testing.T) {
	c, err := LoadConfig(writeFile(t, "nodeIdentity: csr\nnodeCertDuration: 2h\ngatewayServiceAccount: gw:sa\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeIdentity != NodeIdentityCSR || c.NodeCertDuration.Duration != 2*time.Hour || c.GatewayServiceAccount != "gw:sa" {
		t.Errorf("parsed %+v", c)
	}
	d := Config{}.withDefaults()
	if d.NodeIdentity != "" || d.NodeCertDuration.Duration != 24*time.Hour || d.GatewayServiceAccount != "egret-system:egret-gateway" {
		t.Errorf("defaults: nodeIdentity %q, nodeCertDuration %v, gatewayServiceAccount %q", d.NodeIdentity, d.NodeCertDuration.Duration, d.GatewayServiceAccount)
	}
	for _, tc := range []struct{ body, want string }{
		{"nodeIdentity: x509\n", `nodeIdentity is "x509"`},
		{"nodeIdentity: csr\nhealthTLS: {certFile: a, keyFile: b, caFile: c}\n", "choose one"},
		{"nodeCertDuration: -1h\n", "nodeCertDuration"},
		{"gatewayServiceAccount: egret-gateway\n", "namespace:name"},
	} {
		if _, err := LoadConfig(writeFile(t, tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one mentioning %q", tc.body, err, tc.want)
		}
	}

	parse := func(args ...string) (Config, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f := BindFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.Config()
	}
	c, err = parse("--node-identity=csr", "--node-cert-duration=90m", "--gateway-service-account=a:b")
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeIdentity != NodeIdentityCSR || c.NodeCertDuration.Duration != 90*time.Minute || c.GatewayServiceAccount != "a:b" {
		t.Errorf("flags gave %+v", c)
	}
	if _, err := parse("--node-identity=csr", "--health-tls-cert=a", "--health-tls-key=b", "--health-tls-ca=c"); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("--node-identity=csr with --health-tls-*: %v, want an error", err)
	}
	if _, err := parse("--node-identity=csr", "--source=dir:/tmp"); err == nil || !strings.Contains(err.Error(), "--source=kube") {
		t.Errorf("--node-identity=csr with a dir: source: %v, want an error", err)
	}
}
