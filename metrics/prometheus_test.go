package metrics

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/internal/nstest"
)

const (
	dashboardPath = "../deploy/monitoring/egret-dashboard.json"
	rulesPath     = "../deploy/monitoring/egret-rules.yaml"
)

// need returns the path of a command the project installs (hack/deps.sh),
// skipping without it, or failing under CI=true.
func need(t *testing.T, cmd string) string {
	t.Helper()
	p, err := exec.LookPath(cmd)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (hack/deps.sh installs it; CI=true demands it)", cmd)
		}
		t.Skipf("%s is not installed; run hack/deps.sh", cmd)
	}
	return p
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promAPI is a tiny client of Prometheus's HTTP API.
type promAPI struct{ base string }

type promResp struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func (p promAPI) get(path string, q url.Values) (json.RawMessage, error) {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r promResp
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s %v: %s", path, q, r.Error)
	}
	return r.Data, nil
}

type vecResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`
		Values [][]any           `json:"values"`
	} `json:"result"`
}

func (p promAPI) query(expr string) (*vecResult, error) {
	d, err := p.get("/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	var v vecResult
	return &v, json.Unmarshal(d, &v)
}

func (p promAPI) queryRange(expr string, start, end time.Time, step time.Duration) (*vecResult, error) {
	d, err := p.get("/api/v1/query_range", url.Values{"query": {expr},
		"start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix())}, "step": {step.String()}})
	if err != nil {
		return nil, err
	}
	var v vecResult
	return &v, json.Unmarshal(d, &v)
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t testing.TB) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

// grafanaVars replaces the dashboard's variables the way Grafana would for
// a 1 s scrape interval and "All" instances.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5s", "$instance", ".*")

// checkRules waits for every rule of the rule file to have been evaluated
// and requires each to be healthy.
func checkRules(t *testing.T, api promAPI) {
	t.Helper()
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			want[r.Alert] = true
		}
	}
	type rule struct {
		Name           string `json:"name"`
		Health         string `json:"health"`
		LastError      string `json:"lastError"`
		LastEvaluation string `json:"lastEvaluation"`
		State          string `json:"state"`
	}
	var seen, pending []string
	if !nstest.Soon(30*time.Second, func() bool {
		data, err := api.get("/api/v1/rules", url.Values{"type": {"alert"}})
		if err != nil {
			t.Fatal(err)
		}
		var rs struct {
			Groups []struct {
				Rules []rule `json:"rules"`
			} `json:"groups"`
		}
		if err := json.Unmarshal(data, &rs); err != nil {
			t.Fatal(err)
		}
		seen, pending = nil, nil
		bad := false
		for _, g := range rs.Groups {
			for _, r := range g.Rules {
				seen = append(seen, r.Name)
				if r.Health == "unknown" || strings.HasPrefix(r.LastEvaluation, "0001") {
					pending = append(pending, r.Name)
					continue
				}
				if r.Health != "ok" || r.LastError != "" {
					t.Errorf("alert %s: health %s: %s", r.Name, r.Health, r.LastError)
					bad = true
				}
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("Prometheus loaded alerts %v, the rule file has %d", seen, len(want))
		}
		return len(pending) == 0 || bad
	}) {
		t.Fatalf("alerts never evaluated: %v", pending)
	}
	t.Logf("%d alert rules evaluated without error", len(seen))
}
