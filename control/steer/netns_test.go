package steer

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/nsenter"
	"github.com/egret-gw/egret/internal/packetsock"
)

// requirePrivileged skips outside CI when the test cannot build namespaces,
// and fails under CI=true: everything it needs can be installed.
func requirePrivileged(t testing.TB) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "iproute2 (ip)")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("privileged test needs %s (CI=true: install it)", strings.Join(missing, ", "))
	}
	t.Skipf("privileged test needs %s", strings.Join(missing, ", "))
}

func sh(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ipb runs `ip -n ns -batch -` with the given lines.
func ipb(t testing.TB, ns string, lines ...string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s -batch: %v: %s\n%s", ns, err, out, strings.Join(lines, "\n"))
	}
}

var nsSeq int

// newNS creates a uniquely named network namespace removed at cleanup.
func newNS(t testing.TB, role string) (string, netns.NsHandle) {
	t.Helper()
	nsSeq++
	name := fmt.Sprintf("est%d%d-%s", os.Getpid()%100000, nsSeq, role)
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	ipb(t, name, "link set lo up")
	return name, h
}

// frame is what the test needs to know of a captured frame.
type frame struct {
	src, dst         netip.Addr
	proto            uint8
	sport, dport     uint16
	vxlan            bool
	vni              uint32
	innerDstMAC      [6]byte
	innerSrc, inDst  netip.Addr
	inSport, inDport uint16
}

func parseIP(b []byte, et uint16) (src, dst netip.Addr, proto uint8, l4 []byte, ok bool) {
	switch et {
	case 0x0800:
		if len(b) < 20 {
			return
		}
		ihl := int(b[0]&0xf) * 4
		if len(b) < ihl {
			return
		}
		return netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20])), b[9], b[ihl:], true
	case 0x86dd:
		if len(b) < 40 {
			return
		}
		return netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), b[6], b[40:], true
	}
	return
}

func parseFrame(b []byte) (frame, bool) {
	var f frame
	if len(b) < 14 {
		return f, false
	}
	src, dst, proto, l4, ok := parseIP(b[14:], binary.BigEndian.Uint16(b[12:]))
	if !ok {
		return f, false
	}
	f.src, f.dst, f.proto = src, dst, proto
	if (proto == unix.IPPROTO_UDP || proto == unix.IPPROTO_TCP) && len(l4) >= 4 {
		f.sport, f.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	}
	if proto == unix.IPPROTO_UDP && f.dport == DefaultPort && len(l4) >= 8+8+14 {
		vx := l4[8:]
		f.vxlan = true
		f.vni = uint32(vx[4])<<16 | uint32(vx[5])<<8 | uint32(vx[6])
		eth := vx[8:]
		copy(f.innerDstMAC[:], eth[:6])
		is, id, ip, il4, ok := parseIP(eth[14:], binary.BigEndian.Uint16(eth[12:]))
		if ok {
			f.innerSrc, f.inDst = is, id
			if (ip == unix.IPPROTO_UDP || ip == unix.IPPROTO_TCP) && len(il4) >= 4 {
				f.inSport, f.inDport = binary.BigEndian.Uint16(il4), binary.BigEndian.Uint16(il4[2:])
			}
		}
	}
	return f, true
}

// capturer records every frame seen on one interface of a namespace. The
// frames wait on its socket, whose buffer holds far more than a test sends
// between two takes, until take reads them: no reader that could run late.
type capturer struct {
	t      testing.TB
	ifname string
	fd     int
}

// captureBuffer is the capture socket's receive buffer (SO_RCVBUFFORCE):
// a few thousand frames of the size the tests send.
const captureBuffer = 16 << 20

func capture(t *testing.T, ns netns.NsHandle, ifname string) *capturer {
	t.Helper()
	c := &capturer{t: t, ifname: ifname, fd: -1}
	err := nsenter.Do(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := packetsock.Open(unix.SOCK_RAW, unix.ETH_P_ALL)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, captureBuffer); err != nil {
			unix.Close(fd)
			return fmt.Errorf("SO_RCVBUFFORCE: %w", err)
		}
		if err := unix.Bind(fd, packetsock.Addr(unix.ETH_P_ALL, ifi.Index)); err != nil {
			unix.Close(fd)
			return err
		}
		c.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("capture on %s: %v", ifname, err)
	}
	t.Cleanup(func() { c.stop() })
	return c
}

// take returns the frames seen since the capture began or the last take.
// It waits a moment for frames the kernel still has in flight, then reads
// every frame queued on the socket without waiting; a frame the socket had
// to drop (its buffer full) fails the test, since the count would be wrong.
func (c *capturer) take() []frame {
	c.t.Helper()
	// sleep: frames the kernel still has in flight raise no event, and a dropped one never arrives to be waited for
	time.Sleep(150 * time.Millisecond)
	var out []frame
	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			c.t.Errorf("capture on %s: %v", c.ifname, err)
			break
		}
		if f, ok := parseFrame(buf[:n]); ok {
			out = append(out, f)
		}
	}
	// Reading the statistics resets them: each take reports its own drops.
	if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err != nil {
		c.t.Errorf("capture on %s: reading its statistics: %v", c.ifname, err)
	} else if st.Drops > 0 {
		c.t.Errorf("capture on %s dropped %d frames (socket buffer full): the frames taken are incomplete", c.ifname, st.Drops)
	}
	return out
}

func (c *capturer) stop() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// writeUDP sends payload n times from src (the zero AddrPort: any) to dst,
// in the calling thread's namespace.
func writeUDP(src, dst netip.AddrPort, payload []byte, n int) error {
	var laddr *net.UDPAddr
	if src.IsValid() {
		laddr = net.UDPAddrFromAddrPort(src)
	}
	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return err
	}
	defer c.Close()
	// Write errors are ignored: an ICMP error for an earlier datagram fails
	// a later write on a connected socket, and the tests count what arrives.
	for range n {
		c.Write(payload)
	}
	return nil
}

// sendUDP sends two datagrams from each source port in ports, from inside ns.
func sendUDP(t *testing.T, ns netns.NsHandle, src, dst netip.Addr, ports []uint16) {
	t.Helper()
	err := nsenter.Do(ns, func() error {
		for _, p := range ports {
			if err := writeUDP(netip.AddrPortFrom(src, p), netip.AddrPortFrom(dst, 9999), []byte("egret steer test"), 2); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send UDP %v → %v: %v", src, dst, err)
	}
}

// sendTCP starts n connections (their SYNs are enough) from inside ns.
func sendTCP(t *testing.T, ns netns.NsHandle, dst netip.Addr, n int) {
	t.Helper()
	err := nsenter.Do(ns, func() error {
		for range n {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dst, 443).String(), 30*time.Millisecond)
			if err == nil {
				c.Close()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send TCP: %v", err)
	}
}
