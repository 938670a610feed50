// Package kubetest runs a real etcd and kube-apiserver on loopback for tests.
//
// The binaries are built from source by hack/k8s-bins.sh into BinDir. The
// control plane has no controller-manager, scheduler or kubelet: objects are
// stored and validated exactly as in a cluster, but nothing reconciles them
// (pods never run, deleted namespaces stay Terminating).
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminUser is the user name of Env.Config; it is in group system:masters,
// so RBAC never denies it. Use UserConfig or impersonation to test RBAC.
const AdminUser = "egret-test-admin"

// DefaultBinDir is where hack/k8s-bins.sh puts the binaries by default.
const DefaultBinDir = "/var/cache/egret/bin"

// startTimeout bounds how long Start waits for /readyz. The machine may be
// busy compiling, so it is generous.
const startTimeout = 2 * time.Minute

// Env is a running test control plane.
type Env struct {
	// Config reaches the apiserver as AdminUser over TLS. Copy it with
	// rest.CopyConfig before changing it.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the same identity,
	// for kubectl and for code that reads kubeconfig files.
	Kubeconfig string
	// BinDir holds the etcd, kube-apiserver and (if built) kubectl binaries.
	BinDir string

	pki *pki
	cp  *controlPlane
}

// BinDir returns EGRET_TOOLS_DIR, or DefaultBinDir when it is unset.
func BinDir() string {
	if d := os.Getenv("EGRET_TOOLS_DIR"); d != "" {
		return d
	}
	return DefaultBinDir
}

// Missing handles an absent prerequisite: on CI (CI=true) it is a failure,
// since the project can build it; elsewhere the test is skipped.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, so this fails instead of skipping)", msg)
	}
	t.Skip(msg)
}

// Tool returns the path of the cached binary name in BinDir (kubectl, helm,
// ...). When it is missing the test fails under CI=true and skips otherwise;
// build names the script that builds it.
func Tool(t testing.TB, name, build string) string {
	t.Helper()
	p := binary(BinDir(), name)
	if p == "" {
		Missing(t, "%s is not in %s; %s builds it", name, BinDir(), build)
	}
	return p
}

// binary returns the path of name in BinDir, or "" if it is not executable.
func binary(dir, name string) string {
	p := filepath.Join(dir, name)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

// Start runs etcd and kube-apiserver for the test and stops them, removing
// their data, when the test ends. Each call is an independent control plane
// that takes a few seconds to start, so tests that only need isolation
// should share one and use distinct namespaces or object names.
func Start(t testing.TB) *Env {
	t.Helper()
	dir := BinDir()
	if binary(dir, "etcd") == "" || binary(dir, "kube-apiserver") == "" {
		Missing(t, "kubetest: etcd and kube-apiserver are not in %s; build them with hack/k8s-bins.sh", dir)
	}
	env, err := Run(t.TempDir())
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubetest: kube-apiserver log tail:\n%s", env.cp.api.tail(30))
		}
		env.Stop()
	})
	return env
}

