package main

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// timeline is what the controller's status allowed each pod over time:
// snapshots of every pod's expected IPv4 sources, one appended whenever
// they changed.
type timeline struct {
	mu    sync.Mutex
	snaps []snapshot
}

type snapshot struct {
	at      time.Time
	allowed map[string][]netip.Addr // pod → sources the status allows it
}

// add records the sources allowed at time at, if they differ from the last.
func (tl *timeline) add(at time.Time, allowed map[string][]netip.Addr) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if n := len(tl.snaps); n > 0 && sameAllowed(tl.snaps[n-1].allowed, allowed) {
		return
	}
	tl.snaps = append(tl.snaps, snapshot{at: at, allowed: allowed})
}

func sameAllowed(a, b map[string][]netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

// allows reports whether pod may have left with src at time at: src is
// one of its allowed sources at some moment within window of at (the
// documented move window: the data plane follows the status a little
// after it changes, and the sampler reads the status a little after
// the data plane acts). Before the first snapshot nothing is judged.
func (tl *timeline) allows(pod string, src netip.Addr, at time.Time, window time.Duration) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	from, to := at.Add(-window), at.Add(window)
	// i is the first snapshot after from; the one before it was in force at from.
	i := sort.Search(len(tl.snaps), func(i int) bool { return tl.snaps[i].at.After(from) })
	if i == 0 && (len(tl.snaps) == 0 || tl.snaps[0].at.After(at)) {
		return true
	}
	if i > 0 {
		i--
	}
	for ; i < len(tl.snaps) && !tl.snaps[i].at.After(to); i++ {
		if slices.Contains(tl.snaps[i].allowed[pod], src) {
			return true
		}
	}
	return false
}

// changes counts the snapshots taken after from and up to to: how often
// what the status allows some pod changed in that time.
func (tl *timeline) changes(from, to time.Time) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, s := range tl.snaps {
		if s.at.After(from) && !s.at.After(to) {
			n++
		}
	}
	return n
}

// allowedAt is what the status allowed pod at time at (nil before the
// first snapshot).
func (tl *timeline) allowedAt(pod string, at time.Time) []netip.Addr {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	i := sort.Search(len(tl.snaps), func(i int) bool { return tl.snaps[i].at.After(at) })
	if i == 0 {
		return nil
	}
	return tl.snaps[i-1].allowed[pod]
}

// packet is one packet the outside server saw from a pod.
type packet struct {
	at   time.Time
	pod  string
	src  netip.Addr
	kind string // tcp, udp or icmp
}

// wrongSources returns the packets whose source the status did not allow
// their pod within window.
func wrongSources(tl *timeline, pkts []packet, window time.Duration) []packet {
	var bad []packet
	for _, p := range pkts {
		if !tl.allows(p.pod, p.src, p.at, window) {
			bad = append(bad, p)
		}
	}
	return bad
}

// episode is a run of wrong-source packets of one pod with one source,
// none more than a second after the one before.
type episode struct {
	pod         string
	src         netip.Addr
	kinds       []string
	first, last time.Time
	n           int
}

func (e episode) String() string {
	return fmt.Sprintf("%s as %v from %s to %s (%.1f s): %d packets (%s)", e.pod, e.src, e.first.Format("15:04:05.000"),
		e.last.Format("15:04:05.000"), e.last.Sub(e.first).Seconds(), e.n, strings.Join(e.kinds, ", "))
}

// episodes groups wrong-source packets (in time order) so that a report
// shows every distinct wrong source, not only the first few packets.
func episodes(bad []packet) []episode {
	var out []episode
	open := map[string]int{} // pod and source → its episode in out
	for _, p := range bad {
		k := p.pod + " " + p.src.String()
		if i, ok := open[k]; ok && p.at.Sub(out[i].last) <= time.Second {
			e := &out[i]
			e.last, e.n = p.at, e.n+1
			if !slices.Contains(e.kinds, p.kind) {
				e.kinds = append(e.kinds, p.kind)
			}
			continue
		}
		open[k] = len(out)
		out = append(out, episode{pod: p.pod, src: p.src, kinds: []string{p.kind}, first: p.at, last: p.at, n: 1})
	}
	return out
}

// arpAnswer is one ARP reply (or announcement) for an egress IP the
// router's fabric port saw.
type arpAnswer struct {
	at  time.Time
	ip  netip.Addr
	mac [6]byte
}

// doubleWindow is a period in which two gateways (MACs) both answered ARP
// for one IP.
type doubleWindow struct {
	ip       netip.Addr
	macs     [2][6]byte
	from, to time.Time
}

func (w doubleWindow) length() time.Duration { return w.to.Sub(w.from) }

// doubleAnswers finds the periods in which two MACs answered for one IP.
// Each MAC's answers for an IP form runs: answers closer than gap to the
// previous one continue a run (the prober asks several times per gap). Two
// runs of different MACs for one IP that overlap are a double answer, as
// long as the overlap; a move (one run ends, the other begins) is not.
func doubleAnswers(answers []arpAnswer, gap time.Duration) []doubleWindow {
	type run struct {
		mac      [6]byte
		from, to time.Time
	}
	type key struct {
		ip  netip.Addr
		mac [6]byte
	}
	sorted := slices.Clone(answers)
	slices.SortStableFunc(sorted, func(a, b arpAnswer) int { return a.at.Compare(b.at) })
	open := map[key]int{} // → index of its last run in runs[ip]
	runs := map[netip.Addr][]run{}
	for _, a := range sorted {
		k := key{a.ip, a.mac}
		if i, ok := open[k]; ok && a.at.Sub(runs[a.ip][i].to) <= gap {
			runs[a.ip][i].to = a.at
			continue
		}
		open[k] = len(runs[a.ip])
		runs[a.ip] = append(runs[a.ip], run{mac: a.mac, from: a.at, to: a.at})
	}
	var out []doubleWindow
	ips := make([]netip.Addr, 0, len(runs))
	for ip := range runs {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	for _, ip := range ips {
		rs := runs[ip]
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				if rs[i].mac == rs[j].mac {
					continue
				}
				from, to := later(rs[i].from, rs[j].from), earlier(rs[i].to, rs[j].to)
				if to.After(from) {
					out = append(out, doubleWindow{ip: ip, macs: [2][6]byte{rs[i].mac, rs[j].mac}, from: from, to: to})
				}
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
