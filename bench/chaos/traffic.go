package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/egret-gw/egret/lab"
)

// Ports of the outside servers: pod i of the lab talks to tcpBase+i and
// udpBase+i, so that the recorder knows every packet's pod.
const (
	tcpBase = 30000
	udpBase = 31000
)

// servers are the outside servers: per pod, a TCP server that answers
// each line with the source it sees, and the same over UDP.
type servers struct {
	lns []net.Listener
	pcs []net.PacketConn
	wg  sync.WaitGroup
}

// serve listens in namespace ns on ip for n pods.
func serve(ns string, ip netip.Addr, n int) (*servers, error) {
	s := &servers{}
	for i := range n {
		var ln net.Listener
		var pc net.PacketConn
		err := lab.Do(ns, func() error {
			var err error
			if ln, err = net.Listen("tcp4", netip.AddrPortFrom(ip, uint16(tcpBase+i)).String()); err != nil {
				return err
			}
			pc, err = net.ListenPacket("udp4", netip.AddrPortFrom(ip, uint16(udpBase+i)).String())
			return err
		})
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			s.close()
			return nil, fmt.Errorf("outside server in %s: %w", ns, err)
		}
		s.lns, s.pcs = append(s.lns, ln), append(s.pcs, pc)
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go echoLines(c)
			}
		}()
		go func() {
			defer s.wg.Done()
			buf := make([]byte, 1500)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo([]byte(from.String()+"\n"), from)
			}
		}()
	}
	return s, nil
}

// echoLines answers every line on c with the source address c has.
func echoLines(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		if _, err := br.ReadString('\n'); err != nil {
			return
		}
		if _, err := fmt.Fprintln(c, c.RemoteAddr()); err != nil {
			return
		}
	}
}

func (s *servers) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
	for _, pc := range s.pcs {
		pc.Close()
	}
	s.wg.Wait()
}

// podTraffic is one pod's steady traffic: a long-lived TCP connection
// asking every tick, a new TCP connection and a new UDP socket (a new
// flow each) every tick, and a ping every pingEvery.
type podTraffic struct {
	name, ns string
	tcp, udp string // its server addresses
	ping     func() // one ping; the recorder sees it

	mu sync.Mutex
	// newOK are the times and sources of the new connections answered
	// (TCP and UDP), for the recovery.
	newOK []sourceAt
	// long is the long-lived connections' record.
	long []*longConn
}

type sourceAt struct {
	at  time.Time
	src netip.Addr
}

// longConn is one long-lived TCP connection's history.
type longConn struct {
	opened  time.Time
	answers []time.Time
	ended   time.Time // zero while it lives
	err     error
}

const tick = 250 * time.Millisecond

// run sends until stop is closed.
func (p *podTraffic) run(stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() { defer wg.Done(); p.longLived(stop) }()
	every(stop, wg, tick, func() {
		if src, err := p.newTCP(); err == nil {
			p.answered(src)
		}
		if src, err := p.newUDP(); err == nil {
			p.answered(src)
		}
	})
	every(stop, wg, time.Second, p.ping)
}

// every calls fn each d, in a goroutine counted in wg, until stop is closed.
func every(stop <-chan struct{}, wg *sync.WaitGroup, d time.Duration, fn func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

func (p *podTraffic) answered(src netip.Addr) {
	p.mu.Lock()
	p.newOK = append(p.newOK, sourceAt{time.Now(), src})
	p.mu.Unlock()
}

// newTCP asks once on a new connection which source the server sees.
func (p *podTraffic) newTCP() (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := lab.DialContext(ctx, p.ns, "tcp4", p.tcp)
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	return ask(c, bufio.NewReader(c))
}

// newUDP asks once from a new socket (a new flow).
func (p *podTraffic) newUDP() (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := lab.DialContext(ctx, p.ns, "udp4", p.udp)
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("chaos\n")); err != nil {
		return netip.Addr{}, err
	}
	buf := make([]byte, 128)
	n, err := c.Read(buf)
	if err != nil {
		return netip.Addr{}, err
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(string(buf[:n])))
	return ap.Addr(), err
}

// ask sends a line and reads the source the server saw.
func ask(c net.Conn, br *bufio.Reader) (netip.Addr, error) {
	if _, err := fmt.Fprintln(c, "chaos"); err != nil {
		return netip.Addr{}, err
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return netip.Addr{}, err
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(line))
	return ap.Addr(), err
}

// longLived keeps one connection, asking every tick; a connection that
// ends (a reset, or the kernel giving up) is recorded and replaced. No
// application timeout: an outage of a minute is TCP's to ride out, and a
// connection counts as lost only when it ends.
func (p *podTraffic) longLived(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := lab.DialContext(ctx, p.ns, "tcp4", p.tcp)
		cancel()
		if err != nil {
			select {
			case <-stop:
				return
			case <-time.After(tick):
			}
			continue
		}
		lc := &longConn{opened: time.Now()}
		p.mu.Lock()
		p.long = append(p.long, lc)
		p.mu.Unlock()
		ended := make(chan struct{})
		go func() {
			select {
			case <-stop:
				c.Close()
			case <-ended:
			}
		}()
		br := bufio.NewReader(c)
		for stopped := false; !stopped; {
			_, err := ask(c, br)
			p.mu.Lock()
			if err != nil {
				select {
				case <-stop: // closed by us
				default:
					lc.ended, lc.err = time.Now(), err
				}
				p.mu.Unlock()
				break
			}
			lc.answers = append(lc.answers, time.Now())
			p.mu.Unlock()
			select {
			case <-stop:
				stopped = true
			case <-time.After(tick):
			}
		}
		close(ended)
		c.Close()
	}
}

// connStats are the long-lived connections' figures over [from, to):
// how many were lost (ended by an error) and the longest time without an
// answer on a connection that was open.
func (p *podTraffic) connStats(from, to time.Time) (lost int, stall time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lc := range p.long {
		if !lc.ended.IsZero() && !lc.ended.Before(from) && lc.ended.Before(to) {
			lost++
		}
		last := lc.opened
		for _, a := range lc.answers {
			if a.After(from) && a.Before(to) {
				stall = max(stall, a.Sub(later(last, from)))
			}
			last = a
		}
		end := to
		if !lc.ended.IsZero() && lc.ended.Before(to) {
			end = lc.ended
		}
		if last.Before(end) && end.After(from) {
			stall = max(stall, end.Sub(later(last, from)))
		}
	}
	return lost, stall
}

// okSince returns the first new connection answered at or after t with a
// source good reports as allowed, if any.
func (p *podTraffic) okSince(t time.Time, good func(netip.Addr) bool) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.newOK {
		if !s.at.Before(t) && good(s.src) {
			return s.at, true
		}
	}
	return time.Time{}, false
}
