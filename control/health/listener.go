package health

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// DefaultMaxConns caps the connections the health service holds at once. The
// controller keeps one per replica; the rest of the cap is room for
// reconnects and a few manual checks, not for whoever can reach the port.
const DefaultMaxConns = 64

// DefaultMaxPerSource caps the connections one source address holds at
// once on the health service: the controller keeps one per replica, each
// from its own address, so one host (or every pod behind one masquerading
// node address) cannot take the slots the controller's probe needs.
const DefaultMaxPerSource = 4

// LimitListener is a listener that holds at most max connections at once,
// and at most perSource from one source address, and closes any connection
// beyond that as soon as it is accepted, counting it, so a flood of
// connections costs the node a file descriptor for a moment, not a
// goroutine and buffers each for as long as the peer likes. Unlike
// golang.org/x/net/netutil.LimitListener it refuses instead of queueing: a
// queued probe would only time out later.
type LimitListener struct {
	net.Listener
	max, perSource int
	refused        atomic.Uint64

	mu     sync.Mutex
	active int
	bySrc  map[netip.Addr]int
}

// Limit wraps ln so that it holds at most n connections (at least 1), with
// no cap per source address.
func Limit(ln net.Listener, n int) *LimitListener { return LimitPerSource(ln, n, 0) }

// LimitPerSource wraps ln so that it holds at most n connections (at least
// 1) and at most perSource (0: no cap) from one source address.
func LimitPerSource(ln net.Listener, n, perSource int) *LimitListener {
	return &LimitListener{Listener: ln, max: max(n, 1), perSource: max(perSource, 0), bySrc: map[netip.Addr]int{}}
}

// Accept returns the next connection within the caps, closing those beyond them.
func (l *LimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceAddr(c)
		if !l.take(src) {
			l.refused.Add(1)
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l, src: src}, nil
	}
}

// sourceAddr is c's remote address (the zero Addr when it has none, as on
// a unix socket: all such connections share one per-source slot count).
func sourceAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

func (l *LimitListener) take(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active >= l.max || (l.perSource > 0 && l.bySrc[src] >= l.perSource) {
		return false
	}
	l.active++
	l.bySrc[src]++
	return true
}

func (l *LimitListener) give(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active--
	if l.bySrc[src]--; l.bySrc[src] <= 0 {
		delete(l.bySrc, src)
	}
}

// Refused is the number of connections closed because a cap was reached.
func (l *LimitListener) Refused() uint64 { return l.refused.Load() }

// limitedConn gives its slot back once, however often it is closed.
type limitedConn struct {
	net.Conn
	l    *LimitListener
	src  netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.give(c.src) })
	return err
}
