package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/lab"
)

// epoch is the clock both sides stamp with: the generator and the receiver
// run in this one process, so send and receive times come from the same
// monotonic clock.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// traffic is what a trial sends.
type traffic struct {
	Flows int    `json:"flows"`
	Dist  string `json:"distribution"` // uniform (round robin over the flows) or zipf
	Size  int    `json:"frame_bytes"`  // 0: IMIX
	// New makes every frame a flow never seen before (the connection-rate
	// scenario): Flows is then ignored.
	New bool `json:"new_flows"`
	// Dir is the direction: forward (pod → outside, the default), reply
	// (outside → pod on established flows) or both (batches alternate).
	Dir string `json:"direction,omitempty"`
	// Kind is what the frames are: UDP (the default), tcp-syn (each frame
	// a SYN from the pod opening a connection, which the responder outside
	// answers with a SYN-ACK when the SYN reaches it; the connection counts
	// when its SYN-ACK reaches the pod), or icmp-frag (ICMP
	// fragmentation-needed from outside for established flows; Dir is
	// reply).
	Kind string `json:"kind,omitempty"`
}

// Directions and kinds of traffic.
const (
	dirReply    = "reply"
	dirBoth     = "both"
	kindTCPSYN  = "tcp-syn"
	kindICMPErr = "icmp-frag"
)

// legs reports which directions tr sends in.
func (tr traffic) legs() (fwd, rev bool) {
	switch {
	case tr.Kind == kindTCPSYN || tr.Dir == dirBoth:
		return true, true
	case tr.Kind == kindICMPErr || tr.Dir == dirReply:
		return false, true
	}
	return true, false
}

// leg is one direction's generator and receiver: an AF_XDP socket that
// transmits, and an AF_PACKET socket that samples what arrives where an
// nftables table (egret_bench, in ns) counts and drops it.
type leg struct {
	tx     *nic.XSK
	txPool *nic.Pool
	rx     *nic.Packet
	rxPool *nic.Pool
	ns     string     // where the counters are
	want   netip.Addr // the source an arriving frame has when translated right
	parse  func([]byte) (stamp, bool)
	drops  uint64 // PACKET_STATISTICS drops so far (it resets on each read)
}

func (l *leg) close() {
	if l.tx != nil {
		l.tx.Close()
		nic.FreeUmem(l.txPool)
	}
	if l.rx != nil {
		l.rx.Close()
	}
}

// openTx opens l's AF_XDP transmit socket on dev in ns.
func (l *leg) openTx(ns, dev string) (mac [6]byte, err error) {
	err = lab.Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		copy(mac[:], ifc.HardwareAddr)
		if l.txPool, err = nic.NewUmem(4096, 2048, 0); err != nil {
			return err
		}
		l.tx, err = nic.OpenXSK(l.txPool, dev, ifc.Index, 0, nic.XDPOptions{})
		return err
	})
	if err != nil {
		return mac, fmt.Errorf("generator on %s %s: %w", ns, dev, err)
	}
	return mac, nil
}

// openRx installs the counters (rules: an nftables netdev table) and opens
// l's AF_PACKET receiver on dev in ns.
func (l *leg) openRx(ns, dev, rules string) error {
	if out, err := cmdIn(rules, "ip", "netns", "exec", ns, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("counters in %s: %v: %s", ns, err, out)
	}
	l.ns = ns
	err := lab.Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		if l.rxPool, err = nic.NewPool(4096, 2048, 0); err != nil {
			return err
		}
		l.rx, err = nic.OpenPacket(l.rxPool, dev, ifc.Index, nic.PacketOptions{})
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(l.rx.FD(), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		return nil
	})
	if err != nil {
		return fmt.Errorf("receiver on %s %s: %w", ns, dev, err)
	}
	return nil
}

