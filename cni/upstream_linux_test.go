package cni

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
)

// Addresses of the upstream lab: the spec's and upstream's own examples.
const (
	upNode1, upGW1 = "192.168.1.2", "192.168.1.1" // example 1's subnet, the node's default route
	upNode3, upGW3 = "192.168.3.2", "192.168.3.1" // example 2's and the redirect example's subnet
	upTarget       = "10.1.2.3"                   // db-router's one destination
	clusterClient  = "10.129.0.5"                 // a pod of another node, in 10.128.0.0/14
)

// newUpstreamLab is newLab with the master named eth1, as the spec's examples name it,
// on the subnets those examples use; the node's default route (and so the inferred
// gateway) is example 1's router.
func newUpstreamLab(t *testing.T) *lab {
	t.Helper()
	ext, extp := nstest.Pair(t, "eth1", prefix(upNode1+"/24"), "eth1p", prefix(upGW1+"/24"))
	l := &lab{Node: ext.NS, Pod: nstest.Named(t), Out: extp.NS}
	l.Node.AddAddr(t, "eth1", prefix(upNode3+"/24"))
	l.Out.AddAddr(t, "eth1p", prefix(upGW3+"/24"))
	l.Out.AddAddr(t, "lo", prefix(upTarget+"/32"), prefix(denied4+"/32"))
	l.Node.DefaultVia(t, "eth1", addr(upGW1))
	nstest.VethPair(t, l.Pod, "eth0", prefix(podNet4+"/24"), l.Node, "vpod0", prefix(podGW4+"/24"))
	l.Pod.AddAddr(t, "eth0", prefix(podNet6+"/64"))
	l.Node.AddAddr(t, "vpod0", prefix(podGW6+"/64"))
	l.Pod.DefaultVia(t, "eth0", addr(podGW4), addr(podGW6))
	return l
}

func cniError(t *testing.T, out []byte) types.Error {
	t.Helper()
	var e types.Error
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("stdout is not a CNI error: %q", out)
	}
	return e
}

