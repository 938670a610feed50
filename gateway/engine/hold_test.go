package engine_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/xdp"
)

// pinDir is where the XDP loader pins d0's link and counters.
func (tp *topo) pinDir(t *testing.T) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(tp.gw.Handle), &st); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(xdp.DefaultPinDir, fmt.Sprintf("ns%d-if%d", st.Ino, tp.d0.Index))
}

// pinnedLink is the ID of d0's pinned link, 0 if none.
func pinnedLink(t *testing.T, dir string) link.ID {
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

// heldDrops reads the held-drop counter (STAT_HELD) the pinned program
// keeps.
func heldDrops(t *testing.T, dir string) uint64 {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "stats"), nil)
	if err != nil {
		t.Fatalf("pinned counters: %v", err)
	}
	defer m.Close()
	var per []uint64
	if err := m.Lookup(uint32(4), &per); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// TestGracefulStopHoldsXDP is the engine's side of a graceful restart with
// the egress IP on d0 (egressIPsClaimed: the kernel carries it and would
// answer a SYN with an RST). Closed with CloseHeld, the engine leaves its XDP
// program attached, and a SYN to the egress IP in the gap is dropped in
// XDP (counted), not answered by the kernel; the next engine takes the
// same link over and forwards; a final Close leaves no program and no pin.
func TestGracefulStopHoldsXDP(t *testing.T) {
	tp := newTopo(t)
	tp.startServer(t)
	tp.gw.AddAddr(t, "d0", netip.PrefixFrom(egressIP, 32))
	cfg := tp.config()
	cfg.EgressIPsClaimed = true
	syn := tp.probes(t, 2222)[1]
	dir := tp.pinDir(t)
	if !tp.answered(t, syn, 2*time.Second) {
		t.Fatal("without Egret the kernel does not answer the SYN: the probe proves nothing")
	}

	first := startEngine(t, tp, cfg, defaultOptions())
	if _, reply := tp.udpRoundTrip(t, 42100, "before the restart", 20); reply == nil {
		t.Fatal("no round trip through the first engine")
	}
	id := pinnedLink(t, dir)
	if err := first.CloseHeld(time.Minute); err != nil {
		t.Fatal(err)
	}
	if !tp.xdpAttached(t) || pinnedLink(t, dir) != id || id == 0 {
		t.Fatalf("after a held Close: attached %v, pinned link %d (was %d): want the program left in place", tp.xdpAttached(t), pinnedLink(t, dir), id)
	}
	before := heldDrops(t, dir)
	if tp.answered(t, syn, time.Second) {
		t.Fatal("in the restart gap the kernel answered a SYN to the egress IP")
	}
	if after := heldDrops(t, dir); after <= before {
		t.Fatalf("held drops %d -> %d: the SYN was not dropped in XDP", before, after)
	}

	second := startEngine(t, tp, cfg, defaultOptions())
	if got := pinnedLink(t, dir); got != id {
		t.Fatalf("pinned link %d after the takeover, want %d, updated in place", got, id)
	}
	if _, reply := tp.udpRoundTrip(t, 42101, "after the restart", 20); reply == nil {
		t.Fatal("no round trip through the engine that took over")
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if tp.xdpAttached(t) {
		t.Fatal("XDP still attached after a final Close")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory %s left after a final Close: %v", dir, err)
	}
	if !tp.answered(t, syn, 2*time.Second) {
		t.Fatal("after a final Close the kernel does not answer the SYN: something still intercepts")
	}
}
