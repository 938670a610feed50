package conntrack

import "testing"

type pkt struct {
	dir   Dir
	flags uint8
	want  State
}

const (
	syn    = FlagSYN
	synack = FlagSYN | FlagACK
	ack    = FlagACK
	finack = FlagFIN | FlagACK
	rst    = FlagRST
	psh    = FlagPSH | FlagACK
)

// TestTCPStateMachine drives whole connections through Insert + Track and
// checks the state after every packet.
func TestTCPStateMachine(t *testing.T) {
	cases := []struct {
		name  string
		first uint8
		start State
		pkts  []pkt
	}{
		{"three-way handshake, pod closes first", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Original, psh, StateEstablished},
			{Reply, psh, StateEstablished},
			{Original, finack, StateFinWait},
			{Reply, ack, StateFinWait},
			{Reply, finack, StateLastAck},
			{Original, ack, StateTimeWait},
		}},
		{"server closes first", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Reply, finack, StateCloseWait},
			{Original, psh, StateCloseWait},
			{Original, finack, StateLastAck},
			{Reply, ack, StateTimeWait},
		}},
		{"RFC5382_REQ2 simultaneous open", syn, StateSynSent, []pkt{
			{Reply, syn, StateSynRecv},
			{Original, synack, StateSynRecv},
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
		}},
		{"retransmitted SYN", syn, StateSynSent, []pkt{
			{Original, syn, StateSynSent},
			{Reply, synack, StateSynRecv},
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
		}},
		{"RFC7857 the pod's RST keeps state as CLOSE", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Original, rst, StateClose},
			{Original, ack, StateClose},
			{Original, syn, StateSynSent}, // the tuple is reused for a new connection
		}},
		{"an outside RST without sequence numbers changes nothing", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Reply, rst, StateEstablished},
		}},
		{"TIME_WAIT reused by new SYN", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Original, finack, StateFinWait},
			{Reply, finack, StateLastAck},
			{Original, ack, StateTimeWait},
			{Original, syn, StateSynSent},
		}},
		{"mid-stream pickup: the server's answer makes it ESTABLISHED", ack, StatePickedUp, []pkt{
			{Original, psh, StatePickedUp},
			{Reply, psh, StateEstablished},
		}},
		{"mid-stream pickup, the pod closes", ack, StatePickedUp, []pkt{
			{Original, finack, StateFinWait},
		}},
		{"mid-stream pickup, a new SYN on the tuple", ack, StatePickedUp, []pkt{
			{Original, syn, StateSynSent},
		}},
		{"first packet FIN", finack, StateFinWait, []pkt{
			{Reply, finack, StateLastAck},
		}},
		{"first packet RST", rst, StateClose, nil},
		{"SYN in ESTABLISHED does not reset it", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Original, syn, StateEstablished},
			{Reply, syn, StateEstablished},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := mustNew(t, Config{MaxFlows: 16})
			f := flowN(1, ProtoTCP)
			if err := tb.Insert(&f, c.first, 0); err != nil {
				t.Fatal(err)
			}
			if f.State != c.start {
				t.Fatalf("after first packet: %v, want %v", f.State, c.start)
			}
			r := f.Reply()
			var out Flow
			for i, p := range c.pkts {
				k := &f.Orig
				if p.dir == Reply {
					k = &r
				}
				if !tb.Track(p.dir, k, p.flags, int64(i+1), &out) {
					t.Fatalf("packet %d: miss", i)
				}
				if out.State != p.want {
					t.Fatalf("packet %d (dir %d flags %#x): %v, want %v", i, p.dir, p.flags, out.State, p.want)
				}
			}
		})
	}
}

func TestUDPAndICMPStates(t *testing.T) {
	for _, c := range []struct {
		proto         uint8
		first, second State
	}{
		{ProtoUDP, StateUDPUnreplied, StateUDPReplied},
		{ProtoICMP, StateICMPUnreplied, StateICMPReplied},
		{ProtoICMPv6, StateICMPUnreplied, StateICMPReplied},
		{47, StateGeneric, StateGeneric},
	} {
		tb := mustNew(t, Config{MaxFlows: 16})
		f := flowN(1, c.proto)
		if err := tb.Insert(&f, 0, 0); err != nil || f.State != c.first {
			t.Fatalf("proto %d: insert %v state %v", c.proto, err, f.State)
		}
		var out Flow
		if !tb.Track(Original, &f.Orig, 0, 1, &out) || out.State != c.first {
			t.Fatalf("proto %d: outbound packet changed state to %v", c.proto, out.State)
		}
		r := f.Reply()
		if !tb.Track(Reply, &r, 0, 2, &out) || out.State != c.second {
			t.Fatalf("proto %d: reply gives %v, want %v", c.proto, out.State, c.second)
		}
	}
}

func TestStateNames(t *testing.T) {
	seen := map[string]bool{}
	for s := State(0); s < numStates; s++ {
		n := s.String()
		if n == "" || seen[n] {
			t.Fatalf("state %d: name %q empty or duplicate", s, n)
		}
		seen[n] = true
	}
	if State(200).String() != "INVALID" {
		t.Fatal("out-of-range state not INVALID")
	}
}