// TestSpecExamples runs the specification's two example configurations, exactly as the
// spec prints them (no cniVersion), through the plugin binary.
func TestSpecExamples(t *testing.T) {
	nstest.Root(t)
	l := newUpstreamLab(t)
	before := routesOf(t, l.Pod, netlink.FAMILY_V4)

	// Example 1: no cniVersion is 0.1.0, whose result has an ip4 section; the same
	// configuration also works at 0.2.0, the other version upstream's plugin speaks
	// that Egret did not.
	for _, v := range []string{"", "0.2.0"} {
		conf := specExample1
		if v != "" {
			conf = strings.Replace(conf, "{", `{"cniVersion": "`+v+`",`, 1)
		}
		out, err := runPlugin(t, l, "ADD", conf, "")
		if err != nil {
			t.Fatalf("ADD of example 1 (cniVersion %q): %v %s", v, err, out)
		}
		var res struct {
			CNIVersion string `json:"cniVersion"`
			IP4        struct{ IP, Gateway string }
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("result %s: %v", out, err)
		}
		want := v
		if want == "" {
			want = "0.1.0"
		}
		if res.CNIVersion != want || res.IP4.IP != "192.168.1.99/24" || res.IP4.Gateway != upGW1 {
			t.Errorf("result %s, want version %s with 192.168.1.99/24 via %s", out, want, upGW1)
		}
		r4 := routesOf(t, l.Pod, netlink.FAMILY_V4)
		if !hasRoute(r4, "default via "+upGW1+" dev net1") {
			t.Errorf("no default route via net1:%s", joinLines(r4))
		}
		if src, ok := udpProbe(t, l, upTarget, reachable); !ok || src != addr("192.168.1.99") {
			t.Errorf("example 1 (cniVersion %q): received=%v from %v, want from 192.168.1.99", v, ok, src)
		}
		if out, err := runPlugin(t, l, "DEL", conf, ""); err != nil {
			t.Fatalf("DEL: %v %s", err, out)
		}
		assertClean(t, l, before)
	}

	// Example 2 as printed is not JSON: the error says where.
	out, err := runPlugin(t, l, "ADD", specExample2, "K8S_POD_NAME=db-router")
	if e := cniError(t, out); err == nil || e.Code != types.ErrDecodingFailure || !strings.Contains(e.Msg, "line 8, column 2") {
		t.Errorf("example 2 as printed: exit %v, %s; want code 6 naming line 8, column 2", err, out)
	}
	if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
		t.Error("a refused ADD left net1")
	}

	// With its punctuation fixed it is a valid ipvlan configuration. This kernel may
	// have no ipvlan; the same configuration with macvlan runs the data path anyway.
	t.Run("ipvlan", func(t *testing.T) {
		probe := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "ipvprobe", ParentIndex: mustIndex(t, l.Node, "eth1")}, Mode: netlink.IPVLAN_MODE_L2}
		if kernelErr := l.Node.NL.LinkAdd(probe); kernelErr != nil {
			out, err := runPlugin(t, l, "ADD", specExample2Fixed, "K8S_POD_NAME=db-router")
			if e := cniError(t, out); err == nil || e.Code != types.ErrPluginNotAvailable || !strings.Contains(e.Msg, "ipvlan") {
				t.Errorf("ADD without kernel ipvlan: exit %v, %s; want code 50 naming ipvlan", err, out)
			}
			assertClean(t, l, before)
			t.Skipf("kernel cannot create ipvlan devices (%v): example 2's ipvlan data path runs with macvlan below", kernelErr)
		}
		_ = l.Node.NL.LinkDel(probe)
		runSpecExample2(t, l, specExample2Fixed, "ipvlan", before)
	})
	t.Run("macvlan", func(t *testing.T) {
		conf := strings.Replace(specExample2Fixed, `"interfaceType": "ipvlan"`, `"interfaceType": "macvlan"`, 1)
		runSpecExample2(t, l, conf, "macvlan", before)
	})
}

// runSpecExample2 adds example 2 for a pod of each podIP key and checks address,
// gateway and destinations.
func runSpecExample2(t *testing.T, l *lab, conf, kind string, before []string) {
	for _, pod := range []struct{ name, addr string }{{"db-router", "192.168.3.10"}, {"metrics-router", "192.168.3.11"}, {"alpha-7f9c", "192.168.3.12"}} {
		out, err := runPlugin(t, l, "ADD", conf, "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME="+pod.name)
		if err != nil {
			t.Fatalf("ADD for %s: %v %s", pod.name, err, out)
		}
		link, err := l.Pod.NL.LinkByName("net1")
		if err != nil || link.Type() != kind {
			t.Fatalf("net1 for %s: %v %v", pod.name, link, err)
		}
		if !hasRoute(routesOf(t, l.Pod, netlink.FAMILY_V4), "default via "+upGW3+" dev net1") {
			t.Errorf("%s: no default via %s on net1", pod.name, upGW3)
		}
		if src, ok := udpProbe(t, l, upTarget, reachable); !ok || src != addr(pod.addr) {
			t.Errorf("%s: %s received=%v from %v, want from %s", pod.name, upTarget, ok, src, pod.addr)
		}
		// Only db-router has destinations.
		wait := reachable
		if pod.name == "db-router" {
			wait = unreachable
		}
		if _, ok := udpProbe(t, l, denied4, wait); ok != (pod.name != "db-router") {
			t.Errorf("%s: %s reachable=%v", pod.name, denied4, ok)
		}
		if out, err := runPlugin(t, l, "DEL", conf, "K8S_POD_NAME="+pod.name); err != nil {
			t.Fatalf("DEL: %v %s", err, out)
		}
		assertClean(t, l, before)
	}
}

