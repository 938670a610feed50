package flowsync

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/internal/nstest"
)

// benchFlows is the size of the primary's table in the benchmarks.
const benchFlows = 100_000

// benchFlow is flow k of a benchmark table: the pod to one of 250 servers,
// a source port per flow and server, kept as the NAT port.
func benchFlow(k int) (conntrack.Flow, netip.Addr) {
	srv := netip.AddrFrom4([4]byte{198, 51, 100, byte(k%250 + 1)})
	port := uint16(1024 + k/250)
	return conntrack.Flow{
		Orig:    conntrack.Tuple{Src: pod.As16(), Dst: srv.As16(), SrcPort: port, DstPort: 443, Proto: conntrack.ProtoTCP},
		NATAddr: egress.As16(), NATPort: port, State: conntrack.StateEstablished,
	}, srv
}

// waitSynced waits until the standby applied want more records than it
// had (the sender's count first: the standby's cannot pass it).
func waitSynced(b *testing.B, sa, sb *Sync, sentBefore, appliedBefore, want uint64) {
	b.Helper()
	nstest.Eventually(b, "records sent", syncWait, func() bool { return sa.Stats().RecordsSent-sentBefore >= want })
	nstest.Eventually(b, "records applied", syncWait, func() bool { return sb.Stats().RecordsApplied-appliedBefore >= want })
}

// BenchmarkSyncForwarding is the cost of flow sync to the data path. One
// worker forwards the servers' segments of established flows (reverse NAT,
// encapsulation to the pod's node) through a primary holding benchFlows
// flows, in rounds: without flow sync, then with its sync to a standby over
// loopback TCP at the default interval (a scan of the whole table every
// 100 ms, refreshes of the flows the segments touch), in step before the
// round is timed. It reports, in the same run, the packets per second of
// each and on/off, their ratio; on a shared machine that ratio also
// carries whatever else the cores did, so it reports too the worker
// thread's own CPU time per packet with the sync on over off (cpu_on/off:
// what the sync costs the worker itself, locks and caches) and the CPU the
// rest of the process (the sync's scan, its session, the standby) used
// while the sync was on, in cores (sync_cores: what it costs a core the
// workers could use).
func BenchmarkSyncForwarding(b *testing.B) {
	const batch, distinct, rounds = 64, 4096, 3
	runtime.LockOSThread() // the worker's CPU time is this thread's
	defer runtime.UnlockOSThread()
	a := newPipeline(b, 1<<18, egress)
	frames := make([][]byte, distinct)
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range benchFlows {
		f, _ := benchFlow(k)
		adopt(b, a, f)
	}
	for i := range frames {
		f, srv := benchFlow(rng.IntN(benchFlows))
		frames[i] = tcpFrame(b, srv, egress, 443, f.NATPort)
	}
	w := a.NewProcessor(1)
	out := make([][]byte, batch)
	for i := range out {
		out[i] = make([]byte, 2048)
	}
	res := make([]gateway.Result, batch)
	type cost struct{ wall, thread, process time.Duration }
	forward := func(batches int, c *cost) {
		start, t0, p0 := time.Now(), threadTime(b), cpuTime(b)
		for i := 0; i < batches; i++ {
			j := i * batch % distinct
			w.Process(clock(), frames[j:j+batch], out, res)
		}
		c.wall += time.Since(start)
		c.thread += threadTime(b) - t0
		c.process += cpuTime(b) - p0
	}
	forward(1, &cost{})
	for i, r := range res {
		if r.Verdict != gateway.VerdictTx {
			b.Fatalf("segment %d: %v %v, want it forwarded", i, r.Verdict, r.Reason)
		}
	}
	sb, addr := standby(b, newPipeline(b, 1<<18))

	batches := b.N/batch/(2*rounds) + 1
	var off, on cost
	b.ReportAllocs()
	b.ResetTimer()
	for range rounds {
		// Each round starts from a collected heap, so that the garbage of
		// setting up (the standby adopting a resync) is not collected on
		// the next round's time.
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		forward(batches, &off)

		b.StopTimer()
		sa := newSync(b, "primary", testKey, a, func(c *Config) { c.Interval = DefaultInterval })
		sent, applied := sa.Stats().RecordsSent, sb.Stats().RecordsApplied
		sa.SetPeers(map[netip.Addr]string{egress: addr})
		sa.Start()
		waitSynced(b, sa, sb, sent, applied, benchFlows) // the session's full resync
		runtime.GC()
		b.StartTimer()

		forward(batches, &on)

		b.StopTimer()
		sa.Close()
		b.StartTimer()
	}
	b.StopTimer()
	pkts := float64(batches * batch * rounds)
	offPPS, onPPS := pkts/off.wall.Seconds(), pkts/on.wall.Seconds()
	b.ReportMetric(offPPS, "pps_off")
	b.ReportMetric(onPPS, "pps_on")
	b.ReportMetric(onPPS/offPPS, "on/off")
	b.ReportMetric(on.thread.Seconds()/off.thread.Seconds(), "cpu_on/off")
	b.ReportMetric((on.process-on.thread).Seconds()/on.wall.Seconds(), "sync_cores")
}