// seqPkt is a packet with sequence numbers, driven through TrackBatch.
type seqPkt struct {
	dir      Dir
	flags    uint8
	seq, ack uint32
	want     State
}

// TestRSTValidation: an outside RST closes a flow only with the sequence
// number the pod acknowledged last (RFC 5961 §3, exact match), or in
// SYN_SENT only if it acknowledges the pod's SYN; traffic from both sides
// after a RST makes the flow ESTABLISHED again.
func TestRSTValidation(t *testing.T) {
	const podISN, srvISN = 1000, 50000
	hs := []seqPkt{ // handshake, then the pod sends 100 bytes and the server 200
		{Original, syn, podISN, 0, StateSynSent},
		{Reply, synack, srvISN, podISN + 1, StateSynRecv},
		{Original, ack, podISN + 1, srvISN + 1, StateEstablished},
		{Reply, psh, srvISN + 1, podISN + 101, StateEstablished},
		{Original, psh, podISN + 1, srvISN + 201, StateEstablished},
	}
	const rcvNxt = srvISN + 201 // the pod's RCV.NXT, as its last ACK says
	cases := []struct {
		name string
		pkts []seqPkt
	}{
		{"forged RST far out of window", append(hs[:5:5],
			seqPkt{Reply, rst, rcvNxt + 1<<31, 0, StateEstablished},
			seqPkt{Reply, psh, rcvNxt, podISN + 101, StateEstablished})},
		{"RST in window but not exact: challenge ACK is the endpoint's", append(hs[:5:5],
			seqPkt{Reply, rst, rcvNxt + 10, 0, StateEstablished},
			seqPkt{Reply, rst | FlagACK, rcvNxt - 1, podISN + 101, StateEstablished})},
		{"RST at the pod's RCV.NXT closes", append(hs[:5:5],
			seqPkt{Reply, rst, rcvNxt, 0, StateClose})},
		{"an old ACK of the pod does not move the mark back", append(hs[:5:5],
			seqPkt{Original, ack, podISN + 101, srvISN + 1, StateEstablished},
			seqPkt{Reply, rst, srvISN + 1, 0, StateEstablished},
			seqPkt{Reply, rst, rcvNxt, 0, StateClose})},
		{"traffic both ways after a RST restores ESTABLISHED", append(hs[:5:5],
			seqPkt{Reply, rst, rcvNxt, 0, StateClose},
			seqPkt{Original, psh, podISN + 101, rcvNxt, StateClose},
			seqPkt{Original, psh, podISN + 201, rcvNxt, StateClose},
			seqPkt{Reply, ack, rcvNxt, podISN + 301, StateEstablished})},
		{"one side's traffic after a RST does not", append(hs[:5:5],
			seqPkt{Reply, rst, rcvNxt, 0, StateClose},
			seqPkt{Reply, psh, rcvNxt, podISN + 101, StateClose},
			seqPkt{Reply, rst, rcvNxt, 0, StateClose},
			seqPkt{Original, ack, podISN + 101, rcvNxt, StateClose})},
		{"the pod's RST is not checked", append(hs[:5:5],
			seqPkt{Original, rst, 7, 0, StateClose})},
		{"RST answering the SYN must acknowledge it", []seqPkt{
			{Original, syn, podISN, 0, StateSynSent},
			{Reply, rst | FlagACK, 0, podISN, StateSynSent},
			{Reply, rst, 0, 0, StateSynSent},
			{Reply, rst | FlagACK, 0, podISN + 1, StateClose},
			{Original, syn, podISN + 7, 0, StateSynSent}, // a new attempt on the tuple
			{Reply, rst | FlagACK, 0, podISN + 1, StateSynSent},
			{Reply, rst | FlagACK, 0, podISN + 8, StateClose},
		}},
		{"RST in SYN_RECV at the server's ISN+1 once the pod acknowledged it", []seqPkt{
			{Original, syn, podISN, 0, StateSynSent},
			{Reply, synack, srvISN, podISN + 1, StateSynRecv},
			{Reply, rst, srvISN + 1, 0, StateSynRecv}, // the pod has acknowledged nothing yet
			{Original, ack, podISN + 1, srvISN + 1, StateEstablished},
			{Reply, rst, srvISN + 2, 0, StateEstablished},
			{Reply, rst, srvISN + 1, 0, StateClose},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := mustNew(t, Config{MaxFlows: 16})
			f := flowN(1, ProtoTCP)
			// The first SYN goes through Insert (no sequence numbers), as
			// in the gateway; the test's first packet is its retransmission.
			if err := tb.Insert(&f, syn, 0); err != nil {
				t.Fatal(err)
			}
			r := f.Reply()
			for i, p := range c.pkts {
				l := []Lookup{{Key: f.Orig, Dir: p.dir, Flags: p.flags, Seq: p.seq, Ack: p.ack, HasSeq: true}}
				if p.dir == Reply {
					l[0].Key = r
				}
				if tb.TrackBatch(l, int64(i+1)) != 1 {
					t.Fatalf("packet %d: miss", i)
				}
				if got := l[0].Flow.State; got != p.want {
					t.Fatalf("packet %d (dir %d flags %#x seq %d ack %d): %v, want %v", i, p.dir, p.flags, p.seq, p.ack, got, p.want)
				}
			}
		})
	}
}
