package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
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
func openOld(p lab.PodStatus, server string) (*oldConn, *http.Request, net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := lab.DialContext(ctx, p.Namespace, "tcp", server)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("%s: dial %s: %w", p.Name, server, err)
	}
	c := &oldConn{pod: p.Name}
	br := bufio.NewReader(conn)
	req, _ := http.NewRequest(http.MethodGet, "http://"+server+"/", nil)
	req.Host = "egret-bench"
	src, err := ask(conn, br, req, 5*time.Second)
	if err != nil {
		conn.Close()
		return nil, nil, nil, nil, fmt.Errorf("%s: first request: %w", p.Name, err)
	}
	c.src = src.Addr()
	c.answers = append(c.answers, time.Now())
	return c, req, conn, br, nil
}

// ask sends one request and reads the echo server's "<ip>:<port>" answer.
func ask(conn net.Conn, br *bufio.Reader, req *http.Request, limit time.Duration) (netip.AddrPort, error) {
	conn.SetDeadline(time.Now().Add(limit))
	if err := req.Write(conn); err != nil {
		return netip.AddrPort{}, err
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil && err != io.EOF {
		return netip.AddrPort{}, err
	}
	io.Copy(io.Discard, resp.Body)
	return netip.ParseAddrPort(strings.Fields(line + " ")[0])
}

// keep asks until stop, recording each answer; an error (a reset, or no
// answer for limit) ends it.
func (c *oldConn) keep(conn net.Conn, br *bufio.Reader, req *http.Request, stop <-chan struct{}, limit time.Duration) {
	defer conn.Close()
	for {
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
		_, err := ask(conn, br, req, limit)
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
			c, req, conn, br, err := openOld(p, server)
			if err != nil {
				return out, err
			}
			if !slices.Contains(ips, c.src) {
				conn.Close()
				continue
			}
			out = append(out, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.keep(conn, br, req, stop, limit)
			}()
		}
	}
	return out, nil
}
