package main

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/egret-gw/egret/lab"
)

// oldConn is one long-lived HTTP/1.1 connection from a pod to the outside
// echo server that asks, one request after the other with a short pause,
// which source the server sees: the "old connection" of a failover.
type oldConn struct {
	pod string
	src netip.Addr // the egress IP of its first answer

	mu      sync.Mutex
	answers []time.Time // when each answer arrived
	err     error       // why it ended before stop
}

// pause is the gap between an answer and the next request: the resolution
// with which a connection's first answer after the kill is seen (beside
// TCP's own retransmission timer, which dominates).
const pause = 10 * time.Millisecond

// openOld dials from pod's namespace and waits for the first answer.
func openOld(p lab.PodStatus, server string) (*oldConn, *lab.KeepAlive, error) {
	k, err := lab.DialKeepAlive(p.Namespace, server, 5*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: dial %s: %w", p.Name, server, err)
	}
	src, err := k.Get(5 * time.Second)
	if err != nil {
		k.Close()
		return nil, nil, fmt.Errorf("%s: first request: %w", p.Name, err)
	}
	c := &oldConn{pod: p.Name, src: src.Addr(), answers: []time.Time{time.Now()}}
	return c, k, nil
}

// keep asks until stop, recording each answer; an error (a reset, or no
// answer for limit) ends it.
func (c *oldConn) keep(k *lab.KeepAlive, stop <-chan struct{}, limit time.Duration) {
	defer k.Close()
	for {
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
		_, err := k.Get(limit)
		c.mu.Lock()
		if err != nil {
			c.err = err
			c.mu.Unlock()
			return
		}
		c.answers = append(c.answers, time.Now())
		c.mu.Unlock()
	}
}

// resumed returns the first answer after t (the killed gateway gone), if
// any, and the error that ended the connection, if any.
func (c *oldConn) resumed(t time.Time) (time.Time, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.answers {
		if a.After(t) {
			return a, true, c.err
		}
	}
	return time.Time{}, false, c.err
}

// oldConns keeps n connections from every pod that may leave through one
// of ips and returns those whose first answer came from one of them.
func oldConns(st *lab.Status, server string, ips []netip.Addr, n int, stop <-chan struct{}, wg *sync.WaitGroup, limit time.Duration) ([]*oldConn, error) {
	var out []*oldConn
	for _, p := range st.Pods {
		uses := false
		for _, a := range p.ExpectedSources {
			uses = uses || slices.Contains(ips, a)
		}
		if !uses {
			continue
		}
		for range n {
			c, k, err := openOld(p, server)
			if err != nil {
				return out, err
			}
			if !slices.Contains(ips, c.src) {
				k.Close()
				continue
			}
			out = append(out, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.keep(k, stop, limit)
			}()
		}
	}
	return out, nil
}
