package nstest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/packetsock"
)

// Raw is an AF_PACKET socket on one interface of a test namespace, to send
// hand-made frames and capture what arrives.
type Raw struct {
	fd      int
	ifindex int
}

// OpenRaw opens a raw socket on interface name in ns; closed by t.Cleanup.
func (ns *NS) OpenRaw(t testing.TB, name string) *Raw {
	t.Helper()
	var r *Raw
	err := ns.Do(func() error {
		l, err := ns.NL.LinkByName(name)
		if err != nil {
			return err
		}
		fd, err := packetsock.Open(unix.SOCK_RAW, unix.ETH_P_ALL)
		if err != nil {
			return err
		}
		r = &Raw{fd: fd, ifindex: l.Attrs().Index}
		return unix.Bind(fd, packetsock.Addr(unix.ETH_P_ALL, r.ifindex))
	})
	if err != nil {
		t.Fatalf("raw socket on %s: %v", name, err)
	}
	t.Cleanup(func() { unix.Close(r.fd) })
	return r
}

// Send transmits one whole Ethernet frame.
func (r *Raw) Send(frame []byte) error {
	return unix.Sendto(r.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: r.ifindex})
}

// Next returns the next frame received (not sent) on the interface, or nil
// when nothing arrives within timeout.
func (r *Raw) Next(timeout time.Duration) []byte {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 9000)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		unix.SetsockoptTimeval(r.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, from, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return nil
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return append([]byte(nil), buf[:n]...)
	}
}
