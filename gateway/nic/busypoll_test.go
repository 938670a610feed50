package nic_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/nstest"
)

func TestBusyPollCheck(t *testing.T) {
	good := nic.DefaultBusyPoll
	if err := good.Check(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	if err := (nic.BusyPoll{}).Check(); err != nil {
		t.Fatalf("off refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*nic.BusyPoll)
		want string
	}{
		{"budget without time", func(b *nic.BusyPoll) { b.Usecs = 0 }, "without a poll time"},
		{"time", func(b *nic.BusyPoll) { b.Usecs = 5000 }, "1–1000"},
		{"budget 0", func(b *nic.BusyPoll) { b.Budget = 0 }, "budget 0"},
		{"budget", func(b *nic.BusyPoll) { b.Budget = 100000 }, "1–1024"},
		{"defer 0", func(b *nic.BusyPoll) { b.DeferHardIRQs = 0 }, "napi_defer_hard_irqs 0"},
		{"flush", func(b *nic.BusyPoll) { b.GROFlushTimeout = time.Second }, "gro_flush_timeout 1s"},
	} {
		b := good
		tc.edit(&b)
		err := b.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %+v: got %v, want an error saying %q", tc.name, b, err, tc.want)
		}
	}
}

func readSys(t *testing.T, dev, knob string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/net", dev, knob))
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}

// TestAFXDPBusyPollVeth opens a real AF_XDP socket in busy-poll mode on a
// veth: the socket options must read back as set, the interface's NAPI
// knobs must hold the mode's values while it is open and their old values
// after Close, and frames must be received and forwarded by busy polling
// alone (Receive with no timeout: nothing ever sleeps in poll(2)).
func TestAFXDPBusyPollVeth(t *testing.T) {
	d0, g0 := nstest.Pair(t, "d0", dutIP, "g0", genIP)
	raw := g0.NS.OpenRaw(t, "g0")
	d0.NS.Enter(t)
	nstest.MountSysfs(t)
	oldDefer, oldFlush := readSys(t, "d0", "napi_defer_hard_irqs"), readSys(t, "d0", "gro_flush_timeout")
	if oldDefer == "2" || oldFlush == "200000" {
		t.Fatalf("d0 starts with the mode's values (%s, %s): the test could not tell", oldDefer, oldFlush)
	}
	umem, err := nic.NewUmem(4096, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer nic.FreeUmem(umem)
	ifc, err := nic.Open(nic.Config{Interface: "d0", Pools: []*nic.Pool{umem},
		Socket: nic.XDPOptions{BusyPoll: nic.DefaultBusyPoll, TxSkbBudget: 64}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			ifc.Close()
		}
	}()
	if ifc.Mode() != "afxdp" {
		t.Fatalf("opened in %s mode", ifc.Mode())
	}
	if err := ifc.Program.AddEgressIP(egressIP); err != nil {
		t.Fatal(err)
	}
	x := ifc.Queues[0].(*nic.XSK)
	if !x.BusyPolling() {
		t.Fatal("socket not in busy-poll mode")
	}
	prefer, usecs, err := x.BusyPollState()
	if err != nil {
		t.Fatal(err)
	}
	if !prefer || usecs != nic.DefaultBusyPoll.Usecs {
		t.Fatalf("socket options read back as SO_PREFER_BUSY_POLL=%v SO_BUSY_POLL=%d, want true %d",
			prefer, usecs, nic.DefaultBusyPoll.Usecs)
	}
	if got, err := x.TxSkbBudget(); errors.Is(err, nic.ErrKernelLacks) {
		var uts unix.Utsname
		unix.Uname(&uts)
		t.Logf("XDP_MAX_TX_SKB_BUDGET: %v (kernel %s)", err, unix.ByteSliceToString(uts.Release[:]))
	} else if err != nil || got != 64 {
		t.Fatalf("XDP_MAX_TX_SKB_BUDGET: got %d, %v; want 64", got, err)
	}
	if d, f := readSys(t, "d0", "napi_defer_hard_irqs"), readSys(t, "d0", "gro_flush_timeout"); d != "2" || f != "200000" {
		t.Fatalf("napi_defer_hard_irqs %s, gro_flush_timeout %s while busy polling; want 2, 200000", d, f)
	}
	if zc, err := x.ZeroCopy(); err != nil || zc {
		t.Fatalf("zero-copy %v, %v on a veth, which has only copy mode", zc, err)
	}

	// 64, as testVeth: the raw socket also queues the frames it sent, and more
	// overflow its default receive buffer.
	const n = 64
	for i := uint32(0); i < n; i++ {
		if err := raw.Send(frame(d0.MAC, g0.MAC, i)); err != nil {
			t.Fatal(err)
		}
	}
	var rx, fwd nic.Batch
	seen := map[uint32]bool{}
	nstest.Until(t, "busy polling receives every frame", 10*time.Second, func() (bool, string) {
		if err := x.Receive(&rx, 0); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < rx.N; i++ {
			f := rx.Frame(i)
			if s, ok := seqOf(f); ok {
				seen[s] = true
				copy(f[0:6], otherMAC)
				copy(f[6:12], d0.MAC)
				fwd.Take(&rx, i)
			}
		}
		rx.Release()
		x.Transmit(&fwd)
		return len(seen) == n, ""
	})
	// The kernel transmits inside sendto, a budget at a time.
	nstest.Until(t, "every forwarded frame transmitted", 5*time.Second, func() (bool, string) {
		x.Flush()
		return x.InFlight() == 0, ""
	})
	back := map[uint32]bool{}
	for len(back) < n {
		f := raw.Next(2 * time.Second)
		if f == nil {
			break
		}
		if s, ok := seqOf(f); ok && bytes.Equal(f[:6], otherMAC) {
			back[s] = true
		}
	}
	if len(back) != n {
		t.Fatalf("%d of %d forwarded frames came back", len(back), n)
	}
	if st := x.Stats(); st.RxFrames != n || st.TxFrames != n || st.TxDrops != 0 || st.RxErrors != 0 {
		t.Fatalf("stats %+v", st)
	}

	closed = true
	if err := ifc.Close(); err != nil {
		t.Fatal(err)
	}
	if d, f := readSys(t, "d0", "napi_defer_hard_irqs"), readSys(t, "d0", "gro_flush_timeout"); d != oldDefer || f != oldFlush {
		t.Fatalf("after Close napi_defer_hard_irqs %s, gro_flush_timeout %s; want them back at %s, %s", d, f, oldDefer, oldFlush)
	}
}

// TestBusyPollNeedsOwnSysfs: a thread moved into a namespace by setns
// still sees the sysfs of the namespace /sys was mounted in, where a device
// of the same name may be another one. Busy poll must then refuse, not
// write that device's knobs (nor carry on without them).
func TestBusyPollNeedsOwnSysfs(t *testing.T) {
	d0, _ := nstest.Pair(t, "d0", dutIP, "g0", genIP)
	d0.NS.Enter(t)
	umem, err := nic.NewUmem(4096, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer nic.FreeUmem(umem)
	ifc, err := nic.Open(nic.Config{Interface: "d0", Pools: []*nic.Pool{umem}, Socket: nic.XDPOptions{BusyPoll: nic.DefaultBusyPoll}})
	if err == nil {
		ifc.Close()
		t.Fatal("busy poll opened with /sys of another namespace")
	}
	if !strings.Contains(err.Error(), "sysfs") {
		t.Fatalf("error does not say what is wrong: %v", err)
	}
}
