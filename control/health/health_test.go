package health

import (
	"context"
	"errors"
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
	if err := p.Probe(ctx, addr, time.Second); err != nil {
		t.Fatalf("probe of a serving node: %v", err)
	}

	s.SetServing(false)
	if err := p.Check(ctx, addr); !errors.Is(err, ErrNotServing) {
		t.Fatalf("check of a NOT_SERVING node: %v", err)
	}
	s.SetServing(true)

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	// The probe retries for its whole budget and then reports the node
	// unreachable. Only the lower bound is a property of Probe (its
	// deadline); how much later a loaded machine returns is not.
	start := time.Now()
	err = p.Probe(ctx, addr, 500*time.Millisecond)
	if err == nil {
		t.Fatal("probe of a stopped server succeeded")
	}
	if !strings.Contains(err.Error(), "unreachable within 500ms") {
		t.Errorf("probe of a stopped server: %v, want it to give up at its total timeout", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("probe gave up after %v, before its 500ms total timeout", took)
	}

	// The node comes back on the same address: the same prober sees it
	// within its reconnect backoff, not minutes later.
	s2, err := Listen(addr)
	if err != nil {
		t.Fatalf("re-listening on %s: %v", addr, err)
	}
	defer s2.Stop()
	if err := p.Probe(ctx, addr, 2*time.Second); err != nil {
		t.Fatalf("probe after restart: %v", err)
	}
}

func TestProbeBadTargets(t *testing.T) {
	p := NewProber()
	defer p.Close()
	for _, target := range []string{"", "not an address", "127.0.0.1:1", "[::1"} {
		if err := p.Probe(context.Background(), target, 200*time.Millisecond); err == nil {
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
	if err := p.Check(ctx, s.Addr().String()); !errors.Is(err, ErrNotServing) {
		t.Fatalf("first check = %v, want %v", err, ErrNotServing)
	}
	s.SetServing(true)
	if err := p.Check(ctx, s.Addr().String()); err != nil {
		t.Fatalf("check after SetServing(true): %v", err)
	}
}
