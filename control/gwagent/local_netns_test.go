package gwagent

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A pod on the gateway node g1 itself (10.244.9.5, its own namespace behind
// pv0), selected by blue.
const localManifests = `---
apiVersion: v1
kind: Pod
metadata: {name: local, namespace: shop, labels: {app: web}}
spec: {nodeName: g1, containers: [{name: c, image: x}]}
status: {phase: Running, podIPs: [{ip: 10.244.9.5}]}
`

var (
	nsLocalPod    = netip.MustParseAddr("10.244.9.5")
	nsLocalPodNet = netip.MustParsePrefix("10.244.9.1/24")
)

// TestLocalPodNetns: a selected pod on the gateway's own node leaves as the
// egress IP its node hosts, without a tunnel: routed (as the steer agent
// routes it) to the gateway's local port, which the agent created, and
// answered back through it. A real UDP socket in the pod's namespace sends
// and reads the echo; the server reports the source it saw.
func TestLocalPodNetns(t *testing.T) {
	tp, seen := newNsTopo(t)
	gw := tp.gw
	podEnd, _ := nstest.VethPair(t, nstest.New(t), "eth0", netip.PrefixFrom(nsLocalPod, 24), gw, "pv0", nsLocalPodNet)
	podNS := podEnd.NS
	podNS.DefaultVia(t, "eth0", nsLocalPodNet.Addr())
	// The outside server's frames carry full checksums, as from a real
	// NIC (the lab does the same): a veth would hand the gateway partial
	// ones.
	if out, err := exec.Command("nsenter", "--net="+tp.peer.Path(), "ethtool", "-K", "p0", "tx", "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K p0 tx off: %v: %s", err, out)
	}
	if err := gw.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	objs := filepath.Join(dir, "objects")
	if err := os.MkdirAll(filepath.Join(objs, "status"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(objs, "cluster.yaml"), []byte(manifests+localManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	writeStatus(t, objs, "g1")
	src, err := cluster.NewDirReader(objs, 100*time.Millisecond, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	a, engines, stop := startLocalAgent(t, tp, src)
	nstest.Eventually(t, "data plane running", 10*time.Second, func() bool { return a.State().Running })
	nstest.Eventually(t, "egress IP claimed", 3*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })

	// What the steer agent programs on a gateway node for a pod whose
	// gateway is its own (control/steer: Desired with a local hop).
	lh, err := gw.NL.LinkByName(config.LocalKernelLink)
	if err != nil {
		t.Fatalf("the agent did not create the local port: %v", err)
	}
	if err := gw.NL.NeighSet(&netlink.Neigh{LinkIndex: lh.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: config.LocalNextHop4.AsSlice(), HardwareAddr: config.LocalPortMAC[:]}); err != nil {
		t.Fatal(err)
	}
	if err := gw.NL.RouteAdd(&netlink.Route{Table: 100, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)},
		LinkIndex: lh.Attrs().Index, Gw: config.LocalNextHop4.AsSlice(), Flags: int(netlink.FLAG_ONLINK)}); err != nil {
		t.Fatal(err)
	}
	rule := netlink.NewRule()
	rule.Src, rule.Table, rule.Priority = &net.IPNet{IP: nsLocalPod.AsSlice(), Mask: net.CIDRMask(32, 32)}, 100, 100
	if err := gw.NL.RuleAdd(rule); err != nil {
		t.Fatal(err)
	}

	var from netip.AddrPort
	var got string
	nstest.Eventually(t, "echo through the local port", 10*time.Second, func() bool {
		for len(seen) > 0 {
			<-seen
		}
		err := podNS.Do(func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(nsServer, nsServerPort)))
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Write([]byte("local")); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			if err != nil {
				return err
			}
			got = string(buf[:n])
			return nil
		})
		if err != nil {
			return false
		}
		select {
		case from = <-seen:
		case <-time.After(time.Second):
		}
		return true
	})
	if got != "local" {
		t.Fatalf("echo %q, want %q", got, "local")
	}
	if from.Addr() != nsEgressIP {
		t.Fatalf("server saw source %v, want the egress IP %v", from, nsEgressIP)
	}
	// The local node's frames from the wire (a worker claiming the local
	// VTEP) are refused as from an unknown VTEP.
	eng := <-engines
	before := eng.Stats().Pipeline.Drops[gateway.DropUnknownVTEP]
	spoof := tp.podUDP(t, 40009)
	copy(spoof[26:30], config.LocalVTEP4.AsSlice()) // outer IPv4 source
	spoof[24], spoof[25] = 0, 0
	csum := ipChecksum(spoof[14:34])
	spoof[24], spoof[25] = byte(csum>>8), byte(csum)
	nstest.Eventually(t, "spoofed local-VTEP frame counted as unknown_vtep", 5*time.Second, func() bool {
		if err := tp.raw.Send(spoof); err != nil {
			t.Fatal(err)
		}
		return nstest.Soon(200*time.Millisecond, func() bool { return eng.Stats().Pipeline.Drops[gateway.DropUnknownVTEP] > before })
	})
	// Another gateway's reply to the local pod (here w1 plays it: a tunnel
	// frame from a known node to this node's VTEP, which the XDP program
	// takes) reaches the node's kernel whole, through the local port.
	lhRaw := gw.OpenRaw(t, config.LocalKernelLink)
	reply := tp.podUDP(t, 40010)
	inner := reply[50:]                            // inner Ethernet
	copy(inner[14+12:14+16], nsServer.AsSlice())   // inner source: the server
	copy(inner[14+16:14+20], nsLocalPod.AsSlice()) // inner destination: the local pod
	inner[14+10], inner[14+11] = 0, 0              // inner IPv4 checksum, recomputed
	c := ipChecksum(inner[14 : 14+20])
	inner[14+10], inner[14+11] = byte(c>>8), byte(c)
	nstest.Eventually(t, "remote reply handed to the node's kernel on "+config.LocalKernelLink, 5*time.Second, func() bool {
		if err := tp.raw.Send(reply); err != nil {
			t.Fatal(err)
		}
		for f := lhRaw.Next(200 * time.Millisecond); f != nil; f = lhRaw.Next(50 * time.Millisecond) {
			if len(f) == len(reply) && string(f[12:]) == string(reply[12:]) {
				return true
			}
		}
		return false
	})

	// A stop without hold (an uninstall) takes the port away with it.
	stop()
	if _, err := gw.NL.LinkByName(config.LocalKernelLink); err == nil {
		t.Errorf("%s left after the gateway stopped", config.LocalKernelLink)
	}
}

// ipChecksum is the RFC 1071 checksum of an IPv4 header whose checksum
// field is zero.
func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// startLocalAgent is startAgent with the local port on; the channel gets
// each engine it starts.
func startLocalAgent(t *testing.T, tp *nsTopo, src cluster.Source) (*Agent, <-chan *engine.Engine, func()) {
	engines := make(chan *engine.Engine, 4)
	a := &Agent{Node: "g1", Source: src, FenceAfter: time.Minute, Log: testLog(t),
		Base: config.Spec{Interfaces: []string{"d0"}, Mode: "afxdp", Tunnel: config.TunnelVXLAN, VNI: nsVNI, LocalPort: true},
		StartDataPlane: func(s *config.Settled) (DataPlane, error) {
			e, err := engine.New(s, engine.Options{Logger: testLog(t)})
			if err != nil {
				return nil, err
			}
			e.Start()
			engines <- e
			return e, nil
		}}
	return a, engines, runAgent(t, tp, a, "")
}
