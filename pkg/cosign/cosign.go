// Package cosign signs images the way cosign does with a key pair, so that
// `cosign verify --key` accepts the signatures: a simple-signing payload
// naming the image's digest, signed with the key, stored as a layer of an
// image at the tag sha256-<hex>.sig beside the image. It reads the keys
// cosign writes (an encrypted PEM private key and its password) and holds
// no registry or Kubernetes client: the caller reads and writes.
package cosign

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"hash"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/secure-systems-lab/go-securesystemslib/encrypted"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// The data keys of a signing Secret, as kpack and `cosign generate-key-pair
// k8s://…` write them. An empty password is allowed, but must be there.
const (
	SecretKey      = "cosign.key"
	SecretPassword = "cosign.password"
)

// What cosign writes into a signature image.
const (
	// SignatureAnnotation holds, on each layer, the base64 signature of
	// the layer's content (the payload).
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	// PayloadMediaType is the media type of a payload layer.
	PayloadMediaType types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
)

// ReasonInvalidSigningKey: a Secret holding cosign.key and cosign.password
// does not give a private key buildsmith can sign with.
const ReasonInvalidSigningKey = "InvalidSigningKey"

// Key is a private key to sign with, and the ID of its public key.
type Key struct {
	private *ecdsa.PrivateKey
	hash    func() hash.Hash
	// ID is the SHA-256 of the public key's PKIX encoding: it tells
	// whether a recorded signature was made with this key.
	ID string
}

// ParseKey decrypts an encrypted cosign private key (PEM) with its
// password. Errors are Permanent and never quote the key; source names
// where the key came from.
func ParseKey(source string, key, password []byte) (*Key, error) {
	invalid := func(format string, args ...any) error {
		return failure.Permanentf(ReasonInvalidSigningKey, "%s: %s", source, fmt.Sprintf(format, args...))
	}
	block, _ := pem.Decode(key)
	if block == nil {
		return nil, invalid("%s is not PEM", SecretKey)
	}
	if block.Type != "ENCRYPTED SIGSTORE PRIVATE KEY" && block.Type != "ENCRYPTED COSIGN PRIVATE KEY" {
		return nil, invalid("%s is a %q PEM block, not an encrypted cosign private key", SecretKey, block.Type)
	}
	der, err := encrypted.Decrypt(block.Bytes, password)
	if err != nil {
		return nil, invalid("%s does not decrypt with %s (wrong password, or not a cosign key)", SecretKey, SecretPassword)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, invalid("%s does not hold a PKCS #8 private key", SecretKey)
	}
	private, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, invalid("%s is a %T key; buildsmith signs with ECDSA keys (what cosign generate-key-pair makes)", SecretKey, parsed)
	}
	// The hash cosign pairs with each curve.
	var h func() hash.Hash
	switch private.Curve {
	case elliptic.P256():
		h = sha256.New
	case elliptic.P384():
		h = sha512.New384
	case elliptic.P521():
		h = sha512.New
	default:
		return nil, invalid("%s is an ECDSA key on curve %s, which cosign does not use", SecretKey, private.Curve.Params().Name)
	}
	pub, err := x509.MarshalPKIXPublicKey(&private.PublicKey)
	if err != nil {
		return nil, invalid("%s: %v", SecretKey, err)
	}
	id := sha256.Sum256(pub)
	return &Key{private: private, hash: h, ID: "sha256:" + hex.EncodeToString(id[:])}, nil
}

// Public returns the public key.
func (k *Key) Public() crypto.PublicKey { return &k.private.PublicKey }

// Payload is what cosign signs for an image: a simple-signing document
// naming the repository and the manifest digest. The same image gives the
// same bytes.
func Payload(image name.Digest) []byte {
	doc := simpleSigning{Optional: nil}
	doc.Critical.Identity.DockerReference = image.Context().Name()
	doc.Critical.Image.DockerManifestDigest = image.DigestStr()
	doc.Critical.Type = "cosign container image signature"
	raw, _ := json.Marshal(doc) // plain strings: cannot fail
	return raw
}

// simpleSigning is the payload's layout, in cosign's field order.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// Sign returns the base64 signature of payload.
func (k *Key) Sign(payload []byte) (string, error) {
	h := k.hash()
	h.Write(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, k.private, h.Sum(nil))
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// Verifies reports whether signature (base64) is the key's signature of
// payload.
func (k *Key) Verifies(payload []byte, signature string) bool {
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return false
	}
	h := k.hash()
	h.Write(payload)
	return ecdsa.VerifyASN1(&k.private.PublicKey, h.Sum(nil), sig)
}

// SignatureTag is where cosign looks for the signatures of image: the tag
// sha256-<hex>.sig in repo (the image's own repository, unless signatures
// are kept elsewhere).
func SignatureTag(repo name.Repository, image name.Digest) name.Tag {
	return repo.Tag(strings.Replace(image.DigestStr(), ":", "-", 1) + ".sig")
}

// Signed reports whether the signature image manifest (nil: none yet) has
// a layer holding payload signed with key: signing again would only add a
// duplicate.
func Signed(manifest *v1.Manifest, payload []byte, key *Key) bool {
	if manifest == nil {
		return false
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sha256Of(payload))}
	for _, l := range manifest.Layers {
		if l.Digest == digest && key.Verifies(payload, l.Annotations[SignatureAnnotation]) {
			return true
		}
	}
	return false
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

// Signature is one signature to add to a signature image.
type Signature struct {
	Payload   []byte
	Signature string // base64
}

// SignatureImage returns the signature image: the layers of existing (the
// image at the signature tag, nil for none), then one layer per new
// signature, as cosign appends a second signer's. dockerMediaTypes makes
// a Docker v2 manifest for registries that refuse OCI ones (kpack's
// kpack.io/cosign.docker-media-types).
func SignatureImage(existing v1.Image, signatures []Signature, dockerMediaTypes bool) (v1.Image, error) {
	img := existing
	if img == nil {
		img = empty.Image
		if dockerMediaTypes {
			img = mutate.MediaType(img, types.DockerManifestSchema2)
			img = mutate.ConfigMediaType(img, types.DockerConfigJSON)
		} else {
			img = mutate.MediaType(img, types.OCIManifestSchema1)
			img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		}
	}
	for _, s := range signatures {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(s.Payload, PayloadMediaType),
			Annotations: map[string]string{SignatureAnnotation: s.Signature},
		})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}
