package identity

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// caLife is the CA's validity; rotating it is a manual step (delete the
// Secret), so it is long.
const caLife = 10 * 365 * 24 * time.Hour

// backdate is how far before now a certificate starts, for clocks that lag.
const backdate = 5 * time.Minute

// CAKey is the key of the CA certificate in the ConfigMap.
const CAKey = "ca.crt"

// CA is the identity CA: its certificate and key, as held by the
// controller.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	pool    *x509.CertPool
}

// LoadCA reads the CA from the Secret egret-identity-ca in namespace, or
// makes one (ECDSA P-256, 10 years) if there is none, and publishes its
// certificate in the ConfigMap of the same name. Every replica calls it:
// the first to create the Secret wins and the others read what it made.
func LoadCA(ctx context.Context, client kubernetes.Interface, namespace string) (*CA, error) {
	secrets := client.CoreV1().Secrets(namespace)
	sec, err := secrets.Get(ctx, CAName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var fresh *corev1.Secret
		if fresh, err = newCASecret(namespace); err != nil {
			return nil, err
		}
		sec, err = secrets.Create(ctx, fresh, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			sec, err = secrets.Get(ctx, CAName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the identity CA Secret %s/%s: %w", namespace, CAName, err)
	}
	ca, err := parseCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("the identity CA Secret %s/%s (delete it to make a new CA): %w", namespace, CAName, err)
	}
	if err := publishCA(ctx, client, namespace, ca.certPEM); err != nil {
		return nil, err
	}
	return ca, nil
}

// publishCA makes the ConfigMap hold the CA certificate, and nothing else.
func publishCA(ctx context.Context, client kubernetes.Interface, namespace string, certPEM []byte) error {
	cms := client.CoreV1().ConfigMaps(namespace)
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: CAName, Namespace: namespace},
		Data: map[string]string{CAKey: string(certPEM)}}
	cm, err := cms.Get(ctx, CAName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cms.Get(ctx, CAName, metav1.GetOptions{})
		}
	}
	if err == nil && cm.Data[CAKey] != string(certPEM) {
		// The Secret was replaced (a new CA): the gateways must learn it.
		cm = cm.DeepCopy()
		cm.Data = want.Data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publishing the identity CA in the ConfigMap %s/%s: %w", namespace, CAName, err)
	}
	return nil
}

func newCASecret(namespace string) (*corev1.Secret, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the identity CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "egret-identity-ca", Organization: []string{"egret"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("making the identity CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the identity CA key: %w", err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: CAName, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
	}, nil
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt and tls.key are not a certificate and its key: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the CA key is a %T, not ECDSA", pair.PrivateKey)
	}
	if !pair.Leaf.IsCA {
		return nil, errors.New("tls.crt is not a CA certificate")
	}
	pool := x509.NewCertPool()
	pool.AddCert(pair.Leaf)
	return &CA{cert: pair.Leaf, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Leaf.Raw}), key: key, pool: pool}, nil
}

// parseCABundle parses the ConfigMap's ca.crt.
func parseCABundle(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", CAKey)
	}
	return pool, nil
}

// issue signs a certificate for pub from tmpl's subject, names and key
// usages, valid from now-backdate for life.
func (ca *CA) issue(tmpl *x509.Certificate, pub crypto.PublicKey, life time.Duration) ([]byte, error) {
	now := time.Now()
	tmpl.SerialNumber = nil // crypto/x509 draws a random one
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(life)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return der, nil
}
