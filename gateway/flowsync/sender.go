package flowsync

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egret-gw/egret/conntrack"
)

// retryEvery paces the attempts to reach a standby that is not reachable.
const retryEvery = time.Second

// link is the session to one standby. Its connect goroutine dials, proves
// the key and reads acknowledgements; the scan goroutine alone sends, and
// alone touches the fields below the line.
type link struct {
	s    *Sync
	addr string
	stop chan struct{}

	mu   sync.Mutex
	sess *session // the current session, nil while there is none
	// conn is the TCP connection under sess, closed to end it: a TLS
	// connection's Close may wait seconds to send its alert to a stalled
	// standby, and the scan goroutine drops stalled standbys.
	conn    net.Conn
	acked   atomic.Uint64
	ackedAt atomic.Int64 // wall nanoseconds of the last acknowledgement (or the session's start)
	keyOnly bool         // connect goroutine only: the standby was found to speak only the key (logged once)

	// scan goroutine only
	cur        *session
	sent       uint64 // bytes of batches sent in cur (the last batch's seq)
	rows       []shadow
	free       []int32  // unused rows
	bySlot     []int32  // a conntrack slot's row, plus one; 0: the standby was told of no flow in it
	pending    []uint64 // slots whose changes the window had no room for, a bit each
	anyPending bool
	paths      map[uint32]bool // aux values whose return path cur has been told
	resync     bool            // a full resync is under way: 'E' not sent yet
	full       bool            // a look at every slot is under way, from fullFrom on
	fullFrom   uint32          // where the look at every slot goes on
	stopped    bool            // this scan ran out of window at slot stopAt: the rest waits
	stopAt     uint32
	batch      []byte
	rec        []byte
}

// shadow is what the standby was last told of the flow in one slot of the
// flow table. Slots, not tuples, key it: a scan that looks at a slot finds
// its shadow by index, and a slot whose flow is gone still names what the
// standby holds.
type shadow struct {
	key      conntrack.Tuple
	deadline int64 // ns of the pipeline clock
	nat      conntrack.Addr
	port     uint16
	state    conntrack.State
}

// remember records sh as what the standby was told of the flow in slot.
func (l *link) remember(slot uint32, sh shadow) {
	if i := l.bySlot[slot]; i != 0 {
		l.rows[i-1] = sh
		return
	}
	var i int32
	if n := len(l.free); n > 0 {
		i, l.free = l.free[n-1], l.free[:n-1]
		l.rows[i] = sh
	} else {
		i = int32(len(l.rows))
		l.rows = append(l.rows, sh)
	}
	l.bySlot[slot] = i + 1
}

// forget removes slot's shadow.
func (l *link) forget(slot uint32) {
	i := l.bySlot[slot] - 1
	l.rows[i] = shadow{}
	l.free = append(l.free, i)
	l.bySlot[slot] = 0
}

// resetShadow empties the shadow for a new session over a table of slots
// slots (keep) or drops it.
func (l *link) resetShadow(keep bool, slots int) {
	l.rows, l.free, l.bySlot, l.pending, l.anyPending = nil, nil, nil, nil, false
	if keep {
		l.bySlot = make([]int32, slots)
		l.pending = make([]uint64, (slots+63)/64)
	}
}

// postpone leaves slot's change, and the rest of this scan, for a later
// one: the window has no room.
func (l *link) postpone(slot uint32) {
	l.pending[slot>>6] |= 1 << (slot & 63)
	l.anyPending, l.stopped, l.stopAt = true, true, slot
}

// lookFromStart starts a look at every slot.
func (l *link) lookFromStart() { l.full, l.fullFrom = true, 0 }

// takePending adds the slots l left for later to set and clears them (the
// scan over set leaves again those it cannot send).
func (l *link) takePending(set []uint64) {
	if !l.anyPending {
		return
	}
	for i, w := range l.pending {
		if w != 0 {
			set[i] |= w
			l.pending[i] = 0
		}
	}
	l.anyPending = false
}

// keepPending adds the slots of set from slot from on to those l left for
// later: the changes of a scan l sat out (from 0) or stopped in.
func (l *link) keepPending(set []uint64, from uint32) {
	i := int(from >> 6)
	if i >= len(set) {
		return
	}
	l.pending[i] |= set[i] &^ (1<<(from&63) - 1)
	for i++; i < len(set); i++ {
		l.pending[i] |= set[i]
	}
	l.anyPending = true
}

// markRange adds slots [from, to) to set.
func markRange(set []uint64, from, to uint32) {
	for from < to {
		k := min(64-from%64, to-from)
		set[from>>6] |= ^uint64(0) >> (64 - k) << (from % 64)
		from += k
	}
}

