package claim

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// announcer sends the announcements of claims in the background, so that
// a claim (made under the engine's lock) returns at once however many IPs
// move together: a mass failover of 50 IPs with 3 announcements 100ms apart
// would otherwise hold that lock for 10 s.
type announcer struct {
	mu   sync.Mutex
	jobs map[netip.Addr]*announceJob
	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	send     func(frame []byte, ifindex int) error
	log      *slog.Logger
	sent     atomic.Uint64
	failures atomic.Uint64
}

// announceJob is one claim's announcements still to send.
type announceJob struct {
	ifindex int
	frame   []byte
	left    int
	next    time.Time
	every   time.Duration
}

func newAnnouncer(send func([]byte, int) error, log *slog.Logger) *announcer {
	a := &announcer{jobs: map[netip.Addr]*announceJob{}, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), send: send, log: log}
	go a.run()
	return a
}

// queue replaces ip's pending announcements with n new ones, the first
// at once, the others every apart.
func (a *announcer) queue(ip netip.Addr, ifindex int, frame []byte, n int, every time.Duration) {
	a.mu.Lock()
	a.jobs[ip] = &announceJob{ifindex: ifindex, frame: frame, left: max(n, 1), every: every}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// cancel drops ip's pending announcements: a released IP is not announced.
func (a *announcer) cancel(ip netip.Addr) {
	a.mu.Lock()
	delete(a.jobs, ip)
	a.mu.Unlock()
}

func (a *announcer) close() {
	close(a.stop)
	<-a.done
}

func (a *announcer) run() {
	defer close(a.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		a.mu.Lock()
		now := time.Now()
		var next time.Time
		for ip, j := range a.jobs {
			if j.next.After(now) {
				if next.IsZero() || j.next.Before(next) {
					next = j.next
				}
				continue
			}
			if err := a.send(j.frame, j.ifindex); err != nil {
				a.failures.Add(1)
				a.log.Warn("claim: announcement not sent; neighbours learn the IP's new place only when their entries expire", "ip", ip, "err", err)
				delete(a.jobs, ip)
				continue
			}
			a.sent.Add(1)
			if j.left--; j.left == 0 {
				delete(a.jobs, ip)
				continue
			}
			j.next = now.Add(j.every)
			if next.IsZero() || j.next.Before(next) {
				next = j.next
			}
		}
		a.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t.Reset(wait)
		select {
		case <-a.stop:
			return
		case <-a.wake:
		case <-t.C:
		}
	}
}

// sendFrame sends one whole Ethernet frame out of ifindex.
func (r *responder) sendFrame(frame []byte, ifindex int) error {
	return unix.Sendto(r.send, frame, 0, &unix.SockaddrLinklayer{Ifindex: ifindex})
}
