package metrics

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkPipelineScrape runs the harness's batch (new and established
// flows, replies, bad frames) on one worker, without and with a concurrent
// scraper gathering every metric at a fixed interval: 15 s and 1 s (real
// Prometheus intervals; run with -benchtime ≥ 16s so that they scrape) and
// 10 ms (1500 times a 15 s scrape, the worst case). The ns/frame against
// scraper=off is what metrics cost the data plane: the workers only bump
// plain counters and publish once a batch, whoever reads them.
func BenchmarkPipelineScrape(b *testing.B) {
	for _, tc := range []struct {
		name   string
		scrape time.Duration
	}{{"scraper=off", 0}, {"scraper=15s", 15 * time.Second}, {"scraper=1s", time.Second}, {"scraper=10ms", 10 * time.Millisecond}} {
		b.Run(tc.name, func(b *testing.B) {
			p := newHarnessPipeline(b, 1<<14)
			h := newHarness(b, p, 1)
			reg := NewRegistry("bench")
			reg.MustRegister(NewGatewayCollector(h.source()))
			done := make(chan struct{})
			var wg sync.WaitGroup
			var scrapes atomic.Int64
			if tc.scrape > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := time.NewTicker(tc.scrape)
					defer t.Stop()
					for {
						select {
						case <-done:
							return
						case <-t.C:
						}
						if _, err := reg.Gather(); err != nil {
							b.Error(err)
							return
						}
						scrapes.Add(1)
					}
				}()
			}
			w := h.workers[0]
			frames := len(w.frames)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.round(w)
			}
			b.StopTimer()
			close(done)
			wg.Wait()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
			b.ReportMetric(float64(scrapes.Load()), "scrapes")
			if tc.scrape > 0 && scrapes.Load() == 0 && b.Elapsed() > 2*tc.scrape {
				b.Fatal("the scraper never ran")
			}
		})
	}
}

// BenchmarkScrape is the cost of one full gather of a gateway's metrics
// (2 workers, 2 interfaces, 2 egress IPs, Go and process collectors).
func BenchmarkScrape(b *testing.B) {
	p := newHarnessPipeline(b, 1<<14)
	h := newHarness(b, p, 2)
	for _, w := range h.workers {
		h.round(w)
	}
	reg := NewRegistry("bench")
	reg.MustRegister(NewGatewayCollector(h.source()))
	var g prometheus.Gatherer = reg
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := g.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
