package gwagent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
)

// syncBuf is a bytes.Buffer safe for the process' writes and the test's reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func buildEgret(t *testing.T) string { return testbin.Build(t, "egret") }

// agentFiles writes into a new directory dir what `egret gateway` in agent
// mode reads from files: the objects of manifests under objs, with a status
// placing the egress IP on node, and the configuration cfg (d0, VXLAN, and
// the lines of extra).
func agentFiles(t *testing.T, node, extra string) (dir, objs, cfg string) {
	dir = t.TempDir()
	objs = filepath.Join(dir, "objects")
	if err := os.MkdirAll(filepath.Join(objs, "status"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(objs, "cluster.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	writeStatus(t, objs, node)
	cfg = filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte("interfaces: [d0]\nmode: afxdp\ntunnel: vxlan\nvni: 100\nrouterV4: 169.254.78.1\n"+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, objs, cfg
}

// TestGatewayAgentBinary runs `egret gateway` in agent mode (file source)
// in the gateway namespace: the flags reach the agent (announcement count,
// health address), and SIGTERM releases the egress IP.
func TestGatewayAgentBinary(t *testing.T) {
	tp, seen := newNsTopo(t)
	bin := buildEgret(t)
	dir, objs, cfg := agentFiles(t, "g2", "")

	// A file with nodes, or destination tables, is refused in agent mode,
	// with the reason.
	bad := filepath.Join(dir, "bad.yaml")
	for _, part := range []string{
		"nodes: [{name: w1, vtep: 10.78.0.2, innerMAC: '02:00:00:00:00:01'}]",
		"destTables: [{name: t, rules: [{prefix: 203.0.113.0/24, policy: p}]}]",
	} {
		os.WriteFile(bad, []byte("interfaces: [d0]\n"+part+"\n"), 0o644)
		out, err := exec.Command("ip", "netns", "exec", tp.gw.Name, bin, "gateway", "--config", bad, "--source", "dir:"+objs, "--node", "g1").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "nodes, policies and destTables come from the cluster") {
			t.Fatalf("agent mode with %s in the file: err %v, output %s", part, err, out)
		}
	}

	var log syncBuf
	cmd := exec.Command("ip", "netns", "exec", tp.gw.Name, bin, "gateway", "--config", cfg, "--source", "dir:"+objs,
		"--node", "g1", "--health-addr", nsHealthAddr, "--fence-after", "1s", "--announce-count", "2", "--announce-interval", "50ms")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("egret gateway log:\n%s", log.String())
		}
	})
	nstest.Eventually(t, "agent running", 15*time.Second, func() bool { return strings.Contains(log.String(), "gateway: running") })
	nstest.Eventually(t, "SERVING", 3*time.Second, func() bool { return healthOf(t, tp, nsHealthAddr) == healthpb.HealthCheckResponse_SERVING })

	writeStatus(t, objs, "g1")
	nstest.Eventually(t, "egress IP claimed", 3*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })
	if n := tp.countGARPs(nsEgressIP, tp.d0.MAC, time.Second); n != 2 {
		t.Errorf("captured %d gratuitous ARPs, want 2 (--announce-count 2)", n)
	}
	if from, _ := tp.roundTrip(t, seen, 42001); from.Addr() != nsEgressIP {
		t.Fatalf("server saw %v", from)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("egret gateway exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("egret gateway did not stop on SIGTERM")
	}
	if tp.hasAddr(t, nsEgressIP) {
		t.Error("egress IP left on d0 after SIGTERM")
	}
	if !strings.Contains(log.String(), "gateway: final counters") {
		t.Error("no final counters logged")
	}
}
