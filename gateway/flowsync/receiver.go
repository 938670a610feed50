package flowsync

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/natlog"
)

// heldSet is what this gateway holds for one peer node: the flows it
// adopted from it (by original tuple) and the resync generation.
type heldSet struct {
	gen   uint32
	flows map[conntrack.Tuple]heldFlow
}

type heldFlow struct {
	nat  conntrack.Addr
	port uint16
	gen  uint32
}

// pruneEvery paces the removal of held entries whose flow is no longer
// held for the peer: expired here, or live because its egress IP is hosted
// here now.
const pruneEvery = 10 * time.Second

// Listen accepts peers' flows on addr (host:port; the node's InternalIP
// and DefaultPort in a cluster) until Close.
func (s *Sync) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("flow sync listener: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		ln.Close()
		return errors.New("flow sync is closed")
	default:
	}
	s.ln = ln
	s.wg.Add(2)
	go s.accept(ln)
	go s.pruneLoop()
	return nil
}

// Addr returns the listener's address, nil before Listen.
func (s *Sync) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

func (s *Sync) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		src := remoteAddr(c)
		s.mu.Lock()
		if s.pending >= DefaultMaxPending || s.pendingBy[src] >= DefaultMaxPendingPerSource {
			s.mu.Unlock()
			s.c.refused.Add(1)
			c.Close()
			continue
		}
		s.pending++
		s.pendingBy[src]++
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c, src)
	}
}

// remoteAddr is c's peer address.
func remoteAddr(c net.Conn) netip.Addr {
	ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr().Unmap()
}

// authenticated moves c from the handshake's slots to a session's: false
// (and c gets none) when the sessions are at their maximum.
func (s *Sync) authenticated(src netip.Addr, ok bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if s.pendingBy[src]--; s.pendingBy[src] <= 0 {
		delete(s.pendingBy, src)
	}
	if !ok || s.sessions >= DefaultMaxConns {
		return false
	}
	s.sessions++
	return true
}

// refuse counts a refusal for reason and logs it, at most once every
// refusalLogEvery for the whole receiver (a flood of forged records must
// not flood the log).
func (s *Sync) refuse(r Refusal, peer string, ip netip.Addr) {
	s.c.refusals[r].Add(1)
	if s.warnNow() {
		st := s.c.snapshot()
		s.cfg.Log.Warn("flow sync: refused what the cluster does not back (more are counted, not logged, for a while)",
			"peer", peer, "reason", r.String(), "egress_ip", ip, "refused_by_reason", st.RecordsRefused)
	}
}

// warnNow reports whether a refusal may be logged now: at most once every
// refusalLogEvery for the whole receiver.
func (s *Sync) warnNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(s.lastWarn) < refusalLogEvery {
		return false
	}
	s.lastWarn = now
	return true
}

// refusalLogEvery paces the log of refused records and sessions.
const refusalLogEvery = 10 * time.Second

