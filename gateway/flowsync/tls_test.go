package flowsync

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/internal/nstest"
)

// pki is a certificate authority made in the test the way the cluster's
// is (ECDSA P-256).
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{cert: cert, key: key, pool: pool}
}

// issue is p's certificate for cn in org, shaped as the cluster issues a
// gateway's: SAN DNS cn, server and client auth.
func (p *pki) issue(t testing.TB, cn, org string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: []string{org}},
		DNSNames: []string{cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

const gatewaysOrg = "egret:gateways"

// gatewayNode is the tests' PeerNode: the CN of a certificate issued to
// O=egret:gateways (control/identity's GatewayNode in a cluster).
func gatewayNode(leaf *x509.Certificate) (string, error) {
	if len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != gatewaysOrg || leaf.Subject.CommonName == "" {
		return "", fmt.Errorf("certificate %q of %q is not a gateway's", leaf.Subject.CommonName, leaf.Subject.Organization)
	}
	return leaf.Subject.CommonName, nil
}

// clientTLS presents cert (nil: none) and verifies the server's chain
// against ca, not its name (dial targets are addresses), as
// control/identity's client configuration does.
func clientTLS(ca *pki, cert *tls.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca.pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		}}
}

// nodeTLS is the TLS mode of a node holding cert and trusting ca.
func nodeTLS(ca *pki, cert *tls.Certificate) *TLS {
	srv := &tls.Config{MinVersion: tls.VersionTLS13, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	if cert != nil {
		srv.Certificates = []tls.Certificate{*cert}
	}
	return &TLS{Server: srv, Client: clientTLS(ca, cert), PeerNode: gatewayNode}
}

// tlsAdmission is testAdmission with the standby at 127.0.0.1 too (the
// primary checks the standby's certificate against it).
func tlsAdmission() *Admission {
	a := testAdmission()
	a.Nodes["standby"] = AdmitNode{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	return a
}

// tlsSync is a Sync of node in the TLS mode with tls.
func tlsSync(t testing.TB, node string, p *gateway.Pipeline, tls *TLS, mod func(*Config)) *Sync {
	t.Helper()
	return newSync(t, node, nil, p, func(c *Config) {
		c.TLS = tls
		c.Admission = tlsAdmission
		if mod != nil {
			mod(c)
		}
	})
}

// tlsStandby is a TLS-mode receiving gateway listening on loopback.
func tlsStandby(t testing.TB, p *gateway.Pipeline, tls *TLS, mod func(*Config)) (*Sync, string) {
	t.Helper()
	s := tlsSync(t, "standby", p, tls, mod)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s, s.Addr().String()
}

// slots are the listener's connections in their handshake and its sessions.
func slots(s *Sync) (pending, sessions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.sessions
}

// dialTLS opens a TLS connection to addr from src presenting cert and
// returns it with the key its sync handshake takes.
func dialTLS(t *testing.T, addr, src string, ca *pki, cert *tls.Certificate) (*tls.Conn, []byte) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: syncWait}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := tls.Client(c, clientTLS(ca, cert))
	tc.SetDeadline(time.Now().Add(syncWait))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Time{})
	cs := tc.ConnectionState()
	key, err := cs.ExportKeyingMaterial(exporterLabel, nil, MinKeyLen)
	if err != nil {
		t.Fatal(err)
	}
	return tc, key
}

// TestTLSStandbyMirrorsPrimary: in the TLS mode the standby holds exactly
// the primary's flows, through creation, state changes and removal, over
// one session.
func TestTLSStandbyMirrorsPrimary(t *testing.T) {
	ca := newPKI(t)
	a, b := newPipeline(t, 1<<14, egress, egress6), newPipeline(t, 1<<14)
	sb, addr := tlsStandby(t, b, nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg)), nil)
	for i := range 200 {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := tlsSync(t, "primary", a, nodeTLS(ca, ca.issue(t, "primary", gatewaysOrg)), nil)
	sa.SetPeers(peers(addr))
	sa.Start()
	waitMatch(t, a, b)
	churn(t, a)
	waitMatch(t, a, b)
	if st := sa.Stats(); st.FullResyncs != 1 || st.ConnectFail != 0 {
		t.Errorf("primary stats %+v: want one session, no failed attempt", st)
	}
	if st := sb.Stats(); st.Refused != 0 || st.RecordsRefused != [NumRefusals]uint64{} || st.BackupFlows != 200 {
		t.Errorf("standby stats %+v: want 200 backup flows, nothing refused", st)
	}
}

