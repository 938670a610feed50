package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestConfigWatchChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &gatewayFlags{config: path, watch: time.Hour}
	w := f.watchConfig([]byte("a: 1\n"))
	defer w.stop()
	if w.tick == nil {
		t.Fatal("a watched file must have a ticking channel")
	}
	if w.changed() {
		t.Fatal("unchanged file reported as changed")
	}
	if err := os.WriteFile(path, []byte("a: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !w.changed() {
		t.Fatal("changed file not reported")
	}
	if w.changed() {
		t.Fatal("the same change reported twice")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if w.changed() {
		t.Fatal("an unreadable file must not count as a change")
	}

	off := (&gatewayFlags{config: path, watch: 0}).watchConfig(nil)
	defer off.stop()
	if off.tick != nil {
		t.Fatal("--watch 0 must not tick")
	}
}

func TestReloaderKeepsRunningConfigOnError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got []string
	loadErr := errors.New("broken")
	next := 0
	load := func() (int, []byte, error) {
		if next < 0 {
			return 0, nil, loadErr
		}
		return next, nil, nil
	}
	reload := reloader(log, load, func(c int, why string) { got = append(got, why+":"+string(rune('0'+c))) })
	next = 3
	reload("SIGHUP")
	next = -1
	reload("config file changed")
	next = 5
	reload("config file changed")
	want := []string{"SIGHUP:3", "config file changed:5"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("applied %q, want %q", got, want)
	}
}
