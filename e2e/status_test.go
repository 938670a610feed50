package e2e

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/egret-gw/egret/internal/testbin"
)

// clusterStatus is the part of `egret status -o json` (docs/status.md) the
// cluster check reads.
type clusterStatus struct {
	Pods []statusPod `json:"pods"`
}

type statusPod struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Node      string  `json:"node"`
	EgressIP  *string `json:"egressIP"`
	Sources   []struct {
		Family   string     `json:"family"`
		IP       netip.Addr `json:"ip"`
		Gateways []string   `json:"gateways"`
	} `json:"sources"`
	State    string   `json:"state"`
	Problems []string `json:"problems"`
}

// checkStatus runs the built binary's `egret status -o json` against the
// cluster and checks that it says every client pod of each namespace
// leaves as one of ns.want, each through a gateway, or (no want) that no
// EgressIP selects it, so it leaves as its node.
func (e *env) checkStatus(nss []testNS) {
	e.t.Helper()
	bin := testbin.Build(e.t, "egret")
	cmd := exec.Command(bin, "status", "-o", "json", "--kubeconfig", filepath.Join(stateDir, "admin.kubeconfig"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("egret status -o json: %v\n%s", err, stderr.String())
	}
	var st clusterStatus
	if err := json.Unmarshal(out, &st); err != nil {
		e.t.Fatalf("egret status -o json: %v\n%s", err, out)
	}
	for _, ns := range nss {
		var want []netip.Addr
		for _, w := range ns.want {
			a, err := netip.ParseAddr(w)
			if err != nil {
				e.t.Fatalf("%s wants %q, not an address", ns.name, w)
			}
			want = append(want, a)
		}
		for _, p := range e.pods(ns.name) {
			i := slices.IndexFunc(st.Pods, func(sp statusPod) bool {
				return sp.Namespace == ns.name && sp.Name == p.name
			})
			if i < 0 {
				e.t.Errorf("egret status lists no pod %s/%s", ns.name, p.name)
				continue
			}
			sp := st.Pods[i]
			if len(want) == 0 {
				if sp.State != "not-selected" || sp.EgressIP != nil || len(sp.Sources) > 0 {
					e.t.Errorf("%s/%s on %s, selected by nothing: egret status says %s, EgressIP %v, sources %+v, problems %q", ns.name, p.name, p.node, sp.State, sp.EgressIP, sp.Sources, sp.Problems)
				}
				continue
			}
			ok := sp.State == "egress" && sp.EgressIP != nil && len(sp.Sources) > 0
			for _, s := range sp.Sources {
				ok = ok && slices.Contains(want, s.IP) && len(s.Gateways) > 0
			}
			if !ok {
				e.t.Errorf("%s/%s on %s: egret status says %s, sources %+v, problems %q; want it leaving as one of %v", ns.name, p.name, p.node, sp.State, sp.Sources, sp.Problems, want)
			}
		}
	}
	e.t.Logf("egret status: every client pod of %d namespaces leaves as the test expects", len(nss))
}
