package steer

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/nsenter"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDesiredFailClosed(t *testing.T) {
	web := eip("web", match("env", "prod"), match("app", "web"), []string{"192.0.2.101"}, "g1", "192.0.2.101")
	in := baseInputs()
	in.EgressIPs = append(in.EgressIPs, web)
	in.NodeKnown = true
	in.NodePodCIDRs = []string{"fd00:10::/64", "10.128.1.0/24", "bogus"}
	// A pod outside the pod networks, one sharing a selected pod's address.
	in.Pods = append(in.Pods,
		Pod{Namespace: "qa", Name: "macvlan", Node: "w1", IPs: []netip.Addr{addr("10.200.0.5")}},
		Pod{Namespace: "qa", Name: "dup", Node: "w1", IPs: []netip.Addr{addr("10.128.1.2")}},
		Pod{Namespace: "unseen", Name: "x", Node: "w1", IPs: []netip.Addr{addr("10.128.1.7")}})
	st := desired(in, params)
	if st.FailClosed != FailClosedPodCIDR || st.KeepPodCIDRs || st.FailClosedWhy != "" {
		t.Fatalf("mode %q keep=%v why=%q, want podCIDR", st.FailClosed, st.KeepPodCIDRs, st.FailClosedWhy)
	}
	if want := []netip.Prefix{pfx("10.128.1.0/24"), pfx("fd00:10::/64")}; !slices.Equal(st.PodCIDRs, want) {
		t.Fatalf("pod CIDRs %v, want %v", st.PodCIDRs, want)
	}
	if !slices.ContainsFunc(st.Problems, func(e error) bool { return strings.Contains(e.Error(), `"bogus"`) }) {
		t.Fatalf("bad podCIDR not reported: %v", st.Problems)
	}
	// prod/db and dev/web are unselected; prod/web is selected (also
	// under qa/dup's name), host network, done, other node, other network
	// and unknown namespace are never allowed.
	if want := []netip.Addr{addr("10.128.1.3"), addr("10.128.1.4")}; !slices.Equal(st.Allowed, want) {
		t.Fatalf("allowed %v, want %v", st.Allowed, want)
	}
	if want := []netip.Addr{addr("10.128.1.2"), addr("fd00:10::2")}; !slices.Equal(st.Selected, want) {
		t.Fatalf("selected %v, want %v", st.Selected, want)
	}

	// The configuration's pod networks win over the Node's.
	p := params
	p.PodCIDRs = []netip.Prefix{pfx("10.128.0.0/16"), pfx("10.128.1.0/24")}
	st = desired(in, p)
	if want := []netip.Prefix{pfx("10.128.0.0/16")}; !slices.Equal(st.PodCIDRs, want) {
		t.Fatalf("config pod CIDRs %v, want %v (nested network folded)", st.PodCIDRs, want)
	}
	if !slices.Contains(st.Allowed, addr("10.128.1.3")) || slices.Contains(st.Allowed, addr("fd00:10::2")) {
		t.Fatalf("allowed %v", st.Allowed)
	}

	// Node without pod networks: fall back to selected, and say why.
	in.NodePodCIDRs = nil
	st = desired(in, params)
	if st.FailClosed != FailClosedSelected || !strings.Contains(st.FailClosedWhy, "no spec.podCIDRs") || len(st.Allowed)+len(st.PodCIDRs) != 0 || st.KeepPodCIDRs {
		t.Fatalf("fallback: %+v", st)
	}
	// Node not seen: keep the kernel's networks, allow every unselected pod
	// (Apply trims to the kernel's networks).
	in.NodeKnown = false
	st = desired(in, params)
	if !st.KeepPodCIDRs || st.FailClosed != FailClosedPodCIDR || !slices.Contains(st.Allowed, addr("10.200.0.5")) || slices.Contains(st.Allowed, addr("10.128.1.2")) {
		t.Fatalf("node unknown: %+v", st)
	}
	// Configured selected: no networks, nothing allowed.
	p.FailClosed = FailClosedSelected
	st = desired(in, p)
	if st.FailClosed != FailClosedSelected || st.KeepPodCIDRs || len(st.Allowed)+len(st.PodCIDRs) != 0 || st.FailClosedWhy != "" {
		t.Fatalf("failClosed selected: %+v", st)
	}
}

