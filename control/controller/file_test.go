package controller_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// dirCluster keeps the scenario's objects as manifests in a directory.
type dirCluster struct {
	dir string
}

func (d *dirCluster) write(t *testing.T, file string, obj any) {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, file)); err != nil {
		t.Fatal(err)
	}
}

func (d *dirCluster) applyNode(t *testing.T, n *corev1.Node) { d.write(t, "node-"+n.Name+".yaml", n) }

func (d *dirCluster) applyEgressIP(t *testing.T, e *egressv1.EgressIP) {
	d.write(t, "eip-"+e.Name+".yaml", e)
}

func (d *dirCluster) status(t *testing.T, name string) []egressv1.EgressIPStatusItem {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, cluster.StatusDir, name+".yaml"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var e egressv1.EgressIP
	if err := yaml.UnmarshalStrict(b, &e); err != nil {
		t.Fatalf("status file of %s: %v", name, err)
	}
	if e.Name != name || len(e.Spec.EgressIPs) == 0 {
		t.Fatalf("status file of %s holds %q with spec %v", name, e.Name, e.Spec)
	}
	return e.Status.Items
}

func (d *dirCluster) events(t *testing.T) []recorded {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, cluster.EventsFile))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []recorded
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e struct{ Kind, Name, Reason, Message string }
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("events.log line %q: %v", line, err)
		}
		out = append(out, recorded{kind: e.Kind, name: e.Name, reason: e.Reason, message: e.Message})
	}
	return out
}

func (d *dirCluster) run(t *testing.T, cfg controller.Config) *controller.Controller {
	src, err := cluster.NewDir(d.dir, 50*time.Millisecond, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return startController(t, src, cfg)
}

func TestScenarioFileSource(t *testing.T) {
	runScenario(t, &dirCluster{dir: t.TempDir()})
}