// rig is one lab's generators and receivers. Forward (fwd): VXLAN frames
// from worker w1 as its VTEP would send them for pod w1-p1, transmitted
// from w1's eth0; received on the router's fabric side, where the router
// then drops them. Reply (rev): the server's frames to the egress IP,
// transmitted from the router's eth0; received, translated and inside
// VXLAN, on w1's eth0, where w1 then drops them.
type rig struct {
	w        wire
	bk       back
	egressIP netip.Addr
	fwd, rev leg
	genCPU   int
	gwCPUs   []int // the gateway's cores (two in the two-queue scenario, if given)
	gwTasks  []int // pids whose CPU counts as the gateway's own
	fabricNS string
	gwPort   string // the fabric bridge's port towards the gateway (named after it)
	seq      uint64
	newBase  uint64 // next never-used flow of the connection-rate scenarios
	zipf     []uint32
	zipfN    int
}

// target is the gateway the generator's traffic goes through and the
// egress IP it leaves with there.
type target struct {
	gw       *lab.Gateway
	egress   netip.Addr
	innerMAC [6]byte // the inner destination MAC the gateway takes
}

// staticTarget is where the lab's spec steers pod w1-p1 (the kernel and
// egret sides: the spec is their configuration).
func staticTarget(spec *lab.Spec) (target, error) {
	pod := spec.Workers[0].Pods[0]
	egress, gw, ok := spec.Steering(pod)
	if !ok {
		return target{}, fmt.Errorf("pod %s is steered nowhere in this lab", pod.Name)
	}
	return target{gw: gw, egress: egress, innerMAC: gw.TunnelMAC}, nil
}

func newRig(spec *lab.Spec, tg target, genCPU int, gwCPUs []int) (r *rig, err error) {
	w1, gw, egress := spec.Workers[0], tg.gw, tg.egress
	pod := w1.Pods[0]
	r = &rig{egressIP: egress, genCPU: genCPU, gwCPUs: gwCPUs, newBase: 1 << 40, fabricNS: spec.NS("fabric"), gwPort: gw.Name}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	r.w = wire{outerSrc: w1.IP, outerDst: gw.IP, vni: lab.VNI, port: lab.VXLANPort,
		innerSrcMAC: w1.TunnelMAC, innerDstMAC: tg.innerMAC, pod: pod.IP, server: spec.Server.IP, podMTU: spec.PodMTU()}
	if r.w.outerDstMAC, err = macOf(spec.NS(gw.Name), "eth0"); err != nil {
		return nil, err
	}
	if r.w.outerSrcMAC, err = r.fwd.openTx(spec.NS(w1.Name), "eth0"); err != nil {
		return nil, err
	}
	// The router counts and drops the generated frames (AF_PACKET taps
	// ahead of the ingress hook, so the receiver sees them first): the
	// count of those with the egress IP as source is what arrived.
	fam := "ip"
	if egress.Is6() {
		fam = "ip6"
	}
	rules := fmt.Sprintf("table netdev egret_bench {\n\tcounter arrived {}\n\tcounter wrong_source {}\n"+
		"\tchain in {\n\t\ttype filter hook ingress device \"eth0\" priority 0; policy accept;\n"+
		"\t\t%s saddr %v meta l4proto { udp, tcp } th dport %d-%d counter name \"arrived\" drop\n"+
		"\t\tmeta l4proto { udp, tcp } th dport %d-%d counter name \"wrong_source\" drop\n\t}\n}\n",
		fam, egress, benchPortBase, benchPortBase+benchPorts-1, benchPortBase, benchPortBase+benchPorts-1)
	r.fwd.want, r.fwd.parse = egress, parseOut
	if err := r.fwd.openRx(spec.NS(spec.Router.Name), "eth0", rules); err != nil {
		return nil, err
	}
	if !egress.Is4() || !pod.IP.Is4() || !w1.IP.Is4() {
		return r, nil // the reply direction is built for the IPv4 lab only
	}
	r.bk = back{dstMAC: r.w.outerDstMAC, server: spec.Server.IP, egress: egress}
	if r.bk.srcMAC, err = r.rev.openTx(spec.NS(spec.Router.Name), "eth0"); err != nil {
		return nil, err
	}
	// Worker w1 counts and drops what the gateway sends back to the pod
	// inside VXLAN: the inner packet (30 bytes past the outer UDP header)
	// to the pod from the server is what arrived, to the pod from anyone
	// else the wrong source.
	const innerIP = (udpLen + vxlanLen + ethLen) * 8
	rules = fmt.Sprintf("table netdev egret_bench {\n\tcounter arrived {}\n\tcounter wrong_source {}\n"+
		"\tchain in {\n\t\ttype filter hook ingress device \"eth0\" priority 0; policy accept;\n"+
		"\t\tudp dport %d @th,%d,32 %#x @th,%d,32 %#x counter name \"arrived\" drop\n"+
		"\t\tudp dport %d @th,%d,32 %#x counter name \"wrong_source\" drop\n\t}\n}\n",
		lab.VXLANPort, innerIP+16*8, be32(pod.IP), innerIP+12*8, be32(spec.Server.IP),
		lab.VXLANPort, innerIP+16*8, be32(pod.IP))
	r.rev.want, r.rev.parse = spec.Server.IP, parseIn
	if err := r.rev.openRx(spec.NS(w1.Name), "eth0", rules); err != nil {
		return nil, err
	}
	return r, nil
}