func TestIntervalElementsRoundTrip(t *testing.T) {
	list := []netip.Prefix{pfx("0.0.0.0/0"), pfx("10.128.1.0/24"), pfx("255.255.255.0/24"), pfx("198.18.1.7/32"),
		pfx("255.255.255.255/32"), pfx("::/0"), pfx("fd00:18:1::/64"), pfx("ffff::/16"), pfx("2001:db8::1/128")}
	for _, p := range list {
		if got := intervalPrefixes(intervalElements(p)); !slices.Equal(got, []netip.Prefix{p}) {
			t.Errorf("%v came back as %v", p, got)
		}
	}
	// Several disjoint networks in one set, elements in any order.
	var els []nftables.SetElement
	want := []netip.Prefix{pfx("10.0.0.0/24"), pfx("10.0.1.0/24"), pfx("10.9.0.0/16"), pfx("255.0.0.0/8")}
	for _, p := range slices.Backward(want) {
		els = append(els, intervalElements(p)...)
	}
	if got := intervalPrefixes(els); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := normalizePrefixes([]netip.Prefix{pfx("10.1.2.3/16"), pfx("10.0.0.0/8"), pfx("fd00::/8"), pfx("fd00:1::/64"), pfx("10.0.0.0/8"), {}}); !slices.Equal(got, []netip.Prefix{pfx("10.0.0.0/8"), pfx("fd00::/8")}) {
		t.Fatalf("normalize: %v", got)
	}
}

func TestConfigFailClosed(t *testing.T) {
	c := Config{Underlay: "eth0"}.WithDefaults()
	if c.FailClosed != FailClosedPodCIDR || c.Validate() != nil {
		t.Fatalf("default failClosed %q (%v)", c.FailClosed, c.Validate())
	}
	for name, c := range map[string]Config{
		"mode": {Underlay: "eth0", FailClosed: "always"},
		"cidr": {Underlay: "eth0", PodCIDRs: []string{"10.128.1.0/33"}},
		"zone": {Underlay: "eth0", PodCIDRs: []string{"fe80::%eth0/64"}},
	} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	c = Config{Underlay: "eth0", FailClosed: "selected", PodCIDRs: []string{" 10.128.1.7/24 ", "fd00:18:1::/64"}}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.PodNetworks(); !slices.Equal(n, []netip.Prefix{pfx("10.128.1.0/24"), pfx("fd00:18:1::/64")}) {
		t.Fatalf("pod networks %v", n)
	}
}

// Fail-closed test fixtures: the pod of buildLab (198.18.1.2,
// fd00:18:1::2) plus a second address in the pod networks no Pod object
// has (198.18.1.3, fd00:18:1::3); the node masquerades pod traffic that
// leaves by eth0, as a CNI would.
var (
	unseen4   = addr("198.18.1.3")
	unseen6   = addr("fd00:18:1::3")
	nodeIP6   = addr("2001:db8:f::11")
	fcPodNets = []string{"198.18.1.0/24", "fd00:18:1::/64"}
)

