package nat

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Port tables per protocol class. ICMP and ICMPv6 share one: an egress IP is
// of one family, so only one of them is ever used on it.
const (
	classTCP = iota
	classUDP
	classICMP
	numClasses
)

func classOf(proto uint8) (int, bool) {
	switch proto {
	case 6:
		return classTCP, true
	case 17:
		return classUDP, true
	case 1, 58:
		return classICMP, true
	}
	return 0, false
}

// Allocator hands out NAT ports per egress IP and protocol. It is safe for
// concurrent use; calls for different egress IPs do not contend.
type Allocator struct {
	cfg   Config
	inUse InUse
	mu    sync.Mutex                        // serialises changes to ips
	ips   atomic.Pointer[map[Addr]*ipState] // copy-on-write: readers never lock
	stray atomic.Uint64
}

// ipState is one egress IP: a port table per protocol class, created on
// first use (256 KiB each, pointer-free refcounts).
type ipState struct {
	mu        sync.Mutex
	dead      bool // removed by Forget; callers holding it look up again
	tables    [numClasses]atomic.Pointer[portTable]
	exhausted atomic.Uint64
}

type portTable struct {
	refs [65536]uint32 // live flows per port
	used atomic.Int64  // ports with refs > 0, read by PortsInUse without the lock
	eim  bool          // endpoint-independent mapping: ports are owned by one endpoint
	eps  epTable       // the endpoint mappings when eim
	full fullCache     // destinations found exhausted (address-and-port-dependent mapping only)
	// releases counts Release calls: a search that ran without the lock
	// marks its destination full only if no port was released meanwhile.
	releases uint64
}

// fullCache remembers the last fullEntries destinations a search found
// exhausted. Until a flow towards such a destination is released on this IP
// no port can free up towards it (flows only end through Release), so
// further attempts fail at once instead of probing again: a pod hammering
// full destinations costs each attempt a few compares, however many of them
// it rotates over up to fullEntries (a search is bounded and runs without
// the lock beyond that).
type fullCache struct {
	n    int
	next int
	ent  [fullEntries]fullEntry
}

// fullEntries is how many exhausted destinations an egress IP and protocol
// remember (64 × 24 bytes).
const fullEntries = 64

type fullEntry struct {
	dst        Addr
	dport      uint16
	privileged bool
	live       bool
}

func (c *fullCache) has(dst *Addr, dport uint16, privileged bool) bool {
	if c.n == 0 {
		return false
	}
	for i := range c.ent {
		e := &c.ent[i]
		if e.live && e.dport == dport && e.privileged == privileged && e.dst == *dst {
			return true
		}
	}
	return false
}

func (c *fullCache) add(dst *Addr, dport uint16, privileged bool) {
	e := &c.ent[c.next]
	if !e.live {
		c.n++
	}
	*e = fullEntry{dst: *dst, dport: dport, privileged: privileged, live: true}
	c.next = (c.next + 1) % len(c.ent)
}

// forget drops dst:dport (both port ranges) after a flow towards it ended.
func (c *fullCache) forget(dst *Addr, dport uint16) {
	if c.n == 0 {
		return
	}
	for i := range c.ent {
		e := &c.ent[i]
		if e.live && e.dport == dport && e.dst == *dst {
			e.live = false
			c.n--
		}
	}
}

// NewAllocator validates cfg and returns an allocator that asks inUse
// whether a reply 5-tuple is taken.
func NewAllocator(cfg Config, inUse InUse) (*Allocator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if inUse == nil {
		return nil, fmt.Errorf("%w: InUse is nil; the allocator needs the flow table to keep reply 5-tuples unique", ErrConfig)
	}
	a := &Allocator{cfg: cfg, inUse: inUse}
	m := map[Addr]*ipState{}
	a.ips.Store(&m)
	return a, nil
}

// Config returns the validated configuration in use.
func (a *Allocator) Config() Config { return a.cfg }

func unspecified(a *Addr) bool {
	for i := 0; i < 10; i++ {
		if a[i] != 0 {
			return false
		}
	}
	if a[10] == 0 && a[11] == 0 || a[10] == 0xff && a[11] == 0xff {
		return a[12] == 0 && a[13] == 0 && a[14] == 0 && a[15] == 0
	}
	return false
}

func (a *Allocator) lookup(addr *Addr) *ipState {
	return (*a.ips.Load())[*addr]
}

