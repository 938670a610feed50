package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// liveConn is one long-lived HTTP/1.1 connection from a pod to the outside
// echo server, asking every 100 ms which source address and port the
// server sees and checking the answer against the first.
type liveConn struct {
	pod  string
	from netip.AddrPort // the pod's own address and source port
	src  netip.AddrPort // the source the server saw in the first answer
	kept bool           // src has the pod's own port (port preservation)

	mu       sync.Mutex
	answers  int
	last     time.Time      // when the latest answer came
	maxGap   time.Duration  // the longest time between two answers
	gapEnd   time.Time      // when that longest gap ended
	changed  netip.AddrPort // a later answer's source, if it ever differed
	err      error          // why it ended early
	errAfter int            // answers before err
}

// longLived keeps connections from pods open until stop.
type longLived struct {
	conns []*liveConn
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startLongLived opens, from each of pods, n connections the server sees
// from egress IP via and up to others that it sees from another address
// (the workers' multipath route picks the gateway per connection, so it
// dials until it has them, closing the rest), and keeps each asking every
// 100 ms. Of the second pod's n through via, unpreserved are dialed from
// the source ports of the first pod's, so that the server sees them on
// another port of via (port preservation cannot give the pod its own):
// after a failover only the flow sync can carry those; the pick-up cannot.
func startLongLived(t *testing.T, l *Lab, pods []PodStatus, via netip.Addr, n, others, unpreserved int) *longLived {
	t.Helper()
	ll := &longLived{stop: make(chan struct{})}
	server := netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort).String()
	var mu sync.Mutex
	start := func(k *KeepAlive, p PodStatus, port int, seen netip.AddrPort) {
		c := &liveConn{pod: p.Name, from: netip.AddrPortFrom(p.IP, uint16(port)), src: seen, kept: int(seen.Port()) == port, answers: 1, last: time.Now()}
		mu.Lock()
		ll.conns = append(ll.conns, c)
		mu.Unlock()
		ll.wg.Add(1)
		go func() {
			defer ll.wg.Done()
			defer k.Close()
			c.run(k, ll.stop)
		}()
	}
	errs := make(chan error, len(pods))
	for i, p := range pods {
		n := n
		if i == 1 {
			n -= unpreserved
		}
		go func() {
			through, elsewhere := 0, 0
			for try := 0; through < n || elsewhere < others; try++ {
				if try == 8*(n+others) {
					errs <- fmt.Errorf("%s: %d connections opened, %d seen from %v and %d from elsewhere; want %d and %d", p.Name, try, through, via, elsewhere, n, others)
					return
				}
				k, err := DialKeepAlive(p.Namespace, server, 5*time.Second)
				if err != nil {
					errs <- fmt.Errorf("%s: dial %s: %w", p.Name, server, err)
					return
				}
				seen, err := k.Get(5 * time.Second)
				if err != nil {
					k.Close()
					errs <- fmt.Errorf("%s: first request: %w", p.Name, err)
					return
				}
				if seen.Addr() == via && through < n {
					through++
				} else if seen.Addr() != via && elsewhere < others {
					elsewhere++
				} else {
					k.Close()
					continue
				}
				start(k, p, k.conn.LocalAddr().(*net.TCPAddr).Port, seen)
			}
			errs <- nil
		}()
	}
	var failed error
	for range pods {
		if err := <-errs; err != nil && failed == nil {
			failed = err
		}
	}
	if failed == nil && unpreserved > 0 {
		// The first pod's connections through via hold their ports on via
		// towards the server; the second pod dials from the same ports.
		var ports []int
		for _, c := range ll.conns {
			if c.pod == pods[0].Name && c.src.Addr() == via && c.kept {
				ports = append(ports, int(c.from.Port()))
			}
		}
		got := 0
		for _, port := range ports {
			if got == unpreserved {
				break
			}
			k, err := dialFrom(pods[1].Namespace, server, port)
			if err != nil {
				continue // the port is in use in the pod
			}
			seen, err := k.Get(5 * time.Second)
			if err != nil || seen.Addr() != via || int(seen.Port()) == port {
				k.Close()
				continue
			}
			start(k, pods[1], port, seen)
			got++
		}
		if got < unpreserved {
			failed = fmt.Errorf("%d of %d connections from %s through %v with a port %s's hold: the server saw the rest elsewhere or on their own port", got, unpreserved, pods[1].Name, via, pods[0].Name)
		}
	}
	if failed != nil {
		ll.end()
		t.Fatalf("long-lived connections: %v", failed)
	}
	return ll
}

