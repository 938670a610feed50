package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/egret-gw/egret/cni"
)

// install copies this binary into the node's CNI bin directory under both type names
// and, when asked, keeps a kubeconfig for ipConfig there from the pod's service account.
// The DaemonSet in deploy/cni runs it; nothing here is on a CNI code path.
func install(args []string) error {
	fs := flag.NewFlagSet(installName, flag.ContinueOnError)
	binDir := fs.String("cni-bin-dir", "/host/opt/cni/bin", "where the CNI plugins live (node path as mounted)")
	kcDir := fs.String("kubeconfig-dir", "", "if set, write kubeconfig, ca.crt and token here for ipConfig (node path as mounted)")
	kcHostDir := fs.String("kubeconfig-host-dir", "/etc/cni/net.d/egress-router.d", "the same directory as the node sees it (paths inside the kubeconfig)")
	saDir := fs.String("service-account-dir", "/var/run/secrets/kubernetes.io/serviceaccount", "the pod's service account files")
	watch := fs.Duration("refresh", 0, "if > 0, stay running and re-copy the rotating token at this interval")
	masterTypes := fs.String("allow-master-types", "", "comma-separated link kinds (e.g. veth) that may be a master besides NICs, bonds and VLANs; node-side setting")
	passthru := fs.Bool("allow-passthru", false, "let networks use macvlan mode passthru, which gives one pod the whole NIC; node-side setting")
	crossNS := fs.Bool("allow-cross-namespace-configmaps", false, "let ipConfig.namespace name a namespace other than the pod's; node-side setting")
	eips := fs.String("allow-elastic-ips", "", "comma-separated Elastic IPs (allocation IDs or public IPs, as networks name them) aws-elastic-ip may associate with pods; node-side setting")
	netNS := networkNamespaces{}
	fs.Var(netNS, "network-namespaces", "NETWORK=NS[,NS...]: only pods of these namespaces may join the network of that name (Multus lets any namespace name another's NetworkAttachmentDefinition); repeat per network; * as NETWORK: every network not listed, as NS: every namespace. A network not listed takes no Kubernetes pod; node-side setting")
	checkConfig := fs.Bool("check-config", false, "parse and validate the flags, print the result and exit (0 valid, 1 not); copies nothing")
	if err := parseFlags(fs, "copy this plugin into the node's CNI bin directory (and keep a kubeconfig for ipConfig there)", args); err != nil {
		return err
	}
	hc := cni.HostConfig{AllowPassthru: *passthru, AllowCrossNamespaceConfigMaps: *crossNS}
	if len(netNS) > 0 {
		hc.NetworkNamespaces = netNS
	}
	if *kcDir != "" {
		// The plugin takes ipConfig's credentials from here, never from a network config.
		hc.Kubeconfig = filepath.Join(*kcHostDir, "kubeconfig")
	}
	for _, k := range strings.Split(*masterTypes, ",") {
		if k = strings.TrimSpace(k); k != "" {
			hc.AllowMasterTypes = append(hc.AllowMasterTypes, k)
		}
	}
	for _, e := range strings.Split(*eips, ",") {
		if e = strings.TrimSpace(e); e != "" {
			hc.AllowElasticIPs = append(hc.AllowElasticIPs, e)
		}
	}
	// What the plugin will read back must be valid (namespace names).
	if b, err := json.Marshal(hc); err != nil {
		return err
	} else if _, err := cni.ParseHostConfig(b); err != nil {
		return fmt.Errorf("-network-namespaces: %w", err)
	}
	if *checkConfig {
		for name, dir := range map[string]string{"-cni-bin-dir": *binDir, "-kubeconfig-host-dir": *kcHostDir, "-service-account-dir": *saDir} {
			if !filepath.IsAbs(dir) {
				return fmt.Errorf("%s %q: give an absolute path", name, dir)
			}
		}
		if *kcDir != "" && !filepath.IsAbs(*kcDir) {
			return fmt.Errorf("-kubeconfig-dir %q: give an absolute path", *kcDir)
		}
		if *watch < 0 {
			return fmt.Errorf("-refresh %v: give 0 (copy once) or a positive interval", *watch)
		}
		fmt.Println("install: configuration valid")
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	if err := installBinary(self, *binDir); err != nil {
		return err
	}
	// Written on every start, so dropping a flag also drops what it allowed.
	if err := writeHostConfig(*binDir, hc); err != nil {
		return err
	}
	fmt.Printf("installed %s and %s in %s\n", cni.TypeEgressRouter, cni.TypeOpenshiftEgress, *binDir)
	if *kcDir == "" {
		return nil
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return errors.New("KUBERNETES_SERVICE_HOST/PORT are not set: --kubeconfig-dir only works inside a pod")
	}
	for {
		if err := writeKubeconfig(*kcDir, *kcHostDir, *saDir, "https://"+net.JoinHostPort(host, port)); err != nil {
			return err
		}
		if *watch <= 0 {
			return nil
		}
		time.Sleep(*watch)
	}
}

// installBinary copies src to dir/egress-router atomically and points dir/openshift-egress at it.
func installBinary(src, dir string) error {
	dst := filepath.Join(dir, cni.TypeEgressRouter)
	if err := copyFile(src, dst, 0o755); err != nil {
		return err
	}
	link := filepath.Join(dir, cni.TypeOpenshiftEgress)
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(cni.TypeEgressRouter, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return fmt.Errorf("linking %s: %w", link, err)
	}
	return nil
}

// writeHostConfig puts the node-side settings next to the plugin, where it reads them.
func writeHostConfig(dir string, hc cni.HostConfig) error {
	b, err := json.MarshalIndent(hc, "", "  ")
	if err != nil {
		return err
	}
	dst := filepath.Join(dir, cni.HostConfigName)
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}

// copyFile writes through a temporary name so a runtime never executes half a binary.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func writeKubeconfig(dir, hostDir, saDir, server string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"ca.crt", "token"} {
		if err := copyFile(filepath.Join(saDir, f), filepath.Join(dir, f), 0o600); err != nil {
			return fmt.Errorf("copying the service account %s: %w", f, err)
		}
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: egress-router
  user:
    tokenFile: %s
contexts:
- name: egress-router
  context: {cluster: local, user: egress-router}
current-context: egress-router
`, server, filepath.Join(hostDir, "ca.crt"), filepath.Join(hostDir, "token"))
	tmp := filepath.Join(dir, "kubeconfig.tmp")
	if err := os.WriteFile(tmp, []byte(kc), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "kubeconfig"))
}

// networkNamespaces is -network-namespaces: NETWORK=NS[,NS...], repeated.
type networkNamespaces map[string][]string

func (n networkNamespaces) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, k+"="+strings.Join(n[k], ","))
	}
	return strings.Join(parts, " ")
}

func (n networkNamespaces) Set(v string) error {
	network, list, ok := strings.Cut(v, "=")
	network = strings.TrimSpace(network)
	if !ok || network == "" {
		return fmt.Errorf("%q: give NETWORK=NS[,NS...]", v)
	}
	if _, dup := n[network]; dup {
		return fmt.Errorf("network %q given twice", network)
	}
	var nss []string
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			nss = append(nss, ns)
		}
	}
	n[network] = nss
	return nil
}
