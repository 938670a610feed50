package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatchChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := NewWatch(path, []byte("a: 1\n"), time.Hour)
	defer w.Stop()
	if w.C == nil {
		t.Fatal("a watched file must have a ticking channel")
	}
	if w.Changed() {
		t.Fatal("unchanged file reported as changed")
	}
	if err := os.WriteFile(path, []byte("a: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !w.Changed() {
		t.Fatal("changed file not reported")
	}
	if w.Changed() {
		t.Fatal("the same change reported twice")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if w.Changed() {
		t.Fatal("an unreadable file must not count as a change")
	}

	off := NewWatch(path, nil, 0)
	defer off.Stop()
	if off.C != nil {
		t.Fatal("--watch 0 must not tick")
	}
	if none := NewWatch("", nil, time.Second); none.C != nil {
		t.Fatal("no file must not tick")
	}
}
