// Package cosigntest makes cosign key pairs as `cosign generate-key-pair`
// writes them, for tests that cannot run cosign itself.
package cosigntest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KeyPair returns a new ECDSA P-256 private key, encrypted with password
// (PEM "ENCRYPTED SIGSTORE PRIVATE KEY": PKCS #8 sealed with scrypt and
// secretbox), and its public key (PEM "PUBLIC KEY").
func KeyPair(tb testing.TB, password string) (private, public []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return Encrypt(tb, key, password), PublicPEM(tb, key)
}

// Encrypt seals any private key as cosign does.
func Encrypt(tb testing.TB, key any, password string) []byte {
	tb.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	sealed, err := encrypted.Encrypt(der, []byte(password))
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: sealed})
}

// PublicPEM is the PEM of key's public key, as cosign.pub holds it.
func PublicPEM(tb testing.TB, key *ecdsa.PrivateKey) []byte {
	tb.Helper()
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Secret is a signing Secret as kpack documents it, and as
// `cosign generate-key-pair k8s://namespace/name` creates it.
func Secret(namespace, name string, private []byte, password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: "1"},
		Data: map[string][]byte{"cosign.key": private, "cosign.password": []byte(password)}}
}
