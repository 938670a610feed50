// Package e2e runs Egret the way users do: the image pushed to a registry,
// `kubectl apply --server-side -k` of deploy/ under a user's overlay, on the
// real cluster of `make cluster-up` (hack/cluster), and checks egress from
// pods that Kubernetes created, as the outside server sees it (issue 14 §4).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
	"sigs.k8s.io/yaml"
)

// The cluster of hack/cluster/common.sh.
const (
	stateDir = "/var/lib/egret-cluster"
	outNS    = "egretc-out"
	// egressBase is where the examples' egress IPs move to: the i-th address
	// of the examples (in file order) becomes <node network><egressBase+i>,
	// in the nodes' subnet where a gateway can claim it.
	egressBase = 101
	// gatewayLabel is the admin-owned label deploy/ makes gateway nodes by.
	gatewayLabel = "node-restriction.kubernetes.io/egret-gateway"
	// reachabilityTotalTimeout is the controller's default (control/controller).
	reachabilityTotalTimeout = 1 * time.Second
)

var (
	workers  = []string{"w1", "w2"}
	gateways = []string{"gw1", "gw2"}
)

// clusterNet is one address plan of hack/cluster/common.sh, chosen as
// make cluster-up chooses it: CLUSTER_FAMILY, ipv4 unless it says ipv6.
type clusterNet struct {
	family   string
	registry string // as image references name it
	serverIP string // the outside echo server
	routerIP string // the nodes' default route
	nodeIPs  map[string]string
	subnet   string // the nodes' network, to which egressBase+i is appended
	// moveIP is the test's own single-IP object, to watch one IP change node.
	moveIP      string
	overlay     string // the overlay a user of this cluster writes, under the repository
	values      string // its Helm twin
	icmpNetwork string // for net.ListenPacket
	echoRequest byte   // the ICMP type of an echo request
	ipFlag      string // ip(8)'s family option
}

var families = map[string]clusterNet{
	"ipv4": {
		family: "ipv4", registry: "10.77.0.1:5000", serverIP: "10.80.0.1", routerIP: "10.77.0.254",
		nodeIPs: map[string]string{"w1": "10.77.0.11", "w2": "10.77.0.12", "gw1": "10.77.0.13", "gw2": "10.77.0.14"},
		subnet:  "10.77.0.", moveIP: "10.77.0.120",
		overlay: "hack/cluster/overlay", values: "hack/cluster/values.yaml",
		icmpNetwork: "ip4:icmp", echoRequest: 8, ipFlag: "-4",
	},
	"ipv6": {
		family: "ipv6", registry: "egretc-registry:5000", serverIP: "fd80::1", routerIP: "fd77::254",
		nodeIPs: map[string]string{"w1": "fd77::11", "w2": "fd77::12", "gw1": "fd77::13", "gw2": "fd77::14"},
		subnet:  "fd77::", moveIP: "fd77::120",
		overlay: "hack/cluster/overlay-ipv6", values: "hack/cluster/values-ipv6.yaml",
		icmpNetwork: "ip6:ipv6-icmp", echoRequest: 128, ipFlag: "-6",
	},
}

// plan is the cluster this run uses (TestCluster sets it).
var plan clusterNet

// serverHTTP is the URL of the echo server at server (plan.serverIP, or
// the second network's); it echoes UDP on the next port.
func serverHTTP(server string) string {
	return "http://" + net.JoinHostPort(server, "8080") + "/"
}