// be32 is an IPv4 address as the number nftables compares raw payload with.
func be32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func (r *rig) close() {
	r.fwd.close()
	r.rev.close()
}

func macOf(ns, dev string) (m [6]byte, err error) {
	err = lab.Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		copy(m[:], ifc.HardwareAddr)
		return nil
	})
	return m, err
}

// pin moves the calling goroutine's OS thread to cpu at SCHED_FIFO prio.
// The goroutine must stay locked until it exits, so that the runtime ends
// the thread rather than hand it, still real-time, to other goroutines.
func pin(cpu, prio int) error {
	runtime.LockOSThread()
	return setAffinity(unix.Gettid(), []int{cpu}, prio)
}

func (r *rig) flowOf(tr traffic, i uint64) uint64 {
	switch {
	case tr.New:
		return r.newBase + i
	case tr.Dist == "zipf":
		if r.zipfN != tr.Flows {
			// A fixed table of draws (Zipf s=1.1 over the flows), walked in order.
			z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(tr.Flows-1))
			r.zipf = make([]uint32, 1<<20)
			for k := range r.zipf {
				r.zipf[k] = uint32(z.Uint64())
			}
			r.zipfN = tr.Flows
		}
		return uint64(r.zipf[i&(1<<20-1)])
	default:
		return i % uint64(tr.Flows)
	}
}

