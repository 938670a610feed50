package health

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
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
	if err := p.Probe(context.Background(), addr, 5*time.Second); err != nil {
		t.Errorf("probe once the held connections closed: %v", err)
	}
}

// isReset reports a connection reset: a close with unread data may send RST.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