type env struct {
	t          *testing.T
	repo       string
	kubectlBin string // the cached kubectl (hack/k8s-bins.sh)
	version    string
	overlay    string
	ports      int // source ports syncedPair tried so far
	crdCleanup bool
	// previous: release N-1 runs, which does not serve pods on gateway
	// nodes: its steer agent there fails to program a route via its own
	// node ("invalid argument", retried for ever) for any selected pod,
	// which Egret's own controller pod is when it lands there.
	previous bool
	// keyless: the Secret egret-flow-sync is gone and the gateways were
	// restarted since: every flow sync session is mutual TLS.
	keyless bool
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster end-to-end test takes minutes; -short skips it")
	}
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "the cluster end-to-end test needs root (namespaces, containerd, kubelets)")
	}
	fam := os.Getenv("CLUSTER_FAMILY")
	if fam == "" {
		fam = "ipv4"
	}
	var ok bool
	if plan, ok = families[fam]; !ok {
		t.Fatalf("CLUSTER_FAMILY=%s: give ipv4 or ipv6", fam)
	}
	start := time.Now()
	repo, _ := filepath.Abs("..")
	e := &env{t: t, repo: repo, kubectlBin: kubetest.Tool(t, "kubectl", "hack/k8s-bins.sh")}
	// The overlay a user of this cluster writes; EGRET_E2E_OVERLAY runs another
	// (a trial) with the same checks.
	e.overlay = filepath.Join(repo, plan.overlay)
	if o := os.Getenv("EGRET_E2E_OVERLAY"); o != "" {
		e.overlay = o
	}
	v, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	e.version = strings.TrimSpace(string(v))

	// The image and the binaries the cluster runs (echo server) first; a
	// missing tool or package is installed by make, or fails here.
	e.sh("make", "-s", "-C", repo, "image")
	if !e.clusterUp() {
		e.sh("make", "-s", "-C", repo, "cluster-up", "CLUSTER_FAMILY="+plan.family, "CLUSTER_CNI="+clusterCNI())
		t.Cleanup(func() {
			if os.Getenv("EGRET_E2E_KEEP") == "" {
				e.sh("make", "-s", "-C", repo, "cluster-down")
			}
		})
	}
	t.Logf("cluster (%s, %s) up after %v", plan.family, clusterCNI(), time.Since(start).Round(time.Second))

	// 1. the images into the registry: this tree's, and release N-1's, which
	// the test installs first and upgrades from (issue 32).
	image := "ghcr.io/egret-gw/egret:" + e.version
	e.push(image, plan.registry+"/egret-gw/egret:"+e.version)
	// The tag stays the version while the tree changes: the nodes must pull
	// this build, not run the one they cached from an earlier run.
	// The probe's tag stays too.
	e.forgetImages(plan.registry+"/egret-gw/egret:"+e.version, probeImage())
	// Release N-1 first, upgraded to this tree, on the bridge cluster; on
	// flannel (CLUSTER_CNI) this tree's release only: 0.1.0 let flannel's
	// masquerade rename steered packets (a fix of this release).
	upgrade := clusterCNI() == "bridge"
	prev := release{version: e.version, dir: e.repo, image: plan.registry + "/egret-gw/egret:" + e.version}
	if upgrade {
		prev = e.previousRelease()
	}
	e.buildProbeImage()
	// As README says: egress-assignable, and the admin-owned label the
	// gateway DaemonSet selects (release N-1 selects egress-assignable).
	for _, g := range gateways {
		e.kubectl("label", "node", g, "k8s.ovn.org/egress-assignable=", gatewayLabel+"=true", "--overwrite")
	}
	t.Cleanup(func() {
		for _, g := range gateways {
			e.kubectlErr("label", "node", g, "k8s.ovn.org/egress-assignable-", gatewayLabel+"-")
		}
	})
	// Release N-1 as its users installed it: its CRDs once, apart from either
	// install (docs/operations.md): no uninstall below removes them.
	e.installCRDs(prev.dir)
	e.flowSyncSecret()
	e.kustomize(prev.dir).install()
	e.previous = upgrade
	e.waitEgretReady()
	if got := e.gatewayImage(); got != prev.image {
		t.Fatalf("release %s's install runs %s", prev.version, got)
	}
	t.Logf("Egret %s (kustomize) Ready after %v", prev.version, time.Since(start).Round(time.Second))

	// 2. the spec's EgressIP examples, their addresses moved into the nodes' subnet.
	objs := e.applyExamples()
	names := append(slices.Collect(maps.Keys(objs)), "e2e-move")
	moveIP := plan.moveIP

	// 3. namespaces and Deployments: one namespace per object, one none selects.
	// egress-group2 selects every namespace whose "environment" is not
	// "development", so every other namespace here says development.
	nss := []testNS{
		{name: "e2e-prod", labels: map[string]string{"env": "prod", "environment": "development"}, podLabels: map[string]string{"app": "web"}, want: objs["egress-group1"]},
		{name: "e2e-qa", labels: map[string]string{"env": "qa", "environment": "development"}, want: objs["egress-project1"]},
		{name: "e2e-other", labels: map[string]string{"environment": "production"}, want: objs["egress-group2"]},
		{name: "e2e-none", labels: map[string]string{"environment": "development"}},
		{name: "e2e-move", labels: map[string]string{"e2e": "move", "environment": "development"}, want: []string{moveIP}},
		// Pods on the gateway nodes themselves (issue 28): the one on the
		// node hosting moveIP leaves through its own gateway's local port,
		// the other through the tunnel, as from a worker.
		{name: "e2e-gwpods", labels: map[string]string{"e2e": "move", "environment": "development"}, want: []string{moveIP}, nodes: gateways},
	}
	// What release N-1 serves: pods on gateway nodes came after it.
	prevNSs := nss[:5]
	if !upgrade {
		prevNSs = nss
	}
	for _, ns := range nss {
		e.createNamespace(ns)
	}
	t.Cleanup(func() {
		for _, ns := range nss {
			e.kubectlErr("delete", "namespace", ns.name, "--wait=false")
		}
	})
	for _, ns := range nss {
		e.kubectl("-n", ns.name, "wait", "--for=condition=Available", "deployment", "--all", "--timeout=120s")
	}
	icmp := e.icmpRecorder(outNS, plan.serverIP)
	e.checkAllEgress(icmp, names, prevNSs)
	t.Logf("egress through %s checked after %v", prev.version, time.Since(start).Round(time.Second))

	// 4. the upgrade N-1 -> N with kustomize as docs/operations.md says,
	// with two connections open through it (upgradeWith).
	kust := e.kustomize(e.repo)
	if upgrade {
		e.upgradeWith(kust, prev, nss[4], "the kustomize upgrade")
		e.checkAllEgress(icmp, names, nss)
		t.Logf("egress through %s (kustomize upgrade) checked after %v", e.version, time.Since(start).Round(time.Second))
	}
	// The API server enforces PodSecurity baseline on every namespace without
	// a label of its own (make cluster-up): Egret's pods ran only through
	// deploy/namespace.yaml's label.
	e.checkPodSecurity()
	e.checkPinned()
	// What egret status says of every client pod matches what the server saw.
	e.checkStatus(nss)
	e.checkAdmission(nss[3])
	// A worker that labels itself egress-assignable gets no gateway.
	e.checkSelfLabel()
	// Each gateway node holds its own certificate, and another node's is
	// refused by the flow sync.
	e.checkNodeIdentity()
	// An EgressIP of the gateways' second network leaves by their eth1.
	e.checkSecondNIC()
	// A pod leaves as one object towards one server and as another
	// towards the other (deploy/examples/per-destination).
	e.checkByDestination()
	// egret check: every selected namespace's probe leaves as the status
	// says, and a deliberately unsteered path is caught.
	e.checkCheck(nss)
	// A selected pod's connections to a denied destination get it one
	// EgressDestinationDenied Event.
	if plan.family == "ipv4" {
		e.checkDeniedEvent(nss[4], "169.254.169.254", "169.254.1.1")
	} else {
		e.checkDeniedEvent(nss[4], "fd00:ec2::254", "fd00:ec2::1")
	}

	// The upgrade's last step (docs/operations.md): the shared key goes,
	// and the gateways, restarted, speak node certificates alone.
	e.endTransition()

	// 5. the node hosting the single-IP object dies; the IP serves from the
	// other gateway, its standby, and two connections go on with their
	// source address and port, one of them carried only by the synced flow.
	e.failover(icmp, nss[4])
	// The pods on the gateway nodes after the move: the one whose node
	// now hosts moveIP leaves locally, the other tunnels to it.
	e.checkAllEgress(icmp, names, []testNS{nss[5]})
	t.Logf("pods on the gateway nodes checked after the failover at %v", time.Since(start).Round(time.Second))

	// 6. uninstall; every node is clean. (The pods stay: they are the
	// cluster's, not Egret's, and so do the EgressIPs: the users'.)
	eips := e.eipSpecs()
	kust.uninstall()
	e.checkAllClean()
	e.checkEIPsKept(eips, "kubectl delete -k")
	t.Logf("kustomize install removed, nodes clean, EgressIPs kept, at %v", time.Since(start).Round(time.Second))

	// 7. §5: the Helm chart in place of kustomize: release N-1's chart, then
	// helm upgrade to this tree's, with the same checks.
	e.flowSyncSecret()
	e.helm(prev.dir).install()
	e.previous = upgrade
	e.waitEgretReady()
	t.Logf("Egret %s (helm) Ready after %v", prev.version, time.Since(start).Round(time.Second))
	// The EgressIPs the kustomize install served, kept through its
	// uninstall, are served again as they are.
	e.checkAllEgress(icmp, names, prevNSs)
	t.Logf("egress through the Helm install of %s checked at %v", prev.version, time.Since(start).Round(time.Second))
	hm := e.helm(e.repo)
	if upgrade {
		e.upgradeWith(hm, prev, nss[4], "helm upgrade")
		e.checkAllEgress(icmp, names, nss)
		t.Logf("egress after helm upgrade to %s checked at %v", e.version, time.Since(start).Round(time.Second))

		// 8. the downgrade back to N-1 works as the skew policy says
		// (docs/operations.md, "Version skew"): helm rollback, and every pod
		// release N-1 serves leaves as its egress IP again.
		e.downgrade(hm, prev)
		e.checkAllEgress(icmp, names, prevNSs)
		t.Logf("egress after helm rollback to %s checked at %v", prev.version, time.Since(start).Round(time.Second))
	}

	for _, ns := range nss {
		e.kubectl("delete", "namespace", ns.name, "--wait=false")
	}
	hm.uninstall()
	e.checkAllClean()
	e.checkEIPsKept(eips, "helm uninstall")
	t.Logf("total %v", time.Since(start).Round(time.Second))
}

