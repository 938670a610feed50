package steer

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/nsenter"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestTunnelFilterInNetns checks the tunnel rules of the agent's table: the
// node takes frames of its VNI only from the gateway VTEPs it knows, and a
// local pod cannot send its own VXLAN or Geneve to a gateway.
func TestTunnelFilterInNetns(t *testing.T) {
	requirePrivileged(t)
	l := buildLab(t)
	// rogue is another host on the node network, no gateway.
	rogue, rogueH := newNS(t, "rogue")
	ipb(t, l.fabric, "link add p9 type veth peer name eth0 netns "+rogue, "link set p9 master br0 up")
	ipb(t, rogue, "addr add 192.0.2.31/24 dev eth0", "link set eth0 up")
	cfg := testConfig()
	cfg.PodCIDRs = []string{"198.18.1.0/24", "fd00:18:1::/64"}
	k := setupKernel(t, cfg, l.nodeH)
	// g1 hosts the egress IP of this node's pod; g2 one of an object
	// that selects no pod here: both are gateways, rogue is not.
	in := testInputs("g1", "192.0.2.101")
	in.NodeKnown, in.NodePodCIDRs = true, cfg.PodCIDRs
	in.EgressIPs = append(in.EgressIPs, eip("red", match("team", "red"), metav1.LabelSelector{}, []string{"192.0.2.111"}, "g2", "192.0.2.111"))
	want := desired(in, k.Params())
	peers := []netip.Addr{g1VTEP, g2VTEP}
	if !slices.Equal(want.TunnelPeers, peers) || len(want.FDB) != 1 {
		t.Fatalf("tunnel peers %v, FDB %v; want peers %v and only g1 in the FDB", want.TunnelPeers, want.FDB, peers)
	}
	if _, err := k.Apply(want); err != nil {
		t.Fatal(err)
	}
	if got, err := k.Actual(); err != nil || !slices.Equal(got.TunnelPeers, peers) {
		t.Fatalf("kernel tunnel peers %v (%v), want %v", got.TunnelPeers, err, peers)
	}

	pc, err := listenUDP(l.podH, netip.AddrPortFrom(podIP4, 45000))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	drops := func() uint64 {
		t.Helper()
		n, err := k.TunnelDrops()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	rxTunnel := func() uint64 {
		t.Helper()
		h, err := netlink.NewHandleAt(l.nodeH)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		dev, err := h.LinkByName(cfg.Device)
		if err != nil {
			t.Fatal(err)
		}
		return dev.Attrs().Statistics.RxPackets
	}
	// send sends one VXLAN frame of vni carrying payload to the pod, from
	// inside ns, and reports whether the pod received it.
	send := func(ns netns.NsHandle, vni uint32, payload string) bool {
		t.Helper()
		frame := vxlanReply(vni, k.TunnelMAC(), cluster.VTEPMAC(g1VTEP), outside4, podIP4, 9999, 45000, []byte(payload))
		err := nsenter.Do(ns, func() error {
			return writeUDP(netip.AddrPort{}, netip.AddrPortFrom(nodeVTEP, cfg.Port), frame, 1)
		})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		for {
			pc.SetReadDeadline(time.Now().Add(time.Second))
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return false
			}
			if string(buf[:n]) == payload {
				return true
			}
		}
	}

	t.Run("from a gateway VTEP it passes", func(t *testing.T) {
		for _, src := range []struct {
			name string
			ns   netns.NsHandle
		}{{"the pod's gateway", l.g1H}, {"a gateway of another EgressIP", l.g2H}} {
			d0, rx0 := drops(), rxTunnel()
			if !send(src.ns, cfg.VNI, "from "+src.name) {
				t.Fatalf("%s: the pod got no frame", src.name)
			}
			if d := drops() - d0; d != 0 {
				t.Fatalf("%s: %d tunnel drops for a gateway's frame", src.name, d)
			}
			if rxTunnel() == rx0 {
				t.Fatalf("%s: %s received nothing", src.name, cfg.Device)
			}
		}
	})

	t.Run("from a non-gateway it is dropped", func(t *testing.T) {
		for _, src := range []struct {
			name string
			ns   netns.NsHandle
		}{{"rogue host", rogueH}} {
			d0, rx0 := drops(), rxTunnel()
			if send(src.ns, cfg.VNI, "from "+src.name) {
				t.Fatalf("%s: the pod got a frame from a non-gateway", src.name)
			}
			if d := drops() - d0; d != 1 {
				t.Fatalf("%s: tunnel drops rose by %d, want 1", src.name, d)
			}
			if rx := rxTunnel() - rx0; rx != 0 {
				t.Fatalf("%s: %s received %d frames", src.name, cfg.Device, rx)
			}
		}
	})

	t.Run("another VNI on the port is not ours", func(t *testing.T) {
		// A CNI sharing the port (Calico VXLAN) keeps its traffic: the
		// rule matches the tunnel's VNI only.
		d0 := drops()
		send(rogueH, cfg.VNI+1, "other vni")
		if d := drops() - d0; d != 0 {
			t.Fatalf("%d tunnel drops for another VNI", d)
		}
	})

	t.Run("a pod cannot send tunnel frames to a gateway", func(t *testing.T) {
		// g2 serves no pod of this node, and is a gateway all the same.
		for _, g := range []struct {
			ns   netns.NsHandle
			vtep netip.Addr
		}{{l.g1H, g1VTEP}, {l.g2H, g2VTEP}} {
			gw := capture(t, g.ns, "eth0")
			// Control: the pod reaches the gateway's address on another port
			// (node networks are not steered), so the capture would see it.
			d0 := drops()
			sendToPort(t, l.podH, podIP4, g.vtep, 9999)
			if n := udpTo(gw.take(), g.vtep, 9999); n == 0 {
				t.Fatalf("the pod's datagram to %v on port 9999 did not arrive (capture broken?)", g.vtep)
			}
			for _, port := range []uint16{4789, 6081} {
				sendToPort(t, l.podH, podIP4, g.vtep, port)
				if n := udpTo(gw.take(), g.vtep, port); n != 0 {
					t.Fatalf("%d datagrams of the pod reached gateway %v on port %d", n, g.vtep, port)
				}
			}
			if d := drops() - d0; d != 4 {
				t.Fatalf("gateway %v: tunnel drops rose by %d, want 4 (2 per port)", g.vtep, d)
			}
		}
	})

	t.Run("a pod cannot send the tunnel's VNI to any node", func(t *testing.T) {
		// rogue stands for a worker: on a gateway node a pod's frames may
		// leave masqueraded as the node, whose VTEP the workers trust.
		rg := capture(t, rogueH, "eth0")
		d0 := drops()
		sendToPort(t, l.podH, podIP4, rogueIP, cfg.Port) // VNI 4242, the tunnel's
		if n := udpTo(rg.take(), rogueIP, cfg.Port); n != 0 {
			t.Fatalf("%d VXLAN frames of the tunnel's VNI from the pod reached another node", n)
		}
		if d := drops() - d0; d != 2 {
			t.Fatalf("tunnel drops rose by %d, want 2", d)
		}
		// Control: another VNI on the port (a CNI's own VXLAN) passes.
		d0 = drops()
		nsenter.Do(l.podH, func() error {
			return writeUDP(netip.AddrPortFrom(podIP4, 0), netip.AddrPortFrom(rogueIP, cfg.Port), []byte("\x08\x00\x00\x00\x00\x10\x93\x00 another VNI"), 2)
		})
		if n := udpTo(rg.take(), rogueIP, cfg.Port); n == 0 {
			t.Fatal("the pod's frames of another VNI did not arrive (capture broken, or the rule too wide)")
		}
		if d := drops() - d0; d != 0 {
			t.Fatalf("tunnel drops rose by %d for another VNI", d)
		}
	})

	t.Run("gateway leaves, cleanup removes the rules", func(t *testing.T) {
		if _, err := k.Apply(desired(testInputs(), k.Params())); err != nil {
			t.Fatal(err)
		}
		if got, err := k.Actual(); err != nil || len(got.TunnelPeers) != 0 {
			t.Fatalf("tunnel peers %v (%v) after the gateway left", got.TunnelPeers, err)
		}
		d0 := drops()
		send(l.g1H, cfg.VNI, "after leaving")
		if d := drops() - d0; d != 1 {
			t.Fatalf("tunnel drops rose by %d for a former gateway, want 1", d)
		}
		if err := k.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := sh(t, "ip", "netns", "exec", l.node, "nft", "list", "tables"); out != "" {
			t.Fatalf("tables left after cleanup: %s", out)
		}
	})
}

// rogueIP is the rogue host's address on the node network.
var rogueIP = netip.MustParseAddr("192.0.2.31")

// sendToPort sends two UDP datagrams from src to dst:port from inside ns.
func sendToPort(t *testing.T, ns netns.NsHandle, src, dst netip.Addr, port uint16) {
	t.Helper()
	err := nsenter.Do(ns, func() error {
		return writeUDP(netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, port), []byte("\x08\x00\x00\x00\x00\x10\x92\x00 a pod's own VXLAN"), 2)
	})
	if err != nil {
		t.Fatalf("send UDP %v → %v:%d: %v", src, dst, port, err)
	}
}

// udpTo counts the UDP frames to dst:port.
func udpTo(frames []frame, dst netip.Addr, port uint16) int {
	n := 0
	for _, f := range frames {
		if f.proto == 17 && f.dst == dst && f.dport == port {
			n++
		}
	}
	return n
}
