package flowsync

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
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
		s.mu.Lock()
		if len(s.conns) >= DefaultMaxConns {
			s.mu.Unlock()
			s.c.refused.Add(1)
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve applies one peer's batches in order and acknowledges each.
func (s *Sync) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	sess, err := serverHandshake(c, s.cfg.Key)
	if err != nil {
		s.c.refused.Add(1)
		s.cfg.Log.Warn("flow sync: refused a connection without the key", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	s.cfg.Log.Info("flow sync: holding flows for a peer", "peer", sess.peer, "remote", c.RemoteAddr().String())
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
			err = s.apply(sess.peer, body, paths)
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

// apply carries out one batch's items for peer.
func (s *Sync) apply(peer string, b []byte, paths map[uint32]gateway.ReturnPath) error {
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
						pipe.Abandon(&conntrack.Flow{Orig: k, NATAddr: hf.nat, NATPort: hf.port})
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
			s.replaceCopy(peer, h, f)
			if err := pipe.Adopt(f, rp, time.Duration(it.rem), now); err != nil {
				s.c.adoptFailed.Add(1)
				continue
			}
			h.flows[f.Orig] = heldFlow{nat: f.NATAddr, port: f.NATPort, gen: h.gen}
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
