package conntrack

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const sec = int64(time.Second)

// lifetime inserts a flow, drives it into its state with pkts, then checks it
// survives an idle period of min-1s and is gone after want+1s (with the
// default timeouts, want == the RFC minimum unless the RFC recommends more).
func TestTimeoutsRFC(t *testing.T) {
	cases := []struct {
		name  string
		proto uint8
		first uint8
		pkts  []pkt
		state State
		min   time.Duration // the RFC's lower bound
		want  time.Duration // the default we apply
	}{
		{"RFC5382_REQ5_established_2h4m", ProtoTCP, syn, []pkt{{Reply, synack, 0}, {Original, ack, 0}},
			StateEstablished, 2*time.Hour + 4*time.Minute, 2*time.Hour + 4*time.Minute},
		{"RFC5382_REQ5_transitory_SYN_SENT_4min", ProtoTCP, syn, nil, StateSynSent, 4 * time.Minute, 4 * time.Minute},
		{"RFC5382_REQ5_transitory_SYN_RECV_4min", ProtoTCP, syn, []pkt{{Reply, synack, 0}}, StateSynRecv, 4 * time.Minute, 4 * time.Minute},
		{"RFC5382_REQ5_transitory_FIN_WAIT_4min", ProtoTCP, ack, []pkt{{Original, finack, 0}}, StateFinWait, 4 * time.Minute, 4 * time.Minute},
		{"RFC5382_REQ5_transitory_CLOSE_WAIT_4min", ProtoTCP, ack, []pkt{{Reply, finack, 0}}, StateCloseWait, 4 * time.Minute, 4 * time.Minute},
		{"RFC5382_REQ5_transitory_LAST_ACK_4min", ProtoTCP, ack, []pkt{{Reply, finack, 0}, {Original, finack, 0}}, StateLastAck, 4 * time.Minute, 4 * time.Minute},
		{"RFC5382_REQ5_transitory_TIME_WAIT_4min", ProtoTCP, ack, []pkt{{Reply, finack, 0}, {Original, finack, 0}, {Reply, ack, 0}}, StateTimeWait, 4 * time.Minute, 4 * time.Minute},
		{"RFC7857_2.2_RST_held_4min", ProtoTCP, ack, []pkt{{Original, rst, 0}}, StateClose, 4 * time.Minute, 4 * time.Minute},
		{"RFC4787_REQ5_UDP_unreplied_5min", ProtoUDP, 0, nil, StateUDPUnreplied, 2 * time.Minute, 5 * time.Minute},
		{"RFC4787_REQ5_UDP_replied_5min", ProtoUDP, 0, []pkt{{Reply, 0, 0}}, StateUDPReplied, 2 * time.Minute, 5 * time.Minute},
		{"RFC5508_REQ2_ICMP_query_60s", ProtoICMP, 0, nil, StateICMPUnreplied, 60 * time.Second, 60 * time.Second},
		{"RFC5508_REQ2_ICMPv6_query_60s", ProtoICMPv6, 0, []pkt{{Reply, 0, 0}}, StateICMPReplied, 60 * time.Second, 60 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want < c.min {
				t.Fatalf("test wants %v below the RFC minimum %v", c.want, c.min)
			}
			tb := mustNew(t, Config{MaxFlows: 64})
			if got := tb.Timeout(c.state); got < c.min || got != c.want {
				t.Fatalf("Timeout(%v) = %v, want %v (RFC minimum %v)", c.state, got, c.want, c.min)
			}
			f := flowN(3, c.proto)
			now := int64(1000) * sec
			if err := tb.Insert(&f, c.first, now); err != nil {
				t.Fatal(err)
			}
			r := f.Reply()
			var out Flow
			for _, p := range c.pkts {
				now += sec
				k := &f.Orig
				if p.dir == Reply {
					k = &r
				}
				if !tb.Track(p.dir, k, p.flags, now, &out) {
					t.Fatal("miss while driving the state")
				}
			}
			if tb.Len() != 1 {
				t.Fatal("flow missing")
			}
			last := now
			if n := tb.Expire(last+int64(c.min)-sec, 100, nil); n != 0 {
				t.Fatalf("expired %d flows before the RFC minimum %v", n, c.min)
			}
			if !tb.Track(Reply, &r, 0, last+int64(c.min)-sec, &out) {
				// A reply packet right before the deadline must still pass.
				t.Fatal("reply missed before the timeout")
			}
			if want := nextState(c.state, Reply, 0); out.State != want {
				t.Fatalf("state %v, want %v", out.State, want)
			}
			// The reply refreshed the timer (inbound refresh): restart the clock.
			last += int64(c.min) - sec
			if n := tb.Expire(last+int64(c.want)-sec, 100, nil); n != 0 {
				t.Fatalf("expired before the configured %v", c.want)
			}
			var got []Flow
			if n := tb.Expire(last+int64(c.want)+sec, 100, func(f *Flow) { got = append(got, *f) }); n != 1 || len(got) != 1 {
				t.Fatalf("Expire after %v removed %d, want 1", c.want, n)
			}
			if got[0].Orig != f.Orig || tb.Len() != 0 {
				t.Fatalf("wrong flow expired: %+v", got[0])
			}
		})
	}
}