// checkAdmission (issue 33): a pod of ns on a worker cannot open a
// connection to a gateway node's flow sync (9108), nor to its metrics port
// (9110: no Prometheus pod runs here, and the overlay admits only the host,
// which gatewayMetric reads from), nor to its health port (9107) from a
// worker no controller pod runs on (this cluster's CNI masquerades pods to
// their node's address, which the health port admits on a controller's
// node), while the controller's probes go on: no EgressIP's status changes
// meanwhile.
func (e *env) checkAdmission(ns testNS) {
	e.t.Helper()
	statuses := func() string {
		return e.kubectl("get", "eip", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.items}{"\n"}{end}`)
	}
	before := statuses()
	ctl := strings.Fields(e.kubectl("-n", "egret-system", "get", "pods", "-l", "app.kubernetes.io/name=egret-controller",
		"-o", "jsonpath={.items[*].spec.nodeName}"))
	for _, p := range e.pods(ns.name) {
		if slices.Contains(gateways, p.node) {
			continue
		}
		dropped := []string{"9108", "9110"}
		if !slices.Contains(ctl, p.node) {
			dropped = append(dropped, "9107")
		}
		for _, port := range dropped {
			addr := net.JoinHostPort(plan.nodeIPs[gateways[0]], port)
			if out, err := e.exec(ns.name, p.name, "/bin/probe", "dial", addr); err == nil || !strings.Contains(out, "timeout") {
				e.t.Errorf("%s/%s on %s dialled %s: %v %s; want a timeout (SYN dropped by inet egret-admit)", ns.name, p.name, p.node, addr, err, out)
			}
		}
		e.t.Logf("admission: %s on %s refused on %v of %s (controller on %v)", p.name, p.node, dropped, gateways[0], ctl)
	}
	if after := statuses(); after != before {
		e.t.Errorf("EgressIP statuses changed while pods were refused on the health port:\nbefore %s\nafter %s", before, after)
	}
}

// installCRDs applies deploy/crd/ of the tree at root, as docs/operations.md
// says: before Egret (and before each upgrade), and never removed with it.
// The test removes them at its end.
func (e *env) installCRDs(root string) {
	e.t.Helper()
	crds := filepath.Join(root, "deploy/crd")
	e.kubectl("apply", "--server-side", "-k", crds)
	wait := []string{"wait", "--for=condition=established", "--timeout=60s", "crd/egressips.k8s.ovn.org", "crd/cloudprivateipconfigs.cloud.network.openshift.io"}
	// Release N-1 has no EgressIPTraffic.
	if _, err := os.Stat(filepath.Join(crds, "k8s.ovn.org_egressiptraffics.yaml")); err == nil {
		wait = append(wait, "crd/egressiptraffics.k8s.ovn.org")
	}
	e.kubectl(wait...)
	if !e.crdCleanup {
		e.crdCleanup = true
		e.t.Cleanup(func() { e.kubectlErr("delete", "-k", crds, "--ignore-not-found") })
	}
}

// eipSpecs is every EgressIP's spec, as JSON, by name.
func (e *env) eipSpecs() map[string]string {
	e.t.Helper()
	var l struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(e.kubectl("get", "eip", "-o", "json")), &l); err != nil {
		e.t.Fatal(err)
	}
	m := map[string]string{}
	for _, it := range l.Items {
		m[it.Metadata.Name] = string(it.Spec)
	}
	return m
}

// checkEIPsKept fails the test unless every EgressIP of before is still
// there after an uninstall, with the same spec.
func (e *env) checkEIPsKept(before map[string]string, after string) {
	e.t.Helper()
	if len(before) == 0 {
		e.t.Fatal("no EgressIP to keep: the check shows nothing")
	}
	now := e.eipSpecs()
	for name, spec := range before {
		switch got, ok := now[name]; {
		case !ok:
			e.t.Errorf("EgressIP %s is gone after %s", name, after)
		case got != spec:
			e.t.Errorf("EgressIP %s's spec after %s is %s, was %s", name, after, got, spec)
		}
	}
	e.t.Logf("%d EgressIPs kept, spec unchanged, after %s", len(before), after)
}

// checkPodSecurity shows the cluster enforces PodSecurity baseline by
// default, so Egret's pods (host network, NET_ADMIN) were admitted only by
// their namespace's label: a host-network pod in the unlabelled namespace
// default is refused (a server-side dry run, nothing is created).
func (e *env) checkPodSecurity() {
	e.t.Helper()
	if l := e.kubectl("get", "namespace", "egret-system", "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`); l != "privileged" {
		e.t.Errorf("namespace egret-system: pod-security.kubernetes.io/enforce=%q, want privileged", l)
	}
	pod := yamlDoc(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "e2e-host-network", "namespace": "default"},
		"spec": map[string]any{
			"hostNetwork": true,
			"containers":  []any{map[string]any{"name": "c", "image": probeImage(), "command": []string{"/bin/sleep", "1"}}},
		},
	})
	cmd := exec.Command(e.kubectlBin, "--kubeconfig="+filepath.Join(stateDir, "admin.kubeconfig"), "create", "--dry-run=server", "-f", "-")
	cmd.Stdin = strings.NewReader(pod)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `violates PodSecurity "baseline`) {
		e.t.Errorf("a host-network pod in namespace default: %v\n%s\nwant it refused by the cluster's PodSecurity default, baseline (hack/cluster/up.sh)", err, out)
		return
	}
	e.t.Logf("the cluster's PodSecurity default refuses a host-network pod: %s", strings.TrimSpace(string(out)))
}

// flowSyncSecret makes the Secret that turns the gateways' flow sync on,
// with the command docs/security.md gives users ("Flow sync"), in the
// namespace made beforehand, so the gateways start with the key. The
// namespace goes with the install (kubectl delete -k; after helm
// uninstall, kubectl delete namespace), the Secret with it.
func (e *env) flowSyncSecret() {
	e.t.Helper()
	e.kubectl("create", "namespace", "egret-system")
	e.sh("sh", "-c", e.kubectlBin+` -n egret-system create secret generic egret-flow-sync \
  --from-literal=key="$(head -c 48 /dev/urandom | base64 -w0)"`)
}

// heldConn is one keep-alive HTTP connection from a pod to the outside
// server (probe hold): a request every 200 ms until end.
type heldConn struct {
	what   string // namespace/pod
	seen   netip.AddrPort
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	errOut bytes.Buffer
}

// hold opens a connection from pod p of namespace ns, from source port
// port (0: the kernel's choice), and returns once the server answered the
// first request, with the source it saw.
func (e *env) hold(ns string, p pod, port int) (*heldConn, error) {
	args := []string{"--kubeconfig=" + filepath.Join(stateDir, "admin.kubeconfig"), "-n", ns, "exec", "-i", p.name, "--",
		"/bin/probe", "hold", net.JoinHostPort(plan.serverIP, "8080")}
	if port != 0 {
		args = append(args, strconv.Itoa(port))
	}
	h := &heldConn{what: ns + "/" + p.name, cmd: exec.Command(e.kubectlBin, args...)}
	h.cmd.Stderr = &h.errOut
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	h.out = bufio.NewReader(stdout)
	// The probe gives up on its own (5 s to connect, 15 s for an answer);
	// this is for a kubectl exec that hangs.
	stuck := time.AfterFunc(time.Minute, func() { h.cmd.Process.Kill() })
	line, rerr := h.out.ReadString('\n')
	stuck.Stop()
	if rerr == nil {
		h.seen, rerr = netip.ParseAddrPort(strings.TrimSpace(line))
	}
	if rerr != nil {
		h.stdin.Close()
		rest, _ := io.ReadAll(h.out)
		werr := h.cmd.Wait()
		return nil, fmt.Errorf("%s: probe hold: %v (%v): %s%s%s", h.what, rerr, werr, line, rest, h.errOut.String())
	}
	return h, nil
}

// end closes the probe's stdin: it asks once more, so its last answer
// came after whatever happened meanwhile, and reports how many answers
// came, every one from h.seen (else it fails).
func (h *heldConn) end() (int, error) {
	h.stdin.Close()
	rest, _ := io.ReadAll(h.out)
	if err := h.cmd.Wait(); err != nil {
		return 0, fmt.Errorf("%s, seen as %v: %v: %s%s", h.what, h.seen, err, rest, h.errOut.String())
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(rest)))
	if err != nil {
		return 0, fmt.Errorf("%s: probe hold ended with %q: %w", h.what, rest, err)
	}
	return n, nil
}

// syncedConns are two connections through moveIP to the outside server
// from one source port of two pods: the server knows the first by that
// port (preserved) and the second by another, since the egress IP's port
// towards that server is the first's. When their gateway goes, the
// pick-up on the IP's new owner could not carry the second (it would take
// the pod's own port, which the server does not know for it): only a copy
// of its flow can, synced to the standby or left in the state file.
type syncedConns struct {
	preserved, notPreserved *heldConn
	port                    int
}

// syncedPair opens syncedConns from the pods of ns (one per worker, both
// selected by e2e-move).
func (e *env) syncedPair(ns testNS) syncedConns {
	e.t.Helper()
	ps := e.pods(ns.name)
	if len(ps) < 2 {
		e.t.Fatalf("%s has %d running pods; the synced connections need two", ns.name, len(ps))
	}
	for range 16 {
		// Below the pods' ephemeral ports, and another each time: a flow
		// of an earlier check on the same port may still be held.
		e.ports++
		port := 30000 + (os.Getpid()*7+e.ports*131)%2000
		first, err := e.hold(ns.name, ps[0], port)
		if err != nil {
			e.t.Logf("port %d: %v", port, err)
			continue
		}
		if first.seen.Addr().String() != plan.moveIP || first.seen.Port() != uint16(port) {
			e.t.Logf("port %d: %s seen as %v, not %s with its port; another", port, first.what, first.seen, plan.moveIP)
			first.end()
			continue
		}
		second, err := e.hold(ns.name, ps[1], port)
		if err != nil {
			first.end()
			e.t.Fatalf("the second connection from port %d: %v", port, err)
		}
		if second.seen.Addr().String() != plan.moveIP || second.seen.Port() == uint16(port) {
			first.end()
			second.end()
			e.t.Fatalf("%s from port %d was seen as %v while %s holds %v: want %s on another port", second.what, port, second.seen, first.what, first.seen, plan.moveIP)
		}
		e.t.Logf("%s seen as %v (port %d not preserved: %s holds it as %v)", second.what, second.seen, port, first.what, first.seen)
		return syncedConns{preserved: first, notPreserved: second, port: port}
	}
	e.t.Fatalf("16 source ports tried from %s: none was kept by %s", ps[0].name, plan.moveIP)
	return syncedConns{}
}

