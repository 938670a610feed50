package lab

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// TestCommandLifecycle drives `egret lab up|status|down` through the built
// binary: a second up is a no-op, status --json describes the topology, and
// down removes everything even after a crash left namespaces, processes and
// no state behind.
func TestCommandLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a lab; skipped with -short")
	}
	requireRoot(t)
	requireTools(t, "ip", "bridge", "nft", "ethtool", "sysctl")
	bin := egretBinary(t)
	name := testLabName("c")
	egret := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"lab"}, args...)...)
		cmd.Env = append(os.Environ(), "EGRET_LAB_GATEWAY=kernel")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("egret lab %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { Down("", name) })
	status := func() Status {
		t.Helper()
		var st Status
		out := egret("status", "--name", name, "--json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return st
	}

	if out := egret("up", "--name", name); !strings.Contains(out, "192.0.2.101") {
		t.Fatalf("up printed no topology:\n%s", out)
	}
	st := status()
	if !st.Up || st.Mode != ModeKernel || len(st.Problems) > 0 || !st.Server.Running {
		t.Fatalf("status after up: %+v", st)
	}
	want := map[string]string{"w1-p1": "192.0.2.101", "w2-p1": "192.0.2.101", "w1-p2": "192.0.2.102", "w1-p3": "192.0.2.104", "w2-p2": ""}
	for _, p := range st.Pods {
		got := ""
		if p.EgressIP != nil {
			got = p.EgressIP.String()
		}
		if got != want[p.Name] || p.Namespace != name+"-"+p.Name {
			t.Errorf("pod %s: egress IP %q in %s, want %q", p.Name, got, p.Namespace, want[p.Name])
		}
	}
	if len(st.Gateways) != 3 || st.Gateways[0].EgressIPs[0].String() != "192.0.2.101" || len(st.Gateways[2].EgressIPs) != 0 || st.Gateways[0].Interface != "eth0" {
		t.Errorf("gateways: %+v", st.Gateways)
	}
	// The echo server is a separate process that outlived `lab up`.
	if !alive(st.Server.PID) {
		t.Fatalf("echo server pid %d is not running after up exited", st.Server.PID)
	}
	egret("up", "--name", name)
	if st2 := status(); st2.Server.PID != st.Server.PID {
		t.Errorf("a second up rebuilt the lab (echo pid %d → %d)", st.Server.PID, st2.Server.PID)
	}
	if out := egret("status", "--name", name); !strings.Contains(out, "is up") || !strings.Contains(out, "curl") {
		t.Errorf("human status:\n%s", out)
	}

	if st.Underlay != UnderlayIPv4 {
		t.Errorf("status reports underlay %q, want ipv4", st.Underlay)
	}
	// Another underlay rebuilds the lab, and status (without a flag) reads
	// the underlay it was built with.
	if out := egret("up", "--name", name, "--underlay", "ipv6"); !strings.Contains(out, "2001:db8:2::101") {
		t.Fatalf("up --underlay ipv6 printed no IPv6 topology:\n%s", out)
	}
	st6 := status()
	if !st6.Up || st6.Underlay != UnderlayIPv6 || len(st6.Problems) > 0 || st6.Server.IP.String() != "2001:db8:5100::10" || st6.Server.PID == st.Server.PID {
		t.Fatalf("status after up --underlay ipv6: %+v", st6)
	}
	if p := st6.Pod("w1-p1"); p.EgressIP == nil || p.EgressIP.String() != "2001:db8:2::101" || !p.IP.Is6() {
		t.Errorf("w1-p1 on the IPv6-only lab: %+v", p)
	}
	if got, err := HTTPSource(name+"-w1-p1", "[2001:db8:5100::10]:8080", 2*time.Second); err != nil || got.Addr().String() != "2001:db8:2::101" {
		t.Errorf("w1-p1 over the IPv6 underlay (kernel mode): server saw %v (%v), want 2001:db8:2::101", got, err)
	}
	st = st6

	// A crash: the state file is gone, namespaces and the echo server remain.
	if err := os.Remove(filepath.Join(RunRoot, name, "state.json")); err != nil {
		t.Fatal(err)
	}
	if st3 := status(); st3.Up || len(st3.Problems) == 0 {
		t.Errorf("status after a crash shows no leftovers: %+v", st3)
	}
	egret("down", "--name", name)
	if left := Namespaces(name); len(left) > 0 {
		t.Errorf("namespaces left after down: %v", left)
	}
	nstest.Soon(2*time.Second, func() bool { return !alive(st.Server.PID) })
	if alive(st.Server.PID) {
		t.Errorf("echo server %d survived down", st.Server.PID)
	}
	if _, err := os.Stat(filepath.Join(RunRoot, name)); !os.IsNotExist(err) {
		t.Errorf("run folder left after down: %v", err)
	}
	egret("down", "--name", name) // idempotent
	if st4 := status(); st4.Up || len(st4.Problems) > 0 {
		t.Errorf("status after down: %+v", st4)
	}
}
