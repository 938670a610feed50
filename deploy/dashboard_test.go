package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/egret-gw/egret/gateway"
)

// dashboardExprs returns every panel's PromQL expressions by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("monitoring/egret-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

// TestDashboardShowsEveryDrop checks that each way Egret drops a packet is
// documented for operators and visible on the dashboard: every gateway drop
// reason in docs/metrics.md and on a by-reason panel, the reasons that mean
// a hostile sender on their own panel, and every drop counter docs/metrics.md
// lists (the steer agent's included) in some panel's expression.
func TestDashboardShowsEveryDrop(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range gateway.DropReasons() {
		if !strings.Contains(string(doc), "`"+r.String()+"`") {
			t.Errorf("drop reason %s is not in docs/metrics.md (section Drop reasons by what they tell an operator)", r)
		}
	}

	panels := dashboardExprs(t)
	var all []string
	byReason := false
	for _, exprs := range panels {
		for _, e := range exprs {
			all = append(all, e)
			// Grouped by reason and not filtered by it: every reason shows.
			if strings.Contains(e, "egret_gateway_dropped_packets_total") && strings.Contains(e, "by (reason)") &&
				!strings.Contains(e, "reason=") {
				byReason = true
			}
		}
	}
	if !byReason {
		t.Error("no dashboard panel shows egret_gateway_dropped_packets_total by reason")
	}

	const untrusted = "Untrusted input dropped by the gateways (packets/s)"
	exprs := strings.Join(panels[untrusted], "\n")
	// The reasons of docs/metrics.md's first group (a hostile or misconfigured
	// sender), each on the panel: a reason added there and not here fails.
	group := regexp.MustCompile("(?s)\n- A hostile or misconfigured sender(.*?)\n- Capacity").FindSubmatch(doc)
	if group == nil {
		t.Fatal("docs/metrics.md has no group \"A hostile or misconfigured sender\" before \"Capacity\"")
	}
	var hostile []string
	for _, m := range regexp.MustCompile("`([a-z_0-9]+)`").FindAllSubmatch(group[1], -1) {
		for _, r := range gateway.DropReasons() {
			if r.String() == string(m[1]) {
				hostile = append(hostile, r.String())
			}
		}
	}
	if len(hostile) < 7 {
		t.Fatalf("found only %d drop reasons in docs/metrics.md's first group: %v", len(hostile), hostile)
	}
	for _, r := range hostile {
		if !regexp.MustCompile(`reason=~"[^"]*\b` + r + `\b`).MatchString(exprs) {
			t.Errorf("panel %q does not select reason %s: %q", untrusted, r, exprs)
		}
	}

	counters := regexp.MustCompile("`(egret_(?:gateway_dropped_packets|steer_[a-z_]+_drops)_total)`").FindAllStringSubmatch(string(doc), -1)
	if len(counters) < 3 {
		t.Fatalf("found only %d drop counters in docs/metrics.md", len(counters))
	}
	for _, m := range counters {
		found := false
		for _, e := range all {
			found = found || regexp.MustCompile(`\b`+m[1]+`\b`).MatchString(e)
		}
		if !found {
			t.Errorf("drop counter %s (docs/metrics.md) is on no dashboard panel", m[1])
		}
	}
}
