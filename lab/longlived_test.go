package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// liveConn is one long-lived HTTP/1.1 connection from a pod to the outside
// echo server, asking every 100 ms which source address the server sees.
type liveConn struct {
	pod      string
	src      netip.Addr // the egress IP of its first answer
	kept     bool       // the server saw the pod's own source port (port preservation)
	answers  int
	moved    netip.Addr // a later answer's source, if it ever differed
	err      error      // why it ended early
	errAfter int        // answers before err
}

// longLived keeps n connections per pod open until stop.
type longLived struct {
	conns []*liveConn
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startLongLived(t *testing.T, l *Lab, pods []PodStatus, n int) *longLived {
	t.Helper()
	ll := &longLived{stop: make(chan struct{})}
	server := netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort).String()
	ready := make(chan error, len(pods)*n)
	for _, p := range pods {
		for range n {
			c := &liveConn{pod: p.Name}
			ll.conns = append(ll.conns, c)
			ll.wg.Add(1)
			go func() {
				defer ll.wg.Done()
				c.run(p.Namespace, server, ll.stop, ready)
			}()
		}
	}
	for range len(ll.conns) {
		if err := <-ready; err != nil {
			close(ll.stop)
			ll.wg.Wait()
			t.Fatalf("long-lived connection: %v", err)
		}
	}
	return ll
}

// run dials, reports the first answer on ready, then asks every 100 ms
// until stop or an error.
func (c *liveConn) run(ns, server string, stop <-chan struct{}, ready chan<- error) {
	k, err := DialKeepAlive(ns, server, 5*time.Second)
	if err != nil {
		ready <- fmt.Errorf("%s: dial %s: %w", c.pod, server, err)
		return
	}
	defer k.Close()
	local := k.conn.LocalAddr().(*net.TCPAddr).Port
	// A stall longer than 5 s is an interruption, not a slow answer.
	ask := func() (netip.Addr, error) {
		ap, err := k.Get(5 * time.Second)
		return ap.Addr(), err
	}
	seen, err := k.Get(5 * time.Second)
	if err != nil {
		ready <- fmt.Errorf("%s: first request: %w", c.pod, err)
		return
	}
	c.src, c.answers, c.kept = seen.Addr(), 1, int(seen.Port()) == local
	ready <- nil
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		a, err := ask()
		if err != nil {
			c.err, c.errAfter = err, c.answers
			return
		}
		c.answers++
		if a != c.src && !c.moved.IsValid() {
			c.moved = a
		}
	}
}

// checkSurvivors stops the connections and checks that every one whose
// egress IP was on a gateway other than killed (in before) went on
// answering, always from the same source: a failover disturbs only the
// flows of the failed gateway. Of the failed gateway's own connections,
// every one the server saw with the pod's own source port (port
// preservation) must go on as well: the new owner of its egress IP picks it
// up on that port. One whose port was not preserved (two pods' connections
// chose the same port) cannot be picked up and is only counted.
func (ll *longLived) checkSurvivors(t *testing.T, before *Status, killed string) {
	t.Helper()
	close(ll.stop)
	ll.wg.Wait()
	node := map[netip.Addr]string{}
	for _, a := range before.Assignment {
		node[a.IP] = a.Node
	}
	survivors, broken, moved := 0, 0, 0
	for _, c := range ll.conns {
		if node[c.src] == killed {
			switch {
			case c.err != nil:
				broken++
			case c.moved.IsValid():
				moved++
			}
			if c.kept && (c.err != nil || c.moved.IsValid()) {
				t.Errorf("%s's connection via %v (on %s, killed) kept its port but was not picked up: broke after %d answers (%v), moved to %v", c.pod, c.src, killed, c.errAfter, c.err, c.moved)
			}
			continue
		}
		survivors++
		if c.err != nil {
			t.Errorf("%s's connection via %v (%s, which stayed up) broke after %d answers: %v", c.pod, c.src, node[c.src], c.errAfter, c.err)
		}
		if c.moved.IsValid() {
			t.Errorf("%s's connection via %v (%s) was answered from %v later", c.pod, c.src, node[c.src], c.moved)
		}
	}
	if survivors < len(ll.conns)/4 {
		t.Fatalf("only %d of %d connections used a gateway other than %s: the check proves little", survivors, len(ll.conns), killed)
	}
	t.Logf("%d connections through surviving gateways all kept going; of the %d through %s, %d went on (picked up), %d broke, %d were answered from another address",
		survivors, len(ll.conns)-survivors, killed, len(ll.conns)-survivors-broken-moved, broken, moved)
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
	time.Sleep(time.Second)
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
