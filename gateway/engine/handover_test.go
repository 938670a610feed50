package engine

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestHandoverRestartOrUninstall: with a state file, a stop that is not an
// uninstall leaves the XDP program attached (held for the next process)
// and the flows in the file; one that is (final says the DaemonSet is
// gone) detaches it and writes nothing, as a stop without a state file.
func TestHandoverRestartOrUninstall(t *testing.T) {
	d0, _ := nstest.Pair(t, "d0", netip.MustParsePrefix("10.77.0.1/24"), "p0", netip.MustParsePrefix("10.77.0.2/24"))
	d0.NS.Enter(t)
	cfg := &config.Config{Node: "gw-test", Interfaces: []string{"d0"}, VTEPs: []string{"10.77.0.1"},
		InnerMAC: "02:65:67:00:00:01", RouterV4: "169.254.77.1", Tunnel: "vxlan", VNI: 100, Port: 4789,
		EgressIPsClaimed: true}
	set, err := cfg.Settle()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "flows.state")
	xdpOn := func() bool {
		l, err := d0.NS.NL.LinkByName("d0")
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
	}
	log := slog.New(slog.DiscardHandler)
	for _, uninstall := range []bool{false, true} {
		os.Remove(state)
		e, err := New(set, Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		e.Start()
		asked := false
		h := Handover{Engine: e, State: state, Log: log, Final: func() bool { asked = true; return uninstall }}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		_, serr := os.Stat(state)
		switch {
		case !asked:
			t.Fatalf("uninstall=%v: the stop did not ask whether it is an uninstall", uninstall)
		case xdpOn() == uninstall:
			t.Fatalf("uninstall=%v: XDP attached = %v after the stop", uninstall, xdpOn())
		case (serr == nil) == uninstall:
			t.Fatalf("uninstall=%v: state file: %v", uninstall, serr)
		}
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state file after the uninstall: %v", err)
	}
}
