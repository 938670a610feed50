package health

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestServeProbeStopRestart(t *testing.T) {
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	p := NewProber()
	defer p.Close()
	ctx := context.Background()
	if err := p.Probe(ctx, addr, time.Second, nil); err != nil {
		t.Fatalf("probe of a serving node: %v", err)
	}

	s.SetServing(false)
	if err := p.Check(ctx, addr, nil); !errors.Is(err, ErrNotServing) {
		t.Fatalf("check of a NOT_SERVING node: %v", err)
	}
	s.SetServing(true)
	// Opened while s still holds its port: an ephemeral port taken after
	// s stops could be s's own, and the restart below would find it in use.
	ns, err := Listen("127.0.0.1:0", NotServing())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Stop()

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	// Nothing listens any more: the node's kernel refuses the connection,
	// an answer that the agent is not running, so the probe says so at once
	// instead of waiting out its budget (the budget is long here so that
	// waiting it out would show).
	if err := p.Probe(ctx, addr, time.Minute, nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("probe of a stopped server: %v, want %v", err, ErrRefused)
	}
	// NOT_SERVING is an answer too.
	if err := p.Probe(ctx, ns.Addr().String(), time.Minute, nil); !errors.Is(err, ErrNotServing) {
		t.Fatalf("probe of a NOT_SERVING server: %v, want %v", err, ErrNotServing)
	}

	// The node comes back on the same address: the same prober sees it
	// within its reconnect backoff, not minutes later.
	s2, err := Listen(addr)
	if err != nil {
		t.Fatalf("re-listening on %s: %v", addr, err)
	}
	defer s2.Stop()
	if err := p.Probe(ctx, addr, 2*time.Second, nil); err != nil {
		t.Fatalf("probe after restart: %v", err)
	}
}

// A node that answers nothing (a lost packet, a dead host: here a listener
// that accepts and never speaks) is retried for the whole budget and then
// reported unreachable. Only the lower bound is a property of Probe (its
// deadline); how much later a loaded machine returns is not.
func TestProbeSilentNodeUsesItsBudget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	p := NewProber()
	defer p.Close()
	start := time.Now()
	err = p.Probe(context.Background(), ln.Addr().String(), 500*time.Millisecond, nil)
	if err == nil {
		t.Fatal("probe of a silent node succeeded")
	}
	if errors.Is(err, ErrRefused) || errors.Is(err, ErrNotServing) || !strings.Contains(err.Error(), "unreachable within 500ms") {
		t.Errorf("probe of a silent node: %v, want it to give up at its total timeout", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("probe gave up after %v, before its 500ms total timeout", took)
	}
}

func TestProbeBadTargets(t *testing.T) {
	p := NewProber()
	defer p.Close()
	for _, target := range []string{"", "not an address", "127.0.0.1:1", "[::1"} {
		if err := p.Probe(context.Background(), target, 200*time.Millisecond, nil); err == nil {
			t.Errorf("probe of %q succeeded", target)
		}
	}
	if _, err := Listen("256.0.0.1:1"); err == nil {
		t.Error("listening on an invalid address succeeded")
	}
}

// With NotServing the very first check already says NOT_SERVING: there is
// no moment between Listen and SetServing(false) in which a probe passes.
func TestNotServingFromTheStart(t *testing.T) {
	s, err := Listen("127.0.0.1:0", NotServing())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	p := NewProber()
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Check(ctx, s.Addr().String(), nil); !errors.Is(err, ErrNotServing) {
		t.Fatalf("first check = %v, want %v", err, ErrNotServing)
	}
	s.SetServing(true)
	if err := p.Check(ctx, s.Addr().String(), nil); err != nil {
		t.Fatalf("check after SetServing(true): %v", err)
	}
}