// TestTLSUntrustedClientRefused: a primary without a certificate, and one
// with a gateway certificate of another CA, are refused by the standby in
// the TLS handshake, counted refused, hold no session, and send nothing;
// so is a certificate of another CA at a listener whose configuration asks
// for a client certificate without verifying it (counted peer_identity).
func TestTLSUntrustedClientRefused(t *testing.T) {
	ca, evil := newPKI(t), newPKI(t)
	for _, tc := range []struct {
		name     string
		cert     *tls.Certificate
		trust    *pki // the primary's view of the standby's CA
		loose    bool // the listener requests a certificate and does not verify it
		refusal  func(Stats) uint64
		refusals string
	}{
		{"no certificate", nil, ca, false, func(s Stats) uint64 { return s.Refused }, "refused"},
		{"another CA", evil.issue(t, "primary", gatewaysOrg), ca, false, func(s Stats) uint64 { return s.Refused }, "refused"},
		{"unverifying listener", evil.issue(t, "primary", gatewaysOrg), ca, true,
			func(s Stats) uint64 { return s.RecordsRefused[RefusedPeerIdentity] }, "peer_identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPipeline(t, 1<<10, egress), newPipeline(t, 1<<10)
			stls := nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg))
			if tc.loose {
				stls.Server.ClientAuth = tls.RequireAnyClientCert
			}
			sb, addr := tlsStandby(t, b, stls, nil)
			adopt(t, a, flow(0, conntrack.StateEstablished))
			sa := tlsSync(t, "primary", a, nodeTLS(tc.trust, tc.cert), nil)
			sa.SetPeers(map[netip.Addr]string{egress: addr})
			sa.Start()
			nstest.Eventually(t, "refusals", syncWait, func() bool { return tc.refusal(sb.Stats()) >= 2 && sa.Stats().ConnectFail >= 2 })
			if _, sessions := slots(sb); sessions != 0 {
				t.Errorf("the refused primary holds %d sessions", sessions)
			}
			if st := sb.Stats(); tc.refusal(st) != st.Refused+st.RecordsRefused[RefusedPeerIdentity] {
				t.Errorf("standby stats %+v: refusals counted other than as %s", st, tc.refusals)
			}
			if st := sa.Stats(); st.FullResyncs != 0 || st.BytesSent != 0 {
				t.Errorf("the primary sent flows over a refused session: %+v", st)
			}
			if n := len(table(b, egress)); n != 0 || sb.Stats().BackupFlows != 0 {
				t.Errorf("the standby holds %d flows of an untrusted primary", n)
			}
		})
	}
}

// TestTLSHandshakeBounded: a connection that stops in the TLS handshake,
// or after it in the sync handshake, is closed within pendingFor, counted
// refused, and gives its slot back.
func TestTLSHandshakeBounded(t *testing.T) {
	ca := newPKI(t)
	sb, addr := tlsStandby(t, newPipeline(t, 1<<10), nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg)), nil)
	silent := func(t *testing.T, c net.Conn) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(syncWait))
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the standby kept a connection that stopped in its handshake")
		}
	}
	t.Run("TLS", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte{0x16, 3, 1}) // a record header, then nothing
		silent(t, c)
	})
	t.Run("sync", func(t *testing.T) {
		tc, _ := dialTLS(t, addr, "127.0.0.1", ca, ca.issue(t, "primary", gatewaysOrg))
		silent(t, tc)
	})
	nstest.Eventually(t, "slots given back", syncWait, func() bool {
		p, s := slots(sb)
		return p == 0 && s == 0 && sb.Stats().Refused == 2
	})
}