// syncedThrough opens syncedConns once moveIP has a standby, and returns
// them with the IP's gateway and standby once the standby holds their
// flows.
func (e *env) syncedThrough(ns testNS) (sc syncedConns, primary, standby string) {
	e.t.Helper()
	primary = e.eipStatus()[plan.moveIP]
	if !slices.Contains(gateways, primary) {
		e.t.Fatalf("%s is on %q, not a gateway", plan.moveIP, primary)
	}
	standby = e.waitStandby(primary)
	applied0 := e.gatewayMetric(standby, "egret_gateway_sync_records_applied_total")
	sc = e.syncedPair(ns)
	e.checkSyncing(primary, standby, applied0)
	return sc, primary, standby
}

// end ends both connections and fails the test unless each answered, to
// its last request, from the address and port the server saw at first.
func (sc syncedConns) end(t *testing.T, after string) {
	t.Helper()
	for _, h := range []*heldConn{sc.preserved, sc.notPreserved} {
		n, err := h.end()
		if err != nil {
			t.Errorf("the connection held through %s: %v", after, err)
			continue
		}
		kept := "its own port"
		if h == sc.notPreserved {
			kept = fmt.Sprintf("not its own port %d", sc.port)
		}
		t.Logf("a connection from %s went on through %s: %d answers, all from %v (%s)", h.what, after, n, h.seen, kept)
	}
}

// endRollout ends the connections held through the gateway rollout and
// says how they were carried: moveIP moved (to its standby, which held
// their synced flows) or stayed with its restarted host. Either way the
// new gateway on host, where moveIP was before the rollout, must have
// resumed at least their two flows from the state file its predecessor
// left on the node.
func (e *env) endRollout(sc syncedConns, host string) {
	e.t.Helper()
	sc.end(e.t, "the gateway rollout")
	uid := e.kubectl("get", "eip", "e2e-move", "-o", "jsonpath={.metadata.uid}")
	moves := strings.Count(e.kubectl("get", "events", "-A", "--field-selector=involvedObject.uid="+uid,
		"-o", "custom-columns=REASON:.reason", "--no-headers"), "EgressIPMoved")
	e.t.Logf("%s moved %d times in the rollout, from %s to %s", plan.moveIP, moves, host, e.eipStatus()[plan.moveIP])
	for _, g := range gateways {
		p := e.gatewayPod(g)
		var resumed struct {
			Msg   string
			Flows int
		}
		for _, l := range strings.Split(e.kubectl("-n", "egret-system", "logs", p), "\n") {
			if strings.Contains(l, "of the previous process") {
				json.Unmarshal([]byte(l), &resumed)
				e.t.Logf("%s (%s): %s", g, p, l)
			}
		}
		if g == host && (resumed.Msg != "gateway: resumed the flows of the previous process" || resumed.Flows < 2) {
			e.t.Errorf("the new gateway on %s, which hosted %s before the rollout, did not resume the two connections' flows from the state file (%+v)", g, plan.moveIP, resumed)
		}
	}
}

// gatewayPod is the name of the gateway pod on node n.
func (e *env) gatewayPod(n string) string {
	e.t.Helper()
	return strings.TrimSpace(e.kubectl("-n", "egret-system", "get", "pods", "-l", "app.kubernetes.io/name=egret-gateway",
		"--field-selector=spec.nodeName="+n, "-o", "jsonpath={.items[0].metadata.name}"))
}

// waitStandby waits until the controller names a standby for moveIP, on
// node host, and returns it: a gateway back from a restart is held down
// (30 s) before it may host or stand by.
func (e *env) waitStandby(host string) string {
	e.t.Helper()
	var ann, standby string
	if nstest.Poll(90*time.Second, time.Second, func() bool {
		ann = e.kubectl("get", "eip", "e2e-move", "-o", `jsonpath={.metadata.annotations.egret\.io/standby}`)
		var m map[string]string
		if json.Unmarshal([]byte(ann), &m) == nil && slices.Contains(gateways, m[plan.moveIP]) && m[plan.moveIP] != host {
			standby = m[plan.moveIP]
			return e.eipStatus()[plan.moveIP] == host
		}
		return false
	}) {
		return standby
	}
	e.t.Fatalf("e2e-move names no standby for %s on %s after 90s (egret.io/standby %q)\n%s", plan.moveIP, host, ann,
		e.kubectl("get", "events", "-A", "--field-selector=involvedObject.kind=EgressIP"))
	return ""
}

// gatewayMetric reads one unlabelled metric from node n's gateway
// (its metrics port, 9110 on the node's address). The test runs on the
// host, which the cluster's overlay and values admit (--metrics-allow):
// the admission filter drops every other source outside the cluster.
func (e *env) gatewayMetric(n, name string) float64 {
	e.t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(plan.nodeIPs[n], "9110") + "/metrics")
	if err != nil {
		e.t.Fatalf("metrics of the gateway on %s: %v", n, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("metrics of the gateway on %s: %v", n, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				e.t.Fatalf("%s of the gateway on %s: %q", name, n, l)
			}
			return f
		}
	}
	e.t.Fatalf("the gateway on %s serves no %s (is the flow sync on?)", n, name)
	return 0
}

// checkSyncing waits until the standby of moveIP holds what its primary
// sent after applied0 (its records applied before the connections of
// interest opened): at least two more records applied and two backup
// flows. It also shows the primary's session to the standby is a TCP
// connection between the two nodes' InternalIPs on port 9108.
func (e *env) checkSyncing(primary, standby string, applied0 float64) {
	e.t.Helper()
	var applied, backup float64
	if !nstest.Poll(15*time.Second, 100*time.Millisecond, func() bool {
		applied = e.gatewayMetric(standby, "egret_gateway_sync_records_applied_total")
		backup = e.gatewayMetric(standby, "egret_gateway_sync_backup_flows")
		return applied >= applied0+2 && backup >= 2
	}) {
		e.t.Fatalf("the standby %s applied %v records (%v before the connections) and holds %v backup flows 15 s after the connections opened (%v adopt failures, %v owned, %v refused, %v malformed); primary %s sent %v records, %v connect failures, %v stalls",
			standby, applied, applied0, backup, e.gatewayMetric(standby, "egret_gateway_sync_adopt_failures_total"),
			e.gatewayMetric(standby, "egret_gateway_sync_records_owned_total"), e.gatewayMetric(standby, "egret_gateway_sync_refused_total"),
			e.gatewayMetric(standby, "egret_gateway_sync_malformed_total"), primary, e.gatewayMetric(primary, "egret_gateway_sync_records_sent_total"),
			e.gatewayMetric(primary, "egret_gateway_sync_connect_failures_total"), e.gatewayMetric(primary, "egret_gateway_sync_stalls_total"))
	}
	// A few scans more of the primary's sync: every flow of the IP is there.
	for range 3 {
		looked := e.gatewayMetric(primary, "egret_gateway_sync_slots_looked_total")
		if !nstest.Poll(10*time.Second, 100*time.Millisecond, func() bool {
			return e.gatewayMetric(primary, "egret_gateway_sync_slots_looked_total") > looked
		}) {
			e.t.Fatalf("the flow sync of %s scanned nothing for 10 s", primary)
		}
	}
	out := e.sh("ip", "netns", "exec", "egretc-"+primary, "ss", "-Htn", "state", "established", "( dport = :9108 )")
	want := net.JoinHostPort(plan.nodeIPs[standby], "9108")
	var session string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[3] == want {
			if h, _, err := net.SplitHostPort(f[2]); err == nil && h == plan.nodeIPs[primary] {
				session = f[2] + " → " + f[3]
			}
		}
	}
	if session == "" {
		e.t.Errorf("no flow sync session from %s (%s) to %s on %s:\n%s", primary, plan.nodeIPs[primary], standby, want, out)
	}
	e.t.Logf("flow sync %s→%s over %s: primary sent %v records in %v batches (%v full resyncs); standby applied %v, holds %v backup flows, %v adopt failures, refused %v",
		primary, standby, session,
		e.gatewayMetric(primary, "egret_gateway_sync_records_sent_total"), e.gatewayMetric(primary, "egret_gateway_sync_batches_sent_total"),
		e.gatewayMetric(primary, "egret_gateway_sync_full_resyncs_total"),
		e.gatewayMetric(standby, "egret_gateway_sync_records_applied_total"), e.gatewayMetric(standby, "egret_gateway_sync_backup_flows"),
		e.gatewayMetric(standby, "egret_gateway_sync_adopt_failures_total"), e.gatewayMetric(standby, "egret_gateway_sync_refused_total"))
}

