package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// confList wraps one plugin configuration (a JSON object body) in a conflist.
func confList(t *testing.T, version, pluginType, body string) *libcni.NetworkConfigList {
	t.Helper()
	s := fmt.Sprintf(`{"cniVersion":%q,"name":"egress","plugins":[{"type":%q,%s}]}`, version, pluginType, body)
	l, err := libcni.ConfListFromBytes([]byte(s))
	if err != nil {
		t.Fatalf("conflist %s: %v", s, err)
	}
	return l
}

// runtime is the CNI runtime side: libcni executing the built plugin from the node's namespace.
type cniRuntime struct {
	t   *testing.T
	lab *lab
	cni *libcni.CNIConfig
	rt  *libcni.RuntimeConf
}

func newRuntime(t *testing.T, l *lab, podName string) *cniRuntime {
	return &cniRuntime{
		t: t, lab: l,
		cni: libcni.NewCNIConfigWithCacheDir([]string{pluginDir(t)}, t.TempDir(), nil),
		rt: &libcni.RuntimeConf{
			ContainerID: "c-" + l.Pod.Name, NetNS: l.Pod.Path(), IfName: "net1",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns1"}, {"K8S_POD_NAME", podName}},
		},
	}
}

func (r *cniRuntime) add(list *libcni.NetworkConfigList) (types.Result, error) {
	var res types.Result
	err := r.lab.Node.Do(func() (err error) {
		res, err = r.cni.AddNetworkList(context.Background(), list, r.rt)
		return err
	})
	return res, err
}

func (r *cniRuntime) check(list *libcni.NetworkConfigList) error {
	return r.lab.Node.Do(func() error { return r.cni.CheckNetworkList(context.Background(), list, r.rt) })
}

func (r *cniRuntime) del(list *libcni.NetworkConfigList) error {
	return r.lab.Node.Do(func() error { return r.cni.DelNetworkList(context.Background(), list, r.rt) })
}

