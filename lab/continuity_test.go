package lab

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/flowsync"
	"github.com/egret-gw/egret/internal/nstest"
)

// testContinuity runs, on the managed lab testManaged leaves (every
// gateway running), the rest of issue 15's connection-continuity tests:
// 100 long-lived connections through one gateway across its SIGTERM and
// restart (an upgrade) and across a controller-driven move (its node's
// egress-assignable label removed), the standby cut off for 30 s, and the
// standby's table sampled against the primary's under load.
func testContinuity(t *testing.T, l *Lab) {
	t.Run("GracefulRestart", func(t *testing.T) { testGracefulRestartContinues(t, l) })
	t.Run("LabelRemoved", func(t *testing.T) { testLabelRemovedContinues(t, l) })
	t.Run("StandbyCutOff", func(t *testing.T) { testStandbyCutOff(t, l) })
	t.Run("StandbyInStepUnderLoad", func(t *testing.T) { testStandbyInStepUnderLoad(t, l) })
}

// syncLag is how far the standby's table may lag behind the primary's:
// the 100 ms plus one scan of the flow sync.
const syncLag = 100*time.Millisecond + flowsync.DefaultInterval

// pickBlue waits until both of blue's egress IPs are assigned, each with a
// standby, on running gateways, and returns the first: its IP, node and
// standby.
func pickBlue(t *testing.T, l *Lab) (netip.Addr, string, string, *Status) {
	t.Helper()
	var ready []AssignmentStatus
	var st *Status
	nstest.UntilEvery(t, "blue's egress IPs both assigned with a standby on running gateways", 20*time.Second, 200*time.Millisecond, func() (bool, string) {
		var err error
		if st, err = l.Status(); err != nil {
			t.Fatal(err)
		}
		ready = ready[:0]
		for _, a := range st.Assignment {
			if a.EgressIP == "blue" && a.Node != "" && a.Standby != "" && gatewayRunning(l, a.Node) && gatewayRunning(l, a.Standby) {
				ready = append(ready, a)
			}
		}
		return len(ready) == 2, fmt.Sprint(st.Assignment)
	})
	slices.SortFunc(ready, func(a, b AssignmentStatus) int { return a.IP.Compare(b.IP) })
	return ready[0].IP, ready[0].Node, ready[0].Standby, st
}

func gatewayRunning(l *Lab, gw string) bool {
	return alive(readPid(filepath.Join(l.RunDir(), "gateway-"+gw+".pid")))
}

// listedFlow is one line of `egret flows --json`.
type listedFlow struct {
	Proto      string         `json:"proto"`
	Pod        netip.AddrPort `json:"pod"`
	Server     netip.AddrPort `json:"server"`
	EgressIP   netip.Addr     `json:"egressIP"`
	EgressPort uint16         `json:"egressPort"`
	State      string         `json:"state"`
	ExpiresIn  float64        `json:"expiresIn"`
	Backup     bool           `json:"backup"`
}

type flowKey struct {
	proto       string
	pod, server netip.AddrPort
}

// flowTable is one listing of a gateway's flows of one egress IP, with the
// times the listing started and ended.
type flowTable struct {
	gw         string
	raw        []byte // `egret flows --json` output, until parse
	flows      map[flowKey]listedFlow
	start, end time.Time
}

// fetchFlows lists gateway gw's flows of egress IP ip with the operator's
// command, `egret flows --json`, on the gateway's flows socket; parse
// reads them, so that a comparison can take its listings close together.
func fetchFlows(l *Lab, gw string, ip netip.Addr) (flowTable, error) {
	ft := flowTable{gw: gw, start: time.Now()}
	var stderr bytes.Buffer
	cmd := exec.Command(l.Binary, "flows", "--socket", FlowsSocket(l.RunDir(), gw), "--egress-ip", ip.String(), "--json")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	ft.end, ft.raw = time.Now(), out
	if err != nil {
		return ft, fmt.Errorf("egret flows of %s: %w: %s", gw, err, strings.TrimSpace(stderr.String()))
	}
	return ft, nil
}

func (ft *flowTable) parse() error {
	ft.flows = map[flowKey]listedFlow{}
	dec := json.NewDecoder(bytes.NewReader(ft.raw))
	for dec.More() {
		var f listedFlow
		if err := dec.Decode(&f); err != nil {
			return fmt.Errorf("egret flows of %s: %w", ft.gw, err)
		}
		ft.flows[flowKey{f.Proto, f.Pod, f.Server}] = f
	}
	ft.raw = nil
	return nil
}

