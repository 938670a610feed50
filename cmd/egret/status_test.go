package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/status"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusJSON is `egret status -o json` as docs/status.md documents it,
// decoded on its own so that a renamed field fails here.
type statusJSON struct {
	EgressIPs []struct {
		Name string `json:"name"`
		IPs  []struct {
			IP           string  `json:"ip"`
			Node         *string `json:"node"`
			Standby      *string `json:"standby"`
			StandbyState string  `json:"standbyState"`
		} `json:"ips"`
		Pods     int      `json:"pods"`
		Problems []string `json:"problems"`
		Events   []struct {
			Type, Reason, Message string
		} `json:"events"`
	} `json:"egressIPs"`
	Pods []struct {
		Namespace string   `json:"namespace"`
		Name      string   `json:"name"`
		Node      string   `json:"node"`
		PodIPs    []string `json:"podIPs"`
		EgressIP  *string  `json:"egressIP"`
		Sources   []struct {
			Family   string   `json:"family"`
			IP       string   `json:"ip"`
			Gateways []string `json:"gateways"`
		} `json:"sources"`
		State    string   `json:"state"`
		Problems []string `json:"problems"`
	} `json:"pods"`
}

// TestStatusKube runs the real binary as the kubectl plugin (`kubectl
// egret status -o json`, kubectl from hack/k8s-bins.sh finding
// kubectl-egret on PATH) and as `egret status pods` against a real
// kube-apiserver holding nodes, pods, EgressIPs and an Event, as a user
// with only the role deploy/rbac/users.yaml ships for it.
func TestStatusKube(t *testing.T) {
	kubectl := kubetest.Tool(t, "kubectl", "hack/k8s-bins.sh")
	k := newKubeFixture(t)
	k.node("w1", "10.0.0.11", "10.128.1.0/24")
	k.node("g1", "10.0.0.21", "")
	k.node("g2", "10.0.0.22", "")
	for name, l := range map[string]map[string]string{"prod": {"env": "prod"}, "qa": {"env": "qa"}, "dev": nil} {
		k.namespace(name, l)
	}
	for _, p := range [][3]string{{"prod", "web", "10.128.1.2"}, {"qa", "app", "10.128.1.3"}, {"dev", "app", "10.128.1.4"}} {
		k.pod(p[0], p[1], "w1", p[2], nil)
	}
	blue := egressIP("blue", "192.0.2.10", "prod", "g1")
	egressv1.SetStandbyAnnotation(blue, egressv1.FormatStandbys(map[netip.Addr]string{netip.MustParseAddr("192.0.2.10"): "g2"}))
	k.create(blue)
	k.create(egressIP("green", "192.0.2.20", "qa", ""))
	now := metav1.NewTime(time.Now())
	k.must(k.cs.CoreV1().Events("default").Create(k.ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "green.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "k8s.ovn.org/v1", Kind: "EgressIP", Name: "green"},
		Type:           corev1.EventTypeWarning, Reason: "NoMatchingNodeFound", Message: "no assignable node can host egress IP 192.0.2.20",
		Count: 1, FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "egret-controller"}}, metav1.CreateOptions{}))

	// As the kubectl plugin: kubectl finds kubectl-egret on PATH and hands
	// it its environment (KUBECONFIG), a user's with the role shipped for it.
	kubeconfig := k.asUser("status")
	bin := testbin.Build(t, "egret")
	plugins := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(plugins, "kubectl-egret")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubectl, "egret", "status", "-o", "json")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl egret status -o json: %v\n%s", err, stderr.String())
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(st.EgressIPs) != 2 || st.EgressIPs[0].Name != "blue" || st.EgressIPs[1].Name != "green" {
		t.Fatalf("egressIPs %+v", st.EgressIPs)
	}
	b, g := st.EgressIPs[0], st.EgressIPs[1]
	if len(b.IPs) != 1 || b.IPs[0].Node == nil || *b.IPs[0].Node != "g1" || b.IPs[0].Standby == nil || *b.IPs[0].Standby != "g2" ||
		b.IPs[0].StandbyState != "unknown" || b.Pods != 1 || len(b.Problems) != 0 {
		t.Errorf("blue: %+v", b)
	}
	if len(g.IPs) != 1 || g.IPs[0].Node != nil || len(g.Events) != 1 || g.Events[0].Reason != "NoMatchingNodeFound" ||
		!slices.Contains(g.Problems, "192.0.2.20 is not assigned to a node: no assignable node can host egress IP 192.0.2.20 (NoMatchingNodeFound)") {
		t.Errorf("green: %+v", g)
	}
	want := map[string]string{
		"prod/web": "blue running egress IPv4 192.0.2.10 [g1]",
		"qa/app":   "green running no-node-can-host",
		"dev/app":  "<nil> running not-selected",
	}
	got := map[string]string{}
	for _, p := range st.Pods {
		s := "<nil>"
		if p.EgressIP != nil {
			s = *p.EgressIP
		}
		s += " running " + p.State
		for _, src := range p.Sources {
			s += " " + src.Family + " " + src.IP + " " + "[" + strings.Join(src.Gateways, ",") + "]"
		}
		got[p.Namespace+"/"+p.Name] = s
		if p.Node != "w1" || len(p.PodIPs) != 1 || p.Problems == nil {
			t.Errorf("%s/%s: node %q, podIPs %v, problems %v", p.Namespace, p.Name, p.Node, p.PodIPs, p.Problems)
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}

	// egret status pods, with --kubeconfig and a name: that pod, and its
	// owner only.
	js, errOut, code := runBin(t, bin, "status", "pods", "-n", "qa", "app", "--kubeconfig", kubeconfig, "-o", "json")
	st = statusJSON{}
	if err := json.Unmarshal([]byte(js), &st); code != 0 || err != nil || len(st.Pods) != 1 || st.Pods[0].Name != "app" || len(st.EgressIPs) != 1 || st.EgressIPs[0].Name != "green" {
		t.Errorf("status pods -n qa app: exit %d, %v, %+v\n%s", code, err, st, errOut)
	}
	if _, errOut, code := runBin(t, bin, "status", "pods", "nosuch", "--kubeconfig", kubeconfig); code != 1 || !strings.Contains(errOut, "no pod nosuch in any namespace") {
		t.Errorf("status pods nosuch: exit %d, %s", code, errOut)
	}
	table, _, code := runBin(t, bin, "status", "--kubeconfig", kubeconfig)
	if code != 0 || !strings.Contains(table, "blue      192.0.2.10  g1    g2       unknown") || !strings.Contains(table, "qa         app  w1    green     no-node-can-host  -") {
		t.Errorf("table: exit %d\n%s", code, table)
	}
}

