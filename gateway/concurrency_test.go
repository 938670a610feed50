package gateway

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
)

// TestConcurrentProcessors runs processors on one pipeline while snapshots are
// swapped and counters scraped (meaningful under -race): every flow created
// must work, and the summed counters must match what the workers saw.
func TestConcurrentProcessors(t *testing.T) {
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
	ws := []*Processor{f.w, f.p.NewProcessor(2)}
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

// TestConcurrentMovesLeakNothing: two workers send the same UDP flows while
// the policy's second egress IP keeps changing (192.0.2.21, then .22, and
// back), so flows are retired and re-created on both workers at once, racing
// for the same entries (meaningful under -race). Once the swaps stop, every
// flow must work from a current IP, the table must hold each flow once,
// and the allocator must hold exactly one port per flow: no retire, lost
// insert or race may leak or double-release a port.
func TestConcurrentMovesLeakNothing(t *testing.T) {
	ip21, ip22 := netip.MustParseAddr("192.0.2.21"), netip.MustParseAddr("192.0.2.22")
	cfgWith := func(ip netip.Addr) Config {
		c := testConfig()
		c.Policies[0].EgressIPs = []netip.Addr{egress4, ip, egress6}
		return c
	}
	f := newFixture(t, 1<<14, cfgWith(ip21))
	const flows = 256
	var frames [][]byte
	for i := 0; i < flows; i++ {
		p := udpFrom(pod1v4, server4)
		p.sport = uint16(3000 + i)
		frames = append(frames, tunnelFrame(t, podTun(), p.build(t)))
	}
	ws := []*Processor{f.w, f.p.NewProcessor(2)}
	send := func(w *Processor) []Result {
		out := make([][]byte, 16)
		for i := range out {
			out[i] = make([]byte, 2048)
		}
		res := make([]Result, flows)
		for i := 0; i < flows; i += 16 {
			w.Process(testNow, frames[i:i+16], out, res[i:i+16])
		}
		return res
	}
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ip := ip21
			if n%2 == 1 {
				ip = ip22
			}
			s, err := NewSnapshot(cfgWith(ip))
			if err != nil {
				t.Error(err)
				return
			}
			if err := f.p.Swap(s); err != nil {
				t.Error(err)
			}
			n++
		}
	}()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func(w *Processor) {
			defer wg.Done()
			for round := 0; round < 30; round++ {
				send(w)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	if n := <-swapped; n < 2 {
		t.Logf("only %d swaps happened during the traffic", n)
	}
	s, err := NewSnapshot(cfgWith(ip22))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Swap(s); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		for i, r := range send(w) {
			if r.Verdict != VerdictTx {
				t.Fatalf("flow %d after the swaps: %v %v", i, r.Verdict, r.Reason)
			}
		}
	}
	if n := f.ct.Len(); n != flows {
		t.Errorf("%d flows in the table, want %d", n, flows)
	}
	a := f.p.NAT()
	used := 0
	for _, ip := range []netip.Addr{egress4, ip21, ip22} {
		used += a.PortsInUse(nat.Addr(ip.As16()), header.ProtoUDP)
	}
	if n := a.PortsInUse(nat.Addr(ip21.As16()), header.ProtoUDP); n != 0 {
		t.Errorf("%d ports still taken on 192.0.2.21, which no flow uses", n)
	}
	if used != flows || a.StrayReleases() != 0 {
		t.Errorf("ports in use %d for %d flows, stray releases %d", used, flows, a.StrayReleases())
	}
	st := f.p.Stats()
	t.Logf("flows created %d, moved %d", st.Count(CounterFlowsNew), st.Count(CounterFlowsMoved))
}
