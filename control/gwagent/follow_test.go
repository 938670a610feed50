package gwagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/config"
)

// TestFollowBase: the agent takes the file's static configuration again on
// SIGHUP and when the watch finds the file changed; a file that fails to
// load is read once and keeps the running configuration; the loop ends
// with its context.
func TestFollowBase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("eth0")
	loaded := make(chan string, 16)
	load := func() (*config.Spec, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		loaded <- string(b)
		if strings.HasPrefix(string(b), "bad") {
			return nil, errors.New("broken file")
		}
		return &config.Spec{Interfaces: []string{string(b)}}, nil
	}
	applied := make(chan string, 16)
	a := &Agent{Base: config.Spec{Interfaces: []string{"eth0"}}, Log: testLog(t)}
	w := config.NewWatch(path, []byte("eth0"), 10*time.Millisecond)
	defer w.Stop()
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.FollowBase(ctx, w, hup, load, func(s *config.Spec) { applied <- s.Interfaces[0] })
	}()
	next := func(ch <-chan string, what string) string {
		t.Helper()
		select {
		case s := <-ch:
			return s
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
			return ""
		}
	}

	hup <- os.Interrupt // any value: the command sends SIGHUP
	if s := next(applied, "reload on SIGHUP"); s != "eth0" {
		t.Fatalf("SIGHUP applied %q, want eth0", s)
	}
	next(loaded, "load on SIGHUP")
	write("bad: 1")
	if s := next(loaded, "load of the broken file"); s != "bad: 1" {
		t.Fatalf("loaded %q, want the broken file", s)
	}
	write("eth1")
	if s := next(applied, "reload of the changed file"); s != "eth1" {
		t.Fatalf("applied %q after the broken file and eth1, want eth1 (the broken file must not apply)", s)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("FollowBase still running after its context ended")
	}
	// Read once FollowBase returned: apply runs before the agent records
	// the base, so reading at the apply's signal would race with it.
	if got := a.currentBase().Interfaces; !slices.Equal(got, []string{"eth1"}) {
		t.Fatalf("agent's base interfaces %v, want [eth1]", got)
	}
}