// connect keeps a session to the standby open until stop.
func (l *link) connect() {
	defer l.s.wg.Done()
	buf := make([]byte, 0, 64)
	for {
		c, sess, byKey, err := l.open()
		if err != nil {
			l.s.c.connectFail.Add(1)
			var ve *versionError
			var ie *identityError
			var te *tlsError
			switch {
			case errors.As(err, &ie):
				l.s.cfg.Log.Warn("flow sync: the standby's certificate is not that of a gateway node at its address; sending it nothing", "peer", l.addr, "err", err)
			case errors.As(err, &te) && keyOnly(err):
				l.s.cfg.Log.Warn("flow sync: the standby speaks only the shared key (previous release?), and this gateway has none; give it the key until every gateway runs this release", "peer", l.addr)
			case errors.As(err, &te):
				l.s.cfg.Log.Warn("flow sync: the TLS handshake with the standby failed; check both nodes' certificates", "peer", l.addr, "err", err)
			case errors.As(err, &ve):
				l.s.c.versionRefused.Add(1)
				l.s.cfg.Log.Warn("flow sync: the standby speaks a protocol version this gateway does not; upgrade one minor release at a time", "peer", l.addr, "err", err)
			case errors.Is(err, errNotSync):
				l.s.cfg.Log.Warn("flow sync: the standby's sync address answers with something else", "peer", l.addr, "err", err)
			case errors.Is(err, ErrRefused) && l.s.cfg.TLS != nil:
				l.s.cfg.Log.Warn("flow sync: the standby does not prove the key exported from this TLS session (something between the nodes terminates TLS?)", "peer", l.addr)
			case errors.Is(err, ErrRefused):
				l.s.cfg.Log.Warn("flow sync: the standby does not prove the key; check that every gateway mounts the same Secret", "peer", l.addr)
			default:
				l.s.cfg.Log.Debug("flow sync: standby not reachable", "peer", l.addr, "err", err)
			}
		} else {
			l.mu.Lock()
			select {
			case <-l.stop:
				l.mu.Unlock()
				c.Close()
				return
			default:
			}
			// Counted before the scan can send on it.
			auth := "certificate"
			if byKey {
				l.s.c.keySessions.Add(1)
				auth = "key"
			}
			l.acked.Store(0)
			l.ackedAt.Store(time.Now().UnixNano())
			l.sess, l.conn = sess, c
			l.mu.Unlock()
			l.s.cfg.Log.Info("flow sync: sending to the standby", "peer", l.addr, "auth", auth)
			for {
				msg, err := sess.read(buf)
				if err != nil {
					break
				}
				if typ, seq, _, err := header(msg); err == nil && typ == msgAck && seq > l.acked.Load() {
					l.acked.Store(seq)
					l.ackedAt.Store(time.Now().UnixNano())
				}
			}
			l.mu.Lock()
			if l.sess == sess {
				l.sess, l.conn = nil, nil
			}
			l.mu.Unlock()
			c.Close()
		}
		select {
		case <-l.stop:
			return
		case <-time.After(retryEvery):
		}
	}
}

// current returns the session to send on, nil if none.
func (l *link) current() *session {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sess
}

// drop closes the current session; connect opens another (unless stopped).
func (l *link) drop() {
	l.mu.Lock()
	if l.sess != nil {
		l.conn.Close()
		l.sess, l.conn = nil, nil
	}
	l.mu.Unlock()
}

// sweepEvery is how long the scans take to look at every slot of the
// flow table once, besides the slots that changed: what finds the timer
// refreshes (which are not changes) that are due, far under the shortest
// refresh step (a quarter of ICMP's 60 s timeout), and a flow a scan
// could not place (one revived after its deadline).
const sweepEvery = 5 * time.Second

// scanLoop scans the flow table every Interval and sends each peer what
// changed for it.
func (s *Sync) scanLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.scan()
	}
}

