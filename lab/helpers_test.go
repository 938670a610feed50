package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/packetsock"
	"github.com/egret-gw/egret/internal/testbin"
)

// requireRoot skips without root, except under CI=true where it fails.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the lab tests need root (network namespaces, nftables) and CI=true demands they run")
	}
	t.Skip("needs root: the lab builds network namespaces")
}

// requireTools skips when a command the lab uses is missing, except under
// CI=true where hack/deps.sh must have installed it.
func requireTools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing; hack/deps.sh installs it (CI=true demands the test runs)", n)
			}
			t.Skipf("%s is missing; run hack/deps.sh", n)
		}
	}
}

// egretBinary is cmd/egret, built once per test process.
func egretBinary(t testing.TB) string { return testbin.Build(t, "egret") }

// testLabName is unique per test process ("elt" + kind + pid in base 36)
// so that concurrent test runs on one machine never share a lab.
func testLabName(kind string) string {
	return "elt" + kind + strconv.FormatInt(int64(os.Getpid()), 36)
}

// removeStaleTestLabs downs the labs of test processes that died without
// cleaning up (their pid is in the name).
func removeStaleTestLabs() {
	if os.Geteuid() != 0 {
		return
	}
	ents, _ := os.ReadDir("/run/netns")
	done := map[string]bool{}
	for _, e := range ents {
		name, _, ok := strings.Cut(e.Name(), "-")
		if !ok || done[name] || len(name) < 5 || !strings.HasPrefix(name, "elt") {
			continue
		}
		done[name] = true
		pid, err := strconv.ParseInt(name[4:], 36, 64)
		if err != nil || pid == int64(os.Getpid()) || unix.Kill(int(pid), 0) == nil {
			continue
		}
		Down("", name)
	}
}

func TestMain(m *testing.M) {
	removeStaleTestLabs()
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// upLab builds lab name in mode and removes it when the test ends.
func upLab(t *testing.T, name, mode string) *Lab {
	t.Helper()
	return upLabUnderlay(t, name, mode, UnderlayIPv4)
}

// upLabUnderlay is upLab for the lab variant of underlay (NewSpec).
func upLabUnderlay(t *testing.T, name, mode, underlay string) *Lab {
	t.Helper()
	requireRoot(t)
	requireTools(t, "ip", "bridge", "nft", "ethtool", "sysctl")
	bin := egretBinary(t)
	spec, err := NewSpec(name, underlay)
	if err != nil {
		t.Fatal(err)
	}
	impl, err := NewImpl(mode, bin)
	if err != nil {
		t.Fatal(err)
	}
	l := &Lab{Spec: spec, Impl: impl, Binary: bin}
	start := time.Now()
	if err := l.Up(); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Logf("lab %s (underlay %s) up in %s mode in %v", name, underlay, mode, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(l.RunDir(), "*.log"))
			for _, f := range logs {
				t.Logf("%s:\n%s", filepath.Base(f), tail(f))
			}
		}
		if err := Down("", name); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return l
}

// podClient is an HTTP client whose connections start in namespace ns.
func podClient(ns string) *http.Client {
	return &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return DialContext(ctx, ns, network, addr)
			},
		},
	}
}

// parseSource reads the "<ip>:<port>" line the echo server starts its answers with.
func parseSource(t testing.TB, line string) netip.AddrPort {
	t.Helper()
	line = strings.TrimSpace(strings.SplitN(line, "\n", 2)[0])
	ap, err := netip.ParseAddrPort(strings.Fields(line + " ")[0])
	if err != nil {
		t.Fatalf("echo answer %q does not start with an address: %v", line, err)
	}
	return ap
}