// listFlows is fetchFlows and parse.
func listFlows(l *Lab, gw string, ip netip.Addr) (flowTable, error) {
	ft, err := fetchFlows(l, gw, ip)
	if err == nil {
		err = ft.parse()
	}
	return ft, err
}

// waitHeld waits until the standby holds a backup flow, with the egress
// port the server saw, for every connection of ll through ip.
func waitHeld(t *testing.T, l *Lab, standby string, ip netip.Addr, ll *longLived) {
	t.Helper()
	server := netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort)
	nstest.UntilEvery(t, fmt.Sprintf("the standby %s of %v holding a backup flow (with the port the server saw) for each connection", standby, ip), 10*time.Second, 200*time.Millisecond, func() (bool, string) {
		ft, err := listFlows(l, standby, ip)
		if err != nil {
			t.Fatal(err)
		}
		missing := 0
		for _, c := range ll.conns {
			f, ok := ft.flows[flowKey{"tcp", c.from, server}]
			if c.src.Addr() == ip && (!ok || !f.Backup || f.EgressPort != c.src.Port()) {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of the %d connections missing", missing, len(ll.conns))
	})
}

// stepResult compares a standby's backup flows of an egress IP with its
// primary's, sampled by inStep.
type stepResult struct {
	stable    int      // flows listed by both primary listings: each must be on the standby
	standby   int      // backup flows the standby listed
	missing   []string // stable flows the standby lacks
	wrong     []string // stable flows the standby holds with another port, or another state while the primary's did not change
	extra     []string // backup flows the primary listed in neither listing
	lagged    time.Duration
	listingMS int64 // the longest listing's duration
}

func (r stepResult) ok() bool { return len(r.missing)+len(r.wrong)+len(r.extra) == 0 }

func (r stepResult) String() string {
	first := func(s []string) string {
		if len(s) > 3 {
			return strings.Join(s[:3], "; ") + "; …"
		}
		return strings.Join(s, "; ")
	}
	return fmt.Sprintf("%d stable flows on the primary, %d backup flows on the standby; %d missing [%s], %d wrong [%s], %d the primary no longer had [%s]",
		r.stable, r.standby, len(r.missing), first(r.missing), len(r.wrong), first(r.wrong), len(r.extra), first(r.extra))
}

// inStep samples how far the standby's backup flows of ip are behind the
// primary's. It lists the primary's flows of ip (early), waits syncLag
// after that listing ended, then lists the primary's again (now) and the
// standby's at the same time, and the primary's once more when both are
// done (late). A flow in all three primary listings existed before early
// ended and still existed after the standby's listing, so the standby must
// hold it, with the same egress port and, unless the primary's state
// changed between early and late, the same state; a flow close to expiry
// on the primary (under 1 s left) is left out. A backup flow on the
// standby must be in one of the primary listings: a flow the primary
// removed before early was listed must be gone from the standby by then
// (a listing takes a while: a flow made after the primary's listing passed
// its place and synced before the standby's reached it is in late). So
// flows created or removed in the last syncLag (100 ms + one scan
// interval) may differ; nothing else.
func inStep(l *Lab, ip netip.Addr, primary, standby string) (stepResult, error) {
	var r stepResult
	early, err := fetchFlows(l, primary, ip)
	if err != nil {
		return r, err
	}
	// sleep: the comparison's budget is a length of time (syncLag), the sync's allowed lag, not an event
	time.Sleep(time.Until(early.end.Add(syncLag)))
	var now, sb flowTable
	var nowErr, sbErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); now, nowErr = fetchFlows(l, primary, ip) }()
	go func() { defer wg.Done(); sb, sbErr = fetchFlows(l, standby, ip) }()
	wg.Wait()
	if err := errors.Join(nowErr, sbErr); err != nil {
		return r, err
	}
	late, err := fetchFlows(l, primary, ip)
	if err != nil {
		return r, err
	}
	if err := errors.Join(early.parse(), now.parse(), sb.parse(), late.parse()); err != nil {
		return r, err
	}
	r.lagged = sb.start.Sub(early.end)
	r.listingMS = max(early.end.Sub(early.start), now.end.Sub(now.start), sb.end.Sub(sb.start), late.end.Sub(late.start)).Milliseconds()
	for k, f := range sb.flows {
		if !f.Backup {
			return r, fmt.Errorf("the standby %s lists its flow %v of %v as live: it hosts the IP", standby, k, ip)
		}
		r.standby++
		_, e := early.flows[k]
		_, n := now.flows[k]
		_, la := late.flows[k]
		if !e && !n && !la {
			r.extra = append(r.extra, fmt.Sprintf("%s %v→%v %s", k.proto, k.pod, k.server, f.State))
		}
	}
	for k, a := range early.flows {
		b, ok := now.flows[k]
		c, ok2 := late.flows[k]
		if !ok || !ok2 || a.ExpiresIn < 1 || b.ExpiresIn < 1 || c.ExpiresIn < 1 {
			continue
		}
		r.stable++
		s, ok := sb.flows[k]
		switch {
		case !ok:
			r.missing = append(r.missing, fmt.Sprintf("%s %v→%v as %v:%d %s", k.proto, k.pod, k.server, ip, b.EgressPort, b.State))
		case s.EgressPort != b.EgressPort || (a.State == c.State && s.State != b.State):
			r.wrong = append(r.wrong, fmt.Sprintf("%s %v→%v: primary %d %s, standby %d %s", k.proto, k.pod, k.server, b.EgressPort, b.State, s.EgressPort, s.State))
		}
	}
	return r, nil
}

