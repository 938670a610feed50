package engine_test

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/internal/xdptest"
)

// pinDir is where the XDP loader pins d0's link and counters.
func (tp *topo) pinDir(t *testing.T) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(tp.gw.Handle), &st); err != nil {
		t.Fatal(err)
	}
	return xdp.PinDir(xdp.DefaultPinDir, st.Ino, tp.d0.Index)
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
	id := xdptest.LinkID(t, dir)
	if err := first.CloseHeld(time.Minute); err != nil {
		t.Fatal(err)
	}
	if !tp.xdpAttached(t) || xdptest.LinkID(t, dir) != id || id == 0 {
		t.Fatalf("after a held Close: attached %v, pinned link %d (was %d): want the program left in place", tp.xdpAttached(t), xdptest.LinkID(t, dir), id)
	}
	before := xdptest.Held(t, dir)
	if tp.answered(t, syn, time.Second) {
		t.Fatal("in the restart gap the kernel answered a SYN to the egress IP")
	}
	if after := xdptest.Held(t, dir); after <= before {
		t.Fatalf("held drops %d -> %d: the SYN was not dropped in XDP", before, after)
	}

	second := startEngine(t, tp, cfg, defaultOptions())
	if got := xdptest.LinkID(t, dir); got != id {
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