// scan is one pass: every link with a session gets the flows of its egress
// IPs that are new or changed since it was last told, and the removal of
// those gone. It looks at the slots the flow table marked changed, at those
// a link's window had no room for before, and at the sweep's share of the
// rest; at every slot for a link that starts a full resync or whose egress
// IPs changed. A link whose window fills stops there, keeps the slots it
// did not get to for later and goes on from there, and one whose window is
// full sits the scan out: looking at flows it cannot send would only burn
// the CPU the workers need (a resync of a million flows through a slow
// standby walked the whole table every scan).
func (s *Sync) scan() {
	s.mu.Lock()
	byIP := s.byIP
	links := make([]*link, 0, len(s.links))
	for _, l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	ct := s.cfg.Pipeline.Conntrack()
	slots := ct.Slots()
	moved := !sameLinks(byIP, s.seen)
	s.seen = byIP
	var active, waiting []*link
	full := false
	for _, l := range links {
		if !l.begin(slots) {
			continue
		}
		if moved {
			l.lookFromStart()
		}
		if !l.room() {
			waiting = append(waiting, l)
			continue
		}
		full = full || l.full
		active = append(active, l)
	}
	if len(active)+len(waiting) == 0 {
		return
	}
	if words := (slots + 63) / 64; len(s.visit) != words {
		s.visit = make([]uint64, words)
	} else {
		clear(s.visit)
	}
	ct.TakeChanged(s.visit)
	s.markSweep(slots)
	for _, l := range waiting {
		l.keepPending(s.visit, 0)
	}
	if len(active) == 0 {
		return
	}
	for _, l := range active {
		l.takePending(s.visit)
	}
	walk := s.visit
	if full {
		s.walk = append(s.walk[:0], s.visit...)
		for _, l := range active {
			if l.full {
				markRange(s.walk, l.fullFrom, uint32(slots))
			}
		}
		walk = s.walk
	}
	now := s.cfg.Clock()
	looked := uint64(0)
	ct.RangeSlots(now, walk, func(slot uint32, f *conntrack.Flow, rem time.Duration) bool {
		marked := s.visit[slot>>6]&(1<<(slot&63)) != 0
		more := false
		for _, l := range active {
			if l.cur == nil || l.stopped {
				continue
			}
			if marked || l.full && slot >= l.fullFrom {
				looked++
				l.visit(slot, f, rem, now, byIP, ct)
			}
			more = more || l.cur != nil && !l.stopped
		}
		return more
	})
	s.c.slotsLooked.Add(looked)
	for _, l := range active {
		l.finish(s.visit)
	}
}

// sweepShare is how many of a table's slots each scan sweeps, at one scan
// per interval, so that the sweep looks at every slot within sweepEvery.
func sweepShare(slots int, interval time.Duration) int {
	if interval >= sweepEvery {
		return slots
	}
	return int((int64(slots)*int64(interval) + int64(sweepEvery) - 1) / int64(sweepEvery))
}

// markSweep adds the sweep's share of the slots to this scan's set, the
// slots after the last scan's share (wrapping at the end of the table).
func (s *Sync) markSweep(slots int) {
	for n := sweepShare(slots, s.cfg.Interval); n > 0; {
		if s.sweepAt >= slots {
			s.sweepAt = 0
		}
		k := min(n, slots-s.sweepAt)
		markRange(s.visit, uint32(s.sweepAt), uint32(s.sweepAt+k))
		s.sweepAt += k
		n -= k
	}
}

// sameLinks reports whether a and b send the same egress IPs to the same
// links.
func sameLinks(a, b map[conntrack.Addr]*link) bool {
	if len(a) != len(b) {
		return false
	}
	for ip, l := range a {
		if b[ip] != l {
			return false
		}
	}
	return true
}

// begin readies l for a scan over a table of slots slots: a new session
// starts a full resync, a peer that stopped acknowledging is dropped. It
// reports whether l sends.
func (l *link) begin(slots int) bool {
	sess := l.current()
	if sess != l.cur {
		l.cur, l.sent = sess, 0
		l.resetShadow(false, 0)
		l.paths, l.resync = nil, false
		if sess == nil {
			return false
		}
		l.resetShadow(true, slots)
		l.paths, l.resync = map[uint32]bool{}, true
		l.lookFromStart()
		l.s.c.fullResyncs.Add(1)
		l.batch = append(l.batch[:0], itemBegin)
	}
	if l.cur == nil {
		return false
	}
	if l.sent > l.acked.Load() && time.Since(time.Unix(0, l.ackedAt.Load())) > l.s.cfg.StallAfter {
		l.s.c.stalls.Add(1)
		l.s.cfg.Log.Warn("flow sync: the standby stopped acknowledging; dropping the session (a full resync follows)", "peer", l.addr, "unacknowledged_bytes", l.sent-l.acked.Load())
		l.fail()
		return false
	}
	l.stopped = false
	return true
}

// fail ends the current session after a send error or a stall.
func (l *link) fail() {
	l.drop()
	l.resetShadow(false, 0)
	l.cur, l.paths, l.batch = nil, nil, l.batch[:0]
}

// room reports whether the window has room for more.
func (l *link) room() bool {
	return l.cur != nil && l.sent-l.acked.Load() < uint64(l.s.cfg.Window)
}