// lockedState returns the state of addr, created if needed, with its lock held.
func (a *Allocator) lockedState(addr *Addr) *ipState {
	for {
		st := a.lookup(addr)
		if st == nil {
			a.mu.Lock()
			old := *a.ips.Load()
			if st = old[*addr]; st == nil {
				m := make(map[Addr]*ipState, len(old)+1)
				for k, v := range old {
					m[k] = v
				}
				st = &ipState{}
				m[*addr] = st
				a.ips.Store(&m)
			}
			a.mu.Unlock()
		}
		st.mu.Lock()
		if !st.dead {
			return st
		}
		st.mu.Unlock()
	}
}

func (a *Allocator) eim(class int) bool {
	switch class {
	case classTCP:
		return a.cfg.TCPEndpointIndependent
	case classUDP:
		return a.cfg.UDPEndpointIndependent
	}
	return false
}

// table returns the port table of class; st.mu must be held.
func (a *Allocator) table(st *ipState, class int) *portTable {
	t := st.tables[class].Load()
	if t == nil {
		t = &portTable{eim: a.eim(class)}
		st.tables[class].Store(t)
	}
	return t
}

// Allocate picks the NAT port for a new flow src:sport → dst:dport of proto
// on egress IP natAddr, such that the reply 5-tuple dst:dport → natAddr:port
// is not in use. It keeps sport when it can (PreservePort), else tries
// RandomAttempts ports drawn from rnd (a per-worker random value), then
// scanProbes more: the work is bounded, and with address-and-port-dependent
// mapping it runs without the egress IP's lock. ErrExhausted, counted per
// egress IP, when none of them is free towards dst:dport.
func (a *Allocator) Allocate(proto uint8, src Addr, sport uint16, dst Addr, dport uint16, natAddr Addr, rnd uint64) (uint16, error) {
	class, ok := classOf(proto)
	if !ok {
		return 0, ErrProto
	}
	if unspecified(&natAddr) {
		return 0, ErrAddr
	}
	st := a.lockedState(&natAddr)
	t := a.table(st, class)
	var port uint16
	if t.eim {
		port, ok = a.allocEIM(t, class, proto, &src, sport, &dst, dport, &natAddr, rnd)
	} else {
		st, port, ok = a.allocShared(st, t, class, proto, sport, &dst, dport, &natAddr, rnd)
	}
	st.mu.Unlock()
	if !ok {
		st.exhausted.Add(1)
		return 0, ErrExhausted
	}
	return port, nil
}

// Preserve takes the pod's own source port sport as the NAT port of a flow
// src:sport → dst:dport of proto on egress IP natAddr, and nothing else:
// the port a TCP connection picked up mid-stream must have (after a
// failover or a restart without its flow), since with port preservation it
// is the one the server knows. It reports false, taking nothing, when port
// preservation is off, sport lies outside the range ports come from, the
// reply tuple is taken, or (endpoint-independent mapping) the endpoint is
// mapped to another port. Release gives the port back as for Allocate.
func (a *Allocator) Preserve(proto uint8, src Addr, sport uint16, dst Addr, dport uint16, natAddr Addr) bool {
	class, ok := classOf(proto)
	if !ok || unspecified(&natAddr) || !a.cfg.PreservePort {
		return false
	}
	if lo, hi := a.portRange(class, sport); sport < lo || sport > hi {
		return false
	}
	st := a.lockedState(&natAddr)
	defer st.mu.Unlock()
	t := a.table(st, class)
	if t.eim {
		if i := t.eps.find(&src, sport); i >= 0 {
			e := &t.eps.slots[i]
			if e.port != sport || a.inUse.ReplyInUse(proto, dst, dport, natAddr, sport) {
				return false
			}
			e.flows++
			t.take(sport)
			return true
		}
		if !a.free(t, true, proto, &dst, dport, &natAddr, sport) {
			return false
		}
		t.eps.insert(&src, sport, sport)
		t.take(sport)
		return true
	}
	if !a.free(t, false, proto, &dst, dport, &natAddr, sport) {
		return false
	}
	t.take(sport)
	return true
}

// Claim takes port as the NAT port of a flow src:sport → dst:dport of proto
// on egress IP natAddr that arrives with its binding already made: a flow
// replicated from the gateway that created it, or resumed from the state
// file of this gateway's previous process. Unlike Preserve it takes any
// port, whatever the pod's and whether or not ports are preserved, since
// the server already knows it. It reports false, taking nothing, when the
// reply tuple is taken or (endpoint-independent mapping) the port belongs
// to another endpoint or the endpoint to another port. Release gives the
// port back as for Allocate.
func (a *Allocator) Claim(proto uint8, src Addr, sport uint16, dst Addr, dport uint16, natAddr Addr, port uint16) bool {
	class, ok := classOf(proto)
	if !ok || unspecified(&natAddr) || port == 0 {
		return false
	}
	st := a.lockedState(&natAddr)
	defer st.mu.Unlock()
	t := a.table(st, class)
	if a.inUse.ReplyInUse(proto, dst, dport, natAddr, port) {
		return false
	}
	if t.eim {
		if i := t.eps.find(&src, sport); i >= 0 {
			e := &t.eps.slots[i]
			if e.port != port {
				return false
			}
			e.flows++
			t.take(port)
			return true
		}
		if t.refs[port] != 0 {
			return false
		}
		t.eps.insert(&src, sport, port)
	}
	t.take(port)
	return true
}

