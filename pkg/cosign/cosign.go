// Package cosign signs images the way cosign does with a key pair, so that
// `cosign verify --key` accepts the signatures: a simple-signing payload
// naming the image's digest, signed with the key, stored as a layer of an
// image at the tag sha256-<hex>.sig beside the image. It reads the keys
// cosign writes (an encrypted PEM private key and its password) and holds
// no registry or Kubernetes client: the caller reads and writes.
package cosign

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	"golang.org/x/sync/semaphore"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
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

// ReasonSigningKeyTooCostly: a cosign key's scrypt parameters ask more
// memory (or rounds) to decrypt than the controller spends on one key.
const ReasonSigningKeyTooCostly = "SigningKeyTooCostly"

// Limits bound what decrypting one key may cost. The key's Secret chooses
// scrypt's parameters, and with them the memory and time each decryption
// takes: unbounded, one tenant's key makes the shared controller allocate
// what it likes.
type Limits struct {
	// MaxScryptMemory bounds 128·N·r, the bytes scrypt allocates to
	// decrypt a key; 0: DefaultMaxScryptMemory.
	MaxScryptMemory int64
}

// DefaultMaxScryptMemory accepts what cosign generate-key-pair writes
// (cosign 3.1, through go-securesystemslib 0.11's default: N=65536, r=8,
// p=1, 64 MiB; older releases wrote the legacy N=32768, 32 MiB) and
// refuses the stronger OWASP preset (N=131072: 128 MiB, twice the time).
const DefaultMaxScryptMemory int64 = 64 << 20

// MaxScryptParallelism bounds scrypt's p: its rounds run one after
// another, each as long as a whole decryption with p=1. cosign writes 1,
// and go-securesystemslib decrypts nothing else.
const MaxScryptParallelism = 1

// MaxDecryptions is how many keys the process decrypts at once: at most
// MaxDecryptions × MaxScryptMemory of scrypt memory at a time, and as many
// cores, however many keys tenants add or change at once.
const MaxDecryptions = 2

func (l Limits) maxScryptMemory() int64 {
	if l.MaxScryptMemory <= 0 {
		return DefaultMaxScryptMemory
	}
	return l.MaxScryptMemory
}

// envelope is the part of go-securesystemslib's encrypted format that
// says what decrypting costs, decoded as Decrypt decodes it (same names,
// same types), so that what is checked is what Decrypt would use.
type envelope struct {
	KDF struct {
		Name   string `json:"name"`
		Params struct {
			N int `json:"N"`
			R int `json:"r"`
			P int `json:"p"`
		} `json:"params"`
	} `json:"kdf"`
}

// check refuses sealed (the PEM block's bytes) when decrypting it would
// cost more than l allows, reading only its parameters.
func (l Limits) check(source string, sealed []byte) (int64, error) {
	var e envelope
	if err := json.Unmarshal(sealed, &e); err != nil {
		// The JSON error may quote the key's bytes: not repeated.
		return 0, failure.Permanentf(ReasonInvalidSigningKey, "%s: %s is not in cosign's encrypted key format", source, SecretKey)
	}
	if e.KDF.Name != "scrypt" {
		return 0, failure.Permanentf(ReasonInvalidSigningKey, "%s: %s is not sealed with scrypt, as cosign keys are", source, SecretKey)
	}
	n, r, p := e.KDF.Params.N, e.KDF.Params.R, e.KDF.Params.P
	if n <= 1 || n&(n-1) != 0 || r < 1 || p < 1 {
		return 0, failure.Permanentf(ReasonInvalidSigningKey, "%s: %s has invalid scrypt parameters (N=%d, r=%d, p=%d)", source, SecretKey, n, r, p)
	}
	limit := l.maxScryptMemory()
	if p > MaxScryptParallelism {
		return 0, failure.Permanentf(ReasonSigningKeyTooCostly,
			"%s: %s's scrypt parameters (N=%d, r=%d, p=%d) ask for %d scrypt rounds; the limit is p=%d (cosign generate-key-pair writes N=65536, r=8, p=1)",
			source, SecretKey, n, r, p, p, MaxScryptParallelism)
	}
	// 128·N·r without overflowing: N and r are the tenant's.
	if int64(n) > limit/128/int64(r) {
		return 0, failure.Permanentf(ReasonSigningKeyTooCostly,
			"%s: %s's scrypt parameters (N=%d, r=%d, p=%d) need %s to decrypt, more than the limit of %s (cosign generate-key-pair writes N=65536, r=8, p=1: 64 MiB)",
			source, SecretKey, n, r, p, mib(128*float64(n)*float64(r)), mib(float64(limit)))
	}
	return 128 * int64(n) * int64(r), nil
}

// mib formats a number of bytes in MiB.
func mib(bytes float64) string {
	m := bytes / (1 << 20)
	if m == math.Trunc(m) {
		return fmt.Sprintf("%.0f MiB", m)
	}
	return fmt.Sprintf("%.1f MiB", m)
}

// cpuTurns are the turns, process-wide, of the CPU-heavy work tenants'
// inputs ask for: decrypting a key (scrypt), verifying the signatures of a
// signature image. A reconcile waiting for one lends its worker, so that
// four tenants' costly keys or signatures do not hold every worker while
// the others' reconciles wait.
var cpuTurns = semaphore.NewWeighted(MaxDecryptions)

