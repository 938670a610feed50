package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
)

// TestQueueLoopCatchesUpOnExpiry: 4096 flows run out at once. At the normal
// pace (64 every 10 ms of the worker's clock) the sweep would remove at
// most 640 in the 100 ms the test gives it; a worker that finds itself
// behind (a sweep removed its whole budget) sweeps every loop turn without
// blocking, and removes at least three quarters. The clock is the test's:
// one ms per read.
func TestQueueLoopCatchesUpOnExpiry(t *testing.T) {
	w, _ := newBenchLoop(t)
	const flows = 4096
	frames := make([][]byte, flows)
	for i := range frames {
		frames[i] = benchFrame(t, uint16(10000+i))
	}
	out := make([][]byte, flows)
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]gateway.Result, flows)
	w.gw.Process(0, frames, out, res)
	if st := w.gw.Stats(); st.Count(gateway.CounterFlowsNew) != flows {
		n := st.Count(gateway.CounterFlowsNew)
		t.Fatalf("%d flows created, want %d", n, flows)
	}

	start := int64(conntrack.DefaultTimeouts().UDP + time.Minute) // every flow has run out
	var clock atomic.Int64
	clock.Store(start)
	var stop atomic.Bool
	w.now = func() int64 {
		now := clock.Add(int64(time.Millisecond))
		if now >= start+int64(100*time.Millisecond) {
			stop.Store(true)
		}
		return now
	}
	w.expireEvery, w.expireBudget, w.wait = int64(10*time.Millisecond), 64, time.Millisecond
	done := make(chan struct{})
	go func() {
		w.run(&stop)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		stop.Store(true)
		t.Fatal("queue loop did not stop")
	}
	// The pace alone: a sweep every 10 ms from 10 ms on, at most 10 in
	// 100 ms, 640 flows. Catching up must do far better; the last few may
	// wait for the paced sweeps (a sweep whose scan ends in already swept
	// entries removes less than its budget and ends the catching up).
	st := w.gw.Stats()
	n := st.Count(gateway.CounterFlowsExpired)
	if n < flows*3/4 {
		t.Fatalf("%d of %d expired flows removed in 100 ms of sweeping; the pace alone allows 640", n, flows)
	}
	if c := w.pub.read(); c.Expired != n {
		t.Errorf("engine counted %d expired, the pipeline %d", c.Expired, n)
	}
}
