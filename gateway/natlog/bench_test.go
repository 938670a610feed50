package natlog

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
)

// BenchmarkFlush is the writer's cost per record: draining a ring of
// create records of named pods and writing their lines to a file (what
// the workers' core pays when the writer shares it, as in the lab).
func BenchmarkFlush(b *testing.B) {
	c := newClock()
	l, err := New(Config{Dir: b.TempDir(), Gateway: "gw-a", Clock: c.Mono, Now: c.Now, RingSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	pods := map[netip.Addr]Pod{}
	for i := range 256 {
		a := netip.AddrFrom4([4]byte{10, 244, 1, byte(i)})
		pods[a] = Pod{Namespace: "shop", Name: "web-" + a.String(), UID: "6c0a4e5e-1b7d-4f5e-9c3a-0d2b4c6e8f10"}
	}
	l.SetPods(NewPods(pods))
	r := l.NewRing()
	f := flow("10.244.1.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
	b.ReportAllocs()
	// The thread's own CPU time (the write's system time included) is the
	// figure on a shared machine; wall time includes others' turns.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	cpu0 := threadCPU()
	for n := 0; n < b.N; {
		batch := min(b.N-n, 4096)
		for i := range batch {
			f.Orig.Src[15] = byte(i)
			f.Orig.SrcPort = uint16(30000 + i)
			f.NATPort = uint16(40000 + i)
			c.mono += 1000
			rec := Record{Mono: c.mono, Flow: f, Event: Event(1 + i%3)}
			r.Push(&rec)
		}
		c.wall = c.wall.Add(time.Duration(batch) * time.Microsecond)
		l.Flush()
		n += batch
	}
	b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