// run offers rate frames per second of tr for d, then counts what arrived.
func (r *rig) run(tr traffic, rate float64, d time.Duration) (trial, error) {
	var t trial
	total := uint64(rate * d.Seconds())
	if total == 0 {
		return t, fmt.Errorf("rate %.0f for %v is no frames", rate, d)
	}
	fwd, rev := tr.legs()
	if rev && r.rev.tx == nil {
		return t, errors.New("the reply direction is built for the IPv4 lab only")
	}
	var legs []*leg
	if fwd {
		off := uint32(ethLen + 40 + udpLen + 7)
		if r.w.pod.Is4() {
			off = ethLen + 20 + udpLen + 7
		}
		err := sampleFilter(r.fwd.rx.FD(), off)
		if tr.Kind == kindTCPSYN {
			err = attachFilter(r.fwd.rx.FD(), []bpf.Instruction{bpf.RetConstant{Val: 1 << 16}}) // the responder reads every frame
		}
		if err != nil {
			return t, err
		}
		legs = append(legs, &r.fwd)
	}
	if rev {
		if err := sampleFilter(r.rev.rx.FD(), inStampOffset(tr.Kind == kindICMPErr)); err != nil {
			return t, err
		}
		legs = append(legs, &r.rev)
	}
	base := r.seq
	r.seq += total
	var stop atomic.Bool
	var wg sync.WaitGroup
	counters := make([]*counter, len(legs))
	rxErrs := make([]error, len(legs))
	arrived0, wrong0 := make([]uint64, len(legs)), make([]uint64, len(legs))
	drops0 := make([]uint64, len(legs))
	for i, l := range legs {
		rc := newCounter(l.want, l.parse, base, total)
		counters[i] = rc
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pin(r.genCPU, prioReceiver); err != nil {
				rxErrs[i] = err
				return
			}
			var b nic.Batch
			for !stop.Load() {
				if err := l.rx.Receive(&b, 20*time.Millisecond); err != nil {
					rxErrs[i] = err
					return
				}
				if b.N == 0 {
					continue
				}
				at := now()
				for k := 0; k < b.N; k++ {
					rc.add(b.Frame(k), at)
				}
				if tr.Kind == kindTCPSYN && l == &r.fwd {
					r.respond(&b)
				}
				b.Release()
			}
		}()
		drops0[i] = l.packetDrops()
		var err error
		if arrived0[i], wrong0[i], err = routerCounts(l.ns); err != nil {
			stop.Store(true)
			wg.Wait()
			return t, err
		}
	}
	in0 := txDrops(r.fabricNS, r.gwPort)
	cpu0, tasks0 := coreTicks(r.gwCPUs), taskTicks(r.gwTasks)
	sent, secs, err := r.send(tr, rate, base, total)
	cpu1, tasks1 := coreTicks(r.gwCPUs), taskTicks(r.gwTasks)
	// Frames still in flight arrive within milliseconds; late ones count as lost.
	time.Sleep(200 * time.Millisecond)
	t.InputDrops = txDrops(r.fabricNS, r.gwPort) - in0
	var lat histogram
	for i, l := range legs {
		ok1, wrong1, cerr := routerCounts(l.ns)
		if err == nil {
			err = cerr
		}
		if tr.Kind != kindTCPSYN || l == &r.rev {
			// A connection is set up when its SYN-ACK reaches the pod
			// (its SYN had to reach the server first).
			t.Received += ok1 - arrived0[i]
		}
		t.WrongSource += wrong1 - wrong0[i]
	}
	stop.Store(true)
	wg.Wait()
	if tr.Kind == kindTCPSYN {
		r.rev.tx.Flush()
	}
	for i, l := range legs {
		if err == nil {
			err = rxErrs[i]
		}
		rc := counters[i]
		t.Sampled += rc.received
		t.Reordered += rc.reordered
		t.Duplicates += rc.dups
		t.ReceiverDrops += l.packetDrops() - drops0[i]
		lat.merge(&rc.lat)
	}
	t.Seconds, t.Sent = secs, sent
	if secs > 0 {
		t.GatewayCores = float64(cpu1-cpu0) / clkTck / secs
		t.TaskCores = float64(tasks1-tasks0) / clkTck / secs
	}
	if t.Received > 0 {
		t.NsPerPacket = t.GatewayCores * secs / float64(t.Received) * 1e9
		t.TaskNsPerPacket = t.TaskCores * secs / float64(t.Received) * 1e9
	}
	t.Latency = &lat
	return t, err
}

// respond is the server's side of tcp-syn: for every SYN in b that reached
// the router from the egress IP (as the gateway translated it), it sends
// the SYN-ACK from outside, acknowledging it. It runs in the forward
// receiver, on the generator's core; a SYN it had no buffer for goes
// unanswered and counts as lost.
func (r *rig) respond(b *nic.Batch) {
	type syn struct {
		sport, dport uint16
		seq          uint32
	}
	var syns [nic.MaxBatch]syn
	n := 0
	for k := 0; k < b.N && n < len(syns); k++ {
		if sport, dport, seq, ok := parseSYN(b.Frame(k), r.egressIP); ok {
			syns[n] = syn{sport, dport, seq}
			n++
		}
	}
	if n == 0 {
		return
	}
	var out nic.Batch
	got := r.rev.txPool.Alloc(&out, n)
	if got == 0 {
		r.rev.tx.Flush()
		if got = r.rev.txPool.Alloc(&out, n); got == 0 {
			return
		}
	}
	for k := 0; k < got; k++ {
		s := syns[k]
		out.SetFrame(k, out.Off[k], r.bk.buildSynAck(out.Buf[k][out.Off[k]:], s.dport, s.sport, s.seq+1))
	}
	r.rev.tx.Transmit(&out)
}

// txStallLimit is how long the generator waits for its transmit ring to
// hand a frame back before it gives the trial up.
const txStallLimit = 5 * time.Second

// builder writes frame seq of flow, size bytes, sent at ts, into b and
// returns its length.
type builder func(b []byte, size int, flow, seq uint64, ts int64) int

