package cni

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/packetsock"
	"github.com/egret-gw/egret/internal/testbin"

	"golang.org/x/sys/unix"
)

// lab is the node, the pod on it, and the outside network behind the node's ext0.
type lab struct {
	Node, Pod, Out *nstest.NS
}

// Addresses of the lab.
const (
	nodeExt4, nodeExt6 = "192.0.2.2", "2001:db8:2::2"
	outGW4, outGW6     = "192.0.2.1", "2001:db8:2::1"
	podNet4, podNet6   = "10.128.0.5", "fd00:10::5"
	podGW4, podGW6     = "10.128.0.1", "fd00:10::1"
	allowed4, denied4  = "198.51.100.10", "198.51.100.20"
	allowed6, denied6  = "2001:db8:99::10", "2001:db8:99::20"
	egress4, egress6   = "192.0.2.99", "2001:db8:2::99"
)

func newLab(t *testing.T, podDefault bool) *lab {
	t.Helper()
	ext, extp := nstest.Pair(t, "ext0", prefix(nodeExt4+"/24"), "ext0p", prefix(outGW4+"/24"))
	l := &lab{Node: ext.NS, Pod: nstest.Named(t), Out: extp.NS}
	l.Node.AddAddr(t, "ext0", prefix(nodeExt6+"/64"))
	l.Out.AddAddr(t, "ext0p", prefix(outGW6+"/64"))
	l.Out.AddAddr(t, "lo", prefix(allowed4+"/32"), prefix(denied4+"/32"), prefix(allowed6+"/128"), prefix(denied6+"/128"))
	l.Node.DefaultVia(t, "ext0", addr(outGW4), addr(outGW6))

	nstest.VethPair(t, l.Pod, "eth0", prefix(podNet4+"/24"), l.Node, "vpod0", prefix(podGW4+"/24"))
	l.Pod.AddAddr(t, "eth0", prefix(podNet6+"/64"))
	l.Node.AddAddr(t, "vpod0", prefix(podGW6+"/64"))
	if podDefault {
		l.Pod.DefaultVia(t, "eth0", addr(podGW4), addr(podGW6))
	}
	return l
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// pluginDir installs cmd/egress-router (built once) under both type names.
func pluginDir(t *testing.T) string {
	t.Helper()
	bin := testbin.Build(t, "egress-router")
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "egress-router-bin-")
		if buildErr != nil {
			return
		}
		// A hard link, not a symlink: the plugin finds its settings next to
		// the file it runs from.
		if buildErr = os.Link(bin, filepath.Join(binDir, TypeEgressRouter)); buildErr != nil {
			return
		}
		if buildErr = os.Symlink(TypeEgressRouter, filepath.Join(binDir, TypeOpenshiftEgress)); buildErr != nil {
			return
		}
		// The lab's master is a veth, which only the node's settings can allow.
		buildErr = os.WriteFile(filepath.Join(binDir, HostConfigName), []byte(labHostConfig), 0o644)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// labHostConfig is the node-side settings file of the shared plugin directory:
// a veth master, and every network open to every namespace, since the lab
// runs the plugin both for pods of ns1 and, as cnitool does, for none
// (TestNetworkNamespaces and TestDistrustedConfig bind namespaces).
const labHostConfig = `{"allowMasterTypes":["veth"],"networkNamespaces":{"*":["*"]}}`

// pluginDirWith is a plugin directory of its own with the given node-side settings
// (none when hostConfig is empty): a hard link of the built binary, which finds its
// settings next to itself.
func pluginDirWith(t *testing.T, hostConfig string) string {
	t.Helper()
	src := pluginDir(t)
	dir := t.TempDir()
	if err := os.Link(filepath.Join(src, TypeEgressRouter), filepath.Join(dir, TypeEgressRouter)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(TypeEgressRouter, filepath.Join(dir, TypeOpenshiftEgress)); err != nil {
		t.Fatal(err)
	}
	if hostConfig != "" {
		if err := os.WriteFile(filepath.Join(dir, HostConfigName), []byte(hostConfig), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	testbin.Remove()
	os.Exit(code)
}

// udpProbe sends datagrams from the pod to target every 250ms and reports whether the
// outside network received one within wait, and from which source address. Positive
// checks use a long wait (a loaded machine can delay neighbour discovery); negative
// ones run after a positive probe on the same path, so the next hop is resolved and a
// leak would show at once.
func udpProbe(t *testing.T, l *lab, target string, wait time.Duration) (netip.Addr, bool) {
	t.Helper()
	dst := netip.AddrPortFrom(netip.MustParseAddr(target), 9999)
	var conn *net.UDPConn
	if err := l.Out.Do(func() (err error) {
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatalf("listening on %s: %v", dst, err)
	}
	defer conn.Close()
	var c *net.UDPConn
	if err := l.Pod.Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatalf("socket to %s in the pod: %v", dst, err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for end := time.Now().Add(wait); time.Now().Before(end); {
		_, _ = c.Write([]byte("egress-router probe")) // a filtered send may report EPERM
		_ = conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		if _, from, err := conn.ReadFromUDPAddrPort(buf); err == nil {
			return from.Addr().Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// Waits of udpProbe.
const (
	reachable   = 5 * time.Second
	unreachable = 750 * time.Millisecond
)

// sniffer captures frames on an interface of a namespace.
type sniffer struct{ fd int }

func newSniffer(t *testing.T, n *nstest.NS, link string) *sniffer {
	t.Helper()
	l, err := n.NL.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	if err := n.Do(func() (err error) {
		fd, err = packetsock.Open(unix.SOCK_RAW, unix.ETH_P_ALL)
		if err != nil {
			return err
		}
		return unix.Bind(fd, packetsock.Addr(unix.ETH_P_ALL, l.Attrs().Index))
	}); err != nil {
		t.Fatal(err)
	}
	s := &sniffer{fd: fd}
	t.Cleanup(func() { unix.Close(fd) })
	return s
}

// frames returns what arrived within d.
func (s *sniffer) frames(d time.Duration) [][]byte {
	var out [][]byte
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	_ = unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		b := make([]byte, 2048)
		n, _, err := unix.Recvfrom(s.fd, b, 0)
		if err != nil {
			continue
		}
		out = append(out, b[:n])
	}
	return out
}

func hasGARP(frames [][]byte, ip netip.Addr) bool {
	a := ip.As4()
	for _, f := range frames {
		if len(f) >= 42 && f[12] == 0x08 && f[13] == 0x06 && string(f[28:32]) == string(a[:]) && string(f[38:42]) == string(a[:]) {
			return true
		}
	}
	return false
}

func hasNA(frames [][]byte, ip netip.Addr) bool {
	a := ip.As16()
	for _, f := range frames {
		// Ethernet(14) + IPv6(40): next header ICMPv6, hop limit 255, type 136, target.
		if len(f) >= 14+40+24 && f[12] == 0x86 && f[13] == 0xdd && f[14+6] == 58 && f[14+7] == 255 &&
			f[54] == 136 && string(f[62:78]) == string(a[:]) {
			return true
		}
	}
	return false
}

func routesOf(t *testing.T, n *nstest.NS, family int) []string {
	t.Helper()
	rs, err := n.NL.RouteList(nil, family)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		name := "?"
		if l, err := n.NL.LinkByIndex(r.LinkIndex); err == nil {
			name = l.Attrs().Name
		}
		dst := "default"
		if !isDefault(r) {
			dst = r.Dst.String()
		}
		s := dst
		if r.Gw != nil {
			s += " via " + r.Gw.String()
		}
		out = append(out, s+" dev "+name)
	}
	return out
}

func hasRoute(routes []string, want string) bool {
	for _, r := range routes {
		if r == want {
			return true
		}
	}
	return false
}

func joinLines(s []string) string { return "\n  " + strings.Join(s, "\n  ") }
