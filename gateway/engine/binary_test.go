package engine_test

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
)

// egretBinary is cmd/egret, built once per test process.
func egretBinary(t *testing.T) string { return testbin.Build(t, "egret") }

// gatewayProc is `egret gateway` running in the gateway namespace.
type gatewayProc struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan error
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (g *gatewayProc) output() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// startGateway runs the binary with args inside the gateway namespace (the
// child inherits the namespace of the thread that forks it).
func (tp *topo) startGateway(t *testing.T, bin string, args ...string) *gatewayProc {
	t.Helper()
	g := &gatewayProc{log: new(bytes.Buffer), mu: new(sync.Mutex), done: make(chan error, 1)}
	g.cmd = exec.Command(bin, append([]string{"gateway"}, args...)...)
	g.cmd.Stdout = lockedBuf{g.mu, g.log}
	g.cmd.Stderr = lockedBuf{g.mu, g.log}
	if err := tp.gw.Do(g.cmd.Start); err != nil {
		t.Fatalf("start egret gateway: %v", err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	t.Cleanup(func() {
		if g.cmd.ProcessState == nil {
			g.cmd.Process.Kill()
			<-g.done
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("egret gateway output:\n%s", g.output())
		}
	})
	return g
}

// waitReady waits until the gateway has attached XDP and claimed the
// egress IP, failing if the process exits first.
func (tp *topo) waitReady(t *testing.T, g *gatewayProc) {
	t.Helper()
	if !nstest.Soon(15*time.Second, func() bool {
		select {
		case err := <-g.done:
			g.done <- err
			t.Fatalf("egret gateway exited during start: %v\n%s", err, g.output())
		default:
		}
		return tp.xdpAttached(t) && tp.hasAddr(t, egressIP) && bytes.Contains([]byte(g.output()), []byte("gateway: running"))
	}) {
		t.Fatalf("egret gateway not ready after 15s:\n%s", g.output())
	}
}

func (g *gatewayProc) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.done:
		g.done <- err
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("egret gateway did not exit 10s after %v", sig)
	}
	return nil
}

func writeConfig(t *testing.T, path string, c *config.Config) {
	t.Helper()
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// Write then rename, as editors and config management do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestGatewayBinary(t *testing.T) {
	bin := egretBinary(t)
	tp := newTopo(t)
	srv := tp.startServer(t)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := tp.config()
	cfg.Interfaces = []string{"does-not-matter"} // --iface overrides it
	writeConfig(t, cfgPath, cfg)
	args := []string{"--config", cfgPath, "--iface", "d0", "--mode", "afxdp", "--log-format", "json", "--watch", "200ms"}

	// Start, forward, reload on a file change, stop with SIGTERM.
	g := tp.startGateway(t, bin, args...)
	tp.waitReady(t, g)
	if _, reply := tp.udpRoundTrip(t, 42000, "one", 20); reply == nil {
		t.Fatal("no round trip through the gateway binary")
	}
	if from := <-srv.seen; from.Addr() != egressIP {
		t.Errorf("server saw %v, want the egress IP", from)
	}
	second := netip.MustParseAddr("10.77.0.101")
	cfg.Policies[0].EgressIPs = append(cfg.Policies[0].EgressIPs, second.String())
	writeConfig(t, cfgPath, cfg)
	if !nstest.Soon(5*time.Second, func() bool { return tp.hasAddr(t, second) }) {
		t.Fatalf("config file change not applied: %v not claimed\n%s", second, g.output())
	}
	if err := g.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("egret gateway exited with %v after SIGTERM\n%s", err, g.output())
	}
	if tp.xdpAttached(t) {
		t.Error("XDP program left on d0 after SIGTERM")
	}
	if tp.hasAddr(t, egressIP) || tp.hasAddr(t, second) {
		t.Error("egress IPs left on d0 after SIGTERM")
	}
	if _, err := os.Stat(tp.pinDir(t)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins left in %s after SIGTERM without a state file (a final stop): %v", tp.pinDir(t), err)
	}

	// kill -9 leaves the program (pinned link) and the claimed IPs behind;
	// the next start must take them over.
	g = tp.startGateway(t, bin, args...)
	tp.waitReady(t, g)
	g.stop(t, syscall.SIGKILL)
	if !tp.xdpAttached(t) {
		t.Fatal("expected the pinned XDP program to survive kill -9")
	}
	l, _ := tp.gw.NL.LinkByName("d0")
	oldProg := l.Attrs().Xdp.ProgId
	g = tp.startGateway(t, bin, args...)
	tp.waitReady(t, g)
	if _, reply := tp.udpRoundTrip(t, 42001, "after kill -9", 20); reply == nil {
		t.Fatalf("no round trip after restarting from kill -9\n%s", g.output())
	}
	l, _ = tp.gw.NL.LinkByName("d0")
	if l.Attrs().Xdp.ProgId == oldProg {
		t.Errorf("program %d of the killed gateway still runs; the restart should have replaced it", oldProg)
	}
	if err := g.stop(t, syscall.SIGINT); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
	if tp.xdpAttached(t) {
		t.Error("XDP program left on d0 after SIGINT")
	}
}

func TestGatewayBinaryBadConfig(t *testing.T) {
	bin := egretBinary(t)
	dir := t.TempDir()
	for _, c := range []struct{ yaml, want string }{
		{"interfaces: [eth0]\nvteps: [10.0.0.1]\ninnerMAC: 02:00:00:00:00:01\nnodes:\n- name: w1\n  vtep: 10.0.0.300\n", "nodes[0].vtep"},
		{"interfaces: [eth0]\nvteps: [10.0.0.1]\ninnerMAC: 02:00:00:00:00:01\nbatch: 500\n", "batch"},
		{"interfaces: [eth0]\nvteps: [10.0.0.1]\ninnerMAC: nope\n", "innerMAC"},
		{"interfaces: [eth0]\nvtep: [10.0.0.1]\n", "unknown field"},
	} {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(c.yaml), 0o644)
		out, err := exec.Command(bin, "gateway", "--config", p).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(c.want)) {
			t.Errorf("config %q: exit %v, output %q; want a failure naming %q", c.yaml, err, out, c.want)
		}
	}
}