func cniCode(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

var configForms = []struct {
	name, body, pod string
	dests           bool
}{
	{"ip", `"ip":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"],"destinations":["198.51.100.10/32","2001:db8:99::10/128"]},"clusterNetworks":["10.128.0.0/14","fd00:10::/48"],"serviceNetworks":["172.30.0.0/16"]`, "web-1", true},
	{"podIP", `"interfaceArgs":{"master":"ext0","mode":"bridge"},"podIP":{"db-router":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"],"gateway":"192.0.2.1","destinations":["198.51.100.0/28"]},"db-*":{"addresses":["192.0.2.98/24"]}},"clusterNetworks":["10.128.0.0/14"]`, "db-router", true},
	{"podIP-wildcard-any-destination", `"podIP":{"db-router":{"addresses":["192.0.2.97/24"]},"db-*":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"]}}`, "db-7", false},
}

// TestAddCheckDel runs the whole life cycle through libcni for every spec version and
// config form, checking addresses, routes, nftables rules, announcements and reachability.
func TestAddCheckDel(t *testing.T) {
	nstest.Root(t)
	for _, v := range specVersions {
		for i, form := range configForms {
			t.Run(v+"/"+form.name, func(t *testing.T) {
				typ := TypeEgressRouter
				if i%2 == 1 {
					typ = TypeOpenshiftEgress
				}
				l := newLab(t, true)
				r := newRuntime(t, l, form.pod)
				list := confList(t, v, typ, form.body)
				sniff := newSniffer(t, l.Out, "ext0p")
				before4 := routesOf(t, l.Pod, netlink.FAMILY_V4)

				res, err := r.add(list)
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				assertResult(t, res, v)
				assertPlumbed(t, l, form.dests, strings.Contains(form.body, "clusterNetworks"))
				frames := sniff.frames(300 * time.Millisecond)
				if !hasGARP(frames, netip.MustParseAddr(egress4)) {
					t.Errorf("no gratuitous ARP for %s seen on the outside network (%d frames)", egress4, len(frames))
				}
				if !hasNA(frames, netip.MustParseAddr(egress6)) {
					t.Errorf("no unsolicited neighbour advertisement for %s seen (%d frames)", egress6, len(frames))
				}

				// Reachability: the outside sees the egress IP; destinations decide the rest.
				if src, ok := udpProbe(t, l, allowed4, reachable); !ok || src != netip.MustParseAddr(egress4) {
					t.Errorf("allowed %s: received=%v from %v, want from %s", allowed4, ok, src, egress4)
				}
				if form.name == "podIP" {
					// Its destinations are IPv4 only: IPv6 through net1 goes nowhere.
					if _, ok := udpProbe(t, l, allowed6, unreachable); ok {
						t.Errorf("%s is outside this form's destinations but got through", allowed6)
					}
				} else if src, ok := udpProbe(t, l, allowed6, reachable); !ok || src != netip.MustParseAddr(egress6) {
					t.Errorf("allowed %s: received=%v from %v, want from %s", allowed6, ok, src, egress6)
				}
				wait := unreachable
				if !form.dests {
					wait = reachable
				}
				_, ok := udpProbe(t, l, denied4, wait)
				if form.dests && ok {
					t.Errorf("%s is not in destinations but the packet got through", denied4)
				}
				if !form.dests && !ok {
					t.Errorf("no destinations given, yet %s is unreachable", denied4)
				}
				if _, ok := udpProbe(t, l, denied6, unreachable); form.dests && ok {
					t.Errorf("%s is not in destinations but the packet got through", denied6)
				}

				err = r.check(list)
				if v == "0.3.0" || v == "0.3.1" {
					if !errors.Is(err, libcni.ErrorCheckNotSupp) {
						t.Errorf("CHECK on %s: %v, want not supported", v, err)
					}
				} else if err != nil {
					t.Errorf("CHECK: %v", err)
				}
				if v != "0.3.0" && v != "0.3.1" {
					// CHECK must notice when the work is undone behind its back.
					saved := breakDefault(t, l, netlink.FAMILY_V4)
					if err := r.check(list); err == nil {
						t.Error("CHECK passed with the egress default route removed")
					}
					restoreDefault(t, l, saved)
				}

				if err := r.del(list); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				assertClean(t, l, before4)
				if err := r.del(list); err != nil {
					t.Errorf("second DEL: %v", err)
				}
				if _, ok := udpProbe(t, l, allowed4, unreachable); ok {
					t.Error("after DEL the pod still reaches the outside network directly")
				}
			})
		}
	}
}

func assertResult(t *testing.T, res types.Result, v string) {
	t.Helper()
	if res.Version() != v {
		t.Errorf("result version %s, want %s", res.Version(), v)
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Interfaces) != 1 || cur.Interfaces[0].Name != "net1" || cur.Interfaces[0].Mac == "" || cur.Interfaces[0].Sandbox == "" {
		t.Errorf("result interfaces %+v", cur.Interfaces)
	}
	if len(cur.IPs) == 0 || cur.IPs[0].Interface == nil || *cur.IPs[0].Interface != 0 {
		t.Fatalf("result IPs %+v", cur.IPs)
	}
	if got := cur.IPs[0].Address.IP.String(); got != egress4 && got != "192.0.2.99" {
		t.Errorf("result address %s", got)
	}
	if cur.IPs[0].Gateway.String() != outGW4 {
		t.Errorf("result gateway %v, want %s (inferred from the master)", cur.IPs[0].Gateway, outGW4)
	}
}

func assertPlumbed(t *testing.T, l *lab, dests, cluster bool) {
	t.Helper()
	link, err := l.Pod.NL.LinkByName("net1")
	if err != nil {
		t.Fatalf("net1 missing in the pod: %v", err)
	}
	if link.Type() != "macvlan" || link.Attrs().OperState == netlink.OperDown {
		t.Errorf("net1 is %s, state %s", link.Type(), link.Attrs().OperState)
	}
	r4 := routesOf(t, l.Pod, netlink.FAMILY_V4)
	r6 := routesOf(t, l.Pod, netlink.FAMILY_V6)
	for _, want := range []string{"default via " + outGW4 + " dev net1", nodeExt4 + "/32 via " + podGW4 + " dev eth0"} {
		if !hasRoute(r4, want) {
			t.Errorf("pod IPv4 routes lack %q:%s", want, joinLines(r4))
		}
	}
	if hasRoute(r4, "default via "+podGW4+" dev eth0") {
		t.Errorf("the previous default route is still there:%s", joinLines(r4))
	}
	if cluster {
		for _, want := range []string{"10.128.0.0/14 via " + podGW4 + " dev eth0"} {
			if !hasRoute(r4, want) {
				t.Errorf("pod routes lack %q:%s", want, joinLines(r4))
			}
		}
	}
	if !hasRoute(r6, "default via "+outGW6+" dev net1") {
		t.Errorf("pod IPv6 routes lack the default via net1:%s", joinLines(r6))
	}
	counts, err := TableRuleCounts(int(l.Pod.Handle), "net1")
	if err != nil {
		t.Fatal(err)
	}
	if dests && (counts["output"] < 4 || counts["forward"] != counts["output"]) {
		t.Errorf("destinations filter has rules per chain %v", counts)
	}
	if !dests && counts != nil {
		t.Errorf("no destinations, yet a filter table exists with rules per chain %v", counts)
	}
}

func assertClean(t *testing.T, l *lab, before4 []string) {
	t.Helper()
	if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
		t.Error("net1 survived DEL")
	}
	after := routesOf(t, l.Pod, netlink.FAMILY_V4)
	if strings.Join(after, "|") != strings.Join(before4, "|") {
		t.Errorf("routes after DEL:%s\nwant:%s", joinLines(after), joinLines(before4))
	}
	if !hasRoute(routesOf(t, l.Pod, netlink.FAMILY_V6), "default via "+podGW6+" dev eth0") {
		t.Error("IPv6 default route not restored")
	}
	if counts, err := TableRuleCounts(int(l.Pod.Handle), "net1"); err != nil || counts != nil {
		t.Errorf("filter table after DEL: %v, %v", counts, err)
	}
	saved, _ := l.Pod.NL.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: BackupTable}, netlink.RT_FILTER_TABLE)
	if len(saved) != 0 {
		t.Errorf("%d saved routes left in table %d", len(saved), BackupTable)
	}
}

