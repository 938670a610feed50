package gwagent

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/config"
)

// admitView: gateways g1 (this node) and g2, workers w1 (the controller's
// node) and w2 (Prometheus' node), the controller's pod, a finished
// controller pod and a pod of another namespace wearing the controller's
// label; Prometheus' pod in monitoring, a finished one, and a tenant's pod
// wearing its label.
func admitView() cluster.View {
	ctl := map[string]string{"app.kubernetes.io/name": "egret-controller"}
	prom := map[string]string{"app.kubernetes.io/name": "prometheus"}
	gw := func(name, ips string) *corev1.Node {
		n := node(name, ips, nil)
		n.Labels = map[string]string{cluster.LabelEgressAssignable: ""}
		return n
	}
	g1 := gw("g1", "10.0.0.21,fd00::21")
	g1.Annotations = map[string]string{cluster.AnnotationEgretPrimaryIfAddr: `{"ipv4":"10.0.0.21/24"}`}
	w1 := node("w1", "10.0.0.11", nil)
	w1.Spec.PodCIDRs = []string{"10.244.1.0/24", "fd00:244:1::/64"}
	w2 := node("w2", "10.0.0.12", nil)
	w2.Spec.PodCIDRs = []string{"10.244.2.0/24"}
	done := pod("egret-system", "old", "w2", ctl, "10.244.2.9")
	done.Status.Phase = "Failed"
	promDone := pod("monitoring", "prom-old", "w1", prom, "10.244.1.6")
	promDone.Status.Phase = "Succeeded"
	return cluster.View{
		Nodes: []*corev1.Node{g1, gw("g2", "10.0.0.22"), w1, w2},
		Pods: []*corev1.Pod{pod("egret-system", "ctl", "w1", ctl, "10.244.1.7"), done,
			pod("tenant", "fake", "w2", ctl, "10.244.2.8"),
			pod("monitoring", "prom", "w2", prom, "10.244.2.5", "fd00:244:2::5"), promDone,
			pod("tenant", "fakeprom", "w2", prom, "10.244.2.4")},
	}
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestBuildAdmission(t *testing.T) {
	opt := Admission{HealthPort: 9107, SyncPort: 9108, MetricsPort: 9110, ControllerNamespace: "egret-system",
		ControllerSelector: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "egret-controller"}),
		ScraperNamespace:   "monitoring", ScraperSelector: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "prometheus"})}
	r := Build(base(), "g1", admitView(), Options{Admission: &opt})
	// Metrics: the node itself, Prometheus' pod and its node w2; not the
	// other nodes, not the pod networks, not the tenant's pod labelled
	// prometheus, not the finished Prometheus pod (issue 33).
	want := []config.Admit{
		{Name: AdmitHealth, Port: 9107, From: prefixes("10.0.0.11/32", "10.0.0.21/32", "10.244.1.7/32", "fd00::21/128")},
		{Name: AdmitSync, Port: 9108, From: prefixes("10.0.0.21/32", "10.0.0.22/32", "fd00::21/128")},
		{Name: AdmitMetrics, Port: 9110, From: prefixes("10.0.0.12/32", "10.0.0.21/32", "10.244.2.5/32", "fd00::21/128", "fd00:244:2::5/128")},
	}
	if got, exp := fmt.Sprint(r.Spec.Admission), fmt.Sprint(want); got != exp {
		t.Fatalf("admission\n got %s\nwant %s", got, exp)
	}
	if len(r.Problems) != 0 {
		t.Fatalf("problems %v", r.Problems)
	}
	if _, err := r.Spec.Settle(); err != nil {
		t.Fatal(err)
	}

	// Every namespace: a pod anyone labels prometheus counts (documented).
	opt.ScraperNamespace = ""
	r = Build(base(), "g1", admitView(), Options{Admission: &opt})
	if got, exp := fmt.Sprint(r.Spec.Admission[2]), fmt.Sprint(config.Admit{Name: AdmitMetrics, Port: 9110,
		From: prefixes("10.0.0.12/32", "10.0.0.21/32", "10.244.2.4/32", "10.244.2.5/32", "fd00::21/128", "fd00:244:2::5/128")}); got != exp {
		t.Fatalf("scrapers of every namespace\n got %s\nwant %s", got, exp)
	}

	// No scraper pod: the node alone, and the agent says so; named
	// sources are added to it and silence that; a zero port is not
	// filtered.
	opt.ScraperNamespace = "elsewhere"
	r = Build(base(), "g1", admitView(), Options{Admission: &opt})
	if got, exp := fmt.Sprint(r.Spec.Admission[2]), fmt.Sprint(config.Admit{Name: AdmitMetrics, Port: 9110,
		From: prefixes("10.0.0.21/32", "fd00::21/128")}); got != exp || !hasProblem(r, "no metrics scraper pod") {
		t.Fatalf("without a scraper pod\n got %s, problems %v\nwant %s", got, r.Problems, exp)
	}
	opt.ScraperSelector = nil
	if r = Build(base(), "g1", admitView(), Options{Admission: &opt}); !hasProblem(r, "no metrics scraper selector") {
		t.Fatalf("without a scraper selector: problems %v", r.Problems)
	}
	opt.MetricsAllow, opt.SyncPort = prefixes("192.0.2.0/24"), 0
	r = Build(base(), "g1", admitView(), Options{Admission: &opt})
	if got, exp := fmt.Sprint(r.Spec.Admission[1:]), fmt.Sprint([]config.Admit{{Name: AdmitMetrics, Port: 9110,
		From: prefixes("10.0.0.21/32", "192.0.2.0/24", "fd00::21/128")}}); got != exp || len(r.Problems) != 0 {
		t.Fatalf("with --metrics-allow\n got %s, problems %v\nwant %s", got, r.Problems, exp)
	}

	// No controller pod: the health port stays open, and the agent says so.
	opt.ControllerNamespace = "elsewhere"
	r = Build(base(), "g1", admitView(), Options{Admission: &opt})
	if len(r.Spec.Admission) != 1 || r.Spec.Admission[0].Name != AdmitMetrics || !hasProblem(r, "no controller pod") {
		t.Fatalf("without a controller pod: admission %v, problems %v", r.Spec.Admission, r.Problems)
	}

	// Without the option, no filter.
	if r := Build(base(), "g1", admitView(), Options{}); r.Spec.Admission != nil {
		t.Fatalf("admission %v without the option", r.Spec.Admission)
	}
}
