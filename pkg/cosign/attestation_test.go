package cosign

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// TestBundle: the bundle holds the statement in a DSSE envelope whose
// signature verifies over DSSE's PAE as go-securesystemslib (cosign's
// DSSE library) encodes it, with the key's hint.
func TestBundle(t *testing.T) {
	private, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseKey(context.Background(), "k", newKey(t, "pw", private), []byte("pw"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	statement := []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"https://slsa.dev/provenance/v1","predicate":{}}`)
	raw, err := key.Bundle(statement)
	if err != nil {
		t.Fatal(err)
	}
	var b bundle
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(b.DSSEEnvelope.Payload)
	if err != nil || string(payload) != string(statement) || b.MediaType != BundleMediaType ||
		b.DSSEEnvelope.PayloadType != InTotoPayloadType || len(b.DSSEEnvelope.Signatures) != 1 {
		t.Fatalf("bundle %s", raw)
	}
	sig, err := base64.StdEncoding.DecodeString(b.DSSEEnvelope.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(dsse.PAE(InTotoPayloadType, statement))
	if !ecdsa.VerifyASN1(&private.PublicKey, sum[:], sig) {
		t.Error("the signature does not verify over the PAE")
	}
	pub, _ := x509.MarshalPKIXPublicKey(&private.PublicKey)
	hint := sha256.Sum256(pub)
	if b.VerificationMaterial.PublicKey.Hint != base64.StdEncoding.EncodeToString(hint[:]) {
		t.Errorf("hint %q", b.VerificationMaterial.PublicKey.Hint)
	}
}

// TestBundleDeterministic: the same statement signed twice by one key is
// the same bundle (RFC 6979), so an attestation attached again is the same
// referrer.
func TestBundleDeterministic(t *testing.T) {
	key, err := ParseKey(context.Background(), "k", newKey(t, "pw", nil), []byte("pw"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := key.Bundle([]byte(`{"a":1}`))
	second, _ := key.Bundle([]byte(`{"a":1}`))
	other, _ := key.Bundle([]byte(`{"a":2}`))
	if string(first) != string(second) || string(first) == string(other) {
		t.Errorf("bundles of one statement differ, or of two statements are equal:\n%s\n%s\n%s", first, second, other)
	}
}
