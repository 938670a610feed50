package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/internal/nstest"
)

// release is the previous release, N-1, as its users have it: its image in
// the cluster's registry and its tree (deploy/, the chart, this cluster's
// overlay and values as that release wrote them).
type release struct {
	version string
	commit  string
	dir     string // the release's tree
	image   string // its image as the cluster's nodes pull it
}

// previousRelease builds release N-1 (hack/release/previous) from its
// commit, as `make image` of that tree builds it, unless an earlier run
// cached it: the tree under $EGRET_TOOLS_DIR/../releases and the image in
// the project's buildah storage. It needs the commit in this clone's history.
func (e *env) previousRelease() release {
	e.t.Helper()
	f, err := os.Open(filepath.Join(e.repo, "hack/release/previous"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	var r release
	for s := bufio.NewScanner(f); s.Scan(); {
		if l := strings.TrimSpace(s.Text()); l != "" && !strings.HasPrefix(l, "#") {
			if fs := strings.Fields(l); len(fs) == 2 {
				r.version, r.commit = fs[0], fs[1]
			}
		}
	}
	if r.version == "" || len(r.commit) != 40 {
		e.t.Fatal("hack/release/previous names no release: want a line `<version> <commit>`")
	}
	if r.version == e.version {
		e.t.Fatalf("hack/release/previous is %s, the version of this tree: bump VERSION after a release (docs/releasing.md)", r.version)
	}
	tools := os.Getenv("EGRET_TOOLS_DIR")
	if tools == "" {
		tools = "/var/cache/egret/bin"
	}
	short := r.version + "-" + r.commit[:12]
	r.dir = filepath.Join(filepath.Dir(tools), "releases", short)
	local := "localhost/egret-previous:" + short
	bh := filepath.Join(e.repo, "hack/cluster/buildah.sh")
	built := filepath.Join(r.dir, ".built")
	if _, err := os.Stat(built); err == nil {
		if _, err := e.run("bash", bh, "inspect", "--type", "image", local); err == nil {
			e.t.Logf("release %s (%s) from the cache: %s", r.version, r.commit[:12], r.dir)
			return e.pushRelease(r, local)
		}
	}
	if out, err := e.run("git", "-C", e.repo, "cat-file", "-e", r.commit+"^{commit}"); err != nil {
		e.t.Fatalf("release %s's commit %s is not in this clone (a shallow clone? the upgrade test builds N-1 from its commit): %v\n%s", r.version, r.commit, err, out)
	}
	os.RemoveAll(r.dir)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.sh("sh", "-c", `git -C "$0" archive "$1" | tar -x -C "$2"`, e.repo, r.commit, r.dir)
	// That tree's own make, with this run's environment (GOFLAGS, the tools
	// and the build cache are shared).
	cmd := exec.Command("make", "-s", "-C", r.dir, "image", "IMAGE="+local)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("make image of release %s (%s): %v\n%s", r.version, r.commit[:12], err, out)
	}
	if err := os.WriteFile(built, []byte(r.commit+"\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("release %s built from %s into %s", r.version, r.commit[:12], r.dir)
	return e.pushRelease(r, local)
}

// pushRelease puts the release's image into the cluster's registry under
// the name its manifests give it there, and makes the nodes pull it afresh.
func (e *env) pushRelease(r release, local string) release {
	e.t.Helper()
	r.image = plan.registry + "/egret-gw/egret:" + r.version
	e.push(local, r.image)
	e.forgetImages(r.image)
	return r
}

// gatewayImage is the image the gateway DaemonSet's pods run.
func (e *env) gatewayImage() string {
	e.t.Helper()
	return e.kubectl("-n", "egret-system", "get", "daemonset/egret-gateway", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
}

// settled waits until every Egret workload has rolled out: an upgrade
// started within the gateways' minReadySeconds of an install or a rollout
// restarts every gateway not yet available together (docs/operations.md).
func (e *env) settled() {
	e.t.Helper()
	for _, w := range []string{"daemonset/egret-gateway", "daemonset/egret-steer", "deployment/egret-controller"} {
		e.kubectl("-n", "egret-system", "rollout", "status", w, "--timeout=180s")
	}
}

// upgradeWith upgrades the settled install of release prev to this tree's
// with in, while two connections from ns (one on a source port moveIP could
// not preserve) are open through the rollout. Both must go on with their
// source; the new gateway on the node that hosted moveIP must resume their
// flows from the state file release N-1 left; and no gateway of either
// release refused the other's flow sync (docs/operations.md, "Version skew").
func (e *env) upgradeWith(in installer, prev release, ns testNS, what string) {
	e.t.Helper()
	e.settled()
	pair, host, _ := e.syncedThrough(ns)
	in.upgrade()
	e.previous = false
	e.settled()
	e.waitEgretReady()
	if got, want := e.gatewayImage(), plan.registry+"/egret-gw/egret:"+e.version; got != want {
		e.t.Fatalf("after %s the gateway runs %s, want %s", what, got, want)
	}
	e.endRollout(pair, host)
	for _, g := range gateways {
		if n := e.gatewayMetric(g, "egret_gateway_sync_version_refused_total"); n != 0 {
			e.t.Errorf("the gateway on %s refused %v flow sync sessions for their version during %s from %s", g, n, what, prev.version)
		}
	}
	e.t.Logf("%s: %s -> %s", what, prev.version, e.version)
}

// downgrade rolls the Helm install back to release prev, which the skew
// policy allows: once settled, every gateway runs prev's image. Release
// 0.1.0 cannot read the state file this release wrote at the stop; what
// its gateways said of it is shown. The uninstall that follows checks the
// nodes are clean after the downgrade's documented manual step.
func (e *env) downgrade(hm installer, prev release) {
	e.t.Helper()
	e.settled()
	hm.rollback()
	e.previous = true
	e.settled()
	e.waitEgretReady()
	if got := e.gatewayImage(); got != prev.image {
		e.t.Fatalf("after helm rollback the gateway runs %s, want %s", got, prev.image)
	}
	for _, g := range gateways {
		for _, l := range strings.Split(e.kubectl("-n", "egret-system", "logs", e.gatewayPod(g)), "\n") {
			if strings.Contains(l, "flow state") {
				e.t.Logf("%s (%s): %s", g, prev.version, l)
			}
		}
		// The downgrade's manual steps (docs/operations.md, "Version skew"):
		// release 0.1.0 does not know the local port a later gateway left
		// for its successor, so it would outlive an uninstall; nor does it
		// serve the second NIC, on which the later gateway left its XDP
		// program pinned for its successor.
		e.sh("ip", "-n", "egretc-"+g, "link", "del", "egret-lh")
		if plan.family == "ipv4" {
			// A BPF link, which `ip link set … xdp off` cannot detach:
			// removing its pin drops the last reference, and with it the
			// program.
			idx, err := strconv.Atoi(strings.TrimSpace(e.sh("ip", "netns", "exec", "egretc-"+g, "cat", "/sys/class/net/eth1/ifindex")))
			if err != nil {
				e.t.Fatalf("%s: eth1's ifindex: %v", g, err)
			}
			pin := xdp.PinDir(xdp.DefaultPinDir, e.netnsIno(g), idx)
			if err := os.RemoveAll(pin); err != nil {
				e.t.Errorf("removing %s: %v", pin, err)
			}
			if !nstest.Poll(10*time.Second, 200*time.Millisecond, func() bool {
				out, err := e.run("ip", "-n", "egretc-"+g, "-d", "link", "show", "dev", "eth1")
				return err == nil && !strings.Contains(out, "prog/xdp")
			}) {
				e.t.Errorf("%s: the XDP program is still on eth1 after its pin (%s) was removed", g, pin)
			}
		}
	}
}

// steerNodes are the nodes whose steering the checks wait for: every node,
// or while release N-1 runs only the workers (env.previous).
func (e *env) steerNodes() []string {
	if e.previous {
		return workers
	}
	return append(slices.Clone(workers), gateways...)
}
