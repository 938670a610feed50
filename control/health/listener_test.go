package health

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// TestConnectionCap holds MaxConns connections open to a real health
// server: the next one is closed at once and counted, and once a slot is
// free a probe gets through again.
func TestConnectionCap(t *testing.T) {
	s, err := Listen("127.0.0.1:0", MaxConns(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	addr := s.Addr().String()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
		t.Fatalf("the connection over the cap read %d bytes, %v; want it closed", n, err)
	}
	if got := s.Refused(); got != 1 {
		t.Errorf("Refused() = %d, want 1", got)
	}
	// The held connections are within the cap: the server keeps them
	// (it waits for their HTTP/2 preface).
	held[0].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := held[0].Read(make([]byte, 1)); err == io.EOF {
		t.Error("a connection within the cap was closed")
	}

	held[0].Close()
	held[1].Close()
	p := NewProber()
	defer p.Close()
	if err := p.Probe(context.Background(), addr, 5*time.Second, nil); err != nil {
		t.Errorf("probe once the held connections closed: %v", err)
	}
}

// isReset reports a connection reset: a close with unread data may send RST.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// attack opens n connections from the source address src to addr, each
// sending what send holds (nothing: idle), and closes them at the test's end.
func attack(t *testing.T, src, addr string, n int, send []byte) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("attacker connection: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		if len(send) > 0 {
			c.Write(send)
		}
	}
}

// TestHostileClients holds 150 connections from one source (127.0.0.2:
// the whole of 127/8 is this host's) to a real health server with its
// default caps, half idle and half having sent only the start of an HTTP/2
// preface: the controller's probe from another address still gets its
// answer, and what was refused is counted. Without the per-source cap the
// attacker took every slot and the probe failed.
func TestHostileClients(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	addr := s.Addr().String()
	attack(t, "127.0.0.2", addr, 75, nil)
	attack(t, "127.0.0.2", addr, 75, []byte("PRI * HTTP/2.0\r\n"))
	p := NewProber()
	defer p.Close()
	if err := p.Probe(context.Background(), addr, 5*time.Second, nil); err != nil {
		t.Fatalf("the controller's probe under attack: %v", err)
	}
	// Every attacker connection beyond the per-source cap was refused; the
	// refusals may still be under way while the probe answered.
	want := uint64(150 - DefaultMaxPerSource)
	nstest.Soon(10*time.Second, func() bool { return s.Refused() >= want })
	if got := s.Refused(); got < want {
		t.Errorf("Refused() = %d, want at least %d", got, want)
	}
}

// TestHandshakeTimeout: a connection that never finishes its HTTP/2
// handshake is closed after HandshakeTimeout, giving its slot back
// (gRPC's own default waits two minutes).
func TestHandshakeTimeout(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(HandshakeTimeout + 20*time.Second))
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			if err != io.EOF && !isReset(err) {
				t.Fatalf("the idle connection was not closed by the server: %v", err)
			}
			return
		}
	}
}

// TestCapRefusalIsNotDown: a probe that finds the listener full (its
// connections accepted, then closed) is not ErrRefused nor ErrNotServing,
// which would fail the node at once: only its budget runs out.
func TestCapRefusalIsNotDown(t *testing.T) {
	s, err := Listen("127.0.0.1:0", MaxConns(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	attack(t, "127.0.0.2", s.Addr().String(), 2, nil)
	p := NewProber()
	defer p.Close()
	err = p.Probe(context.Background(), s.Addr().String(), 500*time.Millisecond, nil)
	if err == nil || errors.Is(err, ErrRefused) || errors.Is(err, ErrNotServing) {
		t.Fatalf("probe of a full listener: %v; want a plain unreachable error", err)
	}
	if s.Refused() == 0 {
		t.Error("the probe's connections were not refused by the cap")
	}
}
