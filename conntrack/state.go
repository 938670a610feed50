package conntrack

// Flow states. StateNone marks an unused table entry and is never the state
// of a tracked flow. The TCP states follow RFC 793's connection phases as a
// middlebox can observe them (flags and direction only, no sequence numbers),
// in the spirit of RFC 5382 REQ-2: every valid packet sequence, including
// simultaneous open, ends in a state with the right timeout.
const (
	StateNone State = iota

	StateSynSent     // TCP: the pod's SYN seen, no answer yet
	StateSynRecv     // TCP: SYN-ACK seen (or simultaneous SYNs)
	StateEstablished // TCP: handshake done (or a picked-up flow answered)
	StateFinWait     // TCP: the pod side closed first
	StateCloseWait   // TCP: the server side closed first
	StateLastAck     // TCP: both sides sent FIN, waiting for the last ACK
	StateTimeWait    // TCP: closed by both sides and acknowledged
	StateClose       // TCP: reset (RST) seen

	StateUDPUnreplied  // UDP: only the pod has sent
	StateUDPReplied    // UDP: the server has answered
	StateICMPUnreplied // ICMP/ICMPv6 query: request sent
	StateICMPReplied   // ICMP/ICMPv6 query: reply seen
	StateGeneric       // any other protocol (UDP timeout)

	// StatePickedUp is a TCP flow made from a pod's mid-stream segment
	// (a connection whose gateway restarted or whose egress IP moved),
	// nothing heard from the server yet. It has the transitory timeout and
	// may be dropped early, as netfilter's loose pick-up is not "assured":
	// otherwise a pod could hold flows open for hours by sending ACKs
	// nobody answers. The server's first segment makes it ESTABLISHED.
	// Last, so that the states before it keep their numbers.
	StatePickedUp

	numStates
)

var stateNames = [numStates]string{
	"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT",
	"LAST_ACK", "TIME_WAIT", "CLOSE", "UDP_UNREPLIED", "UDP_REPLIED",
	"ICMP_UNREPLIED", "ICMP_REPLIED", "GENERIC", "PICKED_UP",
}

// String returns the state's conntrack-style name, e.g. "ESTABLISHED".
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return "INVALID"
}

// IsTCP reports whether s is one of the TCP states.
func (s State) IsTCP() bool { return s >= StateSynSent && s <= StateClose || s == StatePickedUp }

// validFor reports whether a flow of protocol proto may be in state s; Import
// uses it to refuse records that could never have been produced.
func (s State) validFor(proto uint8) bool {
	switch proto {
	case ProtoTCP:
		return s.IsTCP()
	case ProtoUDP:
		return s == StateUDPUnreplied || s == StateUDPReplied
	case ProtoICMP, ProtoICMPv6:
		return s == StateICMPUnreplied || s == StateICMPReplied
	default:
		return s == StateGeneric
	}
}

// initialState is the state of a new flow whose first packet (from the pod)
// carries tcpFlags.
func initialState(proto, fl uint8) State {
	switch proto {
	case ProtoTCP:
		switch {
		case fl&FlagRST != 0:
			return StateClose
		case fl&FlagSYN != 0 && fl&FlagACK == 0:
			return StateSynSent
		case fl&FlagSYN != 0:
			return StateSynRecv
		case fl&FlagFIN != 0:
			return StateFinWait
		default:
			// Mid-stream pick-up (after a failover or a restart without
			// the flow): open, but unanswered until the server speaks.
			return StatePickedUp
		}
	case ProtoUDP:
		return StateUDPUnreplied
	case ProtoICMP, ProtoICMPv6:
		return StateICMPUnreplied
	default:
		return StateGeneric
	}
}

// nextState advances s by one packet from side dir with TCP flags fl.
func nextState(s State, dir Dir, fl uint8) State {
	switch s {
	case StateUDPUnreplied:
		if dir == Reply {
			return StateUDPReplied
		}
		return s
	case StateICMPUnreplied:
		if dir == Reply {
			return StateICMPReplied
		}
		return s
	}
	if !s.IsTCP() {
		return s
	}
	return tcpNext(s, dir, fl)
}

// tcpNext is the TCP state machine. Without sequence numbers a middlebox can
// only be approximately right; it errs towards the longer timeout.
func tcpNext(s State, dir Dir, fl uint8) State {
	switch {
	case fl&FlagRST != 0:
		// RFC 7857 §2.2: keep the state (TCPClose, 4 min by default) instead
		// of deleting it at once, so a forged RST cannot tear a flow down.
		return StateClose
	case fl&FlagSYN != 0 && fl&FlagACK == 0:
		if dir == Original {
			switch s {
			case StateSynSent, StateClose, StateTimeWait, StatePickedUp:
				// A retransmitted SYN, or a new connection reusing the tuple.
				return StateSynSent
			}
			return s
		}
		if s == StateSynSent {
			// Simultaneous open: the server's SYN crosses the pod's
			// (RFC 5382 REQ-2).
			return StateSynRecv
		}
		return s
	case fl&FlagSYN != 0: // SYN-ACK
		if s == StateSynSent || s == StateSynRecv {
			return StateSynRecv
		}
		return s
	case fl&FlagFIN != 0:
		switch s {
		case StateSynRecv, StateEstablished, StatePickedUp:
			if dir == Original {
				return StateFinWait
			}
			return StateCloseWait
		case StateFinWait:
			if dir == Reply {
				return StateLastAck
			}
		case StateCloseWait:
			if dir == Original {
				return StateLastAck
			}
		}
		return s
	case fl&FlagACK != 0:
		switch s {
		case StateSynRecv:
			return StateEstablished
		case StateLastAck:
			return StateTimeWait
		}
	}
	if s == StatePickedUp && dir == Reply {
		return StateEstablished // the server knows the connection
	}
	return s
}
