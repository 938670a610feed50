package conntrack

// RST validation (RFC 5961 §3, netfilter's tcp_in_window idea). Without
// sequence numbers anyone who guesses a flow's four tuple (the egress IP,
// its port, the server and its port) could reset it with one forged
// segment. The gateway cannot see the pod's receive window exactly, but it
// sees what the pod acknowledged: the pod's ACK is its RCV.NXT as it last
// told the server, and a server that resets the connection sends exactly
// that sequence number (RFC 793 reset generation: SND.NXT, which the pod has
// acknowledged). So an outside RST moves the flow to CLOSE only when its
// sequence number is the pod's highest ACK; any other RST, in the window or
// not, is forwarded and changes nothing: the endpoint decides (an RFC 5961
// stack answers an in-window one with a challenge ACK, and drops the rest).
// In SYN_SENT the pod has acknowledged nothing, and RFC 793 accepts a RST
// there only if it acknowledges the SYN: its ACK must be the pod's SYN
// sequence number + 1.
//
// The pod's own RSTs are not checked: the pod is authenticated (VTEP and
// anti-spoofing) and a flow is its own.
//
// After a RST, a segment from each side that is neither RST nor SYN means
// the connection lives on (the RST was a forgery an endpoint ignored, or an
// in-window one it answered with a challenge ACK): the flow is ESTABLISHED
// again, with that timeout.

// tcpSeq is a flow's sequence state, kept beside its entry (Table.seqs,
// same index) so that the entry stays one cache line; 8 bytes, no
// pointers. A zero mark means "not known": a real zero is rare, and taking
// it for unknown only makes a RST change nothing.
type tcpSeq struct {
	// mark is, in SYN_SENT, the pod's SYN sequence number + 1 (what a RST
	// answering it must acknowledge); in every other state the pod's
	// highest SEG.ACK (its RCV.NXT as it last told the server).
	mark  uint32
	since uint32 // sides (1<<Dir) heard from since the flow went to CLOSE
}

// seg is what the state machine reads of one packet. has is false when the
// caller gave no sequence numbers (Track): the flags still move the state,
// but nothing is learnt and an outside RST cannot be validated.
type seg struct {
	flags    uint8
	has      bool
	related  bool // Lookup.Related: look up only, change nothing
	len      uint16
	seq, ack uint32
}

// after reports whether sequence number a is after b (RFC 1982 arithmetic).
func after(a, b uint32) bool { return int32(a-b) > 0 }

// step advances state s of a flow of protocol proto by one packet from side
// dir, updating its sequence state q.
func step(s State, proto uint8, q *tcpSeq, dir Dir, g *seg) State {
	if proto != ProtoTCP || !s.IsTCP() {
		return nextState(s, dir, g.flags)
	}
	fl := g.flags
	if dir == Original && g.has {
		switch {
		case fl&(FlagSYN|FlagACK) == FlagSYN && (s == StateClose || s == StateTimeWait || s == StateSynSent || s == StatePickedUp):
			// A new connection on the tuple (or the SYN again): what was
			// learnt of the old one does not hold.
			*q = tcpSeq{mark: g.seq + 1}
		case s != StateSynSent && fl&FlagACK != 0 && fl&FlagRST == 0 && (q.mark == 0 || after(g.ack, q.mark)):
			q.mark = g.ack
		}
	}
	if fl&FlagRST != 0 {
		if dir == Reply && !rstAccepted(s, q, g) {
			return s
		}
		q.since = 0 // a RST again: both sides must be heard from anew
		return StateClose
	}
	next := tcpNext(s, dir, fl)
	switch {
	case s == StateSynSent && next != StateSynSent:
		q.mark = 0 // from now on it holds the pod's ACKs, in the server's sequence space
	case s == StateClose && next == StateClose && fl&FlagACK != 0 && fl&FlagSYN == 0:
		if q.since |= 1 << dir; q.since == 3 {
			return StateEstablished
		}
	}
	return next
}

// rstAccepted reports whether an outside RST g may close a flow in state s.
func rstAccepted(s State, q *tcpSeq, g *seg) bool {
	if !g.has {
		return false
	}
	if s == StateSynSent {
		return g.flags&FlagACK != 0 && (q.mark == 0 || g.ack == q.mark)
	}
	return q.mark != 0 && g.seq == q.mark
}

// stepEstablishedACK is step for the common segment, inlined: an ACK
// without SYN, FIN or RST on an ESTABLISHED flow leaves the state as it is
// and only moves the pod's highest ACK. It reports false, having changed
// nothing, for any other segment.
func stepEstablishedACK(s State, q *tcpSeq, dir Dir, g *seg) bool {
	if s != StateEstablished || g.flags&(FlagSYN|FlagFIN|FlagRST|FlagACK) != FlagACK {
		return false
	}
	if dir == Original && g.has && (q.mark == 0 || after(g.ack, q.mark)) {
		q.mark = g.ack
	}
	return true
}

// seqUsed reports whether step may read or write the sequence state of a
// TCP flow in state s for segment g from side dir. When it is false, step's
// answer does not depend on the state and leaves it unchanged, so the
// lookup need not load it (it is another cache line than the entry's):
// a segment without sequence numbers (Track), or from outside, that is no
// RST, on a flow not in CLOSE, and that does not take it out of SYN_SENT.
// TestSeqUsed checks this against step for every state, side and flag
// combination.
func seqUsed(s State, dir Dir, g *seg) bool {
	return (dir == Original && g.has) || g.flags&FlagRST != 0 || s == StateClose ||
		(s == StateSynSent && tcpNext(s, dir, g.flags) != StateSynSent)
}

// seqLikely is seqUsed before the entry is read (TrackBatch's probe, which
// decides whether to prefetch the sequence state with the entry): the
// state is not known yet, so the rare SYN_SENT and CLOSE cases, which read
// it without a prefetch, are left out.
func seqLikely(dir Dir, has bool, flags uint8) bool {
	return has && (dir == Original || flags&FlagRST != 0)
}

// transitions[s][dir][flagIndex(fl)] is nextState(s, dir, fl), with
// trSeqUsed set where seqUsed(s, dir, fl without sequence numbers) is true:
// step's answer for every segment that cannot touch the sequence state, in
// one load instead of a call (TestTransitions checks it against both).
var transitions = func() (tr [numStates][2][16]uint8) {
	for s := range numStates {
		for dir := range Dir(2) {
			for i := range 16 {
				fl := uint8(i&7) | uint8(i&8)<<1 // FIN, SYN, RST; ACK
				tr[s][dir][i] = uint8(nextState(s, dir, fl))
				if seqUsed(s, dir, &seg{flags: fl}) {
					tr[s][dir][i] |= trSeqUsed
				}
			}
		}
	}
	return tr
}()

// trSeqUsed marks a transitions entry whose segment step may read or write
// the sequence state for.
const trSeqUsed = 0x80

// flagIndex maps TCP flags to transitions' index: the flags the state
// machine reads (FIN, SYN, RST, ACK), PSH and the rest dropped.
func flagIndex(fl uint8) uint8 { return fl&7 | fl>>1&8 }
