package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
)

// gatewayCaps reads the capabilities the gateway DaemonSet adds.
func gatewayCaps(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("gateway/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds obj
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, c := range get(ds, "spec", "template", "spec", "containers", 0, "securityContext", "capabilities", "add").([]any) {
		caps = append(caps, c.(string))
	}
	return caps
}

func buildEgret(t *testing.T) string { return testbin.Build(t, "egret") }

// TestGatewayCapabilities runs the real `egret gateway` in AF_XDP mode in a
// throwaway namespace with exactly the DaemonSet's capabilities (bounding
// set; the container runtime does the same) and the 64 KiB RLIMIT_MEMLOCK
// many runtimes default to: it must come up and claim its egress IP. Then it
// runs it once without each capability: each run must fail, so the set is
// the least that works. SYS_ADMIN is not in the set: a gateway that needs it
// again fails the first run.
func TestGatewayCapabilities(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs egret gateway")
	}
	nstest.Root(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is missing")
	}
	bin := buildEgret(t)
	// ip netns exec needs the device namespace by name.
	cap0, _ := nstest.VethPair(t, nstest.Named(t), "cap0", netip.MustParsePrefix("10.98.0.1/24"), nstest.New(t), "cap1", netip.MustParsePrefix("10.98.0.2/24"))
	dut := cap0.NS
	egress := netip.MustParseAddr("10.98.0.50")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(`interfaces: [cap0]
mode: afxdp
queues: 1
vteps: [10.98.0.1]
innerMAC: "02:00:00:00:00:01"
nodes: []
policies: [{name: p, egressIPs: [`+egress.String()+`]}]
`), 0o644); err != nil {
		t.Fatal(err)
	}

	// start reports whether the gateway came up (egress IP on cap0) with caps.
	start := func(caps []string) (bool, string) {
		var b strings.Builder
		b.WriteString("-all")
		for _, c := range caps {
			b.WriteString(",+" + strings.ToLower(c))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// ip netns exec mounts a fresh /sys: the bpffs is mounted as root
		// first, as the DaemonSet's hostPath volume brings the host's; lo
		// is up as on a node, for the metrics endpoint (127.0.0.1:9110).
		script := fmt.Sprintf("mount -t bpf bpf /sys/fs/bpf && ip link set lo up && ulimit -l 64 && exec %s --bounding-set=%s --inh-caps=-all %s gateway --config %s --mode afxdp",
			setpriv, b.String(), bin, cfg)
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", dut.Name, "sh", "-c", script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		up := false
		for deadline := time.Now().Add(8 * time.Second); !up && time.Now().Before(deadline); {
			select {
			case <-exited:
				return false, out.String()
			case <-time.After(100 * time.Millisecond):
			}
			l, err := dut.NL.LinkByName("cap0")
			if err != nil {
				t.Fatal(err)
			}
			addrs, _ := dut.NL.AddrList(l, netlink.FAMILY_V4)
			for _, a := range addrs {
				if a.IP.Equal(egress.AsSlice()) {
					up = true
				}
			}
		}
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		return up, out.String()
	}

	caps := gatewayCaps(t)
	// The engine never enters a namespace (setns) and never mounts the
	// bpffs, so SYS_ADMIN — almost root — must stay out of the set.
	if contains(caps, "SYS_ADMIN") {
		t.Errorf("the gateway DaemonSet adds SYS_ADMIN again: %v", caps)
	}
	if ok, out := start(caps); !ok {
		t.Fatalf("egret gateway did not come up with the DaemonSet's capabilities %v:\n%s", caps, out)
	}
	t.Logf("egret gateway comes up with %v", caps)
	for i, c := range caps {
		less := append(append([]string{}, caps[:i]...), caps[i+1:]...)
		if c == "BPF" && contains(caps, "SYS_ADMIN") {
			t.Logf("BPF: not checked alone while SYS_ADMIN (which also grants bpf()) is in the set")
			continue
		}
		ok, out := start(less)
		if ok {
			t.Errorf("egret gateway also comes up without %s: drop it from the DaemonSet", c)
			continue
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		t.Logf("without %s: %s", c, lines[len(lines)-1])
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