// untilInStep compares primary's flows of ip with standby's backup flows
// (inStep) until they are in step with at least one backup flow, or for
// within; it returns the last comparison.
func untilInStep(t *testing.T, l *Lab, ip netip.Addr, primary, standby string, within time.Duration) stepResult {
	t.Helper()
	for deadline := time.Now().Add(within); ; {
		r, err := inStep(l, ip, primary, standby)
		if err != nil {
			t.Fatal(err)
		}
		if (r.ok() && r.standby > 0) || time.Now().After(deadline) {
			return r
		}
	}
}

// testGracefulRestartContinues: 100 long-lived connections through one
// gateway go on through its SIGTERM (it writes its state file) and the
// start of a new process, as in a rolling update: zero resets, every
// answer from the same address and port, no gap over maxStall.
func testGracefulRestartContinues(t *testing.T, l *Lab) {
	ip, gw, standby, st := pickBlue(t, l)
	lived := startLongLived(t, l, bluePods(st), ip, 50, 0, 10)
	waitHeld(t, l, standby, ip, lived)
	pid := readPid(filepath.Join(l.RunDir(), "gateway-"+gw+".pid"))
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, fmt.Sprintf("egret gateway on %s (pid %d) exiting after SIGTERM", gw, pid), 20*time.Second, func() bool { return gone(pid) })
	stopped := time.Since(at)
	if _, err := os.Stat(StateFile(l.RunDir(), gw)); err != nil {
		t.Errorf("the stopped gateway left no state file: %v", err)
	}
	if err := l.StartGateway(gw); err != nil {
		t.Fatal(err)
	}
	restarted := time.Since(at)
	lived.checkContinued(t, ip, "SIGTERM and restart of "+gw, at)
	now, _ := l.Status()
	t.Logf("%s stopped %.3f s after SIGTERM, the new process served %.3f s after it; %v is now on %s", gw, stopped.Seconds(), restarted.Seconds(), ip, nodeOf(now, ip))
}

func nodeOf(st *Status, ip netip.Addr) string {
	if st != nil {
		for _, a := range st.Assignment {
			if a.IP == ip {
				return a.Node
			}
		}
	}
	return "?"
}

