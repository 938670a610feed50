package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
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
}

// rig is one lab's generator and receiver: VXLAN frames from worker w1 as
// its VTEP would send them for pod w1-p1, transmitted through an AF_XDP
// socket on w1's eth0; received by an AF_PACKET socket on the router's
// fabric side, where the router then drops them (nftables, netdev ingress).
type rig struct {
	w        wire
	egressIP netip.Addr
	tx       *nic.XSK
	txPool   *nic.Pool
	rx       *nic.Packet
	rxPool   *nic.Pool
	genCPU   int
	gwCPU    int
	gwTasks  []int // pids whose CPU counts as the gateway's own
	fabricNS string
	routerNS string
	seq      uint64
	newBase  uint64 // next never-used flow of the connection-rate scenario
	zipf     []uint32
	zipfN    int
}

func newRig(spec *lab.Spec, genCPU, gwCPU int) (*rig, error) {
	w1, g1 := spec.Workers[0], spec.Gateway("g1")
	pod := w1.Pods[0]
	egress, gw, ok := spec.Steering(pod)
	if !ok || gw.Name != g1.Name {
		return nil, fmt.Errorf("pod %s is not steered to g1 in this lab", pod.Name)
	}
	r := &rig{egressIP: egress, genCPU: genCPU, gwCPU: gwCPU, newBase: 1 << 40, fabricNS: spec.NS("fabric")}
	r.w = wire{outerSrc: w1.IP, outerDst: g1.IP, vni: lab.VNI, port: lab.VXLANPort,
		innerSrcMAC: w1.TunnelMAC, innerDstMAC: g1.TunnelMAC, pod: pod.IP, server: spec.Server.IP, podMTU: spec.PodMTU()}
	var err error
	if r.w.outerDstMAC, err = macOf(spec.NS(g1.Name), "eth0"); err != nil {
		return nil, err
	}
	var txIf int
	err = lab.Do(spec.NS(w1.Name), func() error {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		copy(r.w.outerSrcMAC[:], ifc.HardwareAddr)
		txIf = ifc.Index
		if r.txPool, err = nic.NewUmem(4096, 2048, 0); err != nil {
			return err
		}
		r.tx, err = nic.OpenXSK(r.txPool, "eth0", txIf, 0, nic.XDPOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("generator on %s eth0: %w", spec.NS(w1.Name), err)
	}
	rtr := spec.NS(spec.Router.Name)
	r.routerNS = rtr
	// The router counts and drops the generated frames (AF_PACKET taps
	// ahead of the ingress hook, so the receiver sees them first): the
	// count of those with the egress IP as source is what arrived.
	fam := "ip"
	if egress.Is6() {
		fam = "ip6"
	}
	rules := fmt.Sprintf("table netdev egret_bench {\n\tcounter arrived {}\n\tcounter wrong_source {}\n"+
		"\tchain in {\n\t\ttype filter hook ingress device \"eth0\" priority 0; policy accept;\n"+
		"\t\t%s saddr %v udp dport %d-%d counter name \"arrived\" drop\n"+
		"\t\tudp dport %d-%d counter name \"wrong_source\" drop\n\t}\n}\n",
		fam, egress, benchPortBase, benchPortBase+benchPorts-1, benchPortBase, benchPortBase+benchPorts-1)
	if out, err := cmdIn(rules, "ip", "netns", "exec", rtr, "nft", "-f", "-"); err != nil {
		r.close()
		return nil, fmt.Errorf("router counters: %v: %s", err, out)
	}
	err = lab.Do(rtr, func() error {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		if r.rxPool, err = nic.NewPool(4096, 2048, 0); err != nil {
			return err
		}
		r.rx, err = nic.OpenPacket(r.rxPool, "eth0", ifc.Index, nic.PacketOptions{})
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(r.rx.FD(), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		return sampleFilter(r.rx.FD(), r.w.pod.Is4())
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("receiver on %s eth0: %w", rtr, err)
	}
	return r, nil
}

func (r *rig) close() {
	if r.tx != nil {
		r.tx.Close()
		nic.FreeUmem(r.txPool)
	}
	if r.rx != nil {
		r.rx.Close()
	}
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
	return setAffinity(unix.Gettid(), cpu, prio)
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
	base := r.seq
	r.seq += total
	rc := newCounter(r.egressIP, base, total)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	var rxErr error
	go func() {
		defer wg.Done()
		if err := pin(r.genCPU, prioReceiver); err != nil {
			rxErr = err
			return
		}
		var b nic.Batch
		for !stop.Load() {
			if err := r.rx.Receive(&b, 20*time.Millisecond); err != nil {
				rxErr = err
				return
			}
			if b.N == 0 {
				continue
			}
			at := now()
			for i := 0; i < b.N; i++ {
				rc.add(b.Frame(i), at)
			}
			b.Release()
		}
	}()
	drops0 := packetDrops(r.rx.FD())
	in0 := txDrops(r.fabricNS, "g1")
	ok0, wrong0, err := routerCounts(r.routerNS)
	if err != nil {
		return t, err
	}
	cpu0, tasks0 := coreTicks(r.gwCPU), taskTicks(r.gwTasks)
	sent, secs, err := r.send(tr, rate, base, total)
	cpu1, tasks1 := coreTicks(r.gwCPU), taskTicks(r.gwTasks)
	// Frames still in flight arrive within milliseconds; late ones count as lost.
	time.Sleep(200 * time.Millisecond)
	t.InputDrops = txDrops(r.fabricNS, "g1") - in0
	ok1, wrong1, cerr := routerCounts(r.routerNS)
	stop.Store(true)
	wg.Wait()
	if err == nil {
		err = rxErr
	}
	if err == nil {
		err = cerr
	}
	t.Seconds, t.Sent = secs, sent
	t.Received, t.WrongSource = ok1-ok0, wrong1-wrong0
	t.Sampled, t.Reordered, t.Duplicates = rc.received, rc.reordered, rc.dups
	t.ReceiverDrops = packetDrops(r.rx.FD()) - drops0
	if secs > 0 {
		t.GatewayCores = float64(cpu1-cpu0) / clkTck / secs
		t.TaskCores = float64(tasks1-tasks0) / clkTck / secs
	}
	if t.Received > 0 {
		t.NsPerPacket = t.GatewayCores * secs / float64(t.Received) * 1e9
		t.TaskNsPerPacket = t.TaskCores * secs / float64(t.Received) * 1e9
	}
	t.Latency = &rc.lat
	return t, err
}

// send transmits total frames at rate from the generator's core, pacing
// each batch against the clock; it returns the frames handed to the kernel
// and the seconds that took (longer than planned when the generator or its
// core cannot keep up, which lowers the offered rate the trial reports).
func (r *rig) send(tr traffic, rate float64, base, total uint64) (uint64, float64, error) {
	errc := make(chan error, 1)
	var secs float64
	st0 := r.tx.Stats()
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
			n := min(uint64(batch), total-i)
			got := r.txPool.Alloc(&b, int(n))
			if got == 0 {
				r.tx.Flush()
				continue
			}
			ts := now()
			for k := 0; k < got; k++ {
				seq := base + i + uint64(k)
				size := tr.Size
				if size == 0 {
					size = imix[seq%uint64(len(imix))]
				}
				l := r.w.build(b.Buf[k][b.Off[k]:], size, r.flowOf(tr, seq), seq, ts)
				b.SetFrame(k, b.Off[k], l)
			}
			r.tx.Transmit(&b)
			i += uint64(got)
		}
		for try := 0; try < 100 && r.tx.InFlight() > 0; try++ {
			r.tx.Flush()
			time.Sleep(time.Millisecond)
		}
		secs = float64(now()-began) / 1e9
		errc <- nil
	}()
	err := <-errc
	st := r.tx.Stats()
	if tr.New {
		r.newBase += total
	}
	return (st.TxFrames - st0.TxFrames) - (st.TxDrops - st0.TxDrops), secs, err
}

// counter is the receiver's tally of one trial.
type counter struct {
	egress                              netip.Addr
	base, n                             uint64
	seen                                []uint64 // bitmap of sequence numbers
	maxSeq                              uint64
	received, reordered, dups, wrongSrc uint64
	lat                                 histogram
}

func newCounter(egress netip.Addr, base, n uint64) *counter {
	return &counter{egress: egress, base: base, n: n, seen: make([]uint64, (n+63)/64)}
}

func (c *counter) add(f []byte, at int64) {
	st, ok := parseOut(f)
	if !ok || st.seq < c.base || st.seq >= c.base+c.n {
		return // not ours, or a late frame of an earlier trial
	}
	if st.src != c.egress {
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

// sampleFilter attaches the classic BPF program that keeps the sampled
// frames: the low byte of the sequence number, at a fixed offset for the
// pod's IP version, with its low bits zero.
func sampleFilter(fd int, v4 bool) error {
	off := uint32(ethLen + 40 + udpLen + 7)
	if v4 {
		off = ethLen + 20 + udpLen + 7
	}
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: off, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 1<<sampleShift - 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.RetConstant{Val: 1 << 16},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		return err
	}
	f := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		f[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
}

// routerCounts reads the router's counters: frames that arrived with the
// egress IP as source, and generated frames with any other source.
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

// packetDrops reads the AF_PACKET socket's drop counter (PACKET_STATISTICS
// resets it on each read, so the caller's deltas are sums of reads).
var dropTotal uint64

func packetDrops(fd int) uint64 {
	st, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err == nil {
		dropTotal += uint64(st.Drops)
	}
	return dropTotal
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

// coreTicks is the busy time of one CPU (all but idle and iowait).
func coreTicks(cpu int) uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	prefix := "cpu" + strconv.Itoa(cpu) + " "
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var busy uint64
		for i, v := range strings.Fields(line)[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i != 3 && i != 4 && i < 8 { // idle, iowait; guest is inside user
				busy += n
			}
		}
		return busy
	}
	return 0
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