// threadTime is the CPU time the calling OS thread used so far.
func threadTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSyncFlowsPerSecond is how fast a primary's new flows reach its
// standby: with the session up and in step, benchFlows flows are created
// on the primary and the clock runs until the standby has applied them
// all (the default scan interval included).
func BenchmarkSyncFlowsPerSecond(b *testing.B) {
	flows := benchFlowSet()
	var took, cpu time.Duration
	for range b.N {
		t, c := flowsAcross(b, flows, nil)
		took += t
		cpu += c
	}
	b.ReportMetric(float64(benchFlows*b.N)/took.Seconds(), "flows/s")
	// The same per second of CPU (both sides, the flows' creation
	// included): what the rate would be with a core to spare, which a
	// loaded machine does not show in flows/s.
	b.ReportMetric(float64(benchFlows*b.N)/cpu.Seconds(), "flows/cpu-s")
}

// BenchmarkSyncTLSCost is BenchmarkSyncFlowsPerSecond in the TLS mode
// against the key mode, the two interleaved in each round of the same
// run: the TLS mode seals every message twice (TLS records around the
// sync's own AEAD). It reports the TLS mode's flows per second of CPU
// over the key mode's (tls/key_cpu) and of wall time (tls/key); b.N
// rounds of each.
func BenchmarkSyncTLSCost(b *testing.B) {
	flows := benchFlowSet()
	ca := newPKI(b)
	var took, cpu [2]time.Duration
	for n := range b.N {
		// Each mode goes first in every other round: the first of a
		// pair finds the caches and the heap colder.
		for j := range 2 {
			i := (n + j) % 2
			t, c := flowsAcross(b, flows, []*pki{nil, ca}[i])
			took[i] += t
			cpu[i] += c
		}
	}
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "tls/key")
	b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "tls/key_cpu")
}

func benchFlowSet() []conntrack.Flow {
	flows := make([]conntrack.Flow, benchFlows)
	for k := range flows {
		flows[k], _ = benchFlow(k)
	}
	return flows
}

// flowsAcross is one round of BenchmarkSyncFlowsPerSecond: with the
// session up and in step, flows are created on the primary and the clock
// runs until the standby has applied them all (the default scan interval
// included). It returns the wall and CPU time that took. ca, if not nil,
// runs the sync in the TLS mode with certificates of ca.
func flowsAcross(b *testing.B, flows []conntrack.Flow, ca *pki) (took, cpu time.Duration) {
	b.StopTimer()
	a := newPipeline(b, 1<<18, egress)
	var sa, sb *Sync
	var addr string
	interval := func(c *Config) { c.Interval = DefaultInterval }
	if ca == nil {
		sb, addr = standby(b, newPipeline(b, 1<<18))
		sa = newSync(b, "primary", testKey, a, interval)
	} else {
		sb, addr = tlsStandby(b, newPipeline(b, 1<<18), nodeTLS(ca, ca.issue(b, "standby", gatewaysOrg)), nil)
		sa = tlsSync(b, "primary", a, nodeTLS(ca, ca.issue(b, "primary", gatewaysOrg)), interval)
	}
	sa.SetPeers(map[netip.Addr]string{egress: addr})
	sa.Start()
	// In step: a first flow made it across.
	first, _ := benchFlow(benchFlows)
	adopt(b, a, first)
	waitSynced(b, sa, sb, 0, 0, 1)
	sent, applied := sa.Stats().RecordsSent, sb.Stats().RecordsApplied
	b.StartTimer()

	start, cpu0 := time.Now(), cpuTime(b)
	for k := range flows {
		adopt(b, a, flows[k])
	}
	waitSynced(b, sa, sb, sent, applied, uint64(len(flows)))
	took, cpu = time.Since(start), cpuTime(b)-cpu0

	b.StopTimer()
	sa.Close()
	sb.Close()
	b.StartTimer()
	return took, cpu
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSyncScan is one scan of a table of benchFlows flows the standby
// already holds, unchanged: the cost the sync pays every interval for
// finding nothing to send, per flow in the table. steady is the scan as it
// runs (the changed slots, none here, and the sweep's share of the rest);
// full looks at every slot, as a scan does for a resync, after its egress
// IPs changed or after a full window (and as every scan did before the
// change marks).
func BenchmarkSyncScan(b *testing.B) {
	a := newPipeline(b, 1<<18, egress)
	for k := range benchFlows {
		f, _ := benchFlow(k)
		adopt(b, a, f)
	}
	sb, addr := standby(b, newPipeline(b, 1<<18))
	sa := newSync(b, "primary", testKey, a, func(c *Config) { c.Interval = DefaultInterval })
	sa.SetPeers(map[netip.Addr]string{egress: addr})
	l := sa.links[addr]
	nstest.Eventually(b, "session", syncWait, func() bool { return l.current() != nil })
	sa.scan()
	waitSynced(b, sa, sb, 0, 0, benchFlows)
	for _, full := range []bool{false, true} {
		name := "steady"
		if full {
			name = "full"
		}
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread() // the scan's CPU time is this thread's
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			t0 := threadTime(b)
			for range b.N {
				l.full = full
				sa.scan()
			}
			cpu := threadTime(b) - t0
			b.StopTimer()
			if s := sa.Stats().RecordsSent; s != benchFlows {
				b.Fatalf("%d records sent, want %d: the scans were to find nothing new", s, benchFlows)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchFlows), "ns/flow")
			// CPU time, which a loaded machine does not inflate as it
			// does the wall clock.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*benchFlows), "cpu-ns/flow")
		})
	}
}
