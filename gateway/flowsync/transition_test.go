package flowsync

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/internal/nstest"
)

// The upgrade's transition: gateways given both the shared key and
// per-node TLS serve and send to the previous release's, which speak only
// the key.

// fallbackLog is what a primary logs, once per standby, on finding that
// the standby speaks only the key.
const fallbackLog = "the standby speaks only the shared key (previous release?)"

// transitionStandby is a receiving gateway in the transition (key and
// TLS) listening on loopback.
func transitionStandby(t testing.TB, p *gateway.Pipeline, ca *pki, mod func(*Config)) (*Sync, string) {
	t.Helper()
	return tlsStandby(t, p, nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg)), func(c *Config) {
		c.Key = testKey
		if mod != nil {
			mod(c)
		}
	})
}

// TestTransitionListenerServesBoth: a standby in the transition holds the
// flows of a primary of the previous release (key only, egress) and of
// one of this release (TLS, egress6) at once, and counts the key's
// session alone as a key session.
func TestTransitionListenerServesBoth(t *testing.T) {
	ca := newPKI(t)
	adm := tlsAdmission()
	adm.Standby[egress6] = "primary2"
	adm.Nodes["primary2"] = AdmitNode{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	admission := func() *Admission { return adm }
	old, cur, b := newPipeline(t, 1<<12, egress), newPipeline(t, 1<<12, egress6), newPipeline(t, 1<<12)
	sb, addr := transitionStandby(t, b, ca, func(c *Config) { c.Admission = admission })
	for i := range 100 {
		if i%2 == 0 {
			adopt(t, old, flow(i, conntrack.StateEstablished))
		} else {
			adopt(t, cur, flow(i, conntrack.StateEstablished))
		}
	}
	sOld := newSync(t, "primary", testKey, old, func(c *Config) { c.Admission = admission })
	sOld.SetPeers(map[netip.Addr]string{egress: addr})
	sOld.Start()
	sCur := tlsSync(t, "primary2", cur, nodeTLS(ca, ca.issue(t, "primary2", gatewaysOrg)), func(c *Config) { c.Admission = admission })
	sCur.SetPeers(map[netip.Addr]string{egress6: addr})
	sCur.Start()
	nstest.Eventually(t, "standby holds both primaries' flows", syncWait, func() bool {
		return equal(table(old, egress), table(b, egress)) && equal(table(cur, egress6), table(b, egress6))
	})
	if n := len(table(b, egress, egress6)); n != 100 {
		t.Fatalf("standby holds %d flows, want 100", n)
	}
	if st := sb.Stats(); st.KeySessions != 1 || st.Refused != 0 || st.RecordsRefused != [NumRefusals]uint64{} {
		t.Errorf("standby stats %+v: want 1 key session, nothing refused", st)
	}
	if st := sOld.Stats(); st.KeySessions != 1 || st.FullResyncs != 1 {
		t.Errorf("key-only primary stats %+v: want its one session counted a key session", st)
	}
	if st := sCur.Stats(); st.KeySessions != 0 || st.FullResyncs != 1 || st.ConnectFail != 0 {
		t.Errorf("TLS primary stats %+v: want one certificate session", st)
	}
}

// TestTransitionSenderFallsBack: a primary in the transition sends to a
// standby of the previous release (key only) with the key, at once in the
// same attempt (no failed connect), logging it once however often it
// reconnects; to a standby in the transition it sends over TLS, without
// falling back.
func TestTransitionSenderFallsBack(t *testing.T) {
	ca := newPKI(t)
	primary := func(t *testing.T, a *gateway.Pipeline, log *logBuffer) *Sync {
		return tlsSync(t, "primary", a, nodeTLS(ca, ca.issue(t, "primary", gatewaysOrg)), func(c *Config) {
			c.Key = testKey
			c.Log = slog.New(slog.NewTextHandler(log, nil))
		})
	}
	t.Run("key-only standby", func(t *testing.T) {
		a, b := newPipeline(t, 1<<12, egress, egress6), newPipeline(t, 1<<12)
		sb, addr := standby(t, b)
		px := newProxy(t, addr)
		for i := range 100 {
			adopt(t, a, flow(i, conntrack.StateEstablished))
		}
		log := &logBuffer{}
		sa := primary(t, a, log)
		sa.SetPeers(peers(px.addr()))
		sa.Start()
		waitMatch(t, a, b)
		px.cut() // a lost session: the next attempt falls back again
		adopt(t, a, flow(200, conntrack.StateEstablished))
		nstest.Eventually(t, "a second key session", syncWait, func() bool { return sa.Stats().KeySessions == 2 })
		waitMatch(t, a, b)
		if st := sa.Stats(); st.FullResyncs != 2 || st.ConnectFail != 0 {
			t.Errorf("primary stats %+v: want 2 sessions, each from one attempt", st)
		}
		if n := strings.Count(log.String(), fallbackLog); n != 1 {
			t.Errorf("the fallback was logged %d times, want once:\n%s", n, log)
		}
		// The standby of the previous release reads each ClientHello as
		// a client that does not speak its protocol.
		nstest.Eventually(t, "standby: 2 key sessions, 2 ClientHellos refused", syncWait, func() bool {
			st := sb.Stats()
			return st.KeySessions == 2 && st.Refused == 2
		})
	})
	t.Run("transition standby", func(t *testing.T) {
		a, b := newPipeline(t, 1<<12, egress, egress6), newPipeline(t, 1<<12)
		sb, addr := transitionStandby(t, b, ca, nil)
		for i := range 100 {
			adopt(t, a, flow(i, conntrack.StateEstablished))
		}
		log := &logBuffer{}
		sa := primary(t, a, log)
		sa.SetPeers(peers(addr))
		sa.Start()
		waitMatch(t, a, b)
		if st := sa.Stats(); st.KeySessions != 0 || st.FullResyncs != 1 || st.ConnectFail != 0 {
			t.Errorf("primary stats %+v: want one certificate session", st)
		}
		if st := sb.Stats(); st.KeySessions != 0 || st.Refused != 0 {
			t.Errorf("standby stats %+v: want no key session, nothing refused", st)
		}
		if strings.Contains(log.String(), fallbackLog) {
			t.Errorf("the primary fell back to the key with a TLS standby:\n%s", log)
		}
	})
}

// TestTransitionListenerRefuses: a standby in the transition refuses a
// client whose first byte is neither a TLS handshake nor silence without
// greeting it, and greets a silent client but closes it within pendingFor
// when it does not prove the key; both are counted refused and give their
// slots back.
func TestTransitionListenerRefuses(t *testing.T) {
	ca := newPKI(t)
	sb, addr := transitionStandby(t, newPipeline(t, 1<<10), ca, nil)
	// closed reads c until the standby closes it, and returns what came.
	closed := func(t *testing.T, c net.Conn) []byte {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(syncWait))
		var got bytes.Buffer
		_, err := io.Copy(&got, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the standby kept the connection open")
		}
		return got.Bytes()
	}
	t.Run("garbage", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		if got := closed(t, c); len(got) != 0 {
			t.Errorf("a client sending garbage got % x, want nothing", got)
		}
	})
	t.Run("silent", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := closed(t, c); !bytes.HasPrefix(got, magic[:]) {
			t.Errorf("a silent client got % x, want the key mode's greeting", got)
		}
	})
	nstest.Eventually(t, "slots given back", syncWait, func() bool {
		p, s := slots(sb)
		return p == 0 && s == 0 && sb.Stats().Refused == 2
	})
	if st := sb.Stats(); st.KeySessions != 0 || st.RecordsRefused != [NumRefusals]uint64{} {
		t.Errorf("standby stats %+v: want only the 2 refusals", st)
	}
}