// visit brings the standby up to date with slot, which holds f (nil: no
// flow) with rem left. The flow the standby was told of in the slot, if
// it is not f, is removed there first. f is sent if it is one of l's
// egress IPs' and the standby does not know it as it is now: a refresh
// once its deadline has moved a quarter of its timeout past the one the
// standby holds, so a busy flow costs one record per quarter timeout and
// the standby's copy never expires long before the flow.
func (l *link) visit(slot uint32, f *conntrack.Flow, rem time.Duration, now int64, byIP map[conntrack.Addr]*link, ct *conntrack.Table) {
	var sh *shadow
	if i := l.bySlot[slot]; i != 0 {
		sh = &l.rows[i-1]
	}
	mine := f != nil && rem > 0 && byIP[f.NATAddr] == l
	if sh != nil && (!mine || sh.key != f.Orig) {
		if !l.retire(slot, sh, f, byIP, ct) {
			return
		}
		sh = nil
	}
	if !mine {
		return
	}
	deadline := now + int64(rem)
	if sh != nil && sh.state == f.State && sh.nat == f.NATAddr && sh.port == f.NATPort &&
		deadline-sh.deadline <= int64(ct.Timeout(f.State))/4 {
		return
	}
	if !l.room() {
		l.postpone(slot)
		return
	}
	if !l.paths[f.Aux] {
		rp, known := l.s.cfg.Pipeline.ReturnPath(f.Aux)
		if !known {
			return // not a flow of this pipeline's making: nothing to tell
		}
		l.batch = appendPath(l.batch, f.Aux, rp)
		l.paths[f.Aux] = true
	}
	l.batch = append(l.batch, itemUpsert)
	l.batch = conntrack.AppendRecord(l.batch, f, rem)
	l.remember(slot, shadow{key: f.Orig, deadline: deadline, nat: f.NATAddr, port: f.NATPort, state: f.State})
	l.s.c.recordsSent.Add(1)
	l.flushIfFull()
}

// retire removes at the standby the flow sh says it holds from slot, which
// now holds f (nil: none), and forgets sh; false if the window has no room.
// Its egress IP no longer being l's, it is forgotten without a word (the
// IP moved, perhaps to this very standby). Nor is a removal sent while the
// table holds a flow of the same tuple in another slot (removed here and
// made again): that slot is marked changed and sends it.
func (l *link) retire(slot uint32, sh *shadow, f *conntrack.Flow, byIP map[conntrack.Addr]*link, ct *conntrack.Table) bool {
	if byIP[sh.nat] == l && (f != nil && f.Orig == sh.key || !ct.Tracked(&sh.key)) {
		if !l.room() {
			l.postpone(slot)
			return false
		}
		d := conntrack.Flow{Orig: sh.key, NATAddr: sh.nat, NATPort: sh.port, State: sh.state}
		l.batch = append(l.batch, itemDelete)
		l.batch = conntrack.AppendRecord(l.batch, &d, 0)
		l.s.c.recordsSent.Add(1)
		l.flushIfFull()
	}
	l.forget(slot)
	return true
}

// finish ends a scan for l, whose marked slots were in visit. One that ran
// out of window keeps the marked slots it did not get to for later, and a
// look at every slot goes on from where it stopped; a look at every slot
// that reached the end ends the full resync, if one is under way (its end
// marker follows every flow). Then what is batched is sent.
func (l *link) finish(visit []uint64) {
	switch {
	case l.cur == nil:
	case l.stopped:
		l.keepPending(visit, l.stopAt+1)
		if l.full && l.stopAt > l.fullFrom {
			l.fullFrom = l.stopAt
		}
	case l.full:
		if l.resync {
			l.batch = append(l.batch, itemEnd)
			l.resync = false
		}
		l.full = false
	}
	l.flush()
}

func (l *link) flushIfFull() {
	if len(l.batch) >= batchBytes {
		l.flush()
	}
}

// flush seals the batched items into one message and sends it.
func (l *link) flush() {
	if len(l.batch) == 0 || l.cur == nil {
		return
	}
	n := uint64(msgHeader + len(l.batch))
	l.rec = appendHeader(l.rec[:0], msgBatch, l.sent+n)
	l.rec = append(l.rec, l.batch...)
	l.batch = l.batch[:0]
	l.cur.c.SetWriteDeadline(time.Now().Add(l.s.cfg.StallAfter))
	if err := l.cur.write(l.rec); err != nil {
		l.s.cfg.Log.Warn("flow sync: sending to the standby failed; a full resync follows", "peer", l.addr, "err", err)
		l.fail()
		return
	}
	l.sent += n
	l.s.c.batchesSent.Add(1)
	l.s.c.bytesSent.Add(n)
}
