package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
	"sigs.k8s.io/yaml"
)

// The per-destination pair's egress IPs: one in the nodes' subnet, leaving
// by eth0 towards the first server, one of the gateways' second network,
// leaving by eth1 towards the second server.
const (
	destIP1 = "10.77.0.122"
	destIP2 = "10.81.0.102"
)

// checkByDestination (issue 30): deploy/examples/per-destination's pair, as
// a user applies it with its addresses made this cluster's: the bank's
// network becomes the first server's, the partner's the second server's,
// and each EgressIP one address able to reach its server. Every client pod
// of one namespace leaves as the first object's IP towards the first
// server and as the second's towards the second server, over TCP, UDP and
// ICMP as the servers see them.
func (e *env) checkByDestination() {
	e.t.Helper()
	if plan.family != "ipv4" {
		e.t.Log("by destination: make cluster-up gives the gateways a second network on IPv4 clusters only; not checked")
		return
	}
	ns := testNS{name: "e2e-dest", labels: map[string]string{"team": "payments", "environment": "development"}}
	rewrite := map[string]func(o map[string]any){
		"bank.yaml":    func(o map[string]any) { spec(o)["destinationNetworks"] = []string{plan.serverIP + "/32"} },
		"partner.yaml": func(o map[string]any) { spec(o)["destinationNetworks"] = []string{server2IP + "/32"} },
		"payments-to-bank.yaml": func(o map[string]any) {
			spec(o)["egressIPs"] = []string{destIP1}
		},
		"payments-to-partner.yaml": func(o map[string]any) {
			spec(o)["egressIPs"] = []string{destIP2}
		},
	}
	var applied []string // kind/name, for the cleanup
	for f, change := range rewrite {
		b, err := os.ReadFile(filepath.Join(e.repo, "deploy/examples/per-destination", f))
		if err != nil {
			e.t.Fatal(err)
		}
		var o map[string]any
		if err := yaml.Unmarshal(b, &o); err != nil {
			e.t.Fatalf("%s: %v", f, err)
		}
		change(o)
		e.apply(yamlDoc(o))
		applied = append(applied, strings.ToLower(o["kind"].(string))+"/"+o["metadata"].(map[string]any)["name"].(string))
	}
	e.t.Cleanup(func() {
		for _, a := range applied {
			e.kubectlErr("delete", a, "--ignore-not-found", "--wait=false")
		}
	})
	e.createNamespace(ns)
	e.t.Cleanup(func() { e.kubectlErr("delete", "namespace", ns.name, "--wait=false") })
	e.kubectl("-n", ns.name, "wait", "--for=condition=Available", "deployment", "--all", "--timeout=120s")
	e.waitAssigned([]string{"payments-to-bank", "payments-to-partner"})
	st := e.eipStatus()
	e.t.Logf("by destination: %s on %s, %s on %s", destIP1, st[destIP1], destIP2, st[destIP2])

	// Until both pods' steer agents and both gateways have the objects: the
	// first TCP connection from each pod to each server that leaves as the
	// object's IP. Then every protocol, as checkEgress checks.
	pods := e.pods(ns.name)
	for _, to := range []struct{ server, ip string }{{plan.serverIP, destIP1}, {server2IP, destIP2}} {
		for _, p := range pods {
			var last string
			if !nstest.Poll(60*time.Second, 500*time.Millisecond, func() bool {
				out, err := e.exec(ns.name, p.name, "/bin/probe", "http", serverHTTP(to.server))
				last = out
				return err == nil && strings.HasPrefix(out, to.ip+":")
			}) {
				e.t.Fatalf("by destination: %s/%s on %s to %s leaves as %q, want %s", ns.name, p.name, p.node, to.server, last, to.ip)
			}
		}
	}
	icmp1, icmp2 := e.icmpRecorder(outNS, plan.serverIP), e.icmpRecorder(out2NS, server2IP)
	for _, p := range pods {
		e.checkEgress(icmp1, testNS{name: ns.name, want: []string{destIP1}}, p, plan.serverIP)
		e.checkEgress(icmp2, testNS{name: ns.name, want: []string{destIP2}}, p, server2IP)
	}
	// Gone before release N-1 is installed again: it does not know
	// trafficSelector and would send every destination through both.
	for _, a := range applied {
		e.kubectl("delete", a, "--wait=true")
	}
	e.kubectl("delete", "namespace", ns.name, "--wait=false")
}

func spec(o map[string]any) map[string]any { return o["spec"].(map[string]any) }