// installer is one way a user installs Egret: kustomize (deploy/ under an
// overlay) or Helm (deploy/helm/egret with a values file), from one tree:
// this one or the previous release's (e2e/upgrade_test.go).
type installer struct {
	install func()
	// upgrade turns an install of another release into this one, as
	// docs/operations.md says: the CRDs first, then the same install.
	upgrade   func()
	rollback  func() // Helm: back to the revision before the upgrade
	uninstall func() // and wait until every Egret pod is gone
}

// kustomize installs deploy/ of the tree at root under the overlay a user of
// this cluster writes (hack/cluster/overlay; for this tree EGRET_E2E_OVERLAY
// may name a trial instead).
func (e *env) kustomize(root string) installer {
	overlay := filepath.Join(root, plan.overlay)
	if root == e.repo {
		overlay = e.overlay
	}
	done := false
	e.t.Cleanup(func() {
		if !done {
			e.kubectlErr("delete", "-k", overlay, "--ignore-not-found", "--wait=true", "--timeout=90s")
		}
	})
	apply := func() { e.kubectl("apply", "--server-side", "-k", overlay) }
	return installer{
		install: apply,
		upgrade: func() {
			e.installCRDs(root)
			apply()
		},
		uninstall: func() {
			e.kubectl("delete", "-k", overlay, "--wait=true", "--timeout=120s")
			done = true
			e.waitGone()
		},
	}
}

// helm installs the chart of the tree at root with the values a user of
// this cluster writes (hack/cluster/values.yaml, the Helm twin of the
// overlay).
func (e *env) helm(root string) installer {
	hb := kubetest.Tool(e.t, "helm", "hack/helm.sh")
	kc := "--kubeconfig=" + filepath.Join(stateDir, "admin.kubeconfig")
	chart, values := filepath.Join(root, "deploy/helm/egret"), filepath.Join(root, plan.values)
	done := false
	e.t.Cleanup(func() {
		if !done {
			e.run(hb, kc, "uninstall", "egret", "-n", "egret-system", "--wait", "--timeout=90s")
			e.kubectlErr("delete", "namespace", "egret-system", "--ignore-not-found", "--wait=true", "--timeout=60s")
		}
	})
	return installer{
		install: func() {
			// The namespace is there already, made with the flow sync's
			// Secret in it (flowSyncSecret): the chart leaves it unmanaged,
			// so it gets its PodSecurity labels as docs/operations.md says.
			e.kubectl("label", "namespace", "egret-system", "--overwrite", "pod-security.kubernetes.io/enforce=privileged",
				"pod-security.kubernetes.io/audit=privileged", "pod-security.kubernetes.io/warn=privileged")
			// The CRDs are there, applied with kubectl (the kustomize
			// install's, kept through its uninstall, and maybe of a newer
			// release): as docs/operations.md says, Helm leaves them alone.
			e.sh(hb, kc, "install", "egret", chart, "-n", "egret-system", "-f", values, "--set", "createNamespace=false", "--skip-crds")
		},
		upgrade: func() {
			e.installCRDs(root)
			e.sh(hb, kc, "upgrade", "egret", chart, "-n", "egret-system", "-f", values, "--set", "createNamespace=false")
		},
		rollback: func() { e.sh(hb, kc, "rollback", "egret", "-n", "egret-system") },
		uninstall: func() {
			e.sh(hb, kc, "uninstall", "egret", "-n", "egret-system", "--wait", "--timeout=120s")
			done = true
			e.waitGone()
			// The chart keeps its namespace (helm.sh/resource-policy: keep).
			e.kubectl("delete", "namespace", "egret-system", "--wait=true", "--timeout=60s")
		},
	}
}

// checkAllEgress waits for the named objects' IPs to be on gateways and the
// steer agents to settle, shows `kubectl get eip`, and checks every client
// pod's egress.
func (e *env) checkAllEgress(icmp *icmpRecorder, names []string, nss []testNS) {
	e.t.Helper()
	e.waitAssigned(names)
	e.waitSteerSettled(nss)
	e.t.Logf("EgressIPs:\n%s", e.kubectl("get", "eip"))
	for _, ns := range nss {
		for _, p := range e.pods(ns.name) {
			e.checkEgress(icmp, ns, p, plan.serverIP)
		}
	}
}

func (e *env) checkAllClean() {
	e.t.Helper()
	for _, n := range append(slices.Clone(workers), gateways...) {
		e.checkClean(n)
	}
}

// clusterUp reports whether make cluster-up's cluster answers with 4 Ready
// nodes; one of the other family fails the test.
// clusterCNI is the pod network make cluster-up gives the cluster:
// CLUSTER_CNI (hack/cluster/common.sh), bridge unless it says flannel.
func clusterCNI() string {
	if c := os.Getenv("CLUSTER_CNI"); c != "" {
		return c
	}
	return "bridge"
}

func (e *env) clusterUp() bool {
	e.t.Helper()
	if b, err := os.ReadFile(filepath.Join(stateDir, "family")); err == nil && strings.TrimSpace(string(b)) != plan.family {
		e.t.Fatalf("an %s cluster is up and CLUSTER_FAMILY is %s: make cluster-down first", strings.TrimSpace(string(b)), plan.family)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "family")); err == nil {
		cni := "bridge" // a cluster made before up.sh recorded it
		if b, err := os.ReadFile(filepath.Join(stateDir, "cni")); err == nil {
			cni = strings.TrimSpace(string(b))
		}
		if cni != clusterCNI() {
			e.t.Fatalf("a cluster with CNI %s is up and CLUSTER_CNI is %s: make cluster-down first", cni, clusterCNI())
		}
	}
	out, err := e.kubectlErr("get", "nodes", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	if err != nil || strings.Count(out, "True") != 4 {
		return false
	}
	// A cluster is reused only as cluster-up left it. One that still holds
	// Egret is what a killed run (or another one still running) left behind:
	// installing over it fails half-way ("namespaces egret-system already
	// exists") or tests the leftovers, so it is made afresh.
	if _, err := e.kubectlErr("get", "namespace", "egret-system"); err == nil {
		e.t.Logf("the cluster that is up still holds Egret from an earlier run: make cluster-down, then up again")
		e.sh("make", "-s", "-C", e.repo, "cluster-down")
		return false
	}
	return true
}

func (e *env) sh(name string, args ...string) string {
	e.t.Helper()
	out, err := e.run(name, args...)
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(stateDir, "admin.kubeconfig"))
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

func (e *env) kubectlErr(args ...string) (string, error) {
	return e.run(e.kubectlBin, append([]string{"--kubeconfig=" + filepath.Join(stateDir, "admin.kubeconfig")}, args...)...)
}

func (e *env) kubectl(args ...string) string {
	e.t.Helper()
	out, err := e.kubectlErr(args...)
	if err != nil {
		e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// apply applies one object given as YAML.
func (e *env) apply(doc string) {
	e.t.Helper()
	cmd := exec.Command(e.kubectlBin, "--kubeconfig="+filepath.Join(stateDir, "admin.kubeconfig"), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(doc)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, doc)
	}
}

// forgetImages removes images from every node's containerd.
func (e *env) forgetImages(refs ...string) {
	for _, n := range append(slices.Clone(workers), gateways...) {
		sock := filepath.Join(stateDir, "nodes", n, "containerd.sock")
		e.run("ctr", append([]string{"--address", sock, "-n", "k8s.io", "images", "rm"}, refs...)...)
	}
}

func (e *env) push(src, dst string) {
	e.t.Helper()
	e.sh("bash", filepath.Join(e.repo, "hack/cluster/buildah.sh"), "push", "-q", "--tls-verify=false", src, "docker://"+dst)
}

// probeImage is busybox (ping, wget, sleep) with the probe for UDP.
func probeImage() string { return plan.registry + "/egret-e2e-probe:1" }

func (e *env) buildProbeImage() {
	e.t.Helper()
	dir := e.t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "probe"), "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("build probe: %v\n%s", err, out)
	}
	cf := fmt.Sprintf("FROM %s/busybox:1.35\nCOPY probe /bin/probe\n", plan.registry)
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(cf), 0o644); err != nil {
		e.t.Fatal(err)
	}
	bh := filepath.Join(e.repo, "hack/cluster/buildah.sh")
	e.sh("bash", bh, "bud", "-q", "--tls-verify=false", "--format", "oci", "-f", filepath.Join(dir, "Containerfile"), "-t", probeImage(), dir)
	e.sh("bash", bh, "push", "-q", "--tls-verify=false", probeImage(), "docker://"+probeImage())
}

