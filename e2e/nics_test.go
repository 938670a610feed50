package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// The gateways' second network of hack/cluster/common.sh (IPv4 clusters):
// eth1 of gw1 and gw2 on 10.81.0.0/24, whose router (namespace egretc-out2)
// has the echo server 10.82.0.1 behind it, reachable only through eth1.
const (
	out2NS    = "egretc-out2"
	net2      = "10.81.0.0/24"
	server2IP = "10.82.0.1"
	// nic2IP is the test's EgressIP from the second network.
	nic2IP = "10.81.0.101"
)

// nic2Addr is eth1's address on gateway node g (common.sh's node_ip2).
var nic2Addr = map[string]string{"gw1": "10.81.0.13/24", "gw2": "10.81.0.14/24"}

// checkSecondNIC (issue 28 item 2): every gateway node publishes its
// second NIC's subnet in its host-cidrs; an EgressIP from that subnet,
// selecting a namespace of its own, is placed on a gateway, claimed on
// that gateway's eth1 and on no other interface, and a client pod on each
// worker reaches the server behind the second network as that IP over
// TCP, UDP and ICMP, as the server sees them; the second network's router
// learnt the IP's MAC from an ARP answer on it: eth1's.
func (e *env) checkSecondNIC() {
	e.t.Helper()
	if plan.family != "ipv4" {
		e.t.Log("second NIC: make cluster-up gives the gateways a second network on IPv4 clusters only; not checked")
		return
	}
	for _, g := range gateways {
		var last string
		if !nstest.Poll(30*time.Second, 500*time.Millisecond, func() bool {
			last = e.hostCIDRs(g)
			return strings.Contains(last, `"`+nic2Addr[g]+`"`)
		}) {
			e.t.Fatalf("second NIC: node %s's host-cidrs %s lack its eth1 address %s in %s", g, last, nic2Addr[g], net2)
		}
	}

	ns := testNS{name: "e2e-nic2", labels: map[string]string{"e2e": "nic2", "environment": "development"}, want: []string{nic2IP}}
	e.createNamespace(ns)
	e.t.Cleanup(func() { e.kubectlErr("delete", "namespace", ns.name, "--wait=false") })
	e.apply(yamlDoc(egressIP("e2e-nic2", ns.want, map[string]string{"e2e": "nic2"})))
	e.t.Cleanup(func() { e.kubectlErr("delete", "eip", "e2e-nic2", "--wait=false") })
	e.kubectl("-n", ns.name, "wait", "--for=condition=Available", "deployment", "--all", "--timeout=120s")
	// The router forgets the IP, so that the traffic below makes it ask.
	e.run("ip", "-n", out2NS, "neigh", "flush", "to", nic2IP)
	e.waitAssigned([]string{"e2e-nic2"})
	e.waitSteerSettled([]testNS{ns})
	host := e.eipStatus()[nic2IP]
	e.t.Logf("second NIC: %s placed on %s", nic2IP, host)

	// Claimed on eth1 of its gateway only.
	for _, g := range gateways {
		for _, dev := range []string{"eth0", "eth1"} {
			has := slices.Contains(e.ifAddrs(g, dev), nic2IP)
			if want := g == host && dev == "eth1"; has != want {
				e.t.Errorf("second NIC: %s on %s %s: %v, want %v", nic2IP, g, dev, has, want)
			}
		}
	}

	icmp := e.icmpRecorder(out2NS, server2IP)
	for _, p := range e.pods(ns.name) {
		e.checkEgress(icmp, ns, p, server2IP)
	}

	// The router resolved the egress IP on the second network, and eth1 of
	// the hosting gateway answered.
	mac := e.ifMAC(host, "eth1")
	var neigh string
	if !nstest.Poll(5*time.Second, 200*time.Millisecond, func() bool {
		neigh = e.neighMAC(out2NS, nic2IP)
		return neigh == mac
	}) {
		e.t.Errorf("second NIC: the second network's router has %s at %q, want %s's eth1 %s", nic2IP, neigh, host, mac)
	}
	// Gone before the test installs release 0.1.0 again, which serves no
	// second NIC: its steer agents would blackhole the namespace's pods.
	e.kubectl("delete", "eip", "e2e-nic2", "--wait=true")
	e.kubectl("delete", "namespace", ns.name, "--wait=false")
}

// hostCIDRs is node n's host-cidrs annotation: OVN-Kubernetes' when it
// publishes one, else Egret's (what the controller reads,
// cluster.NodeInterfaces).
func (e *env) hostCIDRs(n string) string {
	e.t.Helper()
	var ann map[string]string
	if err := json.Unmarshal([]byte(e.kubectl("get", "node", n, "-o", "jsonpath={.metadata.annotations}")), &ann); err != nil {
		return ""
	}
	if v, ok := ann["k8s.ovn.org/host-cidrs"]; ok {
		return v
	}
	return ann["egret.io/host-cidrs"]
}

// ifAddrs lists the addresses on interface dev of node n.
func (e *env) ifAddrs(n, dev string) []string {
	e.t.Helper()
	var l []struct {
		AddrInfo []struct{ Local string } `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(e.sh("ip", "-n", "egretc-"+n, "-j", "addr", "show", "dev", dev)), &l); err != nil {
		e.t.Fatalf("addresses of %s %s: %v", n, dev, err)
	}
	var out []string
	for _, i := range l {
		for _, a := range i.AddrInfo {
			out = append(out, a.Local)
		}
	}
	return out
}

// ifMAC is the MAC of interface dev of node n.
func (e *env) ifMAC(n, dev string) string {
	e.t.Helper()
	var l []struct{ Address string }
	if err := json.Unmarshal([]byte(e.sh("ip", "-n", "egretc-"+n, "-j", "link", "show", "dev", dev)), &l); err != nil || len(l) != 1 {
		e.t.Fatalf("link %s %s: %v", n, dev, err)
	}
	return l[0].Address
}

// neighMAC is the MAC namespace nsName's neighbour table holds for ip.
func (e *env) neighMAC(nsName, ip string) string {
	out, err := e.run("ip", "-n", nsName, "-j", "neigh", "show", ip)
	if err != nil {
		return ""
	}
	var l []struct{ Lladdr string }
	if json.Unmarshal([]byte(out), &l) != nil || len(l) == 0 {
		return ""
	}
	return l[0].Lladdr
}
