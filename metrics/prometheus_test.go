package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/egret-gw/egret/gateway/kernel/nstest"
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

func acceptLoop(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return ln
}

// startProbes feeds c from real reachability probes: TCP connects to two
// loopback listeners, gw1 and gw2; gw2's closes after failAfter, so its
// probes fail from then on, and the per-round assignment moves its egress
// IP to gw1 (a failover).
func startProbes(t *testing.T, c *Control, failAfter time.Duration) {
	ln1, ln2 := acceptLoop(t), acceptLoop(t)
	targets := map[string]string{"gw1": ln1.Addr().String(), "gw2": ln2.Addr().String()}
	time.AfterFunc(failAfter, func() { ln2.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() { cancel(); wg.Wait() })
	c.SetLeader(true)
	go func() {
		defer wg.Done()
		failedOver := false
		for ctx.Err() == nil {
			up := map[string]bool{}
			for node, addr := range targets {
				start := time.Now()
				conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
				if err == nil {
					conn.Close()
				}
				c.ObserveProbe(node, time.Since(start), err != nil)
				c.SetReachable(node, err == nil)
				up[node] = err == nil
			}
			start := time.Now()
			perNode := map[string]int{}
			for _, ip := range []string{"192.0.2.10", "192.0.2.11"} {
				n := "gw1"
				if ip == "192.0.2.11" && up["gw2"] {
					n = "gw2"
				}
				perNode[n]++
			}
			c.ObserveAssignment(time.Since(start), perNode, 0)
			if !up["gw2"] && !failedOver {
				c.Moved("gw2", true)
				failedOver = true
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
}

// xdpInterface is a real AF_XDP socket whose kernel statistics the
// harness reports as interface xd0.
func xdpInterface(t *testing.T) func() XDPRingStats {
	t.Helper()
	fd, _ := droppingXSK(t, 1024)
	return func() XDPRingStats {
		s, err := ReadXDPRingStats(fd)
		if err != nil {
			t.Errorf("XDP statistics: %v", err)
		}
		return s
	}
}

// TestPrometheusScrapesDashboardAndAlerts runs Debian's Prometheus on
// loopback scraping this test process, which serves the real collectors
// over a real pipeline under crafted traffic (the gateway and controller
// commands are not in the tree yet), then checks that every dashboard
// expression returns data and every alert rule evaluates without error,
// and renders the dashboard's main panels to a PNG.
func TestPrometheusScrapesDashboardAndAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and runs traffic for ~20 s")
	}
	promBin := need(t, "prometheus")
	nstest.Root(t)

	p := newHarnessPipeline(t, 1<<16)
	h := newHarness(t, p, 2)
	h.speed = 20 // the 5-minute UDP timeout passes in 15 s
	// New flows at a rate that swings between ~0.4k and ~2k a second.
	h.addChurn(t, func(e time.Duration) int {
		return 3 + int(2.5*math.Sin(2*math.Pi*e.Seconds()/15))
	})
	readXDP := xdpInterface(t)
	src := h.source()
	inner := src.Interfaces
	src.Interfaces = func(dst []InterfaceStats) []InterfaceStats {
		dst = inner(dst)
		return append(dst, InterfaceStats{Name: "xd0", HasXDP: true, XDP: readXDP()})
	}
	reg := NewRegistry("e2e")
	reg.MustRegister(NewGatewayCollector(src))
	ctl := NewControl(reg)
	srv, err := Serve("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	h.start(2 * time.Millisecond)
	t.Cleanup(h.Stop)
	startProbes(t, ctl, 12*time.Second)

	dir := t.TempDir()
	rules, err := filepath.Abs(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
- job_name: egret
  static_configs: [{targets: [%q]}]
`, rules, srv.Addr())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	promStart := time.Now()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			lines := strings.Split(string(b), "\n")
			t.Logf("prometheus log tail:\n%s", strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
	})
	api := promAPI{base: "http://" + web}

	// Wait until Prometheus has scraped long enough for rates over 1m.
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := api.query(`count_over_time(up{job="egret"}[1m]) >= 8 and up{job="egret"} == 1`)
		if err == nil && len(r.Result) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape the test process 8 times: %v %+v", err, r)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Long enough for the churn swing and the failover (at 12 s) to happen:
	// the per-node failover series exists only from then on.
	time.Sleep(time.Until(promStart.Add(30 * time.Second)))
	d := loadDashboard(t)
	n := 0
	for _, pn := range d.Panels {
		for _, tg := range pn.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			n++
			r, err := api.query(expr)
			switch {
			case err != nil:
				t.Errorf("panel %q: %s: %v", pn.Title, expr, err)
			case len(r.Result) == 0:
				t.Errorf("panel %q: %s returned no data", pn.Title, expr)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d dashboard expressions found", n)
	}
	t.Logf("%d dashboard expressions returned data", n)

	checkRules(t, api)
	png := os.Getenv("EGRET_DASHBOARD_PNG")
	if png == "" {
		png = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := renderDashboard(api, d, promStart, time.Now(), png); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() < 10000 {
		t.Fatalf("rendered dashboard %s: %v (size %v)", png, err, fi)
	}
	t.Logf("dashboard rendered to %s", png)
}

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
	deadline := time.Now().Add(30 * time.Second)
	for {
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
		var seen, pending []string
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
		if len(pending) == 0 || bad {
			t.Logf("%d alert rules evaluated without error", len(seen))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts never evaluated: %v", pending)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