// serve applies one peer's batches in order and acknowledges each.
func (s *Sync) serve(c net.Conn, src netip.Addr) {
	session := false
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		if session {
			s.sessions--
		}
		s.mu.Unlock()
		s.wg.Done()
	}()
	sess, byKey, err := s.accepted(c, src)
	if session = s.authenticated(src, err == nil); !session {
		var ve *versionError
		var ie *identityError
		var ae *addressError
		if errors.As(err, &ae) {
			s.refuse(RefusedPeerAddress, ae.node, netip.Addr{})
			return
		}
		if errors.As(err, &ie) {
			s.c.refusals[RefusedPeerIdentity].Add(1)
			if s.warnNow() {
				s.cfg.Log.Warn("flow sync: refused a peer whose certificate is not that of the gateway node it names (more are counted, not logged, for a while)",
					"remote", c.RemoteAddr().String(), "reason", RefusedPeerIdentity.String(), "err", err)
			}
			return
		}
		if errors.As(err, &ve) {
			s.c.versionRefused.Add(1)
			if s.warnNow() {
				s.cfg.Log.Warn("flow sync: refused a peer that speaks a protocol version this gateway does not (more are counted, not logged, for a while); upgrade one minor release at a time",
					"remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		s.c.refused.Add(1)
		if err == nil {
			err = fmt.Errorf("%d sessions are open already", DefaultMaxConns)
		}
		s.cfg.Log.Debug("flow sync: refused a connection", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	// The peer's name is its own claim, proved only by the shared key
	// (or, with TLS, its certificate's): bind it to the address the
	// cluster gives that node, so that one key holder cannot speak as
	// another gateway, nor a certificate be used from another host.
	if adm := s.admission(); adm == nil || !adm.peerAt(sess.peer, src) {
		s.refuse(RefusedPeerAddress, sess.peer, netip.Addr{})
		return
	}
	auth := "certificate"
	if byKey {
		s.c.keySessions.Add(1)
		auth = "key"
	}
	s.cfg.Log.Info("flow sync: holding flows for a peer", "peer", sess.peer, "remote", c.RemoteAddr().String(), "auth", auth)
	late := map[netip.Addr]bool{}
	stop := make(chan struct{})
	defer close(stop)
	go s.resyncWhenBacked(c, sess.peer, late, stop)
	paths := map[uint32]gateway.ReturnPath{}
	var buf, ack []byte
	var last uint64
	for {
		msg, err := sess.read(buf)
		if err != nil {
			switch {
			case errors.Is(err, ErrRefused):
				s.c.refused.Add(1)
			case errors.Is(err, errMalformed):
				s.c.malformed.Add(1)
			default:
				return // the peer went away
			}
			s.cfg.Log.Warn("flow sync: dropping a peer's session", "peer", sess.peer, "err", err)
			return
		}
		buf = msg[:0]
		typ, seq, body, err := header(msg)
		if err == nil && (typ != msgBatch || seq <= last) {
			err = fmt.Errorf("%w: message type %d, sequence %d after %d", errMalformed, typ, seq, last)
		}
		if err == nil {
			err = s.apply(sess.peer, s.admission(), body, paths, late)
		}
		if err != nil {
			s.c.malformed.Add(1)
			s.cfg.Log.Warn("flow sync: dropping a peer's session", "peer", sess.peer, "err", err)
			return
		}
		last = seq
		ack = appendHeader(ack[:0], msgAck, seq)
		if err := sess.write(ack); err != nil {
			return
		}
	}
}

// maxLate bounds the egress IPs one session remembers as refused for lack
// of the cluster's word: a forged flood must not grow it.
const maxLate = 256

// lateEvery paces the check of a session's refused egress IPs against a
// newer view.
const lateEvery = 100 * time.Millisecond

// resyncWhenBacked ends peer's session, so that the peer reconnects and
// sends everything again (each session starts a full resync), once the
// cluster's view here backs an egress IP whose records the session
// refused (late, under s.rmu). The peer acts on its own view, which can be
// ahead of this node's: a new standby's first records arrive before its
// agent has read the status that makes it the standby, and without this
// they were lost until each flow changed again.
func (s *Sync) resyncWhenBacked(c net.Conn, peer string, late map[netip.Addr]bool, stop <-chan struct{}) {
	t := time.NewTicker(lateEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.done:
			return
		case <-t.C:
		}
		s.rmu.Lock()
		backed := netip.Addr{}
		if len(late) > 0 {
			if adm := s.admission(); adm != nil {
				for ip := range late {
					if adm.Standby[ip] == peer {
						backed = ip
						break
					}
				}
			}
		}
		s.rmu.Unlock()
		if backed.IsValid() {
			s.c.lateResyncs.Add(1)
			s.cfg.Log.Info("flow sync: the cluster now backs an egress IP this session's records were refused for; ending it so that the peer resends everything", "peer", peer, "egress_ip", backed)
			c.Close()
			return
		}
	}
}

// admission is Config.Admission's answer, nil without one.
func (s *Sync) admission() *Admission {
	if s.cfg.Admission == nil {
		return nil
	}
	return s.cfg.Admission()
}

// admit checks f, a record of peer's naming return path rp (checkPath:
// an upsert, which makes state), against adm, counting a refusal. An
// egress IP refused because this node's view does not (yet) make it the
// peer's standby for it goes into late (nil: not kept).
func (s *Sync) admit(adm *Admission, peer string, f *conntrack.Flow, rp gateway.ReturnPath, checkPath bool, late map[netip.Addr]bool) bool {
	ip := netip.AddrFrom16(f.NATAddr).Unmap()
	r, ok := RefusedUnknownIP, false
	if adm != nil {
		r, ok = adm.record(peer, ip, rp.VTEP, netip.AddrFrom16(f.Orig.Src), checkPath)
	}
	if ok {
		return true
	}
	s.refuse(r, peer, ip)
	if late != nil && (r == RefusedUnknownIP || r == RefusedWrongPeer) && len(late) < maxLate {
		late[ip] = true
	}
	return false
}

// apply carries out one batch's items for peer, admitting each record by
// adm: no state (a port table, a VTEP, a flow) is made for an egress IP or
// node the cluster does not back.
func (s *Sync) apply(peer string, adm *Admission, b []byte, paths map[uint32]gateway.ReturnPath, late map[netip.Addr]bool) error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	h := s.held[peer]
	if h == nil {
		h = &heldSet{flows: map[conntrack.Tuple]heldFlow{}}
		s.held[peer] = h
	}
	pipe := s.cfg.Pipeline
	snap := pipe.Snapshot()
	hosted := func(a *conntrack.Addr) bool { return snap != nil && snap.Hosts(netip.AddrFrom16(*a)) }
	now := s.cfg.Clock()
	nl := pipe.NATLog()
	var it item
	for len(b) > 0 {
		var err error
		if b, err = next(b, &it); err != nil {
			return err
		}
		switch it.kind {
		case itemPath:
			if len(paths) >= 1<<16 {
				return fmt.Errorf("%w: more than %d return paths", errMalformed, 1<<16)
			}
			paths[it.aux] = it.path
		case itemBegin:
			h.gen++
		case itemEnd:
			for k, hf := range h.flows {
				if hf.gen != h.gen {
					if !hosted(&hf.nat) {
						gone := conntrack.Flow{Orig: k, NATAddr: hf.nat, NATPort: hf.port}
						if pipe.Abandon(&gone) && nl != nil {
							nl.Push(natlog.EventEnd, &gone)
						}
					}
					s.forget(h, k)
				}
			}
		case itemDelete:
			f := &it.flow
			if hosted(&f.NATAddr) {
				s.c.recordsOwned.Add(1)
				continue
			}
			if !s.admit(adm, peer, f, gateway.ReturnPath{}, false, late) {
				continue
			}
			if hf, had := h.flows[f.Orig]; had && nl != nil {
				// The peer ended the flow it made.
				nl.Push(natlog.EventEnd, &conntrack.Flow{Orig: f.Orig, NATAddr: hf.nat, NATPort: hf.port})
			}
			s.replaceCopy(peer, h, f)
			s.c.recordsApplied.Add(1)
		case itemUpsert:
			f := &it.flow
			if hosted(&f.NATAddr) {
				s.c.recordsOwned.Add(1)
				continue
			}
			rp, ok := paths[f.Aux]
			if !ok {
				return fmt.Errorf("%w: a flow names return path %d, never sent", errMalformed, f.Aux)
			}
			if !s.admit(adm, peer, f, rp, true, late) {
				continue
			}
			_, had := h.flows[f.Orig]
			if !had && len(h.flows) >= s.cfg.MaxPeerFlows {
				s.refuse(RefusedPeerFull, peer, netip.AddrFrom16(f.NATAddr).Unmap())
				continue
			}
			s.replaceCopy(peer, h, f)
			if err := pipe.Adopt(f, rp, time.Duration(it.rem), now); err != nil {
				s.c.adoptFailed.Add(1)
				continue
			}
			h.flows[f.Orig] = heldFlow{nat: f.NATAddr, port: f.NATPort, gen: h.gen}
			if !had && nl != nil {
				// The standby's record of the binding: the answer to
				// "who was this IP:port" survives the owner. Updates of
				// a held copy are the same binding, not logged again.
				nl.Push(natlog.EventAdopt, f)
			}
			s.c.backup.Add(1)
			s.c.recordsApplied.Add(1)
		}
	}
	return nil
}

// replaceCopy removes what this gateway holds of f's flow before peer's
// record of it is applied: peer's own earlier copy (whatever its binding),
// else a copy with f's tuple and NAT binding held other than for peer: one
// resumed from the state file of the previous process on this node, or
// held for another peer (the IP's primary before peer). Its egress IP is
// not hosted here (the caller checked), so the copy answers nothing, and
// peer's record is the current one: without this the copy kept the port,
// the record was not adopted (counted adopt failure) and the copy never
// learned a state change, refresh or removal (seen on the cluster: a
// gateway restarted by a rollout resumed its flows, lost their IP to the
// standby, then stood by for that IP). s.rmu is held.
func (s *Sync) replaceCopy(peer string, h *heldSet, f *conntrack.Flow) {
	if hf, ok := h.flows[f.Orig]; ok {
		s.cfg.Pipeline.Abandon(&conntrack.Flow{Orig: f.Orig, NATAddr: hf.nat, NATPort: hf.port})
		s.forget(h, f.Orig)
		return
	}
	for p, o := range s.held {
		if hf, ok := o.flows[f.Orig]; ok && p != peer && hf.nat == f.NATAddr && hf.port == f.NATPort {
			s.forget(o, f.Orig)
		}
	}
	s.cfg.Pipeline.Abandon(f)
}

func (s *Sync) forget(h *heldSet, k conntrack.Tuple) {
	delete(h.flows, k)
	s.c.backup.Add(-1)
}

// pruneLoop forgets, every pruneEvery, the held entries whose flow has
// expired here or whose egress IP is hosted here now (the flow is live:
// ours, no longer the peer's to change).
func (s *Sync) pruneLoop() {
	defer s.wg.Done()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.prune()
	}
}

func (s *Sync) prune() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	snap := s.cfg.Pipeline.Snapshot()
	ct := s.cfg.Pipeline.Conntrack()
	for _, h := range s.held {
		for k, hf := range h.flows {
			f := conntrack.Flow{Orig: k, NATAddr: hf.nat, NATPort: hf.port}
			r := f.Reply()
			if (snap != nil && snap.Hosts(netip.AddrFrom16(hf.nat))) || !ct.ReplyInUse(&r) {
				s.forget(h, k)
			}
		}
	}
}