// runBin runs bin with args and returns its stdout, stderr and exit status.
func runBin(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), 0
}

// TestStatusFormats: the same report as JSON and YAML has the documented
// top level; a bad -o and --lab with --kubeconfig are usage mistakes.
func TestStatusFormats(t *testing.T) {
	owner := "blue"
	r := &status.Report{EgressIPs: []status.EgressIP{{Name: "blue", IPs: []status.IP{}, Problems: []string{}, Events: []status.Event{}}},
		Pods: []status.Pod{{Namespace: "shop", Name: "web", EgressIP: &owner, PodIPs: []netip.Addr{}, Sources: []status.Source{}, State: status.StateEgress, Problems: []string{}}}}
	for format, want := range map[string][]string{
		"json": {`"egressIPs": [`, `"pods": [`, `"egressIP": "blue"`, `"sources": []`},
		"yaml": {"egressIPs:\n- ", "pods:\n- ", "egressIP: blue\n", "sources: []\n"},
	} {
		var b bytes.Buffer
		if err := writeStatus(&b, r, format, true); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("-o %s lacks %q:\n%s", format, w, b.String())
			}
		}
	}
	for _, args := range [][]string{{"status", "-o", "xml"}, {"status", "pods", "--lab", "x", "--kubeconfig", "y"}} {
		if _, errOut, code := egret(t, args...); code != 2 {
			t.Errorf("egret %v: exit %d, %s; want 2", args, code, errOut)
		}
	}
}

// TestProgName: the binary installed as kubectl-egret names itself
// "kubectl egret" in its messages.
func TestProgName(t *testing.T) {
	for argv0, want := range map[string]string{"egret": "egret", "/usr/local/bin/kubectl-egret": "kubectl egret", `kubectl-egret.exe`: "kubectl egret", "/x/egret-dev": "egret"} {
		if got := progName(argv0); got != want {
			t.Errorf("progName(%q) = %q, want %q", argv0, got, want)
		}
	}
}