// plan says how the generator sends tr's frames: the legs its batches take
// in turn, each with its builder. (The SYN-ACKs of tcp-syn are not the
// generator's: the responder sends them, see run.)
func (r *rig) plan(tr traffic) (legs []*leg, builds []builder) {
	switch {
	case tr.Kind == kindTCPSYN:
		return []*leg{&r.fwd}, []builder{r.w.buildSYN}
	case tr.Kind == kindICMPErr:
		return []*leg{&r.rev}, []builder{r.bk.buildFragNeeded}
	case tr.Dir == dirReply:
		return []*leg{&r.rev}, []builder{r.bk.buildReply}
	case tr.Dir == dirBoth:
		return []*leg{&r.fwd, &r.rev}, []builder{r.w.build, r.bk.buildReply}
	}
	return []*leg{&r.fwd}, []builder{r.w.build}
}

// send transmits total frames at rate from the generator's core, pacing
// each batch against the clock; it returns the frames handed to the kernel
// and the seconds that took (longer than planned when the generator or its
// core cannot keep up, which lowers the offered rate the trial reports).
// Batches take the plan's legs in turn.
func (r *rig) send(tr traffic, rate float64, base, total uint64) (uint64, float64, error) {
	legs, builds := r.plan(tr)
	errc := make(chan error, 1)
	var secs float64
	st0 := make([]nic.Stats, len(legs))
	for k, l := range legs {
		st0[k] = l.tx.Stats()
	}
	go func() {
		if err := pin(r.genCPU, prioGenerator); err != nil {
			errc <- err
			return
		}
		per := float64(time.Second) / rate
		// About 100 µs of frames per batch: a batch leaves as one burst
		// with one send time, so its last frame's latency includes the
		// gateway's work on the frames ahead of it.
		batch := int(rate / 10000)
		batch = max(1, min(batch, nic.MaxBatch))
		var b nic.Batch
		start := now()
		began := start
		var i uint64
		var stalled int64 // since when no frame could be allocated; 0 while frames come back
		turn := 0         // whose batch
		for i < total {
			due := start + int64(float64(i)*per)
			switch wait := due - now(); {
			case wait > 0:
				// A real-time thread's nanosleep has no timer slack;
				// spinning instead would trip the kernel's real-time
				// throttling (and stall everything on the core for 50 ms).
				ts := unix.NsecToTimespec(wait)
				unix.Nanosleep(&ts, nil)
			case wait < -2_000_000:
				// Descheduled for a while: no catch-up burst (the
				// gateway would see a burst the rate does not have);
				// the lost time lowers the offered rate instead.
				start -= wait
			}
			l, build := legs[turn], builds[turn]
			n := min(uint64(batch), total-i)
			got := l.txPool.Alloc(&b, int(n))
			if got == 0 {
				l.tx.Flush()
				// The kernel hands transmitted frames back to the pool; a
				// ring that gave none back for this long has stopped (seen
				// on copy-mode veth after an overload trial), and waiting
				// on would hang the run.
				if stalled == 0 {
					stalled = now()
				} else if now()-stalled > int64(txStallLimit) {
					errc <- fmt.Errorf("the generator's transmit ring handed no frame back for %v after %d of %d frames: the trial is void", txStallLimit, i, total)
					return
				}
				continue
			}
			stalled = 0
			ts := now()
			for k := 0; k < got; k++ {
				seq := base + i + uint64(k)
				size := tr.Size
				if size == 0 {
					size = imix[seq%uint64(len(imix))]
				}
				b.SetFrame(k, b.Off[k], build(b.Buf[k][b.Off[k]:], size, r.flowOf(tr, seq), seq, ts))
			}
			l.tx.Transmit(&b)
			i += uint64(got)
			turn = (turn + 1) % len(legs)
		}
		for try := 0; try < 100; try++ {
			busy := false
			for _, l := range legs {
				if l.tx.InFlight() > 0 {
					l.tx.Flush()
					busy = true
				}
			}
			if !busy {
				break
			}
			time.Sleep(time.Millisecond)
		}
		secs = float64(now()-began) / 1e9
		errc <- nil
	}()
	err := <-errc
	var sent uint64
	for k, l := range legs {
		st := l.tx.Stats()
		sent += (st.TxFrames - st0[k].TxFrames) - (st.TxDrops - st0[k].TxDrops)
	}
	if tr.New {
		r.newBase += total
	}
	return sent, secs, err
}

