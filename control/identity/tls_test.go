package identity

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
	"net"
	"strings"
	"testing"
	"time"
)

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func memCA(t *testing.T) *CA {
	t.Helper()
	sec, err := newCASecret("x")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := parseCA(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// gatewayStore holds a gateway certificate for node issued as the signer
// issues it.
func gatewayStore(t *testing.T, ca *CA, node string) *Store {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: node, Organization: []string{GatewayOrg}},
		DNSNames:    []string{node},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, &key.PublicKey, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	st := newStore()
	st.setCA(ca.certPEM, ca.pool)
	st.setCert(&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf})
	return st
}

func controllerStore(t *testing.T, ca *CA) *Store {
	t.Helper()
	st, err := ControllerStore(t.Context(), ca, time.Hour, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// serve accepts TLS connections with cfg until the test ends, completing
// each handshake and reporting whether the peer had a verified chain by
// writing one byte; it returns the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				b := byte('n')
				if len(tc.ConnectionState().VerifiedChains) > 0 {
					b = 'y'
				}
				tc.Write([]byte{b})
			}()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes with addr as serverName and returns the server's verdict
// on whether our chain was verified ('y').
func dial(addr, serverName string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.ServerName = serverName
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	// In TLS 1.3 the server checks the client's certificate after the
	// client's handshake ends: its refusal arrives on the first read.
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("server refused: %w", err)
	}
	if b[0] != 'y' {
		return errors.New("server has no verified chain")
	}
	return nil
}

func gatewayOnly(leaf *x509.Certificate) error { _, err := GatewayNode(leaf); return err }

// gatewayAt accepts the gateway certificate of the node named serverName.
func gatewayAt(leaf *x509.Certificate, serverName string) error {
	node, err := GatewayNode(leaf)
	if err != nil {
		return err
	}
	if node != serverName {
		return fmt.Errorf("certificate of node %s, dialed %s", node, serverName)
	}
	return nil
}

func TestHandshakes(t *testing.T) {
	ca, other := memCA(t), memCA(t)
	gw1, gw2 := gatewayStore(t, ca, "gw1"), gatewayStore(t, ca, "gw2")
	ctrl := controllerStore(t, ca)
	foreignGW, foreignCtrl := gatewayStore(t, other, "gw2"), controllerStore(t, other)
	// Clients with a certificate of another CA that trust ours: only the
	// server's check can refuse them.
	foreignGWc, foreignCtrlc := gatewayStore(t, other, "gw2"), controllerStore(t, other)
	foreignGWc.setCA(ca.certPEM, ca.pool)
	foreignCtrlc.setCA(ca.certPEM, ca.pool)

	syncSrv := serve(t, gw1.ServerTLS(gatewayOnly))  // flow sync: gateways only
	healthSrv := serve(t, gw1.ServerTLS(Controller)) // health: the controller only
	for _, tc := range []struct {
		name       string
		addr, sn   string
		client     *tls.Config
		wantRefuse string
	}{
		{"gateway to gateway", syncSrv, "gw1", gw2.ClientTLS(gatewayAt), ""},
		{"controller to gateway", healthSrv, "gw1", ctrl.ClientTLS(gatewayAt), ""},
		{"gateway certificate where the controller's is required", healthSrv, "gw1", gw2.ClientTLS(gatewayAt), "refused"},
		{"controller certificate where a gateway's is required", syncSrv, "gw1", ctrl.ClientTLS(gatewayAt), "refused"},
		{"gateway of another CA", syncSrv, "gw1", foreignGWc.ClientTLS(gatewayAt), "refused"},
		{"controller of another CA", healthSrv, "gw1", foreignCtrlc.ClientTLS(gatewayAt), "refused"},
		{"server of another CA", serve(t, foreignGW.ServerTLS(gatewayOnly)), "gw2", gw1.ClientTLS(gatewayAt), "unknown authority"},
		{"controller trusting another CA", healthSrv, "gw1", foreignCtrl.ClientTLS(gatewayAt), "unknown authority"},
		{"another node than dialed", syncSrv, "gw2", gw2.ClientTLS(gatewayAt), "dialed gw2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dial(tc.addr, tc.sn, tc.client)
			switch {
			case tc.wantRefuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantRefuse != "" && err == nil:
				t.Fatal("accepted")
			case tc.wantRefuse != "" && !strings.Contains(err.Error(), tc.wantRefuse):
				t.Fatalf("refused with %v; want %q", err, tc.wantRefuse)
			}
		})
	}

	t.Run("before a certificate", func(t *testing.T) {
		empty := newStore()
		if err := dial(serve(t, empty.ServerTLS(gatewayOnly)), "gw1", gw2.ClientTLS(gatewayAt)); err == nil {
			t.Fatal("a store without a certificate served")
		}
		if err := dial(syncSrv, "gw1", empty.ClientTLS(gatewayAt)); err == nil {
			t.Fatal("a store without a certificate was accepted as a client")
		}
	})
}

func TestRenewIn(t *testing.T) {
	now := time.Unix(1000, 0)
	if got := renewIn(now, now.Add(24*time.Hour)); got != 16*time.Hour {
		t.Fatalf("renewIn(24h) = %v, want 16h", got)
	}
	if got := renewIn(now, now.Add(-time.Hour)); got != time.Second {
		t.Fatalf("renewIn(expired) = %v, want 1s", got)
	}
}