// setAssignable removes (false) or puts back (true) node's
// k8s.ovn.org/egress-assignable label in the lab's nodes.yaml.
func setAssignable(t *testing.T, l *Lab, node string, on bool) {
	t.Helper()
	path := filepath.Join(ObjectsDir(l.RunDir()), "nodes.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "---\n")
	const label = "    k8s.ovn.org/egress-assignable: \"\"\n"
	found := false
	for i, d := range docs {
		if !strings.Contains(d, "\n  name: "+node+"\n") {
			continue
		}
		found = true
		d = strings.Replace(d, label, "", 1)
		if on {
			d = strings.Replace(d, "  labels:\n", "  labels:\n"+label, 1)
		}
		docs[i] = d
	}
	if !found {
		t.Fatalf("nodes.yaml has no node %s", node)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// testLabelRemovedContinues: the controller moves an egress IP while its
// gateway is alive (the node's egress-assignable label is removed); the IP
// goes to its recorded standby, whose backup flows carry 100 long-lived
// connections on: zero resets, same address and port, no gap over
// maxStall.
func testLabelRemovedContinues(t *testing.T, l *Lab) {
	ip, gw, standby, st := pickBlue(t, l)
	lived := startLongLived(t, l, bluePods(st), ip, 50, 0, 10)
	waitHeld(t, l, standby, ip, lived)
	at := time.Now()
	setAssignable(t, l, gw, false)
	t.Cleanup(func() { setAssignable(t, l, gw, true) })
	var now *Status
	if !nstest.Poll(10*time.Second, 50*time.Millisecond, func() bool {
		var err error
		now, err = l.Status()
		return err == nil && nodeOf(now, ip) != gw && nodeOf(now, ip) != ""
	}) {
		lived.end()
		t.Fatalf("%v is still on %s (or unassigned) 10 s after its label was removed", ip, gw)
	}
	moved := time.Since(at)
	lived.checkContinued(t, ip, "the removal of "+gw+"'s egress-assignable label", at)
	if n := nodeOf(now, ip); n != standby {
		t.Errorf("%v moved to %s, its recorded standby was %s", ip, n, standby)
	}
	if !gatewayRunning(l, gw) {
		t.Errorf("the gateway on %s is not running: the move was to happen while it is alive", gw)
	}
	setAssignable(t, l, gw, true)
	t.Logf("%v moved from %s to %s %.3f s after the label was removed", ip, gw, nodeOf(now, ip), moved.Seconds())
}

// churn sends, from each of a set of pods, UDP datagrams each on a new
// flow (a source and destination port pair not used before) to a closed
// port range of the server, at a given rate, through a raw socket: a flow
// per datagram without a socket per flow.
type churn struct {
	stop chan struct{}
	wg   sync.WaitGroup
	sent atomic.Int64
	err  atomic.Pointer[error]
}

// startChurn starts rate new flows per second from each pod, with
// destination ports from dportBase up (each phase its own range: UDP flows
// live 5 min on the gateways).
func startChurn(t *testing.T, l *Lab, pods []PodStatus, rate int, dportBase uint16) *churn {
	t.Helper()
	ch := &churn{stop: make(chan struct{})}
	t.Cleanup(func() { ch.end() })
	server := l.Spec.Server.IP
	for _, p := range pods {
		pc, err := ListenPacket(p.Namespace, "ip4:17", "0.0.0.0")
		if err != nil {
			t.Fatalf("raw UDP socket in %s: %v", p.Name, err)
		}
		ch.wg.Add(1)
		go func() {
			defer ch.wg.Done()
			defer pc.Close()
			dst := &net.IPAddr{IP: server.AsSlice()}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			pkt := make([]byte, 8+8)
			copy(pkt[8:], "egretlab")
			begin := time.Now()
			for i := 0; ; {
				select {
				case <-ch.stop:
					return
				case <-tick.C:
				}
				// Paced by the clock, not by the ticks: a late tick sends
				// what the missed ones would have.
				for i < int(time.Since(begin).Seconds()*float64(rate)) {
					sport, dport := uint16(10000+i%50000), dportBase+uint16(i/50000)
					udpHeader(pkt, p.IP, server, sport, dport)
					if _, err := pc.WriteTo(pkt, dst); err != nil {
						ch.err.CompareAndSwap(nil, &err)
						return
					}
					ch.sent.Add(1)
					i++
				}
			}
		}()
	}
	return ch
}

// end stops the senders and returns the first send error.
func (ch *churn) end() error {
	select {
	case <-ch.stop:
	default:
		close(ch.stop)
	}
	ch.wg.Wait()
	if e := ch.err.Load(); e != nil {
		return *e
	}
	return nil
}

// udpHeader writes the UDP header of pkt (header and payload) from src:sport
// to dst:dport, with its checksum.
func udpHeader(pkt []byte, src, dst netip.Addr, sport, dport uint16) {
	binary.BigEndian.PutUint16(pkt[0:], sport)
	binary.BigEndian.PutUint16(pkt[2:], dport)
	binary.BigEndian.PutUint16(pkt[4:], uint16(len(pkt)))
	pkt[6], pkt[7] = 0, 0
	s, d := src.As4(), dst.As4()
	sum := uint32(17) + uint32(len(pkt))
	for _, b := range [][]byte{s[:], d[:], pkt} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(pkt[6:], c)
}

// testStandbyCutOff: the standby of an egress IP is unreachable on the
// flow sync's port for 30 s (an nftables drop in its namespace) while the
// IP's flows keep changing. The primary does not hold the changes for it:
// the session stalls (counted), reconnecting fails (counted), and after
// the stall it sends nothing more (egret_gateway_sync_sent_bytes_total
// grows by less than 64 KiB over the last 20 s of the cut, while the IP's
// flows change by thousands of records), the changes waiting in the flow
// table.
// When the standby is reachable again a full resync is counted and its
// backup flows are in step with the primary's again (inStep).
func testStandbyCutOff(t *testing.T, l *Lab) {
	requireTools(t, "nft")
	ip, gw, standby, st := pickBlue(t, l)
	m := func(name string) float64 { return gatewayMetric(t, l.Spec, gw, "egret_gateway_sync_"+name) }
	ch := startChurn(t, l, bluePods(st), 300, 20000)
	// The cut must find a session that carries the churn's records: right
	// after a failover the primary may not have reached its new standby
	// yet, and a cut before that stalls nothing (it only fails to connect).
	if r := untilInStep(t, l, ip, gw, standby, 20*time.Second); !r.ok() || r.standby == 0 {
		t.Fatalf("the standby %s holds no backup flows of %v in step with %s 20 s after the churn began: %v", standby, ip, gw, r)
	}
	before := ch.sent.Load()
	resyncs, stalls, fails := m("full_resyncs_total"), m("stalls_total"), m("connect_failures_total")
	ns := l.Spec.NS(standby)
	const table = "egret_labtest_cut"
	if _, err := runIn(fmt.Sprintf("table inet %s {\n\tchain in {\n\t\ttype filter hook input priority -300; policy accept;\n\t\ttcp dport %d drop\n\t}\n}\n", table, flowsync.DefaultPort),
		"ip", "netns", "exec", ns, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	cut := true
	restore := func() {
		if cut {
			if _, err := run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", table); err != nil {
				t.Error(err)
			}
			cut = false
		}
	}
	t.Cleanup(restore)
	at := time.Now()
	// The session stalls StallAfter after the first unacknowledged batch;
	// from then on nothing is sent.
	nstest.UntilEvery(t, "the session to the cut-off standby "+standby+" dropped", flowsync.DefaultStallAfter+15*time.Second, 100*time.Millisecond, func() (bool, string) { return m("stalls_total") > stalls, "" })
	flatFrom, flatAt := m("sent_bytes_total"), time.Now()
	// egret status compares the two gateways' flows: the churn's new
	// flows are not reaching the standby.
	if s := egretStatus(t, l).ip(ip); s == nil || s.StandbyState != "behind" {
		t.Errorf("egret status of %v during the cut of its standby %s: %+v, want behind", ip, standby, s)
	}
	// sleep: "nothing is sent" is a rate over a length of time, up to 30 s into the cut
	time.Sleep(time.Until(at.Add(30 * time.Second)))
	flatTo := m("sent_bytes_total")
	if err := ch.end(); err != nil {
		t.Fatalf("churn: %v", err)
	}
	if s := m("stalls_total"); s <= stalls {
		t.Errorf("stalls %v → %v: the session to the cut-off standby %s was not dropped", stalls, s, standby)
	}
	if f := m("connect_failures_total"); f <= fails {
		t.Errorf("connect failures %v → %v: no failed attempt to reach %s was counted", fails, f, standby)
	}
	// The counter is the gateway's, over all its standbys: the flows of
	// its other egress IPs (idle here) may send a few records meanwhile
	// (an expiry); the IP's own changes, thousands of records, may not.
	if flatTo-flatFrom > 64<<10 {
		t.Errorf("the primary %s sent %v bytes of sync from %v to 30 s into the cut, while the standby of %v acknowledged nothing", gw, flatTo-flatFrom, flatAt.Sub(at).Round(time.Millisecond), ip)
	}
	sent := ch.sent.Load() - before
	restore()
	back := time.Now()
	nstest.UntilEvery(t, fmt.Sprintf("a full resync once %s is reachable again (before the cut: %v)", standby, resyncs), 15*time.Second, 100*time.Millisecond, func() (bool, string) { return m("full_resyncs_total") > resyncs, "" })
	resynced := time.Since(back)
	r := untilInStep(t, l, ip, gw, standby, 15*time.Second)
	if !r.ok() {
		t.Fatalf("the standby %s is not in step with %s for %v 15 s after the resync: %v", standby, gw, ip, r)
	}
	if r.stable < 100 {
		t.Fatalf("only %d flows of %v were stable on %s: the comparison proves little", r.stable, ip, gw)
	}
	t.Logf("standby %s of %v cut off 30 s: %d new flows sent meanwhile from blue's pods; stalls %v → %v, connect failures %v → %v, sync bytes %v → %v over the last %v of the cut; full resync counted %.3f s after the cut ended; in step %.3f s after it: %v",
		standby, ip, sent, stalls, m("stalls_total"), fails, m("connect_failures_total"), flatFrom, flatTo, 30*time.Second-flowsync.DefaultStallAfter-5*time.Second, resynced.Seconds(), time.Since(back).Seconds(), r)
}

// testStandbyInStepUnderLoad: with iperf3 running through a blue gateway
// and 10,000 new UDP flows per second from blue's two pods (5,000 each;
// the workers' multipath sends about half of them through each of blue's
// gateways), the standby's backup flows of an egress IP match its
// primary's within syncLag (inStep), in each of three samples.
func testStandbyInStepUnderLoad(t *testing.T, l *Lab) {
	requireTools(t, "iperf3")
	ip, gw, standby, st := pickBlue(t, l)
	blue := bluePods(st)
	ip3 := startIperf3(t, l, blue[0], 8)
	created := gatewayMetric(t, l.Spec, gw, "egret_gateway_flows_created_total")
	start := time.Now()
	ch := startChurn(t, l, blue, 5000, 21000)
	// The load builds up: the gateway has made two seconds' worth of the
	// churn's flows (5000 a second).
	nstest.UntilEvery(t, "the churn's first 10000 flows on "+gw, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		n := gatewayMetric(t, l.Spec, gw, "egret_gateway_flows_created_total") - created
		return n >= 10000, fmt.Sprint(n)
	})
	for i := range 3 {
		r, err := inStep(l, ip, gw, standby)
		if now, _ := l.Status(); nodeOf(now, ip) != gw {
			// Not the sync's doing: the comparison needs the IP where it was.
			ch.end()
			t.Fatalf("sample %d: %v moved from %s to %s under the load (%v): its gateway missed the controller's reachability probes", i, ip, gw, nodeOf(now, ip), err)
		}
		if err != nil {
			ch.end()
			t.Fatal(err)
		}
		if r.stable < 1000 {
			t.Errorf("sample %d: only %d flows of %v stable on %s: the load did not reach it", i, r.stable, ip, gw)
		}
		if !r.ok() {
			t.Errorf("sample %d: the standby %s is not within %v of %s for %v: %v", i, standby, syncLag, gw, ip, r)
		}
		t.Logf("sample %d: %v (standby listed %v after the first primary listing ended; the longest listing took %d ms)", i, r, r.lagged.Round(time.Millisecond), r.listingMS)
	}
	if err := ch.end(); err != nil {
		t.Fatalf("churn: %v", err)
	}
	rate := (gatewayMetric(t, l.Spec, gw, "egret_gateway_flows_created_total") - created) / time.Since(start).Seconds()
	bps := ip3()
	t.Logf("load: %d datagrams sent on new flows in %.1f s; %s created %.0f flows per second; iperf3 %.0f Mbit/s", ch.sent.Load(), time.Since(start).Seconds(), gw, rate, bps/1e6)
}

// startIperf3 runs an iperf3 server on the lab's server and a client in
// pod p for secs seconds; the function it returns waits for the client and
// returns the received bits per second.
func startIperf3(t *testing.T, l *Lab, p PodStatus, secs int) func() float64 {
	t.Helper()
	s := l.Spec
	port := fmt.Sprint(5300 + os.Getpid()%200)
	srv := exec.Command("ip", "netns", "exec", s.NS(s.Server.Name), "iperf3", "-s", "-1", "--forceflush", "-B", s.Server.IP.String(), "-p", port)
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Server listening") {
				listening <- true
			}
		}
		close(listening)
	}()
	select {
	case ok := <-listening:
		if !ok {
			t.Fatal("iperf3 server ended before listening")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("iperf3 server not listening after 10 s")
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := nsExec(p.Namespace, "iperf3", "-c", s.Server.IP.String(), "-p", port, "-t", fmt.Sprint(secs), "-P", "2", "-J")
		done <- result{o, err}
	}()
	return func() float64 {
		r := <-done
		if r.err != nil {
			t.Fatalf("iperf3 client in %s: %v\n%s", p.Name, r.err, r.out)
		}
		var res struct {
			End struct {
				SumReceived struct {
					Bytes int64   `json:"bytes"`
					BPS   float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(r.out), &res); err != nil || res.End.SumReceived.Bytes == 0 {
			t.Fatalf("iperf3 moved nothing (%v): %s", err, r.out)
		}
		return res.End.SumReceived.BPS
	}
}