// inTurn runs work in one of the process's CPU turns, waiting on ctx for
// one.
func inTurn[T any](ctx context.Context, work func() (T, error)) (T, error) {
	if !cpuTurns.TryAcquire(1) {
		waited := worker.Wait(ctx)
		err := cpuTurns.Acquire(ctx, 1)
		waited()
		if err != nil {
			var zero T
			return zero, err
		}
	}
	defer cpuTurns.Release(1)
	return work()
}

// decrypt is encrypted.Decrypt; a variable so that tests see whether, and
// how often at once, it runs.
var decrypt = encrypted.Decrypt

// decrypted counts the decryptions begun, for Decryptions.
var decrypted atomic.Int64

// Decryptions is how many keys the process has begun to decrypt.
func Decryptions() int64 { return decrypted.Load() }

// decryptInTurn decrypts sealed in one of the process's turns, waiting on
// ctx for one; a reconcile lends its worker meanwhile (the wait can be
// another tenant's keys).
// cost is the scrypt memory it takes, held apart from the rest of the
// heap meanwhile (scryptMemory).
func decryptInTurn(ctx context.Context, sealed, password []byte, cost int64) ([]byte, error) {
	return inTurn(ctx, func() ([]byte, error) {
		decrypted.Add(1)
		defer scryptMemory.hold(cost)()
		return decrypt(sealed, password)
	})
}

// Key is a private key to sign with, and the ID of its public key.
type Key struct {
	private *ecdsa.PrivateKey
	// ID is the SHA-256 of the public key's PKIX encoding: it tells
	// whether a recorded signature was made with this key.
	ID string
}

// ParseKey decrypts an encrypted cosign private key (PEM) with its
// password. Errors never quote the key, and are Permanent but for ctx
// ending while the key waits for its turn; source names where the key
// came from.
//
// The key chooses the cost of its decryption (scrypt's parameters): one
// that would cost more than limits allow is refused before any of it is
// spent (ReasonSigningKeyTooCostly), and the process decrypts at most
// MaxDecryptions keys at once, the others waiting on ctx for their turn.
func ParseKey(ctx context.Context, source string, key, password []byte, limits Limits) (*Key, error) {
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
	cost, err := limits.check(source, block.Bytes)
	if err != nil {
		return nil, err
	}
	der, err := decryptInTurn(ctx, block.Bytes, password, cost)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("%s: waiting to decrypt %s: %w", source, SecretKey, err)
	}
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
	// Every curve is signed with SHA-256 (see digest), which is what
	// `cosign verify --key` checks ECDSA signatures with whatever the
	// curve; a curve cosign has no key type for is refused.
	switch private.Curve {
	case elliptic.P256(), elliptic.P384(), elliptic.P521():
	default:
		return nil, invalid("%s is an ECDSA key on curve %s; cosign keys are on P-256, P-384 or P-521", SecretKey, private.Curve.Params().Name)
	}
	pub, err := x509.MarshalPKIXPublicKey(&private.PublicKey)
	if err != nil {
		return nil, invalid("%s: %v", SecretKey, err)
	}
	id := sha256.Sum256(pub)
	return &Key{private: private, ID: "sha256:" + hex.EncodeToString(id[:])}, nil
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

// digest is what a payload's signature signs: its SHA-256, on every
// curve. `cosign verify --key cosign.pub` (v3.1.1) loads the public key
// with SHA-256 as the hash unless its deprecated
// --signature-digest-algorithm flag says otherwise, and for the .sig
// tag's signatures it hashes the payload with that, P-384 and P-521 keys
// included. (cosign's own sign pairs P-384 with SHA-384 and P-521 with
// SHA-512, and a plain verify --key then refuses those signatures, in the
// .sig format and in a bundle alike: checked with the v3.1.1 binary.)
func digest(payload []byte) []byte {
	sum := sha256.Sum256(payload)
	return sum[:]
}

// Sign returns the base64 signature of payload: deterministic (RFC 6979),
// so that what is signed again (an attestation whose status write was
// lost, say) is the same bytes, the same digest, and no second artifact.
func (k *Key) Sign(payload []byte) (string, error) {
	sig, err := k.private.Sign(nil, digest(payload), crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// Verifies reports whether signature (base64) is the key's signature of
// payload. Each call that gets to ECDSA is counted (Verifications): one
// costs up to ~2 ms of CPU on P-521.
func (k *Key) Verifies(payload []byte, signature string) bool {
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return false
	}
	verified.Add(1)
	return ecdsa.VerifyASN1(&k.private.PublicKey, digest(payload), sig)
}

// verified counts the ECDSA verifications begun, for Verifications.
var verified atomic.Int64

// Verifications is how many signatures the process has verified (or tried
// to): what a tenant's signature images have cost in CPU.
func Verifications() int64 { return verified.Load() }

// SignatureTag is where cosign looks for the signatures of image: the tag
// sha256-<hex>.sig in repo (the image's own repository, unless signatures
// are kept elsewhere).
func SignatureTag(repo name.Repository, image name.Digest) name.Tag {
	return repo.Tag(strings.Replace(image.DigestStr(), ":", "-", 1) + ".sig")
}
