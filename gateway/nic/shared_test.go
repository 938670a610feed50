package nic_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/nstest"
)

// Frames received on d0 leave through d1 from the very same UMEM buffer:
// both AF_XDP sockets share one Umem.
func TestAFXDPSharedUmemForward(t *testing.T) {
	d0, g0 := nstest.Pair(t, "d0", dutIP, "g0", genIP)
	dut, gen := d0.NS, g0.NS
	d1, s1 := nstest.VethPair(t, dut, "d1", netip.MustParsePrefix("10.89.0.1/24"), nstest.New(t), "s1", netip.MustParsePrefix("10.89.0.2/24"))
	sink := s1.NS
	genRaw, sinkRaw := gen.OpenRaw(t, "g0"), sink.OpenRaw(t, "s1")
	dut.Enter(t)
	umem, err := nic.NewUmem(1024, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	pools := []*nic.Pool{umem}
	in, err := nic.Open(nic.Config{Interface: "d0", Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := nic.Open(nic.Config{Interface: "d1", Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	defer nic.FreeUmem(umem)
	if in.Mode() != "afxdp" || out.Mode() != "afxdp" {
		t.Fatalf("modes %s/%s, want afxdp", in.Mode(), out.Mode())
	}
	in.Program.AddEgressIP(egressIP)

	const n = 32
	for i := uint32(0); i < n; i++ {
		genRaw.Send(frame(d0.MAC, g0.MAC, i))
	}
	var rx, fwd nic.Batch
	got := 0
	addrs := map[*byte]bool{}
	for deadline := time.Now().Add(3 * time.Second); got < n && time.Now().Before(deadline); {
		in.Queues[0].Receive(&rx, 50*time.Millisecond)
		for i := 0; i < rx.N; i++ {
			if _, ok := seqOf(rx.Frame(i)); !ok {
				continue
			}
			f := rx.Frame(i)
			copy(f[0:6], s1.MAC)
			copy(f[6:12], d1.MAC)
			addrs[&f[0]] = true
			if !fwd.Take(&rx, i) {
				t.Fatal("Take refused a frame")
			}
			got++
		}
		rx.Release()
		out.Queues[0].Transmit(&fwd)
	}
	if got != n {
		t.Fatalf("received %d of %d", got, n)
	}
	arrived := 0
	for arrived < n {
		f := sinkRaw.Next(2 * time.Second)
		if f == nil {
			break
		}
		if _, ok := seqOf(f); ok {
			arrived++
		}
	}
	if arrived != n {
		t.Fatalf("%d of %d frames came out of d1", arrived, n)
	}
	if st := out.Queues[0].Stats(); st.TxFrames != n || st.TxDrops != 0 {
		t.Fatalf("d1 stats %+v", st)
	}
	// Every transmitted buffer comes back through d1's completion ring
	// into the shared pool.
	x := out.Queues[0].(*nic.XSK)
	nstest.Soon(2*time.Second, func() bool { x.Flush(); return x.InFlight() == 0 })
	if x.InFlight() != 0 {
		t.Fatalf("%d transmitted buffers never completed", x.InFlight())
	}
	if len(addrs) != n {
		t.Fatalf("%d distinct buffers for %d frames", len(addrs), n)
	}
}