func fcLab(t *testing.T) *testLab {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("fail-closed test needs nft (Debian package nftables) for the node's masquerade (CI=true: install it)")
		}
		t.Skip("fail-closed test needs nft (Debian package nftables)")
	}
	l := buildLab(t)
	ipb(t, l.pod, "addr add 198.18.1.3/24 dev eth0", "addr add fd00:18:1::3/64 dev eth0 nodad")
	cmd := exec.Command("ip", "netns", "exec", l.node, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(`table inet egret-test-nat {
	chain post { type nat hook postrouting priority srcnat; policy accept;
		oifname "eth0" ip saddr 198.18.0.0/16 masquerade
		oifname "eth0" ip6 saddr fd00:18::/32 masquerade
	}
}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node masquerade: %v: %s", err, out)
	}
	return l
}

// fcInputs: pod p1 (198.18.1.2, fd00:18:1::2) in namespace blue, selected
// by EgressIP blue or not; this node's Node object is known.
func fcInputs(selected bool, status ...string) Inputs {
	in := testInputs(status...)
	if !selected {
		in.EgressIPs[0].Spec.NamespaceSelector = match("team", "red")
	}
	in.NodeKnown = true
	return in
}

// sendUDPPort sends one datagram from each source port to dst:dport.
func sendUDPPort(t *testing.T, ns netns.NsHandle, src, dst netip.Addr, sports []uint16, dport uint16) {
	t.Helper()
	err := nsenter.Do(ns, func() error {
		for _, p := range sports {
			if err := sendOne(src, p, dst, dport); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send UDP %v → %v: %v", src, dst, err)
	}
}

func sendOne(src netip.Addr, sport uint16, dst netip.Addr, dport uint16) error {
	return writeUDP(netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport), []byte("egret fail-closed test"), 1)
}

// uplinkCount sorts the frames on the node's uplink to the outside by
// destination port: plain ones with the node's address as source
// (masqueraded), plain ones with any other source (not masqueraded), and
// tunnel frames.
type uplinkCount struct{ node, other, tunnel map[uint16]int }

func countUplink(frames []frame) uplinkCount {
	c := uplinkCount{map[uint16]int{}, map[uint16]int{}, map[uint16]int{}}
	for _, f := range frames {
		switch {
		case f.vxlan && (f.inDst == outside4 || f.inDst == outside6):
			c.tunnel[f.inDport]++
		case f.vxlan || (f.dst != outside4 && f.dst != outside6):
		case f.src == nodeVTEP || f.src == nodeIP6:
			c.node[f.dport]++
		default:
			c.other[f.dport]++
		}
	}
	return c
}

// waitPlain collects uplink frames until want plain frames to dport left
// with the node's address, or a few seconds passed (IPv6 waits for
// neighbour discovery).
func waitPlain(up *capturer, dport uint16, want int) uplinkCount {
	total := uplinkCount{map[uint16]int{}, map[uint16]int{}, map[uint16]int{}}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		c := countUplink(up.take())
		for _, m := range []struct{ from, to map[uint16]int }{{c.node, total.node}, {c.other, total.other}, {c.tunnel, total.tunnel}} {
			for k, v := range m.from {
				m.to[k] += v
			}
		}
		if total.node[dport] >= want {
			break
		}
	}
	return total
}

// TestFailClosedPodCIDRInNetns: with failClosed podCIDR, an address of the
// node's pod network that the agent has not classified cannot leave by the
// uplink; once classified unselected it leaves masqueraded with the node's
// address, once selected through the tunnel; changes between the two never
// let a selected pod out; a restart keeps everything blocked; cleanup
// removes it all.
func TestFailClosedPodCIDRInNetns(t *testing.T) {
	requirePrivileged(t)
	l := fcLab(t)
	cfg := testConfig()
	cfg.PodCIDRs = fcPodNets
	k, err := NewKernel(cfg, l.nodeH, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	uplink := capture(t, l.nodeH, "eth0")
	gw1 := capture(t, l.g1H, "eth0")
	gw2 := capture(t, l.g2H, "eth0")

	// Control: before the agent, both addresses leave masqueraded, so the
	// capture can see a leak.
	sendUDPPort(t, l.podH, podIP4, outside4, ports(20000, 2), 5000)
	sendUDPPort(t, l.podH, podIP6, outside6, ports(20000, 2), 5000)
	sendUDPPort(t, l.podH, unseen4, outside4, ports(20000, 2), 5001)
	sendUDPPort(t, l.podH, unseen6, outside6, ports(20000, 2), 5001)
	if c := waitPlain(uplink, 5001, 4); c.node[5000] < 4 || c.node[5001] < 4 {
		t.Fatalf("before the agent: %v frames masqueraded by the uplink, want 4 per port (capture or NAT broken?)", c.node)
	}

	if err := k.Setup(); err != nil {
		t.Fatal(err)
	}

	t.Run("unclassified is blocked", func(t *testing.T) {
		// The agent knows the pod networks but no pod yet.
		in := fcInputs(false)
		in.Pods = nil
		if _, err := k.Apply(desired(in, k.Params())); err != nil {
			t.Fatal(err)
		}
		_, before, _ := k.DropsByReason()
		sendUDPPort(t, l.podH, podIP4, outside4, ports(21000, 4), 5100)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(21000, 4), 5100)
		c := countUplink(uplink.take())
		if len(c.node)+len(c.other)+len(c.tunnel) != 0 {
			t.Fatalf("unclassified pod traffic left the node: %+v", c)
		}
		if _, after, _ := k.DropsByReason(); after < before+8 {
			t.Fatalf("unclassified counter rose by %d, want ≥ 8", after-before)
		}
		// The pod network's traffic to the cluster is not affected.
		sendUDPPort(t, l.podH, podIP4, addr("192.0.2.1"), ports(21100, 1), 5100)
		if !hasPlain(uplink.take(), addr("192.0.2.1")) {
			t.Fatal("traffic to the node network was dropped")
		}
	})

	t.Run("unselected leaves with the node address", func(t *testing.T) {
		if _, err := k.Apply(desired(fcInputs(false), k.Params())); err != nil {
			t.Fatal(err)
		}
		got, _ := k.Actual()
		if !slices.Equal(got.Allowed, []netip.Addr{podIP4, podIP6}) || len(got.PodCIDRs) != 2 {
			t.Fatalf("kernel: allowed %v, pod networks %v", got.Allowed, got.PodCIDRs)
		}
		sendUDPPort(t, l.podH, podIP4, outside4, ports(22000, 4), 5200)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(22000, 4), 5200)
		sendUDPPort(t, l.podH, unseen4, outside4, ports(22000, 4), 5201)
		sendUDPPort(t, l.podH, unseen6, outside6, ports(22000, 4), 5201)
		c := waitPlain(uplink, 5200, 8)
		if c.node[5200] != 8 || c.other[5200] != 0 {
			t.Fatalf("unselected pod: %d frames with the node's address, %d with another; want 8 and 0", c.node[5200], c.other[5200])
		}
		if c.node[5201]+c.other[5201]+c.tunnel[5201] != 0 {
			t.Fatalf("the unseen address leaked: %+v", c)
		}
	})

	t.Run("selected goes into the tunnel", func(t *testing.T) {
		if _, err := k.Apply(desired(fcInputs(true, bothGateways...), k.Params())); err != nil {
			t.Fatal(err)
		}
		got, _ := k.Actual()
		if len(got.Allowed) != 0 || len(got.Selected) != 2 {
			t.Fatalf("kernel: allowed %v, selected %v", got.Allowed, got.Selected)
		}
		sendUDPPort(t, l.podH, podIP4, outside4, ports(23000, 8), 5300)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(23000, 8), 5300)
		c := countUplink(uplink.take())
		if c.node[5300]+c.other[5300] != 0 || c.tunnel[5300] != 16 {
			t.Fatalf("selected pod: %+v, want 16 tunnel frames and nothing plain", c)
		}
		if n := countVXLAN(gw1.take()) + countVXLAN(gw2.take()); n != 16 {
			t.Fatalf("%d tunnel frames at the gateways, want 16", n)
		}
	})

	t.Run("transitions never leak", func(t *testing.T) {
		// A sender marks each datagram with what may happen to it: port
		// 6000 = the pod may be unselected, 6001 = it is selected. The flag
		// turns to "selected" right after the filter transaction of the
		// change to selected, and back only once the steering is gone and
		// in-flight datagrams have drained, just before the allowed set
		// takes the pod again. A 6001 datagram on the uplink outside the
		// tunnel is a leak.
		var selected atomic.Bool
		selected.Store(true) // the pod is selected now
		var toSelected atomic.Bool
		// Besides, at every stage of a change where the pod counts as
		// selected, a burst goes out at once (port 6001, up to 8 per stage).
		probes := 0
		probe := func() {
			nsenter.Do(l.podH, func() error {
				for i := range 4 {
					probes += 2
					sendOne(podIP4, uint16(55000+probes%10000+i), outside4, 6001)
					sendOne(podIP6, uint16(55000+probes%10000+i), outside6, 6001)
				}
				return nil
			})
		}
		stop := make(chan struct{})
		var sent atomic.Int64
		var rounds atomic.Int64 // the sender's loop iterations, each reading the flag once
		k.afterStep = func(stage string) {
			switch {
			case toSelected.Load() && stage == "filter":
				selected.Store(true)
				probe()
			case toSelected.Load():
				probe()
			case stage == "unsteered":
				probe()
				// sleep: datagrams still in the kernel (veth backlog, routing) have no event to wait on
				time.Sleep(100 * time.Millisecond)
				selected.Store(false)
				// The sender may have read the flag just before: once a
				// round that began after the store has ended, it sends 6000.
				seen := rounds.Load()
				nstest.Eventually(t, "the sender sees the pod unselected", 5*time.Second, func() bool { return rounds.Load() > seen+1 })
			default:
				probe()
			}
		}
		defer func() { k.afterStep = nil }()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			nsenter.Do(l.podH, func() error {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return nil
					default:
					}
					dport := uint16(6000)
					if selected.Load() {
						dport = 6001
					}
					src, dst := podIP4, outside4
					if i%2 == 1 {
						src, dst = podIP6, outside6
					}
					if sendOne(src, uint16(24000+i%30000), dst, dport) == nil {
						sent.Add(1)
					}
					rounds.Add(1)
					// sleep: paces the sender (about 1000 datagrams/s); it waits for nothing
					time.Sleep(time.Millisecond)
				}
			})
		}()
		// Each state holds for 100 datagrams of the sender.
		traffic := func(state string) {
			n := sent.Load()
			nstest.Eventually(t, "100 datagrams while "+state, 10*time.Second, func() bool { return sent.Load() >= n+100 })
		}
		for range 3 {
			toSelected.Store(false)
			if _, err := k.Apply(desired(fcInputs(false, bothGateways...), k.Params())); err != nil {
				t.Fatal(err)
			}
			traffic("unselected")
			toSelected.Store(true)
			if _, err := k.Apply(desired(fcInputs(true, bothGateways...), k.Params())); err != nil {
				t.Fatal(err)
			}
			traffic("selected")
		}
		close(stop)
		wg.Wait()
		c := countUplink(uplink.take())
		t.Logf("%d datagrams sent; uplink: masqueraded %v, not masqueraded %v, tunnel %v", sent.Load(), c.node, c.other, c.tunnel)
		if n := c.node[6001] + c.other[6001]; n != 0 {
			t.Fatalf("%d datagrams of the selected pod left outside the tunnel", n)
		}
		if c.node[6000] < 20 || c.tunnel[6001] < 20 {
			t.Fatalf("too little traffic to judge: masqueraded %v, tunnel %v", c.node, c.tunnel)
		}
		if c.other[6000] != 0 {
			t.Fatalf("%d datagrams of the unselected pod left without masquerade", c.other[6000])
		}
		gw1.take()
		gw2.take()
	})

	t.Run("a flow that outlives its selection is masqueraded", func(t *testing.T) {
		// One flow (same ports throughout) starts while the pod is
		// selected, through the tunnel: its connection-tracking entry
		// carries no NAT. Once the pod is unselected the same flow must
		// meet the node's masquerade, not leave with the pod's address (a
		// soak run saw established connections do so when their EgressIP
		// went away).
		if _, err := k.Apply(desired(fcInputs(true, bothGateways...), k.Params())); err != nil {
			t.Fatal(err)
		}
		uplink.take()
		sendUDPPort(t, l.podH, podIP4, outside4, ports(25000, 1), 5400)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(25000, 1), 5400)
		if c := countUplink(uplink.take()); c.tunnel[5400] != 2 {
			t.Fatalf("while selected: %+v, want the flow's 2 datagrams in the tunnel", c)
		}
		if _, err := k.Apply(desired(fcInputs(false, bothGateways...), k.Params())); err != nil {
			t.Fatal(err)
		}
		sendUDPPort(t, l.podH, podIP4, outside4, ports(25000, 1), 5400)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(25000, 1), 5400)
		c := waitPlain(uplink, 5400, 2)
		if c.other[5400] != 0 || c.node[5400] != 2 {
			t.Fatalf("the flow after unselection: %d datagrams with the pod's own address, %d with the node's; want 0 and 2", c.other[5400], c.node[5400])
		}
		// And back: the flow, masqueraded now, is selected again. Its
		// next datagram goes into the tunnel with the pod's address, not
		// the node's masquerade carried along (a soak run saw one leave
		// as the node through the gateway).
		if _, err := k.Apply(desired(fcInputs(true, bothGateways...), k.Params())); err != nil {
			t.Fatal(err)
		}
		uplink.take()
		sendUDPPort(t, l.podH, podIP4, outside4, ports(25000, 1), 5400)
		sendUDPPort(t, l.podH, podIP6, outside6, ports(25000, 1), 5400)
		inner := map[netip.Addr]int{}
		for _, f := range uplink.take() {
			if f.vxlan && f.inDport == 5400 {
				inner[f.innerSrc]++
			}
		}
		if inner[podIP4] != 1 || inner[podIP6] != 1 || len(inner) != 2 {
			t.Fatalf("the flow selected again went into the tunnel with sources %v, want %v and %v once each", inner, podIP4, podIP6)
		}
		gw1.take()
		gw2.take()
	})

	t.Run("restart keeps blocking", func(t *testing.T) {
		// The pod is unselected, the other address unseen; the agent stops.
		if _, err := k.Apply(desired(fcInputs(false, bothGateways...), k.Params())); err != nil {
			t.Fatal(err)
		}
		uplink.take()
		// The next agent: pod networks from the Node object this time, not
		// the config. Traffic of the unseen address runs during its start.
		cfg2 := testConfig()
		var logs bytes.Buffer
		k2, err := NewKernel(cfg2, l.nodeH, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer k2.Close()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			nsenter.Do(l.podH, func() error {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return nil
					default:
					}
					src, dst := unseen4, outside4
					if i%2 == 1 {
						src, dst = unseen6, outside6
					}
					sendOne(src, uint16(25000+i), dst, 6101)
					// sleep: paces the sender (about 500 datagrams/s); it waits for nothing
					time.Sleep(2 * time.Millisecond)
				}
			})
		}()
		src := &memSource{o: fcObjects(false)}
		a := &Agent{Node: "w1", Source: src, Kernel: k2, Resync: time.Hour, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		waitKernel(t, k2, "agent up", func(st State) bool { return slices.Equal(st.Allowed, []netip.Addr{podIP4, podIP6}) })
		// The unseen address's traffic runs on into the running agent's
		// rules: the kernel counts it blocked.
		nstest.Eventually(t, "the running agent blocks the unseen address", 10*time.Second, func() bool {
			_, after, _ := k2.DropsByReason()
			return after >= 20
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		c := countUplink(uplink.take())
		if n := c.node[6101] + c.other[6101] + c.tunnel[6101]; n != 0 {
			t.Fatalf("%d datagrams of the unseen address left during the restart", n)
		}
		// Setup rewrites the rules, so the counters start again from 0.
		if _, after, _ := k2.DropsByReason(); after < 20 {
			t.Fatalf("unclassified counter at %d after the restart, want ≥ 20", after)
		}
		if !strings.Contains(logs.String(), "blocked until classified") || !strings.Contains(logs.String(), "198.18.1.0/24") {
			t.Fatalf("mode not logged: %s", logs.String())
		}
		// The restarted agent still lets the classified pod out.
		sendUDPPort(t, l.podH, podIP4, outside4, ports(26000, 2), 6102)
		if c := waitPlain(uplink, 6102, 2); c.node[6102] != 2 {
			t.Fatalf("classified pod after restart: %+v", c)
		}
	})

	t.Run("node without pod networks falls back to selected", func(t *testing.T) {
		var logs bytes.Buffer
		k3, err := NewKernel(testConfig(), l.nodeH, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer k3.Close()
		o := fcObjects(false)
		o.Nodes[0].Spec.PodCIDRs = nil
		a := &Agent{Node: "w1", Source: &memSource{o: o}, Kernel: k3, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		if _, _, err := a.ReconcileOnce(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "falling back") {
			t.Fatalf("fallback not logged: %s", logs.String())
		}
		got, _ := k3.Actual()
		if len(got.PodCIDRs)+len(got.Allowed) != 0 {
			t.Fatalf("selected mode left pod networks %v, allowed %v", got.PodCIDRs, got.Allowed)
		}
		sendUDPPort(t, l.podH, unseen4, outside4, ports(27000, 2), 6200)
		if c := waitPlain(uplink, 6200, 2); c.node[6200] != 2 {
			t.Fatalf("selected mode: the unseen address should leave: %+v", c)
		}
		// Back to podCIDR mode for the cleanup check.
		if _, err := k.Apply(desired(fcInputs(false), k.Params())); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pods of the node reach each other without clusterCIDRs", func(t *testing.T) {
		// A second pod on the node, 198.18.1.20 behind vp2.
		pod2, pod2H := newNS(t, "pod2")
		ipb(t, l.node, "link add vp2 type veth peer name eth0 netns "+pod2, "link set vp2 up", "route add 198.18.1.20/32 dev vp2")
		ipb(t, pod2, "addr add 198.18.1.20/24 dev eth0", "link set eth0 up", "route add default dev eth0")
		// The first pod sees 198.18.1.20 on its link: the node answers for it.
		sh(t, "ip", "netns", "exec", l.node, "sysctl", "-qw", "net.ipv4.conf.vp1.proxy_arp=1", "net.ipv4.conf.vp2.proxy_arp=1")
		pc, err := listenUDP(pod2H, netip.AddrPortFrom(addr("198.18.1.20"), 6400))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		cfg4 := testConfig()
		cfg4.ClusterCIDRs, cfg4.PodCIDRs = nil, fcPodNets
		k4, err := NewKernel(cfg4, l.nodeH, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer k4.Close()
		in := fcInputs(false)
		in.Pods = nil
		if err := k4.Setup(); err != nil {
			t.Fatal(err)
		}
		if _, err := k4.Apply(desired(in, k4.Params())); err != nil {
			t.Fatal(err)
		}
		sendUDPPort(t, l.podH, unseen4, addr("198.18.1.20"), ports(29000, 1), 6400)
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 100)
		if _, from, err := pc.ReadFrom(buf); err != nil || from.(*net.UDPAddr).AddrPort().Addr() != unseen4 {
			_, d, _ := k4.DropsByReason()
			out, _ := exec.Command("ip", "netns", "exec", l.node, "nft", "list", "table", "inet", NFTTable).CombinedOutput()
			t.Fatalf("the unclassified address did not reach a pod of its node: %v %v (%d dropped)\n%s", from, err, d, out)
		}
		sendUDPPort(t, l.podH, unseen4, outside4, ports(29100, 2), 6401)
		if c := countUplink(uplink.take()); c.node[6401]+c.other[6401] != 0 {
			t.Fatalf("the unclassified address leaked: %+v", c)
		}
		// Restore the main test's excluded networks.
		if err := k.Setup(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cleanup removes everything", func(t *testing.T) {
		if err := k.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := sh(t, "ip", "netns", "exec", l.node, "nft", "list", "tables"); strings.Contains(out, NFTTable) {
			t.Fatalf("nftables table left: %s", out)
		}
		sendUDPPort(t, l.podH, unseen4, outside4, ports(28000, 2), 6300)
		if c := waitPlain(uplink, 6300, 2); c.node[6300] != 2 {
			t.Fatalf("after cleanup the pod network should leave as before: %+v", c)
		}
	})
}

// fcObjects are fcInputs as cluster objects, with Node w1's pod networks.
func fcObjects(selected bool) cluster.View {
	team := "red"
	if selected {
		team = "blue"
	}
	return cluster.View{
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "blue", Labels: map[string]string{"team": "blue"}}}},
		Nodes: []*corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Spec: corev1.NodeSpec{PodCIDRs: fcPodNets}},
			{ObjectMeta: metav1.ObjectMeta{Name: "g1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: g1VTEP.String()}}}},
		},
		EgressIPs: []*egressv1.EgressIP{eip("blue", match("team", team), metav1.LabelSelector{}, []string{"192.0.2.101"}, "g1", "192.0.2.101")},
		Pods:      []*corev1.Pod{k8sPod("blue", "p1", "w1", podIP4.String(), podIP6.String())},
	}
}

func waitKernel(t *testing.T, k *Kernel, what string, ok func(State) bool) {
	t.Helper()
	var st State
	var err error
	if !nstest.Soon(5*time.Second, func() bool { st, err = k.Actual(); return err == nil && ok(st) }) {
		t.Fatalf("%s: kernel state %+v (%v)", what, st, err)
	}
}

// TestPodNetworksInKernel: the interval sets hold what Apply writes, read
// back the same, adjacent and nested networks included, and a second pass
// changes nothing.
func TestPodNetworksInKernel(t *testing.T) {
	requirePrivileged(t)
	_, h := newNS(t, "pods")
	k := &Kernel{nft: &nftState{ns: h, dev: DefaultDevice}}
	if err := k.nft.setup(nil); err != nil {
		t.Fatal(err)
	}
	for _, nets := range [][]netip.Prefix{
		{pfx("10.0.0.0/24"), pfx("10.0.1.0/24"), pfx("10.0.1.128/25"), pfx("255.255.255.0/24"), pfx("fd00:18:1::/64"), pfx("fd00:18:2::/64")},
		{pfx("0.0.0.0/0"), pfx("::/0")},
		{pfx("198.18.1.0/24")},
		nil,
	} {
		first := nftChange{setPods: true, pods: nets}
		if err := k.nft.apply(first); err != nil {
			t.Fatalf("%v: %v", nets, err)
		}
		got, err := k.nft.read()
		if err != nil {
			t.Fatal(err)
		}
		if want := normalizePrefixes(nets); !slices.Equal(got.pods, want) {
			t.Fatalf("kernel holds %v, want %v", got.pods, want)
		}
	}
}
