package engine_test

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestRefusesUnservedRxQueues runs the engine on a 4-queue veth: with fewer
// workers than receive queues it must refuse to start (in afxdp and in auto
// mode, where XDP attaches) with an error naming the interface, both counts
// and the settings to change, and leave no XDP program behind; with a worker
// per queue it starts, and AF_PACKET, which serves every queue, starts too.
func TestRefusesUnservedRxQueues(t *testing.T) {
	gw, peer := nstest.New(t), nstest.New(t)
	va := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "d0", NumRxQueues: 4, NumTxQueues: 4},
		PeerName: "p0", PeerNumRxQueues: 4, PeerNumTxQueues: 4}
	if err := gw.NL.LinkAdd(va); err != nil {
		t.Fatalf("add a 4-queue veth: %v", err)
	}
	p0, err := gw.NL.LinkByName("p0")
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.NL.LinkSetNsFd(p0, int(peer.Handle)); err != nil {
		t.Fatal(err)
	}
	for ns, name := range map[*nstest.NS]string{gw: "d0", peer: "p0"} {
		l, err := ns.NL.LinkByName(name)
		if err == nil {
			err = ns.NL.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	gw.AddAddr(t, "d0", gwPrefix)
	tp := &topo{gw: gw, peer: peer}
	gw.Enter(t)

	start := func(mode string, queues int) (*engine.Engine, error) {
		cfg := tp.config()
		cfg.Mode, cfg.Queues = mode, queues
		set, err := cfg.Settle()
		if err != nil {
			t.Fatal(err)
		}
		return engine.New(set, engine.Options{Logger: testLogger()})
	}
	for _, mode := range []string{"afxdp", "auto"} {
		_, err := start(mode, 2)
		if err == nil {
			t.Fatalf("%s with 2 workers on 4 RX queues started", mode)
		}
		for _, want := range []string{"interface d0 has 4 receive queues", "runs 2 workers", "queues 2–3", "--queues", "ethtool -L d0"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q lacks %q", mode, err, want)
			}
		}
		if tp.xdpAttached(t) {
			t.Errorf("%s: the refused start left its XDP program on d0", mode)
		}
	}
	for _, c := range []struct {
		mode   string
		queues int
	}{{"afxdp", 4}, {"afxdp", 0}, {"afpacket", 1}} {
		eng, err := start(c.mode, c.queues)
		if err != nil {
			t.Errorf("%s with queues %d: %v", c.mode, c.queues, err)
			continue
		}
		if m := eng.Modes()["d0"]; m != c.mode {
			t.Errorf("%s with queues %d runs %v", c.mode, c.queues, eng.Modes())
		}
		if err := eng.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}