// allocShared is Allocate for address-and-port-dependent mapping, entered
// with st locked; it returns the state it holds locked at the end (st, or
// the IP's new state if st was forgotten meanwhile). The search for a free
// port needs no allocator state, only the flow table (ports are shared
// across destinations, so the table's reply tuples alone say which are
// free), so it runs without the lock: workers allocating on the same egress
// IP never wait behind another's conntrack lookups. The lock never made the
// choice exclusive anyway (the flow is inserted after it is released; the
// flow table refuses a reply tuple taken meanwhile).
func (a *Allocator) allocShared(st *ipState, t *portTable, class int, proto uint8, sport uint16, dst *Addr, dport uint16, nat *Addr, rnd uint64) (*ipState, uint16, bool) {
	priv := class != classICMP && sport >= 1 && sport <= privilegedMax
	if t.full.has(dst, dport, priv) {
		return st, 0, false
	}
	gen := t.releases
	st.mu.Unlock()
	port, ok := a.search(t, false, class, proto, sport, dst, dport, nat, rnd)
	st2 := a.lockedState(nat)
	t2 := a.table(st2, class)
	switch {
	case ok:
		t2.take(port)
	case t2 == t && t.releases == gen:
		t.full.add(dst, dport, priv)
	}
	return st2, port, ok
}

// allocEIM reuses the endpoint's mapping or makes one on a port no other
// endpoint holds.
func (a *Allocator) allocEIM(t *portTable, class int, proto uint8, src *Addr, sport uint16, dst *Addr, dport uint16, nat *Addr, rnd uint64) (uint16, bool) {
	if i := t.eps.find(src, sport); i >= 0 {
		e := &t.eps.slots[i]
		// Taken only if this very 5-tuple is already tracked (or the flow
		// table holds flows the allocator never saw): never share it.
		if a.inUse.ReplyInUse(proto, *dst, dport, *nat, e.port) {
			return 0, false
		}
		e.flows++
		t.take(e.port)
		return e.port, true
	}
	port, ok := a.search(t, true, class, proto, sport, dst, dport, nat, rnd)
	if ok {
		t.eps.insert(src, sport, port)
		t.take(port)
	}
	return port, ok
}

func (t *portTable) take(p uint16) {
	if t.refs[p] == 0 {
		t.used.Add(1)
	}
	t.refs[p]++
}

// portRange is where the port for sport comes from: ICMP identifiers from
// 1–65535, privileged ports from 1–1023 (RFC 4787 REQ-3a), others from the
// configured range.
func (a *Allocator) portRange(class int, sport uint16) (lo, hi uint16) {
	switch {
	case class == classICMP:
		return 1, 65535
	case sport >= 1 && sport <= privilegedMax:
		return 1, privilegedMax
	}
	return a.cfg.PortMin, a.cfg.PortMax
}

// Tunnel UDP ports (VXLAN, RFC 7348; Geneve, RFC 8926) the gateway itself
// receives encapsulated pod traffic on. The XDP program and the parser take
// any UDP packet to these ports as tunnel traffic, so a flow NATed to one of
// them would never get its replies: the allocator never hands them out for UDP.
const (
	vxlanPort  = 4789
	genevePort = 6081
)

// reserved reports whether p may never be a NAT port for proto.
func reserved(proto uint8, p uint16) bool {
	return proto == 17 && (p == vxlanPort || p == genevePort)
}

func (a *Allocator) free(t *portTable, exclusive bool, proto uint8, dst *Addr, dport uint16, nat *Addr, p uint16) bool {
	if reserved(proto, p) {
		return false
	}
	if exclusive && t.refs[p] != 0 {
		return false
	}
	return !a.inUse.ReplyInUse(proto, *dst, dport, *nat, p)
}

// scanProbes bounds the search that follows the parity-keeping tries, as
// Linux's nf_nat bounds its attempts: an allocation costs at most 1 +
// RandomAttempts + scanProbes flow-table lookups (273 by default) however
// full the destination, where a whole-range scan cost 64k lookups (several
// milliseconds). A port is found with probability 1-(1-free)^256: 92% with
// 1% of the range free, all but certain with 5%; a destination fuller than
// that is refused as exhausted, which it nearly is.
const scanProbes = 256