// run asks every 100 ms until stop or an error. An answer may take up to
// 10 s, so that a stall is measured as a gap, not ended as an error.
func (c *liveConn) run(k *KeepAlive, stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		a, err := k.Get(10 * time.Second)
		now := time.Now()
		c.mu.Lock()
		if err != nil {
			c.err, c.errAfter = err, c.answers
			c.mu.Unlock()
			return
		}
		c.answers++
		if gap := now.Sub(c.last); gap > c.maxGap {
			c.maxGap, c.gapEnd = gap, now
		}
		c.last = now
		if a != c.src && !c.changed.IsValid() {
			c.changed = a
		}
		c.mu.Unlock()
	}
}

// end stops every connection and waits for them.
func (ll *longLived) end() {
	select {
	case <-ll.stop:
	default:
		close(ll.stop)
	}
	ll.wg.Wait()
}

// answeredSince waits until every connection has been answered after
// since or has ended, for at most limit.
func (ll *longLived) answeredSince(since time.Time, limit time.Duration) {
	nstest.Soon(limit, func() bool {
		for _, c := range ll.conns {
			c.mu.Lock()
			waiting := c.err == nil && !c.last.After(since)
			c.mu.Unlock()
			if waiting {
				return false
			}
		}
		return true
	})
}

// maxStall is the longest a connection may go without an answer across a
// failover, a restart or a move of its gateway (issue 15).
const maxStall = 2 * time.Second

// checkContinued lets the connections run until each has answered after
// the disruption at `at` (a kill, a SIGTERM, a label removal), at most 15
// s, then stops them and checks that every one whose first answer came
// from egress IP via went on: no error (reset or timeout), every answer
// from the same address and port as the first, and no gap longer than
// maxStall between two answers. With the flow sync that holds for every
// connection, whether its port was preserved or not.
func (ll *longLived) checkContinued(t *testing.T, via netip.Addr, what string, at time.Time) {
	t.Helper()
	ll.answeredSince(at, 15*time.Second)
	for range 3 { // a few answers more on each
		ll.answeredSince(time.Now(), 5*time.Second)
	}
	ll.end()
	n, notKept, answers := 0, 0, 0
	var worst time.Duration
	for _, c := range ll.conns {
		if c.src.Addr() != via {
			continue
		}
		n++
		answers += c.answers
		if !c.kept {
			notKept++
		}
		worst = max(worst, c.maxGap)
		switch {
		case c.err != nil:
			t.Errorf("%s's connection seen as %v (own port %d, preserved %v) broke after %d answers, %s: %v", c.pod, c.src, c.from.Port(), c.kept, c.errAfter, what, c.err)
		case c.changed.IsValid():
			t.Errorf("%s's connection seen as %v was later answered as %v (%s)", c.pod, c.src, c.changed, what)
		case !c.last.After(at):
			t.Errorf("%s's connection seen as %v got no answer after %s (%d answers)", c.pod, c.src, what, c.answers)
		}
		if c.maxGap > maxStall {
			t.Errorf("%s's connection seen as %v (preserved port %v) stalled %v, ending %.3f s after %s; the limit is %v", c.pod, c.src, c.kept, c.maxGap.Round(time.Millisecond), c.gapEnd.Sub(at).Seconds(), what, maxStall)
		}
	}
	if n == 0 {
		t.Fatalf("no connection went through %v: the check proves nothing", via)
	}
	t.Logf("%s: %d connections through %v (%d of them without their own port), %d answers; the longest gap between two answers %v",
		what, n, via, notKept, answers, worst.Round(time.Millisecond))
}

