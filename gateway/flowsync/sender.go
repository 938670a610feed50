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

	mu      sync.Mutex
	sess    *session // the current session, nil while there is none
	acked   atomic.Uint64
	ackedAt atomic.Int64 // wall nanoseconds of the last acknowledgement (or the session's start)

	// scan goroutine only
	cur        *session
	sent       uint64                    // bytes of batches sent in cur (the last batch's seq)
	shadow     map[conntrack.Tuple]int32 // a flow's row in rows
	rows       []shadow                  // the shadows; unused rows are on free
	free       []int32
	paths      map[uint32]bool // aux values whose return path cur has been told
	resync     bool            // a full resync is under way: 'E' not sent yet
	incomplete bool            // this scan left changes unsent (window full)
	batch      []byte
	rec        []byte
}

// shadow is what the standby was last told of one flow. The map holds
// row numbers, not shadows, so that the scan's check of an unchanged flow
// is one map lookup (its mark, gen, is set in the row), and finish walks a
// slice instead of the map.
type shadow struct {
	key      conntrack.Tuple
	deadline int64 // ns of the pipeline clock
	nat      conntrack.Addr
	port     uint16
	state    conntrack.State
	used     bool
	gen      uint32 // the last scan that saw the flow
}

// remember records sh as what the standby was told of its flow.
func (l *link) remember(sh shadow) {
	if i, ok := l.shadow[sh.key]; ok {
		l.rows[i] = sh
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
	l.shadow[sh.key] = i
}

// forget removes row i.
func (l *link) forget(i int32) {
	delete(l.shadow, l.rows[i].key)
	l.rows[i] = shadow{}
	l.free = append(l.free, i)
}

// resetShadow empties the shadow for a new session (keep) or drops it.
func (l *link) resetShadow(keep bool) {
	l.shadow, l.rows, l.free = nil, nil, nil
	if keep {
		l.shadow = map[conntrack.Tuple]int32{}
	}
}

// connect keeps a session to the standby open until stop.
func (l *link) connect() {
	defer l.s.wg.Done()
	buf := make([]byte, 0, 64)
	for {
		d := net.Dialer{Timeout: retryEvery}
		if src := l.s.cfg.Source; src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		c, err := d.Dial("tcp", l.addr)
		var sess *session
		if err == nil {
			if sess, err = clientHandshake(c, l.s.cfg.Key, l.s.cfg.Node); err != nil {
				c.Close()
			}
		}
		if err != nil {
			l.s.c.connectFail.Add(1)
			if errors.Is(err, ErrRefused) {
				l.s.cfg.Log.Warn("flow sync: the standby does not prove the key; check that every gateway mounts the same Secret", "peer", l.addr)
			} else {
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
			l.acked.Store(0)
			l.ackedAt.Store(time.Now().UnixNano())
			l.sess = sess
			l.mu.Unlock()
			l.s.cfg.Log.Info("flow sync: sending to the standby", "peer", l.addr)
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
				l.sess = nil
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
		l.sess.c.Close()
		l.sess = nil
	}
	l.mu.Unlock()
}

// scanLoop scans the flow table every Interval and sends each peer what
// changed for it.
func (s *Sync) scanLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var gen uint32
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		gen++
		s.scan(gen)
	}
}

// scan is one pass: every link with a session gets the flows of its egress
// IPs that are new or changed since it was last told, and the removal of
// those gone.
func (s *Sync) scan(gen uint32) {
	s.mu.Lock()
	byIP := s.byIP
	links := make([]*link, 0, len(s.links))
	for _, l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	active := 0
	for _, l := range links {
		if l.begin() {
			active++
		}
	}
	if active == 0 {
		return
	}
	now := s.cfg.Clock()
	ct := s.cfg.Pipeline.Conntrack()
	ct.Range(now, func(f *conntrack.Flow, rem time.Duration) {
		if l := byIP[f.NATAddr]; l != nil && l.cur != nil && rem > 0 {
			l.visit(f, rem, now, gen, ct)
		}
	})
	for _, l := range links {
		if l.cur != nil {
			l.finish(gen, byIP)
		}
	}
}

// begin readies l for a scan: a new session starts a full resync, a peer
// that stopped acknowledging is dropped. It reports whether l sends.
func (l *link) begin() bool {
	sess := l.current()
	if sess != l.cur {
		l.cur, l.sent = sess, 0
		l.resetShadow(false)
		l.paths, l.resync = nil, false
		if sess == nil {
			return false
		}
		l.resetShadow(true)
		l.paths, l.resync = map[uint32]bool{}, true
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
	l.incomplete = false
	return true
}

// fail ends the current session after a send error or a stall.
func (l *link) fail() {
	l.drop()
	l.resetShadow(false)
	l.cur, l.paths, l.batch = nil, nil, l.batch[:0]
}

// room reports whether the window has room for more.
func (l *link) room() bool {
	return l.cur != nil && l.sent-l.acked.Load() < uint64(l.s.cfg.Window)
}

// visit sends f if the standby does not know it as it is now. A refresh is
// sent once the flow's deadline has moved a quarter of its timeout past
// the one the standby holds, so a busy flow costs one record per quarter
// timeout and the standby's copy never expires long before the flow.
func (l *link) visit(f *conntrack.Flow, rem time.Duration, now int64, gen uint32, ct *conntrack.Table) {
	deadline := now + int64(rem)
	if i, ok := l.shadow[f.Orig]; ok {
		sh := &l.rows[i]
		sh.gen = gen
		if sh.state == f.State && sh.nat == f.NATAddr && sh.port == f.NATPort &&
			deadline-sh.deadline <= int64(ct.Timeout(f.State))/4 {
			return
		}
	}
	if !l.room() {
		l.incomplete = true
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
	l.remember(shadow{key: f.Orig, deadline: deadline, nat: f.NATAddr, port: f.NATPort, state: f.State, used: true, gen: gen})
	l.s.c.recordsSent.Add(1)
	l.flushIfFull()
}

// finish sends the removal of the flows of l's egress IPs that the scan
// did not see, ends a full resync that the scan completed and sends what
// is batched.
func (l *link) finish(gen uint32, byIP map[conntrack.Addr]*link) {
	for i := range l.rows {
		sh := &l.rows[i]
		if !sh.used || sh.gen == gen {
			continue
		}
		if byIP[sh.nat] != l {
			// Its egress IP is no longer ours to send (it moved, perhaps
			// to this very standby): forget it without a word.
			l.forget(int32(i))
			continue
		}
		if !l.room() {
			l.incomplete = true
			break
		}
		f := conntrack.Flow{Orig: sh.key, NATAddr: sh.nat, NATPort: sh.port, State: sh.state}
		l.batch = append(l.batch, itemDelete)
		l.batch = conntrack.AppendRecord(l.batch, &f, 0)
		l.forget(int32(i))
		l.s.c.recordsSent.Add(1)
		l.flushIfFull()
	}
	if l.cur != nil && l.resync && !l.incomplete {
		l.batch = append(l.batch, itemEnd)
		l.resync = false
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