// search finds a free port: sport itself, then RandomAttempts random ports
// (of sport's parity with PreserveParity), then scanProbes random ports of
// any parity. With exclusive false it reads nothing of t (it may run
// without the lock).
func (a *Allocator) search(t *portTable, exclusive bool, class int, proto uint8, sport uint16, dst *Addr, dport uint16, nat *Addr, rnd uint64) (uint16, bool) {
	lo, hi := a.portRange(class, sport)
	if a.cfg.PreservePort && sport >= lo && sport <= hi && a.free(t, exclusive, proto, dst, dport, nat, sport) {
		return sport, true
	}
	n := uint64(hi) - uint64(lo) + 1
	parity := a.cfg.PreserveParity && class != classICMP && n > 1
	x, r := rnd, uint64(0)
	for i := 0; i < a.cfg.RandomAttempts; i++ {
		x, r = splitmix(x)
		p := uint64(lo) + (uint64(uint32(r))*n)>>32
		if parity {
			p = p&^1 | uint64(sport&1)
			if p > uint64(hi) {
				p -= 2
			} else if p < uint64(lo) {
				p += 2
			}
		}
		if a.free(t, exclusive, proto, dst, dport, nat, uint16(p)) {
			return uint16(p), true
		}
	}
	// Then scanProbes more random ports of either parity. Random rather
	// than consecutive: a scan that takes the first free port after a
	// random offset fills runs of ports (as linear probing clusters), and a
	// bounded window would then mostly land inside one.
	for k := 0; k < scanProbes; k++ {
		x, r = splitmix(x)
		p := uint16(uint64(lo) + (uint64(uint32(r))*n)>>32)
		if a.free(t, exclusive, proto, dst, dport, nat, p) {
			return p, true
		}
	}
	return 0, false
}

// splitmix64 steps state x and returns the new state and a random output.
func splitmix(x uint64) (uint64, uint64) {
	x += 0x9e3779b97f4a7c15
	z := x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return x, z ^ z>>31
}

// Release returns the port of a flow that ended. A release that matches no
// allocation (a double release, a port never handed out) changes nothing and
// is counted (StrayReleases).
func (a *Allocator) Release(proto uint8, src Addr, sport uint16, dst Addr, dport uint16, natAddr Addr, natPort uint16) {
	class, ok := classOf(proto)
	st := a.lookup(&natAddr)
	if !ok || st == nil || natPort == 0 {
		a.stray.Add(1)
		return
	}
	st.mu.Lock()
	t := st.tables[class].Load()
	if st.dead || t == nil || t.refs[natPort] == 0 {
		st.mu.Unlock()
		a.stray.Add(1)
		return
	}
	if t.refs[natPort]--; t.refs[natPort] == 0 {
		t.used.Add(-1)
	}
	t.releases++
	t.full.forget(&dst, dport)
	if t.eim {
		if i := t.eps.find(&src, sport); i >= 0 && t.eps.slots[i].port == natPort {
			if t.eps.slots[i].flows--; t.eps.slots[i].flows == 0 {
				t.eps.remove(i)
			}
		}
	}
	st.mu.Unlock()
}

// PortsInUse is the number of distinct ports of proto on natAddr that at
// least one live flow uses.
func (a *Allocator) PortsInUse(natAddr Addr, proto uint8) int {
	class, ok := classOf(proto)
	st := a.lookup(&natAddr)
	if !ok || st == nil {
		return 0
	}
	t := st.tables[class].Load()
	if t == nil {
		return 0
	}
	return int(t.used.Load())
}

// Exhausted is how many allocations on natAddr failed with ErrExhausted.
func (a *Allocator) Exhausted(natAddr Addr) uint64 {
	if st := a.lookup(&natAddr); st != nil {
		return st.exhausted.Load()
	}
	return 0
}

// StrayReleases counts Release calls that matched no allocated port.
func (a *Allocator) StrayReleases() uint64 { return a.stray.Load() }

// Forget drops the state of an egress IP that left this gateway, once no
// port on it is in use; it reports whether it did. Without it every egress
// IP ever hosted keeps up to 768 KiB of port tables.
func (a *Allocator) Forget(natAddr Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := *a.ips.Load()
	st := old[natAddr]
	if st == nil {
		return true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for c := range st.tables {
		if t := st.tables[c].Load(); t != nil && t.used.Load() != 0 {
			return false
		}
	}
	st.dead = true
	m := make(map[Addr]*ipState, len(old))
	for k, v := range old {
		if k != natAddr {
			m[k] = v
		}
	}
	a.ips.Store(&m)
	return true
}