// checkUndisturbed stops the connections and checks that every one whose
// first answer did not come from via (the failed gateway's egress IP) went on answering from the same source without a gap
// longer than maxStall: a failover disturbs only the flows of the failed
// gateway (the workers keep each gateway's slot in the multipath route).
func (ll *longLived) checkUndisturbed(t *testing.T, via netip.Addr, killed string) {
	t.Helper()
	ll.end()
	n := 0
	var worst time.Duration
	for _, c := range ll.conns {
		if c.src.Addr() == via {
			continue
		}
		n++
		worst = max(worst, c.maxGap)
		if c.err != nil {
			t.Errorf("%s's connection seen as %v (its gateway stayed up) broke after %d answers: %v", c.pod, c.src, c.errAfter, c.err)
		}
		if c.changed.IsValid() {
			t.Errorf("%s's connection seen as %v was later answered as %v", c.pod, c.src, c.changed)
		}
		if c.maxGap > maxStall {
			t.Errorf("%s's connection seen as %v (its gateway stayed up) stalled %v", c.pod, c.src, c.maxGap.Round(time.Millisecond))
		}
	}
	if n == 0 {
		t.Fatalf("no connection used a gateway other than %s: the check proves nothing", killed)
	}
	t.Logf("%d connections through the gateways other than %s went on; the longest gap between two answers %v", n, killed, worst.Round(time.Millisecond))
}

// udpTalk is one UDP conversation from a pod to the echo server: a
// datagram every 100 ms from one socket, each answer saying which source
// the server saw.
type udpTalk struct {
	pod   string
	stop  chan struct{}
	done  chan struct{}
	srcs  []netip.AddrPort
	times []time.Time
	// answers counts srcs for readers while the conversation runs.
	answers atomic.Int64
}

func startUDPTalk(t *testing.T, l *Lab, p PodStatus) *udpTalk {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	conn, err := DialContext(ctx, p.Namespace, "udp", netip.AddrPortFrom(l.Spec.Server.IP, UDPPort).String())
	cancel()
	if err != nil {
		t.Fatalf("UDP from %s: %v", p.Name, err)
	}
	u := &udpTalk{pod: p.Name, stop: make(chan struct{}), done: make(chan struct{})}
	buf := make([]byte, 2048)
	exchange := func(i int) {
		if _, err := fmt.Fprintf(conn, "talk %d", i); err != nil {
			return // an ICMP error for an earlier datagram; the next goes out
		}
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := conn.Read(buf)
		if err != nil {
			return // lost in the failover window
		}
		head, _, _ := strings.Cut(string(buf[:n]), "\n")
		if ap, err := netip.ParseAddrPort(strings.Fields(head + " ")[0]); err == nil {
			u.srcs, u.times = append(u.srcs, ap), append(u.times, time.Now())
			u.answers.Add(1)
		}
	}
	// The first answer before returning: the caller wants to know the
	// conversation's egress IP.
	for i := 0; len(u.srcs) == 0; i++ {
		if i == 5 {
			conn.Close()
			t.Fatalf("%s's UDP conversation: no answer to 5 datagrams", p.Name)
		}
		exchange(i)
	}
	go func() {
		defer close(u.done)
		defer conn.Close()
		for i := 5; ; i++ {
			select {
			case <-u.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			exchange(i)
		}
	}()
	return u
}

// end stops the conversation.
func (u *udpTalk) end() {
	select {
	case <-u.stop:
	default:
		close(u.stop)
	}
	<-u.done
}

// checkKeptPort stops the conversation and checks that the server saw it
// from one address and port throughout, and heard it again after failedOver:
// a UDP conversation keeps its source port across a failover (its flow is
// made anew on the IP's new owner with the pod's preserved port).
func (u *udpTalk) checkKeptPort(t *testing.T, failedOver time.Time) {
	t.Helper()
	// A few answers more (ten exchanges take a second); if they do not
	// come, the checks below say what is missing.
	n := u.answers.Load()
	nstest.Soon(10*time.Second, func() bool { return u.answers.Load() >= n+5 })
	u.end()
	if len(u.srcs) == 0 {
		t.Fatalf("%s's UDP conversation got no answer", u.pod)
	}
	after := 0
	for i, s := range u.srcs {
		if s != u.srcs[0] {
			t.Errorf("%s's UDP conversation: answer %d from %v, the first from %v", u.pod, i, s, u.srcs[0])
		}
		if u.times[i].After(failedOver) {
			after++
		}
	}
	if after == 0 {
		t.Errorf("%s's UDP conversation got no answer after the failover", u.pod)
	}
	t.Logf("%s's UDP conversation: %d answers, %d after the failover, all from %v", u.pod, len(u.srcs), after, u.srcs[0])
}