// counter is the receiver's tally of one trial on one leg.
type counter struct {
	want                                netip.Addr // the source a frame must have
	parse                               func([]byte) (stamp, bool)
	base, n                             uint64
	seen                                []uint64 // bitmap of sequence numbers
	maxSeq                              uint64
	received, reordered, dups, wrongSrc uint64
	lat                                 histogram
}

func newCounter(want netip.Addr, parse func([]byte) (stamp, bool), base, n uint64) *counter {
	return &counter{want: want, parse: parse, base: base, n: n, seen: make([]uint64, (n+63)/64)}
}

func (c *counter) add(f []byte, at int64) {
	st, ok := c.parse(f)
	if !ok || st.seq < c.base || st.seq >= c.base+c.n {
		return // not ours, or a late frame of an earlier trial
	}
	if st.src != c.want {
		return // counted by the router
	}
	i := st.seq - c.base
	if c.seen[i/64]&(1<<(i%64)) != 0 {
		c.dups++
		return
	}
	c.seen[i/64] |= 1 << (i % 64)
	c.received++
	if st.seq < c.maxSeq {
		c.reordered++
	} else {
		c.maxSeq = st.seq
	}
	c.lat.add(at - st.ts)
}

// sampleShift: the receiver reads one frame in 1<<sampleShift, those whose
// sequence number is a multiple of it (a socket filter picks them in the
// kernel); loss is counted by the router, on every frame.
const sampleShift = 5

// sampleFilter attaches (or replaces) the classic BPF program that keeps
// the sampled frames: the low byte of the sequence number, at offset off,
// with its low bits zero.
func sampleFilter(fd int, off uint32) error {
	return attachFilter(fd, []bpf.Instruction{
		bpf.LoadAbsolute{Off: off, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 1<<sampleShift - 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.RetConstant{Val: 1 << 16},
		bpf.RetConstant{Val: 0},
	})
}

// attachFilter attaches (or replaces) a classic BPF socket filter.
func attachFilter(fd int, ins []bpf.Instruction) error {
	prog, err := bpf.Assemble(ins)
	if err != nil {
		return err
	}
	f := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		f[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
}

// routerCounts reads the counters of the egret_bench table in ns (the
// router's, or worker w1's for the reply direction): frames that arrived
// with the source they should have, and generated frames with any other.
func routerCounts(ns string) (arrived, wrong uint64, err error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "-j", "list", "counters", "table", "netdev", "egret_bench").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("read the router's counters: %w", err)
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, 0, fmt.Errorf("the router's counters: %w", err)
	}
	for _, o := range doc.Nftables {
		switch {
		case o.Counter == nil:
		case o.Counter.Name == "arrived":
			arrived = o.Counter.Packets
		case o.Counter.Name == "wrong_source":
			wrong = o.Counter.Packets
		}
	}
	return arrived, wrong, nil
}

// packetDrops reads the receiver's drop counter (PACKET_STATISTICS resets
// it on each read, so the caller's deltas are sums of reads).
func (l *leg) packetDrops() uint64 {
	st, err := unix.GetsockoptTpacketStats(l.rx.FD(), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err == nil {
		l.drops += uint64(st.Drops)
	}
	return l.drops
}

// txDrops is the transmit drop counter of a veth: for the bridge's port
// towards the gateway, the frames the gateway's receive ring had no room for.
func txDrops(ns, dev string) uint64 {
	out, err := exec.Command("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		return 0
	}
	var links []struct {
		Stats struct {
			TX struct {
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal(out, &links) != nil || len(links) == 0 {
		return 0
	}
	return links[0].Stats.TX.Dropped
}

// clkTck is USER_HZ, the unit of /proc tick counters (100 on Linux).
const clkTck = 100

// coreTicks is the busy time of the CPUs (all but idle and iowait), each
// counted once.
func coreTicks(cpus []int) uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	var busy uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || !slices.Contains(cpus, n) {
			continue
		}
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i != 3 && i != 4 && i < 8 { // idle, iowait; guest is inside user
				busy += n
			}
		}
	}
	return busy
}

// taskTicks sums utime+stime of the processes (all their threads).
func taskTicks(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		sum += u + st
	}
	return sum
}
