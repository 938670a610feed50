package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// traceJSON is `egret trace -o json` as docs/status.md documents it,
// decoded on its own so that a renamed field fails here.
type traceJSON struct {
	Pod         string   `json:"pod"`
	Node        string   `json:"node"`
	Destination string   `json:"destination"`
	PodIP       string   `json:"podIP"`
	SelectedBy  []string `json:"selectedBy"`
	EgressIP    *string  `json:"egressIP"`
	Checks      []struct {
		Name, Result, Detail string
		Decides              bool
	} `json:"checks"`
	Gateways []struct {
		Node              string `json:"node"`
		EgressIP          string `json:"egressIP"`
		ConntrackMax      int    `json:"conntrackMax"`
		PodFlowLimit      int    `json:"podFlowLimit"`
		EgressIPFlowLimit int    `json:"egressIPFlowLimit"`
	} `json:"gateways"`
	Spread  string `json:"spread"`
	Verdict string `json:"verdict"`
	SeenAs  string `json:"seenAs"`
	Reason  string `json:"reason"`
	Setting string `json:"setting"`
}

// TestTraceKube runs the real binary's `egret trace` against a real
// kube-apiserver holding the objects and deploy/'s two ConfigMaps: the
// gateway agent's own Build (the nodes' networks it denies), the
// ConfigMaps' deny-list, limits and unsteered networks all reach the
// verdicts. It runs as a user with only the role deploy/rbac/users.yaml
// ships for it.
func TestTraceKube(t *testing.T) {
	k := newKubeFixture(t)
	k.node("w1", "10.0.0.11", "10.128.1.0/24")
	k.node("g1", "10.0.0.21", "")
	k.namespace("prod", map[string]string{"env": "prod"})
	k.namespace("egret-system", nil)
	k.pod("prod", "web", "w1", "10.128.1.2", nil)
	k.create(egressIP("blue", "192.0.2.10", "prod", "g1"))
	for name, data := range map[string]map[string]string{
		"egret-gateway": {"gateway.yaml": "interfaces: [eth0]\npodFlowLimit: 500\ndeniedDestinations: [203.0.113.0/24]\n"},
		"egret-steer":   {"steer.yaml": "underlay: eth0\nclusterCIDRs: [10.128.0.0/14]\nserviceCIDRs: [10.96.0.0/12]\n"},
	} {
		k.must(k.cs.CoreV1().ConfigMaps("egret-system").Create(k.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}))
	}

	kubeconfig := k.asUser("trace")
	bin := testbin.Build(t, "egret")
	trace := func(dest string) traceJSON {
		t.Helper()
		out, errOut, code := runBin(t, bin, "trace", "prod/web", dest, "--kubeconfig", kubeconfig, "-o", "json")
		var tr traceJSON
		if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil {
			t.Fatalf("trace prod/web %s: exit %d, %v\n%s%s", dest, code, err, out, errOut)
		}
		return tr
	}
	tr := trace("198.51.100.1:443")
	if tr.Verdict != "egress" || tr.EgressIP == nil || *tr.EgressIP != "blue" || len(tr.Gateways) != 1 || tr.Gateways[0].Node != "g1" ||
		tr.Gateways[0].EgressIP != "192.0.2.10" || tr.Gateways[0].PodFlowLimit != 500 || !strings.HasPrefix(tr.SeenAs, "192.0.2.10:") {
		t.Errorf("to the outside: %+v", tr)
	}
	tr = trace("203.0.113.9:443/tcp")
	if tr.Verdict != "dropped" || !strings.Contains(tr.Reason, "entry 203.0.113.0/24 (deniedDestinations in the gateways' configuration (ConfigMap egret-system/egret-gateway, key gateway.yaml))") ||
		!strings.Contains(tr.Setting, "allowedDestinations: [203.0.113.0/24]") {
		t.Errorf("to a denied network: %+v", tr)
	}
	// The gateway agent denies every node's InternalIP (gwagent.Build).
	if tr = trace("10.0.0.11:10250"); tr.Verdict != "dropped" || !strings.Contains(tr.Reason, "entry 10.0.0.11/32 (the nodes' own networks") {
		t.Errorf("to a node: %+v", tr)
	}
	if tr = trace("10.96.0.10:53/udp"); tr.Verdict != "direct" || !strings.Contains(tr.Setting, "serviceCIDRs in the steer agents' configuration (ConfigMap egret-system/egret-steer, key steer.yaml)") {
		t.Errorf("to a service: %+v", tr)
	}

	// Mistakes: a pod that does not exist, a destination that is no address.
	if _, errOut, code := runBin(t, bin, "trace", "prod/nope", "198.51.100.1", "--kubeconfig", kubeconfig); code != 1 || !strings.Contains(errOut, "no pod prod/nope") {
		t.Errorf("trace prod/nope: exit %d, %s", code, errOut)
	}
	if _, errOut, code := runBin(t, bin, "trace", "prod/web", "example.com", "--kubeconfig", kubeconfig); code != 2 || !strings.Contains(errOut, "give an IP address") {
		t.Errorf("trace prod/web example.com: exit %d, %s", code, errOut)
	}
	// Without the ConfigMaps the trace still runs, and says what it did not check.
	for _, name := range []string{"egret-gateway", "egret-steer"} {
		if err := k.cs.CoreV1().ConfigMaps("egret-system").Delete(k.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr = trace("198.51.100.1:443")
	if tr.Verdict != "egress" || tr.Checks[2].Name != "unsteered-networks" || tr.Checks[2].Result != "unknown" || tr.Gateways[0].PodFlowLimit != 1<<16 {
		t.Errorf("without the ConfigMaps: %+v", tr)
	}
}