// Run starts etcd and kube-apiserver outside a test, keeping their data
// and logs under work, for the benchmarks of bench/; Stop ends them.
func Run(work string) (*Env, error) {
	dir := BinDir()
	etcdBin, apiBin := binary(dir, "etcd"), binary(dir, "kube-apiserver")
	if etcdBin == "" || apiBin == "" {
		return nil, fmt.Errorf("etcd and kube-apiserver are not in %s; build them with hack/k8s-bins.sh", dir)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	p, err := newPKI(work)
	if err != nil {
		return nil, err
	}
	env := &Env{BinDir: dir, pki: p}
	for attempt := range 3 {
		cp, err := env.start(etcdBin, apiBin, filepath.Join(work, "run"+strconv.Itoa(attempt)))
		if err == nil {
			env.cp = cp
			return env, nil
		}
		if !errors.Is(err, errPortRace) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("could not start a control plane in 3 attempts: %w", errPortRace)
}

// Stop ends the control plane Run started.
func (e *Env) Stop() {
	if e.cp != nil {
		e.cp.stop()
	}
}

// controlPlane is one etcd + kube-apiserver pair.
type controlPlane struct {
	etcd, api *process
}

func (c *controlPlane) stop() {
	if c.api != nil {
		c.api.stop(15 * time.Second)
	}
	if c.etcd != nil {
		c.etcd.stop(10 * time.Second)
	}
}

func (e *Env) start(etcdBin, apiBin, dir string) (_ *controlPlane, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	cp := &controlPlane{}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()

	clientURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	cp.etcd, err = startProcess("etcd", etcdBin, []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// Test data is thrown away: skip fsync, it only costs time.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return cp, err
	}
	if err := waitFor(cp.etcd, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, clientURL+"/health")
	}); err != nil {
		return cp, err
	}

	host := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	cp.api, err = startProcess("kube-apiserver", apiBin, []string{
		"--etcd-servers=" + clientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The endpoint reconciler refuses a loopback advertise address, and
		// there is no cluster network for the kubernetes Service anyway.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + dir,
		"--tls-cert-file=" + e.pki.servingCertFile,
		"--tls-private-key-file=" + e.pki.servingKeyFile,
		"--client-ca-file=" + e.pki.caFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + e.pki.saPubFile,
		"--service-account-signing-key-file=" + e.pki.saKeyFile,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		// No controller-manager creates the "default" service account, so
		// the ServiceAccount admission plugin would refuse every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
	}, filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return cp, err
	}

	e.Config = &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   e.pki.caPEM,
			CertData: e.pki.adminCert,
			KeyData:  e.pki.adminKey,
		},
		QPS:   200,
		Burst: 400,
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return cp, fmt.Errorf("building a client for %s: %w", host, err)
	}
	if err := waitFor(cp.api, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return cp, err
	}

	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(e.Kubeconfig, e.Config, AdminUser); err != nil {
		return cp, err
	}
	return cp, nil
}

// waitFor polls ready until it succeeds, the process dies or startTimeout
// passes; errors quote the process log.
func waitFor(p *process, ready func(context.Context) error) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			if p.portInUse() {
				return fmt.Errorf("%s exited: %w:\n%s", p.name, errPortRace, p.tail(10))
			}
			return fmt.Errorf("%s exited during start (%v); log %s:\n%s", p.name, p.err, p.logPath, p.tail(30))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = ready(ctx)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v (last error: %v); log %s:\n%s", p.name, startTimeout, last, p.logPath, p.tail(30))
}

func httpOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// writeKubeconfig writes a kubeconfig with the credentials of cfg inlined.
func writeKubeconfig(path string, cfg *rest.Config, user string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["egret-test"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts["egret-test"] = &clientcmdapi.Context{Cluster: "egret-test", AuthInfo: user}
	kc.CurrentContext = "egret-test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// UserConfig returns a config that authenticates as user in groups with a
// client certificate from the test CA, so RBAC applies to it (unlike
// Config, whose group system:masters bypasses RBAC).
func (e *Env) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	cert, key, err := e.pki.ClientCert(user, groups...)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.CertData, cfg.KeyData = cert, key
	return cfg
}

// UserKubeconfig writes a kubeconfig file with UserConfig's credentials for
// user in groups, for a command run as that user, and returns its path.
func (e *Env) UserKubeconfig(t testing.TB, user string, groups ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := writeKubeconfig(path, e.UserConfig(t, user, groups...), user); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return path
}

// Kubectl runs the kubectl from BinDir against this control plane and
// returns its combined output. A missing kubectl fails on CI and skips
// elsewhere, like a missing apiserver.
func (e *Env) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin := binary(e.BinDir, "kubectl")
	if bin == "" {
		Missing(t, "kubetest: kubectl is not in %s; build it with hack/k8s-bins.sh", e.BinDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + e.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return string(out), nil
}