// RFC 4787 REQ-6: outbound packets refresh the mapping.
func TestRFC4787_REQ6_OutboundRefresh(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 64})
	f := flowN(1, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); err != nil {
		t.Fatal(err)
	}
	var out Flow
	now := int64(0)
	for i := 0; i < 10; i++ { // 10 × 4 min idle gaps > the 5 min timeout
		now += int64(4 * time.Minute)
		if tb.Expire(now, 10, nil) != 0 {
			t.Fatalf("refreshed flow expired at step %d", i)
		}
		if !tb.Track(Original, &f.Orig, 0, now, &out) {
			t.Fatal("miss")
		}
	}
}

// RFC 4787 REQ-5c: configurable, never below 2 minutes; RFC 5382 REQ-5 and
// RFC 5508 REQ-2 likewise.
func TestConfigTimeoutsBelowRFCMinimumRejected(t *testing.T) {
	cases := []struct {
		name string
		to   Timeouts
		ok   bool
	}{
		{"RFC4787_REQ5_UDP_2min_allowed", Timeouts{UDP: 2 * time.Minute}, true},
		{"RFC4787_REQ5_UDP_119s_rejected", Timeouts{UDP: 119 * time.Second}, false},
		{"RFC5382_REQ5_established_2h3m_rejected", Timeouts{TCPEstablished: 2*time.Hour + 3*time.Minute}, false},
		{"RFC5382_REQ5_established_24h_allowed", Timeouts{TCPEstablished: 24 * time.Hour}, true},
		{"RFC5382_REQ5_transitory_3min_rejected", Timeouts{TCPTransitory: 3 * time.Minute}, false},
		{"RFC5382_REQ5_timewait_1min_rejected", Timeouts{TCPTimeWait: time.Minute}, false},
		{"RFC7857_RST_10s_rejected", Timeouts{TCPClose: 10 * time.Second}, false},
		{"RFC5508_REQ2_ICMP_59s_rejected", Timeouts{ICMP: 59 * time.Second}, false},
		{"RFC5508_REQ2a_ICMP_configurable", Timeouts{ICMP: 90 * time.Second}, true},
		{"absurdly_long_rejected", Timeouts{UDP: 400 * 24 * time.Hour}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb, err := New(Config{MaxFlows: 8, Timeouts: c.to})
			if c.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "timeout") {
				t.Fatalf("error does not name the timeout: %v", err)
			}
			if c.ok && c.to.UDP != 0 && tb.Timeout(StateUDPReplied) != c.to.UDP {
				t.Fatalf("UDP timeout %v not applied", c.to.UDP)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{MaxFlows: 0}, {MaxFlows: -1}, {MaxFlows: 10, Shards: 3}, {MaxFlows: 10, Shards: 8192}, {MaxFlows: 1 << 29}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// An expired flow not yet swept admits nothing from outside, but the pod's
// next packet revives it (lazy expiry never shortens a timeout).
func TestExpiredFlowRejectsInbound(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 8})
	f := flowN(1, ProtoUDP)
	if err := tb.Insert(&f, 0, 0); err != nil {
		t.Fatal(err)
	}
	r := f.Reply()
	var out Flow
	late := int64(6 * time.Minute)
	if tb.Track(Reply, &r, 0, late, &out) {
		t.Fatal("inbound packet matched an expired mapping")
	}
	if !tb.Track(Original, &f.Orig, 0, late, &out) {
		t.Fatal("outbound packet did not revive the flow")
	}
	if !tb.Track(Reply, &r, 0, late+sec, &out) {
		t.Fatal("inbound after revival missed")
	}
}

// Expire's work is bounded: budget caps removals, and one call never scans
// more than 8*budget+64 entries.
func TestExpireIncrementalBudget(t *testing.T) {
	const n = 5000
	tb := mustNew(t, Config{MaxFlows: n, Shards: 4})
	for i := uint32(0); i < n; i++ {
		f := flowN(i, ProtoUDP)
		if err := tb.Insert(&f, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	now := int64(time.Hour)
	seen := map[Tuple]bool{}
	calls := 0
	for tb.Len() > 0 {
		calls++
		if calls > 10*n {
			t.Fatal("Expire makes no progress")
		}
		got := tb.Expire(now, 7, func(f *Flow) {
			if seen[f.Orig] {
				t.Errorf("flow expired twice: %+v", f.Orig)
			}
			seen[f.Orig] = true
		})
		if got > 7 {
			t.Fatalf("Expire removed %d > budget 7", got)
		}
	}
	if len(seen) != n {
		t.Fatalf("expired %d flows, want %d", len(seen), n)
	}
	if calls < n/7 {
		t.Fatalf("only %d calls for %d flows at budget 7", calls, n)
	}

	// Nothing expired: one call examines a bounded number of entries, so
	// many calls are needed to sweep all, and none removes anything.
	for i := uint32(0); i < n; i++ {
		f := flowN(i, ProtoUDP)
		if err := tb.Insert(&f, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		if tb.Expire(now+sec, 1, nil) != 0 {
			t.Fatal("removed a live flow")
		}
	}
	if tb.Len() != n {
		t.Fatalf("Len %d", tb.Len())
	}
	if _, err := New(Config{MaxFlows: 1, Timeouts: Timeouts{UDP: time.Second}}); err == nil || errors.Is(err, ErrFull) {
		t.Fatal("1s UDP timeout accepted")
	}
}
