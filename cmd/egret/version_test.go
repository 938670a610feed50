package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/flowsync"
	"github.com/egret-gw/egret/nat"
)

// TestVersionText: `egret version` prints its one line as before: the
// version, the VCS revision (empty in a test binary) and the Go version.
func TestVersionText(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"version", "-o", "text"}} {
		out, errOut, code := egret(t, args...)
		f := strings.Split(strings.TrimSuffix(out, "\n"), " ")
		if code != 0 || errOut != "" || len(f) != 4 || f[0] != "egret" || f[1] != version || f[3] != runtime.Version() || !strings.HasSuffix(out, "\n") {
			t.Fatalf("egret %s: exit %d, stdout %q, stderr %q; want \"egret %s <revision> %s\"", strings.Join(args, " "), code, out, errOut, version, runtime.Version())
		}
	}
}

// TestVersionJSON: `egret version -o json` prints one object with exactly
// the keys docs/operations.md documents, and the versions of the formats
// this binary writes.
func TestVersionJSON(t *testing.T) {
	out, errOut, code := egret(t, "version", "-o", "json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	want := map[string]any{"version": version, "api": "k8s.ovn.org/v1",
		"syncProtocol": float64(flowsync.SyncVersion), "stateFile": float64(flowsync.StateVersion)}
	if len(got) != len(want) {
		t.Fatalf("printed %v; want exactly the keys of %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if flowsync.StateVersion != 2 || flowsync.SyncVersion != 1 {
		t.Errorf("sync protocol %d, state file %d: a format changed; update docs/operations.md (Version skew) and this test", flowsync.SyncVersion, flowsync.StateVersion)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if !bytes.Contains(doc, []byte("`"+k+"`")) {
			t.Errorf("docs/operations.md does not document the key %q", k)
		}
	}

	if _, errOut, code := egret(t, "version", "-o", "yaml"); code != 2 || !strings.Contains(errOut, "want text or json") {
		t.Errorf("-o yaml: exit %d, stderr %q; want a usage error", code, errOut)
	}
}

// TestStateFileRefusalsCounted: a state file the gateway refuses is
// counted by its reason in egret_gateway_state_file_refused_total, whose
// every reason is there from the start.
func TestStateFileRefusalsCounted(t *testing.T) {
	gm := &gatewayMetrics{reg: prometheus.NewRegistry(), log: slog.New(slog.DiscardHandler)}
	gm.countStateRefusals()
	if n := testutil.CollectAndCount(gm.reg, "egret_gateway_state_file_refused_total"); n != len(flowsync.StateRefusals) {
		t.Fatalf("%d series before any refusal; want one per reason (%d)", n, len(flowsync.StateRefusals))
	}
	ct, err := conntrack.New(conntrack.Config{MaxFlows: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	p, err := gateway.NewPipeline(ct, nat.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "flows.state")
	os.WriteFile(path, []byte("EGST\x09 a later release's"), 0o600)
	_, _, err = flowsync.LoadState(path, p, 0)
	gm.resumed(err)
	gm.resumed(nil)
	for _, r := range flowsync.StateRefusals {
		want := 0.0
		if r == flowsync.StateRefusedVersion {
			want = 1
		}
		if got := testutil.ToFloat64(gm.stateRefused.WithLabelValues(string(r))); got != want {
			t.Errorf("reason %s: %v, want %v (LoadState: %v)", r, got, want, err)
		}
	}
}
