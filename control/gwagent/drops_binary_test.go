package gwagent

import (
	"bufio"
	"encoding/json"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/internal/nstest"
)

// nsDenied is a destination on every gateway's deny-list (the metadata
// address).
var nsDenied = netip.MustParseAddr("169.254.169.254")

// podTo is a VXLAN frame from w1 carrying UDP from the pod (port sport) to
// dst port 53.
func (tp *nsTopo) podTo(t *testing.T, dst netip.Addr, sport uint16) []byte {
	ieth := &layers.Ethernet{SrcMAC: nsNodeMAC, DstMAC: net.HardwareAddr{2, 0x65, 10, 78, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
	iip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: nsPod.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
	iudp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 53}
	iudp.SetNetworkLayerForChecksum(iip)
	inner := serialize(t, ieth, iip, iudp, gopacket.Payload("query"))
	eth := &layers.Ethernet{SrcMAC: tp.p0.MAC, DstMAC: tp.d0.MAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: nsPeerPrefix.Addr().AsSlice(), DstIP: nsGwPrefix.Addr().AsSlice()}
	udp := &layers.UDP{SrcPort: 50123, DstPort: 4789}
	udp.SetNetworkLayerForChecksum(ip)
	return serialize(t, eth, ip, udp, &layers.VXLAN{ValidIDFlag: true, VNI: nsVNI}, gopacket.Payload(inner))
}

// TestFlowsDropsBinary runs `egret gateway` in agent mode (file source)
// with a flows socket, and `egret flows --drops -o json` against it: a
// packet of a selected pod to a denied destination shows up with its
// reason, headers, tunnel and pod.
func TestFlowsDropsBinary(t *testing.T) {
	tp, _ := newNsTopo(t)
	bin := buildEgret(t)
	dir, objs, cfg := agentFiles(t, "g1", "metricsAddr: \"off\"\n")
	sock := filepath.Join(dir, "flows.sock")
	var log syncBuf
	gw := exec.Command("ip", "netns", "exec", tp.gw.Name, bin, "gateway", "--config", cfg, "--source", "dir:"+objs,
		"--node", "g1", "--health-addr", "", "--flows-socket", sock)
	gw.Stdout, gw.Stderr = &log, &log
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gw.Process.Kill()
		gw.Wait()
		if t.Failed() {
			t.Logf("egret gateway log:\n%s", log.String())
		}
	})
	nstest.Eventually(t, "agent running", 15*time.Second, func() bool { return strings.Contains(log.String(), "gateway: running") })

	flows := exec.Command(bin, "flows", "--drops", "--socket", sock, "--rate", "100/s", "-o", "json")
	out, err := flows.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var flowsErr syncBuf
	flows.Stderr = &flowsErr
	if err := flows.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flows.Process.Kill(); flows.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	// Sent until the stream has subscribed and shows one.
	frame := tp.podTo(t, nsDenied, 40123)
	var line string
	if !nstest.Poll(10*time.Second, 100*time.Millisecond, func() bool {
		if err := tp.raw.Send(frame); err != nil {
			t.Fatal(err)
		}
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("egret flows --drops ended: %s", flowsErr.String())
			}
			line = l
			return true
		default:
			return false
		}
	}) {
		t.Fatalf("no drop sample streamed; egret flows said %q", flowsErr.String())
	}
	var e struct {
		Time     time.Time `json:"time"`
		Reason   string    `json:"reason"`
		Proto    string    `json:"proto"`
		Src, Dst string
		Tunnel   string     `json:"tunnel"`
		VTEP     netip.Addr `json:"vtep"`
		VNI      uint32     `json:"vni"`
		Len      int        `json:"len"`
		Pod      string     `json:"pod"`
	}
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if e.Reason != "denied_destination" || e.Proto != "udp" || e.Src != "10.244.1.5:40123" || e.Dst != "169.254.169.254:53" ||
		e.Tunnel != "vxlan" || e.VTEP != nsPeerPrefix.Addr() || e.VNI != nsVNI || e.Len != len(frame) || e.Pod != "shop/web" ||
		time.Since(e.Time) > time.Minute {
		t.Errorf("sample %s\nwant denied_destination udp 10.244.1.5:40123 → 169.254.169.254:53, vxlan from %v vni %d, len %d, pod shop/web",
			line, nsPeerPrefix.Addr(), nsVNI, len(frame))
	}
}