// waitEgretReady waits until every pod of every Egret workload runs the
// current template and is Ready. Ready, not available: the gateway
// DaemonSet's minReadySeconds (40 s, for rolling updates) would add its
// wait to every install for nothing the checks need.
func (e *env) waitEgretReady() {
	e.t.Helper()
	want := []string{"DaemonSet/egret-gateway", "DaemonSet/egret-steer", "DaemonSet/egress-router-cni", "Deployment/egret-controller"}
	var last string
	if nstest.Poll(180*time.Second, time.Second, func() bool {
		out, err := e.kubectlErr("-n", "egret-system", "get", "daemonsets,deployments", "-o", "json")
		if err != nil {
			last = out
			return false
		}
		var l struct {
			Items []struct {
				Kind     string
				Metadata struct{ Name string }
				Spec     struct{ Replicas *int }
				Status   struct {
					DesiredNumberScheduled, NumberReady, UpdatedNumberScheduled int
					Replicas, ReadyReplicas, UpdatedReplicas                    int
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			e.t.Fatal(err)
		}
		ready := map[string]bool{}
		var b strings.Builder
		for _, it := range l.Items {
			st := it.Status
			ok := false
			switch it.Kind {
			case "DaemonSet":
				ok = st.DesiredNumberScheduled > 0 && st.NumberReady == st.DesiredNumberScheduled && st.UpdatedNumberScheduled == st.DesiredNumberScheduled
			case "Deployment":
				ok = it.Spec.Replicas != nil && st.ReadyReplicas == *it.Spec.Replicas && st.UpdatedReplicas == *it.Spec.Replicas && st.Replicas == *it.Spec.Replicas
			}
			ready[it.Kind+"/"+it.Metadata.Name] = ok
			fmt.Fprintf(&b, "%s/%s %+v\n", it.Kind, it.Metadata.Name, st)
		}
		last = b.String()
		return !slices.ContainsFunc(want, func(w string) bool { return !ready[w] })
	}) {
		return
	}
	e.t.Fatalf("Egret not Ready after 180s:\n%s\n%s", last, e.kubectl("-n", "egret-system", "get", "pods", "-o", "wide"))
}

// applyExamples applies deploy/examples' EgressIPs with only their egress IP
// addresses changed, and e2e-move, and returns each example's new addresses.
func (e *env) applyExamples() map[string][]string {
	e.t.Helper()
	files := []string{"egress-group1.yaml", "egress-group2.yaml", "egress-project1.yaml"}
	objs := map[string][]string{}
	i := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(e.repo, "deploy/examples", f))
		if err != nil {
			e.t.Fatal(err)
		}
		var o map[string]any
		if err := yaml.Unmarshal(b, &o); err != nil {
			e.t.Fatalf("%s: %v", f, err)
		}
		spec := o["spec"].(map[string]any)
		var ips []string
		for range spec["egressIPs"].([]any) {
			ips = append(ips, plan.subnet+strconv.Itoa(egressBase+i))
			i++
		}
		spec["egressIPs"] = ips
		name := o["metadata"].(map[string]any)["name"].(string)
		objs[name] = ips
		e.apply(yamlDoc(o))
	}
	// The test's own single-IP object: each example has two IPs and there are
	// two gateways, so none of theirs can move.
	e.apply(yamlDoc(egressIP("e2e-move", []string{plan.moveIP}, map[string]string{"e2e": "move"})))
	e.t.Cleanup(func() {
		for name := range objs {
			e.kubectlErr("delete", "eip", name, "--ignore-not-found")
		}
		e.kubectlErr("delete", "eip", "e2e-move", "--ignore-not-found")
	})
	return objs
}

func egressIP(name string, ips []string, nsLabels map[string]string) map[string]any {
	return map[string]any{
		"apiVersion": "k8s.ovn.org/v1", "kind": "EgressIP",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"egressIPs": ips, "namespaceSelector": map[string]any{"matchLabels": nsLabels}},
	}
}

func yamlDoc(o any) string {
	b, err := yaml.Marshal(o)
	if err != nil {
		panic(err)
	}
	return string(b)
}

type testNS struct {
	name      string
	labels    map[string]string
	podLabels map[string]string
	want      []string // the egress IPs its pods may leave with; none: the node's IP
	// nodes are where its client pods run, one each: the workers unless
	// it says otherwise.
	nodes []string
}

func (e *env) createNamespace(ns testNS) {
	e.t.Helper()
	e.apply(yamlDoc(map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns.name, "labels": ns.labels},
	}))
	nodes := ns.nodes
	if nodes == nil {
		nodes = workers
	}
	for _, w := range nodes {
		labels := map[string]string{"e2e": "client", "worker": w}
		for k, v := range ns.podLabels {
			labels[k] = v
		}
		e.apply(yamlDoc(map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "client-" + w, "namespace": ns.name},
			"spec": map[string]any{
				"replicas": 1,
				"selector": map[string]any{"matchLabels": map[string]any{"e2e": "client", "worker": w}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"nodeSelector":                  map[string]any{"kubernetes.io/hostname": w},
						"terminationGracePeriodSeconds": 0,
						"containers": []any{map[string]any{
							"name": "client", "image": probeImage(),
							"command": []string{"/bin/sleep", "3600"},
						}},
					},
				},
			},
		}))
	}
}

type pod struct{ name, node string }

func (e *env) pods(ns string) []pod {
	e.t.Helper()
	out := e.kubectl("-n", ns, "get", "pods", "-l", "e2e=client", "--field-selector=status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}`)
	var ps []pod
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			ps = append(ps, pod{f[0], f[1]})
		}
	}
	if len(ps) == 0 {
		e.t.Fatalf("no running client pod in %s", ns)
	}
	return ps
}

// eipStatus is the controller's assignment: egress IP → node.
func (e *env) eipStatus() map[string]string {
	e.t.Helper()
	var l struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ EgressIPs []string }
			Status   struct {
				Items []struct{ Node, EgressIP string }
			}
		}
	}
	if err := json.Unmarshal([]byte(e.kubectl("get", "eip", "-o", "json")), &l); err != nil {
		e.t.Fatal(err)
	}
	m := map[string]string{}
	for _, it := range l.Items {
		for _, s := range it.Status.Items {
			m[s.EgressIP] = s.Node
		}
	}
	return m
}

// waitAssigned waits until every IP of the named objects is on a gateway.
func (e *env) waitAssigned(names []string) {
	e.t.Helper()
	var missing []string
	if nstest.Poll(90*time.Second, 500*time.Millisecond, func() bool {
		st := e.eipStatus()
		missing = nil
		for _, n := range names {
			var o struct{ Spec struct{ EgressIPs []string } }
			if err := json.Unmarshal([]byte(e.kubectl("get", "eip", n, "-o", "json")), &o); err != nil {
				e.t.Fatal(err)
			}
			for _, ip := range o.Spec.EgressIPs {
				if !slices.Contains(gateways, st[ip]) {
					missing = append(missing, n+"/"+ip)
				}
			}
		}
		return len(missing) == 0
	}) {
		return
	}
	e.t.Fatalf("egress IPs not assigned to a gateway after 90s: %v\n%s\nevents:\n%s", missing,
		e.kubectl("get", "eip", "-o", "wide"), e.kubectl("get", "events", "-A", "--field-selector=involvedObject.kind=EgressIP"))
}

