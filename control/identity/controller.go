package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"time"
)

// ControllerStore returns a Store that holds a controller client
// certificate issued in process by ca (no CSR: the controller holds the
// CA's key), renewed with a new key at 2/3 of its life until ctx ends.
func ControllerStore(ctx context.Context, ca *CA, life time.Duration, log *slog.Logger) (*Store, error) {
	if life <= 0 {
		life = DefaultCertDuration
	}
	if log == nil {
		log = slog.Default()
	}
	st := newStore()
	st.setCA(ca.certPEM, ca.pool)
	cert, err := ca.controllerCert(life)
	if err != nil {
		return nil, err
	}
	st.setCert(cert)
	go func() {
		for {
			t := time.NewTimer(renewIn(time.Now(), cert.Leaf.NotAfter))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			next, err := ca.controllerCert(life)
			if err != nil {
				// Only a broken random source fails here; keep the old
				// certificate and try again a little later.
				log.Error("renewing the controller's identity certificate", "err", err)
				continue
			}
			cert = next
			st.setCert(cert)
		}
	}()
	return st, nil
}

func (ca *CA) controllerCert(life time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the controller's key: %w", err)
	}
	der, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ControllerCN, Organization: []string{ControllerOrg}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, &key.PublicKey, life)
	if err != nil {
		return nil, fmt.Errorf("issuing the controller's certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the controller's certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// renewIn is how long from now a certificate expiring at notAfter is
// renewed: at 2/3 of what is left of its life. Counting from now, not from
// NotBefore (backdated 5 minutes for clock skew), keeps short test lives
// from renewing in a loop; at least a second passes between two renewals.
func renewIn(now, notAfter time.Time) time.Duration {
	return max(notAfter.Sub(now)*2/3, time.Second)
}