// TestTLSPeerBoundToItsAddress: a primary with its own valid certificate
// connecting from an address the cluster does not give its node is
// refused as peer_address, and nothing it sends is held.
func TestTLSPeerBoundToItsAddress(t *testing.T) {
	ca := newPKI(t)
	a, b := newPipeline(t, 1<<10, egress), newPipeline(t, 1<<10)
	sb, addr := tlsStandby(t, b, nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg)), nil)
	adopt(t, a, flow(0, conntrack.StateEstablished))
	sa := tlsSync(t, "primary", a, nodeTLS(ca, ca.issue(t, "primary", gatewaysOrg)), func(c *Config) {
		c.Source = netip.MustParseAddr("127.0.0.2") // primary's node is at 127.0.0.1
	})
	sa.SetPeers(map[netip.Addr]string{egress: addr})
	sa.Start()
	nstest.Eventually(t, "refused peer_address", syncWait, func() bool { return sb.Stats().RecordsRefused[RefusedPeerAddress] >= 1 })
	if st := sb.Stats(); st.RecordsApplied != 0 || st.BackupFlows != 0 || st.RecordsRefused[RefusedPeerIdentity] != 0 {
		t.Errorf("standby stats %+v: want nothing applied, no peer_identity", st)
	}
	if n := len(table(b, egress)); n != 0 {
		t.Errorf("the standby holds %d flows from the wrong address", n)
	}
}

// TestTLSNameMustMatchCertificate drives a client by hand: a gateway
// naming another node than its certificate's, and a certificate of the
// cluster's CA that is not a gateway's, are refused as peer_identity,
// before any record is applied; a client that does not take the key from
// its TLS session is refused; the same client with its own name gets its
// batch acknowledged (the harness works).
func TestTLSNameMustMatchCertificate(t *testing.T) {
	ca := newPKI(t)
	b := newPipeline(t, 1<<10)
	adm := tlsAdmission()
	adm.Nodes["gw2"] = AdmitNode{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	sb, addr := tlsStandby(t, b, nodeTLS(ca, ca.issue(t, "standby", gatewaysOrg)), func(c *Config) {
		c.Admission = func() *Admission { return adm }
	})
	items := appendPath(nil, 1, path)
	f := flow(0, conntrack.StateEstablished)
	f.Aux = 1
	items = conntrack.AppendRecord(append(items, itemUpsert), &f, time.Hour)
	// refusedAfter sends a batch on s and reports that no ack came.
	refusedAfter := func(s *session) bool {
		s.c.SetDeadline(time.Now().Add(syncWait))
		if err := s.write(append(appendHeader(nil, msgBatch, 10), items...)); err != nil {
			return true
		}
		_, err := s.read(nil)
		return err != nil && !errors.Is(err, ErrRefused)
	}

	// gw2's certificate, naming itself primary (whose egress IP this node
	// stands by for, at the same address).
	tc, key := dialTLS(t, addr, "127.0.0.1", ca, ca.issue(t, "gw2", gatewaysOrg))
	if s, err := clientHandshake(tc, key, "primary", syncVersions); err == nil && !refusedAfter(s) {
		t.Error("a gateway naming another node than its certificate's got its batch acknowledged")
	}
	if got := sb.Stats().RecordsRefused[RefusedPeerIdentity]; got != 1 {
		t.Errorf("refused peer_identity: %d, want 1", got)
	}

	// A controller's certificate of the same CA, naming itself primary.
	tc, key = dialTLS(t, addr, "127.0.0.1", ca, ca.issue(t, "primary", "egret:controllers"))
	if s, err := clientHandshake(tc, key, "primary", syncVersions); err == nil && !refusedAfter(s) {
		t.Error("a certificate that is not a gateway's got its batch acknowledged")
	}
	if got := sb.Stats().RecordsRefused[RefusedPeerIdentity]; got != 2 {
		t.Errorf("refused peer_identity: %d, want 2", got)
	}

	// primary's certificate, but the sync handshake with a key of its
	// own: the session's keys are bound to the TLS session's.
	before := sb.Stats().Refused
	tc, _ = dialTLS(t, addr, "127.0.0.1", ca, ca.issue(t, "primary", gatewaysOrg))
	if _, err := clientHandshake(tc, testKey, "primary", syncVersions); !errors.Is(err, ErrRefused) {
		t.Errorf("a sync handshake with a key not exported from the TLS session: %v, want refused", err)
	}
	nstest.Eventually(t, "refused", syncWait, func() bool { return sb.Stats().Refused == before+1 })

	if st := sb.Stats(); st.RecordsApplied != 0 || st.BackupFlows != 0 || st.RecordsRefused[RefusedPeerAddress] != 0 {
		t.Fatalf("standby stats %+v: want nothing applied, no peer_address", st)
	}
	tc, key = dialTLS(t, addr, "127.0.0.1", ca, ca.issue(t, "primary", gatewaysOrg))
	s, err := clientHandshake(tc, key, "primary", syncVersions)
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, msgBatch, 10, items)
	if typ, seq := recvAck(t, s); typ != msgAck || seq != 10 {
		t.Fatalf("ack %d/%d, want %d/10", typ, seq, msgAck)
	}
	if st := sb.Stats(); st.RecordsApplied != 1 || st.RecordsRefused[RefusedPeerIdentity] != 2 {
		t.Errorf("standby stats %+v: want the primary's record applied", st)
	}
}