// waitSteerSettled waits until every selected pod has its steer rule on its
// node and the steer agents' routes and rules stop changing: a new pod is
// blocked until its agent classifies it (fail-closed), a status just written
// reaches each agent a moment later, and a connection opened while a second
// gateway joins the multipath route may be rehashed onto it mid-handshake
// (the continuity issue, not this test's).
func (e *env) waitSteerSettled(nss []testNS) {
	e.t.Helper()
	want := map[string][]string{} // node → selected pod addresses
	for _, ns := range nss {
		if len(ns.want) == 0 {
			continue
		}
		out := e.kubectl("-n", ns.name, "get", "pods", "-l", "e2e=client", "-o", `jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP}{"\n"}{end}`)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				want[f[0]] = append(want[f[0]], f[1])
			}
		}
	}
	snapshot := func() string {
		var b strings.Builder
		for _, w := range e.steerNodes() {
			out, _ := e.run("ip", plan.ipFlag, "-n", "egretc-"+w, "route", "show", "table", "all", "proto", "231")
			b.WriteString(out)
			rules, _ := e.run("ip", plan.ipFlag, "-n", "egretc-"+w, "rule", "show")
			b.WriteString(rules)
			for _, ip := range want[w] {
				if !strings.Contains(rules, "from "+ip+" ") {
					b.WriteString("missing rule for " + ip + "\n")
				}
			}
		}
		return b.String()
	}
	// Sampled every 500 ms: settled once four samples in a row match.
	prev, stable := "", 0
	if nstest.Poll(30*time.Second, 500*time.Millisecond, func() bool {
		cur := snapshot()
		if cur == prev && !strings.Contains(cur, "blackhole") && !strings.Contains(cur, "missing rule") {
			stable++
			return stable == 4
		}
		prev, stable = cur, 0
		return false
	}) {
		return
	}
	// What changed between the last two samples, and what the agents said.
	var logs strings.Builder
	for _, w := range e.steerNodes() {
		p, _ := e.kubectlErr("-n", "egret-system", "get", "pods", "-l", "app.kubernetes.io/name=egret-steer",
			"--field-selector=spec.nodeName="+w, "-o", "jsonpath={.items[0].metadata.name}")
		out, _ := e.kubectlErr("-n", "egret-system", "logs", "--tail=15", strings.TrimSpace(p))
		fmt.Fprintf(&logs, "steer on %s:\n%s\n", w, out)
	}
	e.t.Fatalf("the steer agents' routes kept changing for 30s:\n%s\nthen:\n%s\n%s", prev, snapshot(), logs.String())
}

// exec runs a command in a pod.
func (e *env) exec(ns, p string, cmd ...string) (string, error) {
	out, err := e.kubectlErr(append([]string{"-n", ns, "exec", p, "--"}, cmd...)...)
	return strings.TrimSpace(out), err
}

// checkEgress asks the echo server at server (HTTP on port 8080, UDP on
// 8081, ping), from inside the pod, which source it saw over TCP, UDP and
// ICMP; icmp listens at that server.
func (e *env) checkEgress(icmp *icmpRecorder, ns testNS, p pod, server string) {
	e.t.Helper()
	want := ns.want
	if len(want) == 0 {
		want = []string{plan.nodeIPs[p.node]}
	}
	srcOf := func(s string) string {
		h, _, err := net.SplitHostPort(s)
		if err != nil {
			return "?" + s
		}
		return h
	}
	// Up to three TCP tries, each failure logged: in about one run in three
	// one connection of a pod selected by a two-IP object times out (open in
	// the issue note; not yet explained). A wrong source address is never retried.
	var out string
	var err error
	for try := 1; try <= 3; try++ {
		out, err = e.exec(ns.name, p.name, "/bin/probe", "http", serverHTTP(server))
		if err == nil {
			break
		}
		e.t.Logf("%s/%s on %s: TCP to %s try %d failed: %q (%v)", ns.name, p.name, p.node, server, try, out, err)
	}
	if got := srcOf(out); err != nil || !slices.Contains(want, got) {
		e.t.Errorf("%s/%s on %s: TCP to %s left as %q (err %v), want one of %v", ns.name, p.name, p.node, server, out, err, want)
	}
	out, err = e.exec(ns.name, p.name, "/bin/probe", "udp", net.JoinHostPort(server, "8081"))
	if got := srcOf(out); err != nil || !slices.Contains(want, got) {
		e.t.Errorf("%s/%s on %s: UDP to %s left as %q (err %v), want one of %v", ns.name, p.name, p.node, server, out, err, want)
	}
	size := icmp.next()
	// Three echo requests, one reply needed: a gateway just restarted drops
	// the first packet towards a next hop it has not resolved yet (seen after
	// the rollout; TCP and UDP retransmit, a single ping does not).
	out, err = e.exec(ns.name, p.name, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-s", strconv.Itoa(size), server)
	got := icmp.source(size, 2*time.Second)
	if err != nil || !slices.Contains(want, got) {
		e.t.Errorf("%s/%s on %s: ICMP echo to %s left as %q (ping: %v %s), want one of %v", ns.name, p.name, p.node, server, got, err, out, want)
	}
}

// icmpRecorder reads the echo requests reaching the outside server: the
// kernel there answers ping, this records from whom it came. Each ping has
// its own payload size so the requests are told apart.
type icmpRecorder struct {
	t    *testing.T
	pc   net.PacketConn
	size int
}

// icmpRecorder listens for the echo requests to server, in network
// namespace nsName.
func (e *env) icmpRecorder(nsName, server string) *icmpRecorder {
	e.t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		e.t.Fatal(err)
	}
	defer orig.Close()
	defer netns.Set(orig)
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		e.t.Fatalf("namespace %s: %v", nsName, err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		e.t.Fatal(err)
	}
	pc, err := net.ListenPacket(plan.icmpNetwork, server)
	if err != nil {
		e.t.Fatalf("ICMP listener in %s: %v", nsName, err)
	}
	e.t.Cleanup(func() { pc.Close() })
	return &icmpRecorder{t: e.t, pc: pc, size: 200}
}

func (r *icmpRecorder) next() int { r.size++; return r.size }

// source returns who sent the echo request with this payload size.
func (r *icmpRecorder) source(size int, wait time.Duration) string {
	src, _ := r.first(size, time.Time{}, wait)
	return src
}

// drain discards what the socket holds.
func (r *icmpRecorder) drain() {
	buf := make([]byte, 2048)
	for {
		r.pc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, _, err := r.pc.ReadFrom(buf); err != nil {
			return
		}
	}
}

// first returns the source and arrival time of the first echo request with
// this payload size that arrives after after, waiting at most wait. With no
// such request it returns the last matching source seen, and a zero time.
func (r *icmpRecorder) first(size int, after time.Time, wait time.Duration) (string, time.Time) {
	buf := make([]byte, 2048)
	deadline := time.Now().Add(wait)
	last := ""
	for {
		r.pc.SetReadDeadline(deadline)
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return last, time.Time{}
		}
		at := time.Now()
		// ICMP and ICMPv6 headers are 8 bytes; echo request is type 8 or 128.
		if n < 8 || buf[0] != plan.echoRequest || n-8 != size {
			continue
		}
		last = from.String()
		if at.After(after) && (after.IsZero() || last == plan.moveIP) {
			return last, at
		}
	}
}

