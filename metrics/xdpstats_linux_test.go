package metrics

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/nstest"
)

const xskBuffers = 128 // the smallest pool the port package accepts

// droppingXSK opens a real AF_XDP socket on a veth in a throwaway namespace
// and steers n frames to it while nobody gives the kernel buffers, so the
// kernel drops most of them. It returns the socket's fd and the XDP program
// steering to it; everything is closed by t.Cleanup.
func droppingXSK(t *testing.T, n int) (int, *nic.Interface) {
	t.Helper()
	d0, g0 := nstest.Pair(t, "xd0", netip.MustParsePrefix("10.77.0.1/24"), "xg0", netip.MustParsePrefix("10.77.0.2/24"))
	dut := d0.NS
	raw := g0.NS.OpenRaw(t, "xg0")
	umem, err := nic.NewUmem(xskBuffers, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	egress := netip.MustParseAddr("192.0.2.99")
	var ifc *nic.Interface
	// Only the socket setup runs in the namespace: the test goroutine (and
	// the servers it starts) stay in the host's.
	if err := dut.Do(func() error {
		var err error
		if ifc, err = nic.Open(nic.Config{Interface: "xd0", Pools: []*nic.Pool{umem}}); err != nil {
			return err
		}
		return ifc.Program.AddEgressIP(egress)
	}); err != nil {
		nic.FreeUmem(umem)
		t.Fatal(err)
	}
	t.Cleanup(func() { ifc.Close(); nic.FreeUmem(umem) })
	if ifc.Mode() != "afxdp" {
		t.Fatalf("mode %s, want afxdp (the kernel has XDP on veth)", ifc.Mode())
	}
	x, ok := ifc.Queues[0].(*nic.XSK)
	if !ok {
		t.Fatalf("port is %T, want *nic.XSK", ifc.Queues[0])
	}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{198, 51, 100, 1}, DstIP: egress.AsSlice()}
	udp := &layers.UDP{SrcPort: 53, DstPort: 40000}
	udp.SetNetworkLayerForChecksum(ip)
	frame := serialize(t, &layers.Ethernet{SrcMAC: g0.MAC, DstMAC: d0.MAC, EthernetType: layers.EthernetTypeIPv4},
		ip, udp, gopacket.Payload(make([]byte, 32)))
	for i := 0; i < n; i++ {
		if err := raw.Send(frame); err != nil {
			t.Fatal(err)
		}
	}
	return x.FD(), ifc
}

// Frames steered to a socket that has more frames than buffers and never
// receives are lost, and the loss shows in XDP_STATISTICS as read by
// ReadXDPRingStats.
func TestReadXDPRingStats(t *testing.T) {
	const n = 1024
	fd, ifc := droppingXSK(t, n)
	var st XDPRingStats
	var err error
	nstest.Soon(3*time.Second, func() bool {
		if st, err = ReadXDPRingStats(fd); err != nil {
			t.Fatal(err)
		}
		return st.RxDropped+st.RxRingFull > 0
	})
	t.Logf("after %d frames: %+v", n, st)
	if st.RxDropped+st.RxRingFull == 0 || st.RxDropped+st.RxRingFull > n {
		t.Fatalf("%d frames steered to a socket with %d buffers: XDP_STATISTICS says %+v", n, xskBuffers, st)
	}
	xs, err := ifc.Program.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if xs.Egress < st.RxDropped {
		t.Fatalf("XDP program steered %d frames, fewer than the %d the socket dropped", xs.Egress, st.RxDropped)
	}
}

func TestReadXDPRingStatsNotXSK(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := ReadXDPRingStats(fd); err == nil {
		t.Fatal("XDP statistics read from a UDP socket")
	}
	if _, err := ReadXDPRingStats(-1); err == nil {
		t.Fatal("XDP statistics read from fd -1")
	}
}