// TestTLSStandbyImpersonated: a primary dialing its standby's address
// finds there a gateway certificate of another node (gw2, which the
// cluster places elsewhere): it sends nothing, counting a failed connect;
// nor does it send when it has no view of the cluster to check against.
func TestTLSStandbyImpersonated(t *testing.T) {
	ca := newPKI(t)
	for _, tc := range []struct {
		name    string
		standby string // the node the certificate at the standby's address is issued to
		adm     func() *Admission
	}{
		{"another node", "gw2", func() *Admission {
			a := tlsAdmission()
			a.Nodes["gw2"] = AdmitNode{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.200")}}
			return a
		}},
		{"no view", "standby", func() *Admission { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPipeline(t, 1<<10, egress), newPipeline(t, 1<<10)
			sb, addr := tlsStandby(t, b, nodeTLS(ca, ca.issue(t, tc.standby, gatewaysOrg)), nil)
			adopt(t, a, flow(0, conntrack.StateEstablished))
			log := &logBuffer{}
			sa := tlsSync(t, "primary", a, nodeTLS(ca, ca.issue(t, "primary", gatewaysOrg)), func(c *Config) {
				c.Admission = tc.adm
				c.Log = slog.New(slog.NewTextHandler(log, nil))
			})
			sa.SetPeers(map[netip.Addr]string{egress: addr})
			sa.Start()
			nstest.Eventually(t, "connects failed", syncWait, func() bool {
				return sa.Stats().ConnectFail >= 2 && strings.Count(log.String(), "the standby's certificate is not that of a gateway node at its address") >= 2
			})
			if st := sa.Stats(); st.FullResyncs != 0 || st.BytesSent != 0 {
				t.Errorf("the primary sent flows to an impersonated standby: %+v", st)
			}
			if n := len(table(b, egress)); n != 0 || sb.Stats().RecordsApplied != 0 {
				t.Errorf("the impersonating standby holds %d flows", n)
			}
		})
	}
}

// logBuffer is a log's output the test reads while it is written.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNewKeyOrTLS: New takes a key, per-node TLS or both (the upgrade's
// transition), the key only long enough and TLS only whole.
func TestNewKeyOrTLS(t *testing.T) {
	ca := newPKI(t)
	p := newPipeline(t, 1<<10)
	full := func() *TLS { return nodeTLS(ca, ca.issue(t, "n", gatewaysOrg)) }
	for _, tc := range []struct {
		name string
		key  []byte
		tls  *TLS
		want string // in the error; "": none
	}{
		{"key", testKey, nil, ""},
		{"tls", nil, full(), ""},
		{"both", testKey, full(), ""},
		{"both, short key", testKey[:8], full(), "use at least 32"},
		{"both, no PeerNode", testKey, func() *TLS { c := full(); c.PeerNode = nil; return c }(), "per-node TLS needs"},
		{"neither", nil, nil, "needs a pre-shared key or per-node TLS"},
		{"short key", testKey[:8], nil, "use at least 32"},
		{"no server", nil, func() *TLS { c := full(); c.Server = nil; return c }(), "per-node TLS needs"},
		{"no client", nil, func() *TLS { c := full(); c.Client = nil; return c }(), "per-node TLS needs"},
		{"no PeerNode", nil, func() *TLS { c := full(); c.PeerNode = nil; return c }(), "per-node TLS needs"},
	} {
		s, err := New(Config{Node: "n", Key: tc.key, TLS: tc.tls, Pipeline: p, Clock: clock})
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		if s != nil {
			s.Close()
		}
	}
}
