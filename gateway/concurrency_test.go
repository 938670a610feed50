package gateway

import (
	"sync"
	"testing"
)

// TestConcurrentWorkers runs workers on one pipeline while snapshots are
// swapped and counters scraped (meaningful under -race): every flow created
// must work, and the summed counters must match what the workers saw.
func TestConcurrentWorkers(t *testing.T) {
	f := newFixture(t, 1<<14, testConfig())
	const workers, perWorker = 2, 500
	frames := make([][][]byte, workers)
	for w := range frames {
		for i := 0; i < perWorker; i++ {
			p := udpFrom(pod1v4, server4)
			p.sport = uint16(2000 + w*perWorker + i)
			frames[w] = append(frames[w], tunnelFrame(t, podTun(), p.build(t)))
		}
	}
	ws := []*Worker{f.w, f.p.NewWorker(2)}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() { // swapper and scraper
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, err := NewSnapshot(testConfig())
			if err != nil {
				t.Error(err)
				return
			}
			if err := f.p.Swap(s); err != nil {
				t.Error(err)
			}
			_ = f.p.Stats()
		}
	}()
	for w := range ws {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			out := make([][]byte, 16)
			for i := range out {
				out[i] = make([]byte, 2048)
			}
			res := make([]Result, 16)
			for i := 0; i < perWorker; i += 16 {
				k := min(16, perWorker-i)
				ws[w].Process(testNow, frames[w][i:i+k], out[:k], res[:k])
				for j := 0; j < k; j++ {
					if res[j].Verdict != VerdictTx {
						t.Errorf("worker %d frame %d: %v", w, i+j, res[j].Reason)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	if n := f.ct.Len(); n != workers*perWorker {
		t.Errorf("%d flows, want %d", n, workers*perWorker)
	}
	if s := f.p.Stats(); s.Count(CounterForwarded) != workers*perWorker || s.Count(CounterFlowsNew) != workers*perWorker {
		t.Errorf("summed counters %+v", s.Counters)
	}
}
