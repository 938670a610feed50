package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/egret-gw/egret/lab"
)

// Ports a pod may try on a gateway node: the health probe, the flow sync
// and the metrics (on loopback in the lab: refused from a pod).
var hostilePorts = []uint16{lab.HealthPort, 9108, 9110}

// hostileConns is how many connections the hostile pod opens to each port
// of each gateway (issue 33: the cluster attack's 30 per port, five times).
const hostileConns = 150

// hostile is issue 33's attack as a fault: an unselected pod opens
// hostileConns connections to every port of every gateway and holds them,
// idle (health, sync) or with HTTP keep-alive requests (metrics), until
// cleared. The listeners' caps, timeouts and slots must keep the
// controller's probes and the standbys' sync going: nothing may move.
func hostile(l *lab.Lab, st *lab.Status) (func() error, *hostileCount, error) {
	ns := ""
	for _, p := range st.Pods {
		if len(p.ExpectedSources) == 0 {
			ns = p.Namespace
			break
		}
	}
	if ns == "" && len(st.Pods) > 0 {
		ns = st.Pods[len(st.Pods)-1].Namespace
	}
	if ns == "" {
		return nil, nil, fmt.Errorf("no pod to attack from")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cnt := &hostileCount{}
	var wg sync.WaitGroup
	for _, g := range l.Spec.Gateways {
		for _, port := range hostilePorts {
			addr := netip.AddrPortFrom(g.IP, port).String()
			for range hostileConns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cnt.hold(ctx, ns, addr, port == 9110)
				}()
			}
		}
	}
	return func() error { cancel(); wg.Wait(); return nil }, cnt, nil
}

// hostileCount counts what the attack got.
type hostileCount struct {
	mu                           sync.Mutex
	opened, refused, closedEarly int
}

func (c *hostileCount) add(opened, refused, closed int) {
	c.mu.Lock()
	c.opened += opened
	c.refused += refused
	c.closedEarly += closed
	c.mu.Unlock()
}

func (c *hostileCount) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("hostile pod: %d connections opened, %d refused, %d closed by the gateway before the attack ended",
		c.opened, c.refused, c.closedEarly)
}

// hold opens one connection from ns to addr and keeps it until ctx ends:
// idle, or (http) sending a keep-alive request whenever the last was
// answered. A connection the gateway closes is opened again.
func (c *hostileCount) hold(ctx context.Context, ns, addr string, http bool) {
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := lab.DialContext(dctx, ns, "tcp", addr)
		cancel()
		if err != nil {
			c.add(0, 1, 0)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond): // not a busy loop on a refused port
			}
			continue
		}
		c.add(1, 0, 0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if http {
				buf := make([]byte, 4096)
				for {
					if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: gw\r\nConnection: keep-alive\r\n\r\n"); err != nil {
						return
					}
					if _, err := conn.Read(buf); err != nil {
						return
					}
				}
			}
			io.Copy(io.Discard, conn) // idle: returns when the gateway closes it
		}()
		select {
		case <-ctx.Done():
			conn.Close()
			<-done
			return
		case <-done:
			conn.Close()
			c.add(0, 0, 1)
		}
	}
}
