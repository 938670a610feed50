package steer

import (
	"testing"
)

// TestMasqueradingCNIKeepsPodSource: a CNI that masquerades every packet
// from the pod network to anywhere outside it, whatever the interface, as
// flannel's --ip-masq does (its rule, `-s <cluster CIDR> ! -d 224.0.0.0/4 -j
// MASQUERADE`, installed here with iptables as flannel installs it), must
// not rename a selected pod's packets steered into the tunnel: the gateway
// would see the node's address, which is no pod of it.
func TestMasqueradingCNIKeepsPodSource(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	for _, c := range [][]string{
		{"iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "198.18.0.0/16", "!", "-d", "224.0.0.0/4", "-j", "MASQUERADE", "--random-fully"},
		{"ip6tables", "-t", "nat", "-A", "POSTROUTING", "-s", "fd00:18::/32", "!", "-d", "ff00::/8", "-j", "MASQUERADE", "--random-fully"},
	} {
		sh(t, "ip", append([]string{"netns", "exec", l.node}, c...)...)
	}
	k := setupKernel(t, testConfig(), l.nodeH)
	uplink := capture(t, l.nodeH, "eth0")
	gw1 := capture(t, l.g1H, "eth0")
	gw2 := capture(t, l.g2H, "eth0")

	// Control: an unselected pod's packets do leave masqueraded, so the
	// rule works and would rename steered ones if nothing stopped it.
	sendUDP(t, l.podH, podIP4, outside4, ports(30000, 2))
	masq := 0
	for _, f := range uplink.take() {
		if !f.vxlan && f.dst == outside4 && f.src == nodeVTEP {
			masq++
		}
	}
	if masq == 0 {
		t.Fatal("the unselected pod's packets did not leave masqueraded as the node: the CNI's rule is not in effect")
	}

	if _, err := k.Apply(desired(testInputs(bothGateways...), k.Params())); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, l.podH, podIP4, outside4, ports(40000, 16))
	sendUDP(t, l.podH, podIP6, outside6, ports(40000, 16))
	seen := map[string]int{}
	for _, c := range []*capturer{gw1, gw2} {
		for _, f := range c.take() {
			if !f.vxlan || (f.inDst != outside4 && f.inDst != outside6) {
				continue
			}
			if f.innerSrc != podIP4 && f.innerSrc != podIP6 {
				t.Errorf("a steered packet reached a gateway from %v, want the pod's own address: the CNI's masquerade renamed it", f.innerSrc)
			}
			seen[f.innerSrc.String()]++
		}
	}
	if seen[podIP4.String()] == 0 || seen[podIP6.String()] == 0 {
		t.Fatalf("steered packets by inner source at the gateways: %v; want both of the pod's addresses", seen)
	}
	t.Logf("steered packets by inner source: %v", seen)
}