func httpGetSource(t testing.TB, ns string, s *Spec) netip.AddrPort {
	t.Helper()
	resp, err := podClient(ns).Get(fmt.Sprintf("http://%v/", netip.AddrPortFrom(s.Server.IP, HTTPPort)))
	if err != nil {
		t.Fatalf("HTTP from %s: %v", ns, err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatalf("HTTP body from %s: %v", ns, err)
	}
	return parseSource(t, line)
}

// udpEcho sends payload from conn and returns the source the server saw,
// checking the payload came back; it retries lost datagrams.
func udpEcho(t testing.TB, conn net.Conn, payload string) netip.AddrPort {
	t.Helper()
	buf := make([]byte, 2048)
	for try := 0; try < 5; try++ {
		if _, err := conn.Write([]byte(payload)); err != nil {
			t.Fatalf("UDP send: %v", err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			continue
		}
		got := string(buf[:n])
		head, body, _ := strings.Cut(got, "\n")
		if body != payload {
			t.Fatalf("UDP echo payload %q, sent %q", body, payload)
		}
		return parseSource(t, head)
	}
	t.Fatalf("no UDP echo reply for %q after 5 tries", payload)
	return netip.AddrPort{}
}

// icmpEcho builds an ICMPv4 echo request.
func icmpEcho(id, seq uint16, payload []byte) []byte {
	b := make([]byte, 8+len(payload))
	b[0] = 8
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	copy(b[8:], payload)
	binary.BigEndian.PutUint16(b[2:], ^checksum(b))
	return b
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// capture collects every frame arriving on one interface of a namespace
// through an AF_PACKET socket.
type capture struct {
	fd     int
	mu     sync.Mutex
	frames [][]byte
	done   chan struct{}
	stop   chan struct{}
}

func startCapture(t testing.TB, ns, dev string) *capture {
	t.Helper()
	c := &capture{done: make(chan struct{}), stop: make(chan struct{})}
	err := Do(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		c.fd, err = packetsock.Open(unix.SOCK_RAW, unix.ETH_P_ALL)
		if err != nil {
			return err
		}
		return unix.Bind(c.fd, packetsock.Addr(unix.ETH_P_ALL, ifi.Index))
	})
	if err != nil {
		t.Fatalf("capture on %s in %s: %v", dev, ns, err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	go func() {
		defer close(c.done)
		buf := make([]byte, 65536)
		for {
			// Once stopped, the frames already queued on the socket are
			// still read (without waiting): the kernel queued them before
			// whatever the caller checked, and a capture that lost them
			// because this goroutine ran late would miss a frame that came.
			flags := 0
			select {
			case <-c.stop:
				flags = unix.MSG_DONTWAIT
			default:
			}
			n, from, err := unix.Recvfrom(c.fd, buf, flags)
			if err != nil {
				if flags != 0 && err != unix.EINTR {
					return
				}
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			c.mu.Lock()
			c.frames = append(c.frames, append([]byte(nil), buf[:n]...))
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Stop() })
	return c
}

// Stop ends the capture and returns the frames seen.
func (c *capture) Stop() [][]byte {
	select {
	case <-c.stop:
	default:
		close(c.stop)
		<-c.done
		unix.Close(c.fd)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// ipv4 returns the IPv4 packet inside an Ethernet frame, or nil.
func ipv4(frame []byte) []byte {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != unix.ETH_P_IP {
		return nil
	}
	p := frame[14:]
	if p[0]>>4 != 4 || int(p[0]&15)*4 < 20 || len(p) < int(p[0]&15)*4 {
		return nil
	}
	return p
}

func ipSrc(p []byte) netip.Addr { return netip.AddrFrom4([4]byte(p[12:16])) }
func ipDst(p []byte) netip.Addr { return netip.AddrFrom4([4]byte(p[16:20])) }
func ipL4(p []byte) []byte      { return p[int(p[0]&15)*4:] }

// waitPort waits until a TCP port answers from inside ns.
func waitPort(t testing.TB, ns, addr string) {
	t.Helper()
	nstest.UntilEvery(t, addr+" answering in "+ns, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		c, err := DialContext(ctx, ns, "tcp", addr)
		cancel()
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

// gone reports whether process pid has exited and been reaped.
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return errors.Is(err, os.ErrNotExist)
}

// countCalls counts action among the calls a fake cloud API received.
func countCalls(calls []string, action string) int {
	n := 0
	for _, c := range calls {
		if c == action {
			n++
		}
	}
	return n
}
