package cni

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requireRoot skips privileged tests for non-root users, except under CI where they must run.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("privileged test needs root (CI=true)")
	}
	t.Skip("privileged test: run as root")
}

// testNS is a throwaway named network namespace.
type testNS struct {
	Name string
	Path string
	H    netns.NsHandle
	NL   *netlink.Handle
}

func newNS(t *testing.T, role string) *testNS {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "egrt-" + role + "-" + hex.EncodeToString(rnd[:])
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	h, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		// This thread is in the wrong namespace now: keep it locked so the runtime drops it.
		t.Fatalf("returning to the original namespace: %v", serr)
	}
	orig.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatalf("creating netns %s: %v", name, err)
	}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	n := &testNS{Name: name, Path: "/var/run/netns/" + name, H: h, NL: nl}
	t.Cleanup(func() {
		nl.Close()
		h.Close()
		_ = netns.DeleteNamed(name)
	})
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("lo up in %s: %v", name, err)
	}
	return n
}

// Do runs f on a thread inside the namespace (sockets made there belong to it, and
// child processes started there inherit it).
func (n *testNS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(n.H); err != nil {
			errc <- err
			return
		}
		err = f()
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, serr) // thread stays locked and dies with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

func (n *testNS) addr(t *testing.T, link string, cidrs ...string) {
	t.Helper()
	l, err := n.NL.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cidrs {
		p := netip.MustParsePrefix(c)
		a := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := n.NL.AddrAdd(l, a); err != nil {
			t.Fatalf("%s: adding %s to %s: %v", n.Name, c, link, err)
		}
	}
	if err := n.NL.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
}

func (n *testNS) defaultVia(t *testing.T, link string, gws ...string) {
	t.Helper()
	l, err := n.NL.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		a := netip.MustParseAddr(g)
		if err := n.NL.RouteAdd(&netlink.Route{Dst: defaultDst(familyOf(a)), Gw: a.AsSlice(), LinkIndex: l.Attrs().Index}); err != nil {
			t.Fatalf("%s: default via %s: %v", n.Name, g, err)
		}
	}
}

// veth links a in x with b in y.
func veth(t *testing.T, x *testNS, a string, y *testNS, b string) {
	t.Helper()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = a
	v := &netlink.Veth{LinkAttrs: attrs, PeerName: b, PeerNamespace: netlink.NsFd(int(y.H))}
	if err := x.NL.LinkAdd(v); err != nil {
		t.Fatalf("veth %s/%s: %v", a, b, err)
	}
}

// lab is the node, the pod on it, and the outside network behind the node's ext0.
type lab struct {
	Node, Pod, Out *testNS
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
	l := &lab{Node: newNS(t, "node"), Pod: newNS(t, "pod"), Out: newNS(t, "out")}
	veth(t, l.Node, "ext0", l.Out, "ext0p")
	l.Node.addr(t, "ext0", nodeExt4+"/24", nodeExt6+"/64")
	l.Out.addr(t, "ext0p", outGW4+"/24", outGW6+"/64")
	l.Out.addr(t, "lo", allowed4+"/32", denied4+"/32", allowed6+"/128", denied6+"/128")
	l.Node.defaultVia(t, "ext0", outGW4, outGW6)

	veth(t, l.Pod, "eth0", l.Node, "vpod0")
	l.Pod.addr(t, "eth0", podNet4+"/24", podNet6+"/64")
	l.Node.addr(t, "vpod0", podGW4+"/24", podGW6+"/64")
	if podDefault {
		l.Pod.defaultVia(t, "eth0", podGW4, podGW6)
	}
	return l
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// pluginDir builds cmd/egress-router once and installs it under both type names.
func pluginDir(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "egress-router-bin-")
		if buildErr != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(goBin, "build", "-o", filepath.Join(binDir, TypeEgressRouter), "../cmd/egress-router").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building the plugin: %v\n%s", err, out)
			return
		}
		buildErr = os.Symlink(TypeEgressRouter, filepath.Join(binDir, TypeOpenshiftEgress))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
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

func newSniffer(t *testing.T, n *testNS, link string) *sniffer {
	t.Helper()
	l, err := n.NL.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	if err := n.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.Attrs().Index})
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

func routesOf(t *testing.T, n *testNS, family int) []string {
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
