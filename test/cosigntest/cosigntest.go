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

// NewKeyPair returns a new ECDSA P-256 private key, encrypted with
// password (PEM "ENCRYPTED SIGSTORE PRIVATE KEY": PKCS #8 sealed with
// scrypt and secretbox), and its public key (PEM "PUBLIC KEY"), as
// cosign generate-key-pair writes cosign.key and cosign.pub.
func NewKeyPair(password string) (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if private, err = encrypt(key, password); err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return private, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// KeyPair is NewKeyPair for tests.
func KeyPair(tb testing.TB, password string) (private, public []byte) {
	tb.Helper()
	private, public, err := NewKeyPair(password)
	if err != nil {
		tb.Fatal(err)
	}
	return private, public
}

// CostlyKey is a new P-256 cosign key sealed with scrypt's strongest preset
// (N=2^17, r=8, p=1: 128 MiB to decrypt), as a hostile tenant may write one.
func CostlyKey(tb testing.TB, password string) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	sealed, err := encrypted.EncryptWithCustomKDFParameters(der, []byte(password), encrypted.OWASP)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: sealed})
}

// Encrypt seals any private key as cosign does.
func Encrypt(tb testing.TB, key any, password string) []byte {
	tb.Helper()
	sealed, err := encrypt(key, password)
	if err != nil {
		tb.Fatal(err)
	}
	return sealed
}

func encrypt(key any, password string) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	sealed, err := encrypted.Encrypt(der, []byte(password))
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: sealed}), nil
}

// Secret is a signing Secret as kpack documents it, and as
// `cosign generate-key-pair k8s://namespace/name` creates it.
func Secret(namespace, name string, private []byte, password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: "1"},
		Data: map[string][]byte{"cosign.key": private, "cosign.password": []byte(password)}}
}