// TestTLSAddressCheckedAfterHandshake: a host presenting another node's
// valid certificate (gw2's, whose node is at 127.0.0.1) from another
// address, and sending nothing after the TLS handshake, is refused as
// peer_address and closed, in the TLS mode and in the transition.
func TestTLSAddressCheckedAfterHandshake(t *testing.T) {
	ca := newPKI(t)
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"TLS", nil}, {"transition", testKey}} {
		t.Run(tc.name, func(t *testing.T) {
			adm := tlsAdmission()
			adm.Nodes["gw2"] = AdmitNode{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
			sb, addr := tlsStandby(t, newPipeline(t, 1<<10), nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg)), func(c *Config) {
				c.Key = tc.key
				c.Admission = func() *Admission { return adm }
			})
			tconn, _ := dialTLS(t, addr, "127.0.0.2", ca, ca.issue(t, "gw2", gatewaysOrg))
			tconn.SetReadDeadline(time.Now().Add(syncWait))
			_, err := io.Copy(io.Discard, tconn)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the standby kept the connection of a certificate from another node's address")
			}
			nstest.Eventually(t, "refused peer_address", syncWait, func() bool { return sb.Stats().RecordsRefused[RefusedPeerAddress] == 1 })
			if st := sb.Stats(); st.Refused != 0 || st.RecordsRefused[RefusedPeerIdentity] != 0 {
				t.Errorf("standby stats %+v: want it counted peer_address only", st)
			}
		})
	}
}
