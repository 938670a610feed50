package nic_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/nstest"
)

// Where XDP cannot attach (here: the interface already runs someone
// else's XDP program) Open falls back to AF_PACKET and says so.
func TestOpenFallsBackToAFPacket(t *testing.T) {
	dutEnd, _ := nstest.Pair(t, "d0", dutIP, "g0", genIP)
	dut := dutEnd.NS
	dut.Enter(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "not_egret", Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()}, // XDP_PASS
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	d0, _ := dut.NL.LinkByName("d0")
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: d0.Attrs().Index})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var logs bytes.Buffer
	umem, _ := nic.NewUmem(256, 2048, 0)
	defer nic.FreeUmem(umem)
	ifc, err := nic.Open(nic.Config{Interface: "d0", Pools: []*nic.Pool{umem},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer ifc.Close()
	if ifc.Mode() != "afpacket" || ifc.Program != nil {
		t.Fatalf("mode %s, want the AF_PACKET fallback", ifc.Mode())
	}
	if !strings.Contains(logs.String(), "falling back to AF_PACKET") || !strings.Contains(logs.String(), "not_egret") {
		t.Fatalf("log does not explain the fallback:\n%s", logs.String())
	}
	// The foreign program is left alone.
	d0, _ = dut.NL.LinkByName("d0")
	if x := d0.Attrs().Xdp; x == nil || !x.Attached {
		t.Fatal("the other XDP program was removed")
	}
}