// failover stops the kubelet of the gateway hosting moveIP and takes its
// network down while the pod pings the outside server ten times a second.
// The first echo request from moveIP after that can only have left through
// the other gateway: its arrival, as the server's namespace saw it, is when
// the IP served again.
func (e *env) failover(icmp *icmpRecorder, ns testNS) {
	e.t.Helper()
	moveIP := plan.moveIP
	// Two connections through moveIP, one whose port was not preserved,
	// synced to the standby: the other gateway.
	pair, from, to := e.syncedThrough(ns)
	if e.keyless {
		for _, g := range []string{from, to} {
			if n := e.gatewayMetric(g, "egret_gateway_sync_key_sessions_total"); n != 0 {
				e.t.Errorf("the gateway on %s counts %v flow sync sessions by the shared key after it was deleted", g, n)
			}
		}
		e.t.Logf("the flows of the connections below reached %s over node certificates alone", to)
		// The controller's probes are mutual TLS with its certificate, so
		// each gateway takes their leases (--controller-lease=tls).
		for _, g := range []string{from, to} {
			nstest.Until(e.t, g+" holding a controller lease", 10*time.Second, func() (bool, string) {
				left := e.gatewayMetric(g, "egret_gateway_controller_lease_remaining_seconds")
				return left > 0, fmt.Sprintf("lease remaining %vs", left)
			})
		}
	}
	p := e.pods(ns.name)[0]
	pid, err := os.ReadFile(filepath.Join(stateDir, "pids", "kubelet-"+from+".pid"))
	if err != nil {
		e.t.Fatal(err)
	}
	size := icmp.next()
	pinging := make(chan string, 1)
	go func() {
		out, _ := e.exec(ns.name, p.name, "ping", "-c", "150", "-i", "0.1", "-W", "1", "-s", strconv.Itoa(size), plan.serverIP)
		pinging <- out
	}()
	if src, _ := icmp.first(size, time.Time{}, 5*time.Second); src != moveIP {
		e.t.Fatalf("before the failure the pod's ping reached the server from %q, want %s", src, moveIP)
	}
	e.sh("kill", "-STOP", strings.TrimSpace(string(pid)))
	e.sh("ip", "-n", "egretc-"+from, "link", "set", "eth0", "down")
	t0 := time.Now()
	// What arrived through the dead gateway before t0 waits in the socket;
	// arrival is read time only for what comes after this.
	icmp.drain()
	e.t.Cleanup(func() { e.reviveNode(from, string(pid)) })
	budget := reachabilityTotalTimeout + time.Second
	src, at := icmp.first(size, t0, 14*time.Second)
	if src != moveIP {
		e.t.Fatalf("no echo request from %s reached the server within 14s after %s died (last source %q)\n%s", moveIP, from, src, e.kubectl("get", "eip", "-o", "wide"))
	}
	served := at.Sub(t0)
	e.t.Logf("%s served from %s %v after %s went down (budget %v)", moveIP, to, served.Round(time.Millisecond), from, budget)
	if served > budget {
		e.t.Errorf("%s took %v to serve again, more than reachabilityTotalTimeout + 1s = %v", moveIP, served, budget)
	}
	if got := e.eipStatus()[moveIP]; got != to {
		e.t.Errorf("%s serves again but its status names %q, want %s", moveIP, got, to)
	}
	out, err := e.exec(ns.name, p.name, "/bin/probe", "http", serverHTTP(plan.serverIP))
	if h, _, _ := net.SplitHostPort(out); err != nil || h != moveIP {
		e.t.Errorf("after the move, TCP from %s/%s left as %q (err %v), want %s", ns.name, p.name, out, err, moveIP)
	}
	// Events are sent asynchronously; this object's own (by UID), not an
	// earlier run's of the same name.
	uid := e.kubectl("get", "eip", "e2e-move", "-o", "jsonpath={.metadata.uid}")
	var ev string
	nstest.Poll(10*time.Second, 500*time.Millisecond, func() bool {
		ev = e.kubectl("get", "events", "-A", "--field-selector=involvedObject.uid="+uid, "-o", "custom-columns=REASON:.reason,MESSAGE:.message")
		return strings.Contains(ev, "EgressIPMoved") && strings.Contains(ev, "from "+from+" to "+to)
	})
	e.t.Logf("events of the move:\n%s", ev)
	if !strings.Contains(ev, "EgressIPMoved") || !strings.Contains(ev, "from "+from+" to "+to) {
		e.t.Errorf("no EgressIPMoved Event of e2e-move says from %s to %s:\n%s", from, to, ev)
	}
	pair.end(e.t, from+"'s failure")
	e.reviveNode(from, string(pid))
	e.kubectl("wait", "--for=condition=Ready", "node/"+from, "--timeout=60s")
	<-pinging
}

func (e *env) reviveNode(n, pid string) {
	e.run("ip", "-n", "egretc-"+n, "link", "set", "eth0", "up")
	e.run("ip", "-n", "egretc-"+n, "route", "replace", "default", "via", plan.routerIP)
	e.run("kill", "-CONT", strings.TrimSpace(pid))
}

// waitGone waits for every pod of Egret to be gone.
func (e *env) waitGone() {
	e.t.Helper()
	if nstest.Poll(120*time.Second, time.Second, func() bool {
		out, _ := e.kubectlErr("get", "pods", "-A", "-l", "app.kubernetes.io/part-of=egret", "-o", "name")
		return strings.TrimSpace(out) == ""
	}) {
		return
	}
	e.t.Fatal("Egret pods still present 120s after kubectl delete -k")
}

// checkClean looks for anything of Egret's left on a node.
func (e *env) checkClean(n string) {
	e.t.Helper()
	in := func(args ...string) string {
		return e.sh("nsenter", append([]string{"--net=/run/netns/egretc-" + n, "--"}, args...)...)
	}
	if out := in("nft", "list", "tables"); strings.Contains(out, "egret") {
		e.t.Errorf("%s: nftables tables left: %s", n, out)
	}
	for _, fam := range []string{"-4", "-6"} {
		if out := in("ip", fam, "-d", "rule", "show"); strings.Contains(out, "proto 231") {
			e.t.Errorf("%s: ip %s rules left:\n%s", n, fam, out)
		}
		if out := in("ip", fam, "route", "show", "table", "all"); strings.Contains(out, "proto 231") || strings.Contains(out, "egret") {
			e.t.Errorf("%s: ip %s routes left:\n%s", n, fam, out)
		}
	}
	links := in("ip", "-d", "link", "show")
	if clusterCNI() == "flannel" {
		links = withoutLink(links, "flannel.1") // the CNI's own VXLAN device
	}
	for _, bad := range []string{"egret", "vxlan", "geneve", "xdp"} {
		if strings.Contains(links, bad) {
			e.t.Errorf("%s: %q left in links:\n%s", n, bad, links)
		}
	}
	var addrs []string
	for _, a := range strings.Fields(in("ip", plan.ipFlag, "-o", "addr", "show", "dev", "eth0", "scope", "global")) {
		if p, err := netip.ParsePrefix(a); err == nil {
			addrs = append(addrs, p.Addr().String())
		}
	}
	if !slices.Equal(addrs, []string{plan.nodeIPs[n]}) {
		e.t.Errorf("%s: eth0 holds %v, want only the node's %s (claimed egress IPs left)", n, addrs, plan.nodeIPs[n])
	}
	// The gateway pins its XDP link and counters per namespace and
	// interface (gateway/xdp pin.go), or pinned the link alone before.
	if pins := xdp.NamespacePins(xdp.DefaultPinDir, e.netnsIno(n)); len(pins) > 0 {
		e.t.Errorf("%s: XDP pins left: %v", n, pins)
	}
}

// netnsIno is the inode of node n's network namespace, which names the
// XDP pins of its interfaces (xdp.PinDir).
func (e *env) netnsIno(n string) uint64 {
	e.t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/egretc-"+n, &st); err != nil {
		e.t.Fatal(err)
	}
	return st.Ino
}

// checkPinned: each gateway attached its XDP program and pinned the link in
// the host's /sys/fs/bpf/egret, the one directory of the bpffs the
// DaemonSet mounts (--pin-dir): in AF_XDP mode, not fallen back to
// AF_PACKET because it could not pin.
func (e *env) checkPinned() {
	e.t.Helper()
	for _, n := range gateways {
		linked := false
		for _, p := range xdp.NamespacePins(xdp.DefaultPinDir, e.netnsIno(n)) {
			if _, err := os.Stat(filepath.Join(p, "link")); err == nil {
				linked = true
			}
		}
		if !linked {
			e.t.Errorf("%s: no XDP link pinned in %s (the gateway's --pin-dir mount)", n, xdp.DefaultPinDir)
		}
	}
}

// withoutLink drops the block of the link named name from `ip -d link
// show` output (its numbered line and the indented lines that follow).
func withoutLink(out, name string) string {
	var b strings.Builder
	skip := false
	for _, l := range strings.SplitAfter(out, "\n") {
		if l != "" && l[0] >= '0' && l[0] <= '9' {
			f := strings.Fields(l)
			skip = len(f) > 1 && strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":") == name
		}
		if !skip {
			b.WriteString(l)
		}
	}
	return b.String()
}