// breakDefault deletes the pod's default route of family and returns it.
func breakDefault(t *testing.T, l *lab, family int) netlink.Route {
	t.Helper()
	rs, err := l.Pod.NL.RouteList(nil, family)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if isDefault(r) {
			if err := l.Pod.NL.RouteDel(&r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("no default route of family %d to break", family)
	return netlink.Route{}
}

func restoreDefault(t *testing.T, l *lab, r netlink.Route) {
	t.Helper()
	if err := l.Pod.NL.RouteAdd(&r); err != nil {
		t.Fatal(err)
	}
}

// runPlugin executes the binary directly, as a runtime would, in the node's namespace.
func runPlugin(t *testing.T, l *lab, cmd, conf, args string) (stdout []byte, exitErr error) {
	t.Helper()
	return runPluginIn(t, l, l.Pod.Path(), cmd, conf, args)
}

func runPluginIn(t *testing.T, l *lab, netnsPath, cmd, conf, args string) (stdout []byte, exitErr error) {
	t.Helper()
	return runPluginFrom(t, l, pluginDir(t), netnsPath, cmd, conf, args)
}

// runPluginFrom executes the plugin of dir, with the node-side settings found there.
func runPluginFrom(t *testing.T, l *lab, dir, netnsPath, cmd, conf, args string) (stdout []byte, exitErr error) {
	t.Helper()
	err := l.Node.Do(func() error {
		c := exec.Command(filepath.Join(dir, TypeEgressRouter))
		c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID=ctr1", "CNI_NETNS="+netnsPath,
			"CNI_IFNAME=net1", "CNI_PATH="+dir, "CNI_ARGS="+args)
		c.Stdin = strings.NewReader(conf)
		var out bytes.Buffer
		c.Stdout = &out
		exitErr = c.Run()
		stdout = out.Bytes()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return stdout, exitErr
}

// TestErrorsAreCNIErrors checks the error contract: JSON on stdout, the right code,
// a message naming the field, a non-zero exit, and nothing left behind.
func TestErrorsAreCNIErrors(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	before := routesOf(t, l.Pod, netlink.FAMILY_V4)
	cases := []struct {
		name, conf, args string
		code             uint
		words            string
	}{
		{"two forms", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.99/24"]},"podIP":{"a":{"addresses":["192.0.2.99/24"]}}}`, "", types.ErrInvalidNetworkConfig, "exactly one of ip, podIP or ipConfig"},
		{"bad address", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.999/24"]}}`, "", types.ErrInvalidNetworkConfig, "ip.addresses[0]"},
		{"not json", `{"cniVersion":"1.0.0","name":`, "", types.ErrDecodingFailure, ""},
		{"aws without an Elastic IP", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","interfaceType":"aws-elastic-ip","ip":{"addresses":["192.0.2.99/24"]}}`, "", types.ErrInvalidNetworkConfig, "allocationId"},
		{"no master", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["203.0.113.9/24"]}}`, "", types.ErrInvalidNetworkConfig, "interfaceArgs.master"},
		{"missing master", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","interfaceArgs":{"master":"nope0"},"ip":{"addresses":["192.0.2.99/24"]}}`, "", types.ErrInvalidNetworkConfig, "interfaceArgs.master"},
		{"no pod match", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","podIP":{"a":{"addresses":["192.0.2.99/24"]}}}`, "K8S_POD_NAME=b", types.ErrInvalidNetworkConfig, "podIP"},
		{"bare address outside the master's subnets", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","interfaceArgs":{"master":"ext0"},"ip":{"addresses":["203.0.113.9"],"gateway":"192.0.2.1"}}`, "", types.ErrInvalidNetworkConfig, "203.0.113.9 has no prefix length and no subnet of the master ext0"},
		{"redirect of a family without an address", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.99/24"],"destinations":["80 TCP 2001:db8:99::10"]}}`, "", types.ErrInvalidNetworkConfig, "needs an address of its IP family"},
		{"bad args", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.99/24"]}}`, "K8S_POD_NAME", types.ErrInvalidEnvironmentVariables, "CNI_ARGS"},
		{"no kubeconfig", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ipConfig":{"name":"x"}}`, "K8S_POD_NAMESPACE=ns1", types.ErrPluginNotAvailable, "ipConfig needs a kubeconfig"},
		// Fails after the interface exists (no IPv6 default to keep fd00:10::/48 on):
		// the rollback must remove it again.
		{"late failure", `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"]},"clusterNetworks":["10.128.0.0/14","fd00:99::/48"]}`, "", 0, "clusterNetworks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "late failure" {
				saved := breakDefault(t, l, netlink.FAMILY_V6)
				defer func() { _ = l.Pod.NL.RouteAdd(&saved) }()
			}
			out, err := runPlugin(t, l, "ADD", tc.conf, tc.args)
			if err == nil {
				t.Fatalf("ADD succeeded: %s", out)
			}
			var e types.Error
			if jerr := json.Unmarshal(out, &e); jerr != nil {
				t.Fatalf("stdout is not a CNI error: %q", out)
			}
			if tc.code != 0 && e.Code != tc.code {
				t.Errorf("code %d, want %d (%s)", e.Code, tc.code, e.Msg)
			}
			if e.Code == 0 {
				t.Errorf("code 0 for %s", e.Msg)
			}
			if !strings.Contains(e.Msg, tc.words) {
				t.Errorf("message %q does not mention %q", e.Msg, tc.words)
			}
			if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
				t.Error("a failed ADD left net1 behind")
			}
			if got := routesOf(t, l.Pod, netlink.FAMILY_V4); strings.Join(got, "|") != strings.Join(before, "|") {
				t.Errorf("a failed ADD changed the routes:%s", joinLines(got))
			}
			if counts, _ := TableRuleCounts(int(l.Pod.Handle), "net1"); counts != nil {
				t.Error("a failed ADD left a filter table")
			}
		})
	}
	// DEL of something never added, and for a namespace that is gone, succeeds.
	del := `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.99/24"]}}`
	if out, err := runPlugin(t, l, "DEL", del, ""); err != nil {
		t.Errorf("DEL of nothing: %v %s", err, out)
	}
	if out, err := runPluginIn(t, l, "/var/run/netns/"+l.Pod.Name+"-gone", "DEL", del, ""); err != nil {
		t.Errorf("DEL in a namespace that is gone: %v %s", err, out)
	}
	// ADD into a namespace that does not exist is error 8 (invalid netns).
	out, err := runPluginIn(t, l, "/var/run/netns/"+l.Pod.Name+"-gone", "ADD", del, "")
	var e types.Error
	if err == nil || json.Unmarshal(out, &e) != nil || e.Code != types.ErrInvalidNetNS {
		t.Errorf("ADD in a missing namespace: %v %s", err, out)
	}
}

// TestStatusAndGC covers the 1.1.0 verbs: STATUS reports availability, GC lets the
// runtime DEL stale attachments and then succeeds.
func TestStatusAndGC(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	r := newRuntime(t, l, "web")
	list := confList(t, "1.1.0", TypeEgressRouter, `"ip":{"addresses":["192.0.2.99/24"]}`)
	if err := l.Node.Do(func() error { return r.cni.GetStatusNetworkList(context.Background(), list) }); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	// aws-elastic-ip with an Elastic IP the node's settings do not list.
	aws := confList(t, "1.1.0", TypeEgressRouter, `"interfaceType":"aws-elastic-ip","interfaceArgs":{"allocationId":"eipalloc-0a1b2c3d4e5f60001"},"ip":{"addresses":["192.0.2.99/24"]}`)
	if err := l.Node.Do(func() error { return r.cni.GetStatusNetworkList(context.Background(), aws) }); cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "allowElasticIPs") {
		t.Errorf("STATUS for aws-elastic-ip the node does not allow: %v, want code 50 saying so", err)
	}
	gone := confList(t, "1.1.0", TypeEgressRouter, `"interfaceArgs":{"master":"nope0"},"ip":{"addresses":["192.0.2.99/24"]}`)
	if err := l.Node.Do(func() error { return r.cni.GetStatusNetworkList(context.Background(), gone) }); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with a missing master: %v, want code 50", err)
	}
	if _, err := r.add(list); err != nil {
		t.Fatal(err)
	}
	valid := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: r.rt.ContainerID, IfName: "net1"}}}
	if err := l.Node.Do(func() error { return r.cni.GCNetworkList(context.Background(), list, valid) }); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := l.Pod.NL.LinkByName("net1"); err != nil {
		t.Error("GC removed a valid attachment")
	}
	if err := l.Node.Do(func() error { return r.cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{}) }); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
		t.Error("GC left a stale attachment")
	}
}

