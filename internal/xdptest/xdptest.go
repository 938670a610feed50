// Package xdptest reads, for tests, what the XDP loader (gateway/xdp,
// pin.go) pins for an interface, in the directory xdp.PinDir names: the
// link and the counters map. It opens the pins as any bpffs reader would,
// not through the loader's code, so a test states independently what is
// attached and what it counted.
package xdptest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// statHeld is STAT_HELD in egret.c: frames dropped while a restart holds
// the interface.
const statHeld = 4

// LinkID is the ID of the link pinned in dir, 0 if none is.
func LinkID(t testing.TB, dir string) link.ID {
	t.Helper()
	lk, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	info, err := lk.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// Held is the held-drop counter of the counters pinned in dir, summed over
// the CPUs.
func Held(t testing.TB, dir string) uint64 {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "stats"), nil)
	if err != nil {
		t.Fatalf("pinned counters: %v", err)
	}
	defer m.Close()
	var per []uint64
	if err := m.Lookup(uint32(statHeld), &per); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}
