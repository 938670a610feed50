package nic_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/nstest"
)

var (
	dutIP    = netip.MustParsePrefix("10.88.0.1/24")
	genIP    = netip.MustParsePrefix("10.88.0.2/24")
	egressIP = netip.MustParseAddr("10.88.0.100")
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
)

// vethLab is a device under test (namespace dut, interface d0) and a traffic
// generator (namespace gen, interface g0) joined by a veth pair.
type vethLab struct {
	dut, gen *nstest.NS
	d0, g0   *nstest.Veth
	raw      *nstest.Raw
	ifc      *nic.Interface
}

func newVethLab(t testing.TB, packet bool) *vethLab {
	d0, g0 := nstest.Pair(t, "d0", dutIP, "g0", genIP)
	dut, gen := d0.NS, g0.NS
	l := &vethLab{dut: dut, gen: gen, d0: d0, g0: g0, raw: gen.OpenRaw(t, "g0")}
	dut.Enter(t)
	umem, err := nic.NewUmem(4096, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	ifc, err := nic.Open(nic.Config{Interface: "d0", Pools: []*nic.Pool{umem}, Packet: packet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ifc.Close(); nic.FreeUmem(umem) })
	if want := map[bool]string{true: "afpacket", false: "afxdp"}[packet]; ifc.Mode() != want {
		t.Fatalf("opened in %s mode, want %s", ifc.Mode(), want)
	}
	if ifc.Program != nil {
		if err := ifc.Program.AddEgressIP(egressIP); err != nil {
			t.Fatal(err)
		}
	}
	l.ifc = ifc
	return l
}

// frame is Ethernet/IPv4/UDP to the egress IP with a marker and a sequence
// number in the payload.
func frame(dst, src net.HardwareAddr, seq uint32) []byte {
	f := make([]byte, 14+20+8+18)
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	copy(ip[12:], genIP.Addr().AsSlice())
	copy(ip[16:], egressIP.AsSlice())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], "EGRET-")
	binary.BigEndian.PutUint32(udp[14:], seq)
	return f
}

func seqOf(f []byte) (uint32, bool) {
	i := bytes.Index(f, []byte("EGRET-"))
	if i < 0 || i+10 > len(f) {
		return 0, false
	}
	return binary.BigEndian.Uint32(f[i+6:]), true
}

func testVeth(t *testing.T, packet bool) {
	l := newVethLab(t, packet)
	p := l.ifc.Queues[0]
	const n = 64
	for i := uint32(0); i < n; i++ {
		if err := l.raw.Send(frame(l.d0.MAC, l.g0.MAC, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Receive them (maybe over several batches) and forward each back out
	// of the same port with MACs swapped, without copying.
	var rx, fwd nic.Batch
	seen := map[uint32]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		if err := p.Receive(&rx, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < rx.N; i++ {
			f := rx.Frame(i)
			s, ok := seqOf(f)
			if !ok {
				continue // kernel chatter (AF_PACKET sees everything)
			}
			if !bytes.Equal(f, frame(l.d0.MAC, l.g0.MAC, s)) {
				t.Fatalf("frame %d arrived altered: %x", s, f)
			}
			seen[s] = true
			copy(f[0:6], otherMAC)
			copy(f[6:12], l.d0.MAC)
			fwd.Take(&rx, i)
		}
		rx.Release()
		p.Transmit(&fwd)
	}
	if len(seen) != n {
		t.Fatalf("received %d of %d frames", len(seen), n)
	}
	back := map[uint32]bool{}
	for len(back) < n {
		f := l.raw.Next(2 * time.Second)
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

	// Transmit a batch the worker builds from scratch.
	var tx nic.Batch
	if got := p.Pool().Alloc(&tx, n); got != n {
		t.Fatalf("Alloc gave %d buffers", got)
	}
	for i := 0; i < n; i++ {
		f := frame(otherMAC, l.d0.MAC, 1000+uint32(i))
		tx.SetFrame(i, tx.Off[i], len(f))
		copy(tx.Frame(i), f)
	}
	p.Transmit(&tx)
	built := 0
	for built < n {
		f := l.raw.Next(2 * time.Second)
		if f == nil {
			break
		}
		if s, ok := seqOf(f); ok && s >= 1000 {
			built++
		}
	}
	if built != n {
		t.Fatalf("%d of %d built frames arrived", built, n)
	}
	st := p.Stats()
	if st.TxFrames != 2*n || st.TxDrops != 0 || st.RxFrames < n {
		t.Fatalf("stats %+v", st)
	}
	// Every frame here is 60 bytes; AF_PACKET also sees kernel chatter.
	if st.TxBytes != 2*n*60 || st.RxBytes < n*60 || st.RxBytes < 14*st.RxFrames {
		t.Fatalf("byte counters %+v: want %d bytes sent and at least %d received", st, 2*n*60, n*60)
	}
	if x, ok := p.(*nic.XSK); ok {
		// The kernel completes transmits on its own time; each Flush reaps.
		nstest.Soon(2*time.Second, func() bool { x.Flush(); return p.Pool().Free() >= 4096-2048-nic.MaxBatch })
		if free := p.Pool().Free(); free < 4096-2048-nic.MaxBatch {
			t.Fatalf("%d buffers free: transmitted buffers not returned", free)
		}
	}
}

func TestAFXDPVeth(t *testing.T)    { testVeth(t, false) }
func TestAFPacketVeth(t *testing.T) { testVeth(t, true) }
