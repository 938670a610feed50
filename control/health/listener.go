package health

import (
	"net"
	"sync"
	"sync/atomic"
)

// DefaultMaxConns caps the connections the health service holds at once. The
// controller keeps one per replica; the rest of the cap is room for
// reconnects and a few manual checks, not for whoever can reach the port.
const DefaultMaxConns = 64

// LimitListener is a listener that holds at most max connections at once and
// closes any connection beyond that as soon as it is accepted, counting it,
// so a flood of connections costs the node a file descriptor for a moment,
// not a goroutine and buffers each for as long as the peer likes. Unlike
// golang.org/x/net/netutil.LimitListener it refuses instead of queueing: a
// queued probe would only time out later.
type LimitListener struct {
	net.Listener
	max     int64
	active  atomic.Int64
	refused atomic.Uint64
}

// Limit wraps ln so that it holds at most n connections (at least 1).
func Limit(ln net.Listener, n int) *LimitListener {
	return &LimitListener{Listener: ln, max: int64(max(n, 1))}
}

// Accept returns the next connection within the cap, closing those beyond it.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.active.Add(1) > l.max {
			l.active.Add(-1)
			l.refused.Add(1)
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// Refused is the number of connections closed because the cap was reached.
func (l *LimitListener) Refused() uint64 { return l.refused.Load() }

// limitedConn gives its slot back once, however often it is closed.
type limitedConn struct {
	net.Conn
	l    *LimitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.active.Add(-1) })
	return err
}