// TestIPvlan runs the ipvlan path where the kernel has it; elsewhere it checks the
// plugin refuses cleanly, then skips with the reason.
func TestIPvlan(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	r := newRuntime(t, l, "web")
	list := confList(t, "1.0.0", TypeEgressRouter, `"interfaceType":"ipvlan","interfaceArgs":{"master":"ext0"},"ip":{"addresses":["192.0.2.99/24"],"destinations":["198.51.100.10/32"]}`)
	probe := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "ipvprobe", ParentIndex: mustIndex(t, l.Node, "ext0")}, Mode: netlink.IPVLAN_MODE_L2}
	kernelErr := l.Node.NL.LinkAdd(probe)
	_, err := r.add(list)
	if kernelErr != nil {
		if err == nil || cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "ipvlan") {
			t.Errorf("ADD on a kernel without ipvlan: %v, want code 50 naming ipvlan", err)
		}
		if _, lerr := l.Pod.NL.LinkByName("net1"); lerr == nil {
			t.Error("failed ipvlan ADD left net1")
		}
		t.Skipf("kernel cannot create ipvlan devices (%v): ipvlan data path not exercised", kernelErr)
	}
	_ = l.Node.NL.LinkDel(probe)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	link, lerr := l.Pod.NL.LinkByName("net1")
	if lerr != nil || link.Type() != "ipvlan" {
		t.Fatalf("net1: %v %v", link, lerr)
	}
	if src, ok := udpProbe(t, l, allowed4, reachable); !ok || src != netip.MustParseAddr(egress4) {
		t.Errorf("allowed destination via ipvlan: %v %v", ok, src)
	}
	if _, ok := udpProbe(t, l, denied4, unreachable); ok {
		t.Error("denied destination reachable via ipvlan")
	}
	if err := r.check(list); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := r.del(list); err != nil {
		t.Errorf("DEL: %v", err)
	}
}

