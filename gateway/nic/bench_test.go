package nic_test

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	asavie "github.com/asavie/xdp"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/internal/nstest"
)

// generator blasts frames to the egress IP from namespace gen, out of g0,
// 64 per sendmmsg, until stopped.
type generator struct {
	stop atomic.Bool
	sent atomic.Uint64
	wg   sync.WaitGroup
}

func startGenerator(b *testing.B, gen *nstest.NS, g0, d0 *nstest.Veth) *generator {
	var fd int
	err := gen.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: g0.Index})
	})
	if err != nil {
		b.Fatal(err)
	}
	g := &generator{}
	var hdr [nic.MaxBatch]unix.Mmsghdr
	var iov [nic.MaxBatch]unix.Iovec
	frames := make([][]byte, nic.MaxBatch)
	for i := range frames {
		frames[i] = frame(d0.MAC, g0.MAC, uint32(i))
		iov[i].Base = &frames[i][0]
		iov[i].SetLen(len(frames[i]))
		hdr[i].Hdr.Iov = &iov[i]
		hdr[i].Hdr.SetIovlen(1)
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer unix.Close(fd)
		for !g.stop.Load() {
			r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafePtr(&hdr[0])), nic.MaxBatch, 0, 0, 0)
			if e == 0 {
				g.sent.Add(uint64(r))
			}
		}
	}()
	b.Cleanup(func() { g.stop.Store(true); g.wg.Wait() })
	return g
}

var fps = map[string]float64{}

// BenchmarkForward receives frames on a veth end and sends each back out of
// the same interface (MACs rewritten, buffer reused), as the gateway does
// with a packet after NAT. One op is one forwarded frame; afxdp and
// afpacket run in the same invocation and the ratio is logged.
func BenchmarkForward(b *testing.B) {
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.Run("afxdp", func(b *testing.B) { benchPort(b, false) })
	b.Run("afpacket", func(b *testing.B) { benchPort(b, true) })
	b.Run("asavie", benchAsavie)
	if fps["afpacket"] > 0 {
		b.Logf("AF_XDP/AF_PACKET = %.2fx, own rings/asavie = %.2fx (frames/s %.0f, %.0f, %.0f)",
			fps["afxdp"]/fps["afpacket"], fps["afxdp"]/fps["asavie"], fps["afxdp"], fps["afpacket"], fps["asavie"])
	}
}

func benchPort(b *testing.B, packet bool) {
	l := newVethLab(b, packet)
	p := l.ifc.Queues[0]
	g := startGenerator(b, l.gen, l.g0, l.d0)
	var rx nic.Batch
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done, idle := 0, 0
	for done < b.N {
		if err := p.Receive(&rx, 10*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		if rx.N == 0 {
			if idle++; idle > 500 {
				b.Fatalf("no frames for 5s (generator sent %d)", g.sent.Load())
			}
			continue
		}
		idle = 0
		for i := 0; i < rx.N; i++ {
			f := rx.Frame(i)
			copy(f[0:6], otherMAC)
			copy(f[6:12], l.d0.MAC)
		}
		done += rx.N
		p.Transmit(&rx)
	}
	el := time.Since(start)
	b.StopTimer()
	rate := float64(done) / el.Seconds()
	b.ReportMetric(rate, "frames/s")
	fps[map[bool]string{false: "afxdp", true: "afpacket"}[packet]] = rate
	if st := p.Stats(); st.TxFrames == 0 {
		b.Fatalf("nothing transmitted: %+v", st)
	}
}

// benchAsavie is the same loop on github.com/asavie/xdp's socket, for the
// comparison with our own ring handling.
func benchAsavie(b *testing.B) {
	d0, g0 := nstest.Pair(b, "d0", dutIP, "g0", genIP)
	d0.NS.Enter(b)
	prog, err := xdp.Load(d0.Index, xdp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { prog.Detach() })
	if err := prog.Attach(); err != nil {
		b.Fatal(err)
	}
	prog.AddEgressIP(egressIP)
	opts := asavie.SocketOptions{NumFrames: 4096, FrameSize: 2048, FillRingNumDescs: 2048, CompletionRingNumDescs: 2048, RxRingNumDescs: 2048, TxRingNumDescs: 2048}
	xsk, err := asavie.NewSocket(d0.Index, 0, &opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { xsk.Close() })
	if err := prog.Register(0, xsk.FD()); err != nil {
		b.Fatal(err)
	}
	startGenerator(b, g0.NS, g0, d0)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := 0
	for done < b.N {
		xsk.Fill(xsk.GetDescs(xsk.NumFreeFillSlots()))
		n, _, err := xsk.Poll(10)
		if err != nil {
			b.Fatal(err)
		}
		if n > nic.MaxBatch {
			n = nic.MaxBatch
		}
		descs := xsk.Receive(n)
		for _, d := range descs {
			f := xsk.GetFrame(d)
			copy(f[0:6], otherMAC)
			copy(f[6:12], d0.MAC)
		}
		done += len(descs)
		xsk.Transmit(descs)
	}
	el := time.Since(start)
	b.StopTimer()
	fps["asavie"] = float64(done) / el.Seconds()
	b.ReportMetric(fps["asavie"], "frames/s")
}

func unsafePtr(h *unix.Mmsghdr) unsafe.Pointer { return unsafe.Pointer(h) }
