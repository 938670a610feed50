package cni

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/egret-gw/egret/internal/nstest"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
)

// linkNames lists the interfaces of a namespace, to prove a refused ADD left none behind.
func linkNames(t *testing.T, n *nstest.NS) []string {
	t.Helper()
	ls, err := n.NL.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Attrs().Name)
	}
	slices.Sort(out)
	return out
}

// TestDistrustedConfig checks that what a NetworkAttachmentDefinition's author could
// use against the node is refused with a CNI error, touching nothing, unless the node's
// settings allow it.
func TestDistrustedConfig(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	for _, link := range []netlink.Link{
		&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br9"}},
		&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx9"}, VxlanId: 9, Port: 4789},
		&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "egret0"}, VxlanId: 10, Port: 4790}, // the tunnel
		&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "mv9", ParentIndex: mustIndex(t, l.Node, "ext0")}, Mode: netlink.MACVLAN_MODE_BRIDGE},
	} {
		if err := l.Node.NL.LinkAdd(link); err != nil {
			t.Fatalf("creating %s: %v", link.Attrs().Name, err)
		}
	}
	// Not every kernel has 8021q; the VLAN case runs where it does.
	vlanErr := l.Node.NL.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "ext0.7", ParentIndex: mustIndex(t, l.Node, "ext0")}, VlanId: 7})
	// An outside host already using an address the node knows nothing of.
	l.Out.AddAddr(t, "ext0p", prefix("192.0.2.50/24"), prefix("2001:db8:2::50/64"))
	// strict allows nothing; every directory binds the pods' namespace ns1.
	strict := pluginDirWith(t, `{"networkNamespaces":{"*":["ns1"]}}`)
	lab := pluginDir(t) // allows veth masters only
	permissive := pluginDirWith(t, `{"allowMasterTypes":["veth"],"allowPassthru":true,"allowCrossNamespaceConfigMaps":true,"networkNamespaces":{"*":["ns1"]}}`)
	const head = `{"cniVersion":"1.0.0","name":"e","type":"egress-router",`
	podArgs := "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web"
	cases := []struct {
		name, dir, conf string
		code            uint
		words           string
	}{
		{"bridge master", lab, head + `"interfaceArgs":{"master":"br9"},"ip":{"addresses":["192.0.2.99/24"],"gateway":"192.0.2.1"}}`, types.ErrInvalidNetworkConfig, "br9, a bridge interface"},
		{"vxlan master", lab, head + `"interfaceArgs":{"master":"vx9"},"ip":{"addresses":["192.0.2.99/24"],"gateway":"192.0.2.1"}}`, types.ErrInvalidNetworkConfig, "vx9, a vxlan interface"},
		{"tunnel-named master", lab, head + `"interfaceArgs":{"master":"egret0"},"ip":{"addresses":["192.0.2.99/24"],"gateway":"192.0.2.1"}}`, types.ErrInvalidNetworkConfig, "egret0, a vxlan interface"},
		{"macvlan master", lab, head + `"interfaceArgs":{"master":"mv9"},"ip":{"addresses":["192.0.2.99/24"],"gateway":"192.0.2.1"}}`, types.ErrInvalidNetworkConfig, "mv9, a macvlan interface"},
		{"veth master by default", strict, head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["192.0.2.99/24"]}}`, types.ErrInvalidNetworkConfig, "ext0, a veth interface"},
		{"VLAN over a veth by default", strict, head + `"interfaceArgs":{"master":"ext0.7"},"ip":{"addresses":["192.0.2.99/24"],"gateway":"192.0.2.1"}}`, types.ErrInvalidNetworkConfig, "ext0.7 is (over) ext0, a veth interface"},
		{"passthru", lab, head + `"interfaceArgs":{"master":"ext0","mode":"passthru"},"ip":{"addresses":["192.0.2.99/24"]}}`, types.ErrInvalidNetworkConfig, "passthru is not allowed"},
		{"node address", lab, head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["192.0.2.2/24"]}}`, types.ErrInvalidNetworkConfig, "192.0.2.2 is an address of the node"},
		{"node IPv6 address", lab, head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["2001:db8:2::2/64"]}}`, types.ErrInvalidNetworkConfig, "2001:db8:2::2 is an address of the node"},
		{"address of another node interface", lab, head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["10.128.0.1/24"],"gateway":"192.0.2.1"}}`, types.ErrInvalidNetworkConfig, "10.128.0.1 is an address of the node"},
		{"the master's router", lab, head + `"ip":{"addresses":["192.0.2.1/24"],"gateway":"192.0.2.3"}}`, types.ErrInvalidNetworkConfig, "192.0.2.1 is a gateway of ext0"},
		{"the pod's gateway", lab, head + `"ip":{"addresses":["192.0.2.5/24"],"gateway":"192.0.2.5"}}`, types.ErrInvalidNetworkConfig, "192.0.2.5 is the pod's gateway"},
		{"address answered on the link", lab, head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["192.0.2.50/24"]}}`, types.ErrInvalidNetworkConfig, "address already in use on the link"},
		{"IPv6 address answered on the link", lab, head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["2001:db8:2::50/64"]}}`, types.ErrInvalidNetworkConfig, "address already in use on the link"},
		{"cross-namespace ConfigMap", lab, head + `"ipConfig":{"namespace":"kube-system","name":"x"}}`, types.ErrInvalidNetworkConfig, `ipConfig.namespace: "kube-system" is not the pod's namespace "ns1"`},
		// Allowed host-side, the same config goes on to its next check (the node has no kubeconfig).
		{"cross-namespace ConfigMap allowed", permissive, head + `"ipConfig":{"namespace":"kube-system","name":"x"}}`, types.ErrPluginNotAvailable, "the node's egress-router-host.json names none"},
		// The credentials are the node's: a network config may not pick a file.
		{"kubeconfig in the network config", lab, head + `"kubeconfig":"/etc/kubernetes/admin.conf","ipConfig":{"name":"x"}}`, types.ErrInvalidNetworkConfig, "kubeconfig: a network configuration may not name a kubeconfig"},
		// A Kubernetes pod joins only a network the node binds to its namespace (issue 33).
		{"network bound to no namespace", pluginDirWith(t, `{"allowMasterTypes":["veth"]}`), head + `"interfaceArgs":{"master":"ext0"},"ip":{"addresses":["192.0.2.99/24"]}}`, types.ErrInvalidNetworkConfig, `network "e" is bound to no namespace on this node`},
		{"bad host settings", pluginDirWith(t, `{"allowPasthru":true}`), head + `"ip":{"addresses":["192.0.2.99/24"]}}`, types.ErrPluginNotAvailable, "unknown field"},
	}
	beforeNode, beforePod := linkNames(t, l.Node), linkNames(t, l.Pod)
	beforeRoutes := routesOf(t, l.Pod, netlink.FAMILY_V4)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if strings.HasPrefix(c.name, "VLAN") && vlanErr != nil {
				t.Skipf("no VLAN support: %v", vlanErr)
			}
			out, err := runPluginFrom(t, l, c.dir, l.Pod.Path(), "ADD", c.conf, podArgs)
			var e types.Error
			if err == nil || json.Unmarshal(out, &e) != nil || e.Code != c.code || !strings.Contains(e.Msg, c.words) {
				t.Errorf("ADD: exit %v, %s; want code %d containing %q", err, out, c.code, c.words)
			}
			if got := linkNames(t, l.Node); !slices.Equal(got, beforeNode) {
				t.Errorf("node interfaces after a refused ADD: %v, want %v", got, beforeNode)
			}
			if got := linkNames(t, l.Pod); !slices.Equal(got, beforePod) {
				t.Errorf("pod interfaces after a refused ADD: %v, want %v", got, beforePod)
			}
			if got := routesOf(t, l.Pod, netlink.FAMILY_V4); !slices.Equal(got, beforeRoutes) {
				t.Errorf("pod routes after a refused ADD:%s", joinLines(got))
			}
		})
	}

	// What the node allows works: passthru on the lab's master (which must have no
	// other macvlan for that).
	if err := l.Node.NL.LinkDel(&netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Index: mustIndex(t, l.Node, "mv9")}}); err != nil {
		t.Fatal(err)
	}
	conf := head + `"interfaceArgs":{"master":"ext0","mode":"passthru"},"ip":{"addresses":["192.0.2.99/24"]}}`
	if out, err := runPluginFrom(t, l, permissive, l.Pod.Path(), "ADD", conf, podArgs); err != nil {
		t.Errorf("ADD with passthru allowed: %v %s", err, out)
	}
	if out, err := runPluginFrom(t, l, permissive, l.Pod.Path(), "DEL", conf, podArgs); err != nil {
		t.Errorf("DEL: %v %s", err, out)
	}
	if got := linkNames(t, l.Pod); !slices.Equal(got, beforePod) {
		t.Errorf("pod interfaces after DEL: %v, want %v", got, beforePod)
	}
}