func mustIndex(t *testing.T, n *nstest.NS, name string) int {
	t.Helper()
	l, err := n.NL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

// TestDestinationsForwarded: a pod that routes for others (an egress router in redirect
// mode) is held to the same destinations as its own traffic.
func TestDestinationsForwarded(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	if err := l.Pod.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	// The node sends the outside targets through the pod instead of straight out.
	for _, dst := range []string{allowed4 + "/32", denied4 + "/32"} {
		if err := l.Node.NL.RouteAdd(&netlink.Route{Dst: ipNet(netip.MustParsePrefix(dst)), Gw: netip.MustParseAddr(podNet4).AsSlice(), LinkIndex: mustIndex(t, l.Node, "vpod0")}); err != nil {
			t.Fatal(err)
		}
	}
	r := newRuntime(t, l, "router")
	list := confList(t, "1.1.0", TypeEgressRouter, `"ip":{"addresses":["192.0.2.99/24"],"destinations":["198.51.100.10/32"]}`)
	if _, err := r.add(list); err != nil {
		t.Fatal(err)
	}
	send := func(target string, wait time.Duration) bool {
		dst := netip.AddrPortFrom(netip.MustParseAddr(target), 9998)
		var conn *net.UDPConn
		if err := l.Out.Do(func() (err error) {
			conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := l.Node.Do(func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
			if err != nil {
				return err
			}
			defer c.Close()
			for range 3 {
				_, _ = c.Write([]byte("forwarded probe"))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		_, _, err := conn.ReadFromUDPAddrPort(make([]byte, 64))
		return err == nil
	}
	if !send(allowed4, reachable) {
		t.Errorf("forwarded packet to allowed %s did not arrive", allowed4)
	}
	if send(denied4, unreachable) {
		t.Errorf("forwarded packet to %s passed the destinations filter", denied4)
	}
	if err := r.del(list); err != nil {
		t.Fatal(err)
	}
}
