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
		{"RFC7857 RST keeps state as CLOSE", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Reply, rst, StateClose},
			{Original, ack, StateClose},
			{Original, syn, StateSynSent}, // the tuple is reused for a new connection
		}},
		{"RST answers the SYN", syn, StateSynSent, []pkt{
			{Reply, rst | FlagACK, StateClose},
		}},
		{"TIME_WAIT reused by new SYN", syn, StateSynSent, []pkt{
			{Reply, synack, StateSynRecv},
			{Original, ack, StateEstablished},
			{Original, finack, StateFinWait},
			{Reply, finack, StateLastAck},
			{Original, ack, StateTimeWait},
			{Original, syn, StateSynSent},
		}},
		{"mid-stream pickup", ack, StateEstablished, []pkt{
			{Reply, psh, StateEstablished},
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