// redirectLab is the upstream lab with a client pod on another node (behind the node
// namespace, in the cluster network 10.128.0.0/14) and the egress router pod routed as
// OVN-Kubernetes routes its pods: cluster and service networks via eth0 besides the
// default route, and no clusterNetworks/serviceNetworks in the configuration.
func redirectLab(t *testing.T) (*lab, *nstest.NS) {
	t.Helper()
	l := newUpstreamLab(t)
	l.Pod.AddRoute(t, "eth0", prefix("10.128.0.0/14"), addr(podGW4))
	l.Pod.AddRoute(t, "eth0", prefix("172.30.0.0/16"), addr(podGW4))
	client := nstest.New(t)
	nstest.VethPair(t, client, "eth0", prefix(clusterClient+"/24"), l.Node, "vcli0", prefix("10.129.0.1/24"))
	client.DefaultVia(t, "eth0", addr("10.129.0.1"))
	if err := l.Node.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	l.Out.AddAddr(t, "lo", prefix("10.100.3.0/32"), prefix("203.0.113.26/32"), prefix("203.0.113.27/32"))
	return l, client
}

// TestRedirect sends through the egress router pod: a client pod connects to the
// router's pod address on a redirect rule's port; the rule DNATs it to the target,
// the connection leaves through net1 from the egress address, and the answer finds
// its way back.
func TestRedirect(t *testing.T) {
	nstest.Root(t)
	l, client := redirectLab(t)
	before := routesOf(t, l.Pod, netlink.FAMILY_V4)
	res, err := runPlugin(t, l, "ADD", upstreamRedirect, "")
	if err != nil {
		t.Fatalf("ADD: %v %s", err, res)
	}

	// TCP 8080 -> 203.0.113.26:80.
	var ln net.Listener
	if err := l.Out.Do(func() (err error) { ln, err = net.Listen("tcp", "203.0.113.26:80"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan [2]string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		seen <- [2]string{c.RemoteAddr().(*net.TCPAddr).IP.String(), c.LocalAddr().String()}
		_, _ = c.Write([]byte("answer from 203.0.113.26:80"))
	}()
	reply, err := firstBytes(client, podNet4+":8080")
	if err != nil {
		t.Errorf("client to %s:8080: %v", podNet4, err)
	}
	select {
	case s := <-seen:
		if s != [2]string{"192.168.3.10", "203.0.113.26:80"} {
			t.Errorf("the server saw %s -> %s, want 192.168.3.10 -> 203.0.113.26:80", s[0], s[1])
		}
	default:
		t.Error("the server accepted nothing")
	}
	if reply != "answer from 203.0.113.26:80" {
		t.Errorf("the client read %q", reply)
	}

	// UDP 80 -> 10.100.3.0:80 (the /30 of the rule is its block; the address is the target).
	var srv *net.UDPConn
	if err := l.Out.Do(func() (err error) {
		srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.100.3.0:80")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var cc *net.UDPConn
	if err := client.Do(func() (err error) {
		cc, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(podNet4+":80")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	from, got := udpExchange(t, cc, srv)
	if from != addr("192.168.3.10") || got != podNet4+":80" {
		t.Errorf("UDP redirect: server saw source %v, client got the answer from %q", from, got)
	}

	// The pod network's own routes stayed: cluster traffic of the pod itself leaves
	// through eth0 from the pod address, not through net1.
	var cl *net.UDPConn
	if err := client.Do(func() (err error) {
		cl, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(clusterClient+":7777")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var pc *net.UDPConn
	if err := l.Pod.Do(func() (err error) {
		pc, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(clusterClient+":7777")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if from, _ := udpExchange(t, pc, cl); from != addr(podNet4) {
		t.Errorf("cluster traffic from the pod arrived from %v, want %s through eth0", from, podNet4)
	}
	r4 := routesOf(t, l.Pod, netlink.FAMILY_V4)
	for _, want := range []string{"10.128.0.0/14 via " + podGW4 + " dev eth0", "172.30.0.0/16 via " + podGW4 + " dev eth0", "default via " + upGW3 + " dev net1"} {
		if !hasRoute(r4, want) {
			t.Errorf("pod routes lack %q:%s", want, joinLines(r4))
		}
	}

	// Destinations: the redirects' blocks are allowed to the pod itself; others are not.
	if src, ok := udpProbe(t, l, "203.0.113.27", reachable); !ok || src != addr("192.168.3.10") {
		t.Errorf("a redirect target from the pod: received=%v from %v", ok, src)
	}
	if _, ok := udpProbe(t, l, denied4, unreachable); ok {
		t.Errorf("%s is in no destinations entry but got through", denied4)
	}

	// The pod forwards for its redirects, but a host of the egress network that
	// routes through it toward the cluster gets nowhere: dropped and counted.
	assertNoInbound(t, l, client)

	// CHECK passes, and fails once a route of the pod network recorded at ADD is gone.
	if out, err := runPlugin(t, l, "CHECK", withPrevResult(t, upstreamRedirect, res), ""); err != nil {
		t.Errorf("CHECK: %v %s", err, out)
	}
	gone := &netlink.Route{Dst: ipNet(prefix("172.30.0.0/16")), Gw: addr(podGW4).AsSlice(), LinkIndex: mustIndex(t, l.Pod, "eth0")}
	if err := l.Pod.NL.RouteDel(gone); err != nil {
		t.Fatal(err)
	}
	if out, err := runPlugin(t, l, "CHECK", withPrevResult(t, upstreamRedirect, res), ""); err == nil || !strings.Contains(cniError(t, out).Msg, "172.30.0.0/16") {
		t.Errorf("CHECK without the service route: %v %s", err, out)
	}
	if err := l.Pod.NL.RouteAdd(gone); err != nil {
		t.Fatal(err)
	}

	if out, err := runPlugin(t, l, "DEL", upstreamRedirect, ""); err != nil {
		t.Fatalf("DEL: %v %s", err, out)
	}
	assertClean(t, l, before)
	// After DEL nothing is redirected any more.
	if err := client.Do(func() error {
		c, err := net.DialTimeout("tcp", podNet4+":8080", unreachable)
		if err == nil {
			c.Close()
		}
		return err
	}); err == nil {
		t.Error("after DEL the client still connects through the redirect")
	}
}

// withPrevResult adds ADD's result to conf as prevResult, as a runtime does for CHECK.
func withPrevResult(t *testing.T, conf string, result []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	var prev map[string]any
	if err := json.Unmarshal(result, &prev); err != nil {
		t.Fatalf("result %q: %v", result, err)
	}
	m["prevResult"] = prev
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func deadline(d time.Duration) time.Time { return time.Now().Add(d) }

// udpExchange sends from c (connected) until srv answers, and returns the source srv
// saw and where c got the answer from ("" when none came).
func udpExchange(t *testing.T, c, srv *net.UDPConn) (netip.Addr, string) {
	t.Helper()
	src := make(chan netip.Addr, 1)
	go func() {
		b := make([]byte, 64)
		_ = srv.SetReadDeadline(deadline(reachable))
		for first := true; ; first = false {
			n, from, err := srv.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			if first {
				src <- from.Addr().Unmap()
			}
			_, _ = srv.WriteToUDPAddrPort(b[:n], from)
		}
	}()
	got := ""
	b := make([]byte, 64)
	for end := deadline(reachable); time.Now().Before(end); {
		_, _ = c.Write([]byte("udp exchange"))
		_ = c.SetReadDeadline(deadline(250 * time.Millisecond))
		if _, from, err := c.ReadFromUDPAddrPort(b); err == nil {
			got = netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String()
			break
		}
	}
	select {
	case a := <-src:
		return a, got
	default:
		return netip.Addr{}, got
	}
}

// TestRedirectIPv6: a redirect to an IPv6 target, with the node as the client: the
// target sees the IPv6 egress address, the client the answer.
func TestRedirectIPv6(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	before := routesOf(t, l.Pod, netlink.FAMILY_V4)
	conf := `{"cniVersion":"1.1.0","name":"e","type":"egress-router","ip":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"],"destinations":["8080 TCP ` + allowed6 + ` 80"]}}`
	if out, err := runPlugin(t, l, "ADD", conf, ""); err != nil {
		t.Fatalf("ADD: %v %s", err, out)
	}
	var ln net.Listener
	if err := l.Out.Do(func() (err error) { ln, err = net.Listen("tcp", "["+allowed6+"]:80"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		_, _ = c.Write([]byte("v6 answer"))
	}()
	reply, err := firstBytes(l.Node, "["+podNet6+"]:8080")
	if err != nil {
		t.Errorf("node to [%s]:8080: %v", podNet6, err)
	}
	select {
	case src := <-seen:
		if src != egress6 {
			t.Errorf("the server saw %s, want %s", src, egress6)
		}
	default:
		t.Error("the server accepted nothing")
	}
	if reply != "v6 answer" {
		t.Errorf("the client read %q", reply)
	}
	if out, err := runPlugin(t, l, "DEL", conf, ""); err != nil {
		t.Fatalf("DEL: %v %s", err, out)
	}
	assertClean(t, l, before)
}

// firstBytes connects to addr over TCP from inside ns and returns what the
// far end writes first (up to 64 bytes).
func firstBytes(ns interface{ Do(func() error) error }, addr string) (string, error) {
	var reply string
	err := ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, reachable)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetReadDeadline(deadline(reachable))
		b := make([]byte, 64)
		n, err := c.Read(b)
		reply = string(b[:n])
		return err
	})
	return reply, err
}

// assertNoInbound sends UDP from the egress network (Out, through a route via
// the pod's net1 address) to a cluster client: the pod must drop it in its
// forward chain (the counter of FilterTable's inbound drop rises) and the
// client must receive nothing.
func assertNoInbound(t *testing.T, l *lab, client *nstest.NS) {
	t.Helper()
	var cl *net.UDPConn
	if err := client.Do(func() (err error) {
		cl, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(clusterClient+":7778")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l.Out.AddRoute(t, "eth1p", prefix("10.129.0.0/24"), addr("192.168.3.10"))
	var oc *net.UDPConn
	if err := l.Out.Do(func() (err error) {
		oc, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(clusterClient+":7778")))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	got := make(chan netip.AddrPort, 1)
	go func() {
		b := make([]byte, 64)
		if _, from, err := cl.ReadFromUDPAddrPort(b); err == nil {
			got <- from
		}
	}()
	before := inboundDrops(t, l)
	for end := deadline(reachable); ; {
		_, _ = oc.Write([]byte("from the egress network"))
		select {
		case from := <-got:
			t.Fatalf("a host of the egress network reached the cluster client through the pod (from %v)", from)
		case <-time.After(50 * time.Millisecond):
		}
		if inboundDrops(t, l) > before {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the pod neither forwarded nor counted a drop of the inbound packets")
		}
	}
}

// inboundDrops is the packet count of the forward chain's drop rule for what
// comes in through net1.
func inboundDrops(t *testing.T, l *lab) uint64 {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(l.Pod.Handle)))
	if err != nil {
		t.Fatal(err)
	}
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: FilterTable("net1")}
	rules, err := c.GetRules(tb, &nftables.Chain{Name: "forward", Table: tb})
	if err != nil {
		t.Fatalf("reading the pod's forward chain: %v", err)
	}
	for _, r := range rules {
		iif := false
		for _, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Meta:
				iif = iif || e.Key == expr.MetaKeyIIFNAME
			case *expr.Counter:
				if iif {
					return e.Packets
				}
			}
		}
	}
	return 0
}
