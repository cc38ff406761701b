package cosign

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// What cosign v3 writes for an attestation signed with a key: a Sigstore
// bundle holding a DSSE envelope of the in-toto statement, as the one
// layer of an OCI 1.1 referrer of the image (checked with the v3.1.1
// binary: `cosign verify-attestation --key` finds it by the referrers API,
// or else the fallback tag, and reads nothing else then).
const (
	// BundleMediaType is the referrer's artifactType and its layer's
	// media type.
	BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// InTotoPayloadType is the DSSE payload type of an in-toto statement.
	InTotoPayloadType = "application/vnd.in-toto+json"
	// AnnotationBundleContent and AnnotationBundlePredicateType are the
	// referrer manifest's annotations cosign writes.
	AnnotationBundleContent       = "dev.sigstore.bundle.content"
	AnnotationBundlePredicateType = "dev.sigstore.bundle.predicateType"
)

type bundle struct {
	MediaType            string               `json:"mediaType"`
	VerificationMaterial verificationMaterial `json:"verificationMaterial"`
	DSSEEnvelope         dsseEnvelope         `json:"dsseEnvelope"`
}

type verificationMaterial struct {
	PublicKey struct {
		Hint string `json:"hint"`
	} `json:"publicKey"`
}

type dsseEnvelope struct {
	Payload     string          `json:"payload"`
	PayloadType string          `json:"payloadType"`
	Signatures  []dsseSignature `json:"signatures"`
}

type dsseSignature struct {
	Sig string `json:"sig"`
}

// pae is DSSE's pre-authentication encoding of a payload of payloadType:
// what the envelope's signature signs.
func pae(payloadType string, payload []byte) []byte {
	return fmt.Appendf(nil, "DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(payload), payload)
}

// Bundle signs statement (an in-toto statement) with k into a Sigstore
// bundle (v0.3) of a DSSE envelope, as `cosign attest --key` makes one:
// the public key's hint is the base64 SHA-256 of its PKIX encoding; no
// transparency log entry (verify with --insecure-ignore-tlog, as every
// key-signed builder signature).
func (k *Key) Bundle(statement []byte) ([]byte, error) {
	sig, err := k.Sign(pae(InTotoPayloadType, statement))
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.private.PublicKey)
	if err != nil {
		return nil, err
	}
	hint := sha256.Sum256(pub)
	b := bundle{MediaType: BundleMediaType, DSSEEnvelope: dsseEnvelope{
		Payload: base64.StdEncoding.EncodeToString(statement), PayloadType: InTotoPayloadType,
		Signatures: []dsseSignature{{Sig: sig}},
	}}
	b.VerificationMaterial.PublicKey.Hint = base64.StdEncoding.EncodeToString(hint[:])
	return json.Marshal(b)
}
