package cosign

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/secure-systems-lab/go-securesystemslib/encrypted"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
	"github.com/buildsmith/buildsmith/test/cosigntest"
)

// newKey returns private (nil: a new ECDSA P-256 key) encrypted with
// password, as cosign generate-key-pair writes it.
func newKey(t *testing.T, password string, private any) []byte {
	t.Helper()
	if private == nil {
		var err error
		if private, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	return cosigntest.Encrypt(t, private, password)
}

func TestParseKey(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := newKey(t, "s3cret", nil)
	plainDER, _ := x509.MarshalPKCS8PrivateKey(p384)
	for _, tc := range []struct {
		name     string
		key      []byte
		password string
		wantErr  string // "" for a key
	}{
		{name: "ECDSA P-256, as cosign generate-key-pair makes", key: good, password: "s3cret"},
		{name: "ECDSA P-384", key: newKey(t, "", p384)},
		{name: "the COSIGN PEM type of older cosign", key: []byte(strings.ReplaceAll(string(good), "SIGSTORE", "COSIGN")), password: "s3cret"},
		{name: "wrong password", key: good, password: "guess",
			wantErr: "secret apps/signing: cosign.key does not decrypt with cosign.password (wrong password, or not a cosign key)"},
		{name: "not PEM", key: []byte("hello"), wantErr: "secret apps/signing: cosign.key is not PEM"},
		{name: "an unencrypted key", key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: plainDER}),
			wantErr: `secret apps/signing: cosign.key is a "PRIVATE KEY" PEM block, not an encrypted cosign private key`},
		{name: "an RSA key", key: newKey(t, "x", rsaKey), password: "x",
			wantErr: "secret apps/signing: cosign.key is a *rsa.PrivateKey key; buildsmith signs with ECDSA keys (what cosign generate-key-pair makes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParseKey(context.Background(), "secret apps/signing", tc.key, []byte(tc.password), Limits{})
			if tc.wantErr == "" {
				if err != nil || !strings.HasPrefix(key.ID, "sha256:") || len(key.ID) != 71 {
					t.Fatalf("ParseKey: %v, key ID %v", err, key)
				}
				return
			}
			f, ok := failure.As(err)
			if !ok || f.Class != failure.Permanent || f.Reason != ReasonInvalidSigningKey || err.Error() != tc.wantErr {
				t.Errorf("error %v (%+v), want Permanent %s %q", err, f, ReasonInvalidSigningKey, tc.wantErr)
			}
		})
	}
}

// TestKeyCurves: a key on each curve cosign makes keys on signs the
// payload's SHA-256, which is what `cosign verify --key` (v3.1.1) checks an
// ECDSA signature of the .sig tag against whatever the curve: it loads the
// public key with SHA-256 unless told otherwise by a deprecated flag. The
// hash cosign's sign pairs with P-384 and P-521 (SHA-384, SHA-512) would
// fail that verify, so such a signature (made before) does not count as
// the key's. A curve cosign has no key type for is refused, naming it.
func TestKeyCurves(t *testing.T) {
	image, err := name.NewDigest("registry.example.com/b@sha256:" + strings.Repeat("ef", 32))
	if err != nil {
		t.Fatal(err)
	}
	payload := Payload(image)
	for _, tc := range []struct {
		curve   elliptic.Curve
		refused string // "": a key
		other   crypto.Hash
	}{
		{curve: elliptic.P256(), other: crypto.SHA384},
		{curve: elliptic.P384(), other: crypto.SHA384},
		{curve: elliptic.P521(), other: crypto.SHA512},
		{curve: elliptic.P224(),
			refused: "secret apps/signing: cosign.key is an ECDSA key on curve P-224; cosign keys are on P-256, P-384 or P-521"},
	} {
		t.Run(tc.curve.Params().Name, func(t *testing.T) {
			private, err := ecdsa.GenerateKey(tc.curve, rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			key, err := ParseKey(context.Background(), "secret apps/signing", newKey(t, "pw", private), []byte("pw"), Limits{})
			if tc.refused != "" {
				f, ok := failure.As(err)
				if !ok || f.Class != failure.Permanent || f.Reason != ReasonInvalidSigningKey || err.Error() != tc.refused {
					t.Fatalf("ParseKey: %v (%+v), want Permanent %s %q", err, f, ReasonInvalidSigningKey, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sig, err := key.Sign(payload)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := base64.StdEncoding.DecodeString(sig)
			if err != nil {
				t.Fatal(err)
			}
			// What cosign verify does: hash the payload with SHA-256 and
			// check the ASN.1 signature against the public key.
			if !ecdsa.VerifyASN1(&private.PublicKey, hashOf(crypto.SHA256, payload), raw) {
				t.Errorf("the signature does not verify over the payload's SHA-256")
			}
			if ecdsa.VerifyASN1(&private.PublicKey, hashOf(tc.other, payload), raw) {
				t.Errorf("the signature verifies over the payload's %v", tc.other)
			}
			if !key.Verifies(payload, sig) {
				t.Errorf("Verifies refuses the key's own signature")
			}
			// A signature over another hash (what cosign's sign makes for
			// P-384 and P-521, and buildsmith made before) fails cosign's
			// verify, so it is not taken for the key's: a new one is added.
			old, err := ecdsa.SignASN1(rand.Reader, private, hashOf(tc.other, payload))
			if err != nil {
				t.Fatal(err)
			}
			if key.Verifies(payload, base64.StdEncoding.EncodeToString(old)) {
				t.Errorf("Verifies takes a signature over the payload's %v", tc.other)
			}
		})
	}
}

// hashOf is payload's digest with h.
func hashOf(h crypto.Hash, payload []byte) []byte {
	w := h.New()
	w.Write(payload)
	return w.Sum(nil)
}

// sealed returns a new P-256 key sealed with password at go-securesystemslib's
// preset strength, as cosign writes it (Standard is cosign's own).
func sealed(t *testing.T, password string, strength encrypted.KDFParameterStrength) []byte {
	t.Helper()
	private, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(private)
	box, err := encrypted.EncryptWithCustomKDFParameters(der, []byte(password), strength)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: box})
}

// withKDF returns key with its envelope's kdf changed by edit: what a
// tenant can write into a Secret without scrypt's cost to make it.
func withKDF(t *testing.T, key []byte, edit func(kdf map[string]any)) []byte {
	t.Helper()
	block, _ := pem.Decode(key)
	var env map[string]any
	if err := json.Unmarshal(block.Bytes, &env); err != nil {
		t.Fatal(err)
	}
	edit(env["kdf"].(map[string]any))
	block.Bytes, _ = json.Marshal(env)
	return pem.EncodeToMemory(block)
}

// scrypt sets the kdf's parameters.
func scrypt(n, r, p int64) func(map[string]any) {
	return func(kdf map[string]any) { kdf["params"] = map[string]any{"N": n, "r": r, "p": p} }
}

// countDecrypt counts the calls of decrypt until the test ends.
func countDecrypt(t *testing.T) *atomic.Int64 {
	var calls atomic.Int64
	real := decrypt
	decrypt = func(sealed, password []byte) ([]byte, error) {
		calls.Add(1)
		return real(sealed, password)
	}
	t.Cleanup(func() { decrypt = real })
	return &calls
}

// TestParseKeyCost: the keys cosign writes, now and before, decrypt and
// sign; a key whose scrypt parameters cost more than the limits allow is
// refused from its envelope alone: scrypt never runs, nothing of its cost
// is allocated, and the message names the parameters and the limit.
func TestParseKeyCost(t *testing.T) {
	standard := sealed(t, "pw", encrypted.Standard)
	for _, tc := range []struct {
		name    string
		key     []byte
		limits  Limits
		reason  string   // "": a key
		message []string // parts of the message
	}{
		{name: "cosign generate-key-pair's (N=2^16, 64 MiB)", key: standard},
		{name: "older cosign's (N=2^15, 32 MiB)", key: sealed(t, "pw", encrypted.Legacy)},
		{name: "the OWASP preset (N=2^17, 128 MiB)", key: sealed(t, "pw", encrypted.OWASP), reason: ReasonSigningKeyTooCostly,
			message: []string{"secret apps/signing: cosign.key's scrypt parameters (N=131072, r=8, p=1) need 128 MiB to decrypt, more than the limit of 64 MiB"}},
		{name: "cosign's own over a lower limit", key: standard, limits: Limits{MaxScryptMemory: 32 << 20}, reason: ReasonSigningKeyTooCostly,
			message: []string{"(N=65536, r=8, p=1) need 64 MiB", "the limit of 32 MiB"}},
		{name: "r=16", key: withKDF(t, standard, scrypt(1<<16, 16, 1)), reason: ReasonSigningKeyTooCostly,
			message: []string{"(N=65536, r=16, p=1) need 128 MiB", "the limit of 64 MiB"}},
		{name: "p=4", key: withKDF(t, standard, scrypt(1<<15, 8, 4)), reason: ReasonSigningKeyTooCostly,
			message: []string{"(N=32768, r=8, p=4) ask for 4 scrypt rounds; the limit is p=1"}},
		{name: "N·r past int64", key: withKDF(t, standard, scrypt(1<<62, 1<<20, 1)), reason: ReasonSigningKeyTooCostly,
			message: []string{"N=4611686018427387904, r=1048576", "the limit of 64 MiB"}},
		{name: "N not a power of 2", key: withKDF(t, standard, scrypt(3<<14, 8, 1)), reason: ReasonInvalidSigningKey,
			message: []string{"cosign.key has invalid scrypt parameters (N=49152, r=8, p=1)"}},
		{name: "r=0", key: withKDF(t, standard, scrypt(1<<15, 0, 1)), reason: ReasonInvalidSigningKey,
			message: []string{"invalid scrypt parameters"}},
		{name: "another kdf", key: withKDF(t, standard, func(kdf map[string]any) { kdf["name"] = "argon2id" }), reason: ReasonInvalidSigningKey,
			message: []string{"cosign.key is not sealed with scrypt, as cosign keys are"}},
		{name: "not JSON", key: pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("secret bytes")}),
			reason: ReasonInvalidSigningKey, message: []string{"cosign.key is not in cosign's encrypted key format"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := countDecrypt(t)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			key, err := ParseKey(context.Background(), "secret apps/signing", tc.key, []byte("pw"), tc.limits)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if tc.reason == "" {
				if err != nil || calls.Load() != 1 {
					t.Fatalf("ParseKey: %v, %d decryptions", err, calls.Load())
				}
				payload := []byte("payload")
				sig, err := key.Sign(payload)
				if err != nil || !key.Verifies(payload, sig) {
					t.Errorf("the key does not sign: %v", err)
				}
				return
			}
			f, ok := failure.As(err)
			if !ok || f.Class != failure.Permanent || f.Reason != tc.reason {
				t.Fatalf("error %v (%+v), want Permanent %s", err, f, tc.reason)
			}
			for _, part := range tc.message {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("message %q lacks %q", err, part)
				}
			}
			// Refused before any scrypt work: no decryption, a few KiB
			// allocated (scrypt's would be ≥ 64 MiB), no time spent.
			if n, allocated := calls.Load(), after.TotalAlloc-before.TotalAlloc; n != 0 || allocated > 1<<20 || took > time.Second {
				t.Errorf("refused after %d decryptions, %d bytes allocated, %v", n, allocated, took)
			}
		})
	}
}

// waiter is a worker.Waiter that counts the waits begun.
type waiter struct{ waits atomic.Int64 }

func (w *waiter) Wait() func() { w.waits.Add(1); return func() {} }

// TestDecryptionsTakeTurns: the process decrypts MaxDecryptions keys at
// once; the others wait for a turn, lending their worker, and give up when
// their context ends.
func TestDecryptionsTakeTurns(t *testing.T) {
	key := sealed(t, "", encrypted.Legacy)
	release := make(chan struct{})
	var inside, most atomic.Int64
	real := decrypt
	decrypt = func(sealed, password []byte) ([]byte, error) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inside.Add(-1)
		return real(sealed, password)
	}
	t.Cleanup(func() { decrypt = real })
	before := Decryptions()

	const callers = 5
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			_, err := ParseKey(context.Background(), "k", key, nil, Limits{})
			errs <- err
		})
	}
	for deadline := time.Now().Add(10 * time.Second); inside.Load() < MaxDecryptions; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d decryptions started, want %d", inside.Load(), MaxDecryptions)
		}
	}

	// With every turn taken, a caller waits, lending its worker, until its
	// context ends: an error of that, not a verdict on the key.
	w := &waiter{}
	ctx, cancel := context.WithTimeout(worker.With(context.Background(), w), 50*time.Millisecond)
	defer cancel()
	_, err := ParseKey(ctx, "secret apps/late", key, nil, Limits{})
	if _, classified := failure.As(err); !errors.Is(err, context.DeadlineExceeded) || classified ||
		!strings.Contains(err.Error(), "secret apps/late: waiting to decrypt cosign.key") || w.waits.Load() != 1 {
		t.Errorf("a caller without a turn: %v (classified %v), %d waits", err, classified, w.waits.Load())
	}

	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if most.Load() != MaxDecryptions || Decryptions()-before != callers {
		t.Errorf("%d decryptions at once (want %d), %d in all (want %d)", most.Load(), MaxDecryptions, Decryptions()-before, callers)
	}
}

func TestPayloadAndTag(t *testing.T) {
	image, err := name.NewDigest("registry.example.com/builders/go@sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"critical":{"identity":{"docker-reference":"registry.example.com/builders/go"},` +
		`"image":{"docker-manifest-digest":"sha256:` + strings.Repeat("ab", 32) + `"},` +
		`"type":"cosign container image signature"},"optional":null}`
	if got := string(Payload(image)); got != want {
		t.Errorf("payload:\n%s\nwant:\n%s", got, want)
	}
	if got := SignatureTag(image.Context(), image).String(); got != "registry.example.com/builders/go:sha256-"+strings.Repeat("ab", 32)+".sig" {
		t.Errorf("tag %s", got)
	}
	elsewhere, _ := name.NewRepository("other.example.com/signatures")
	if got := SignatureTag(elsewhere, image).String(); got != "other.example.com/signatures:sha256-"+strings.Repeat("ab", 32)+".sig" {
		t.Errorf("tag in another repository: %s", got)
	}
}

// TestSignatureImage: a signature verifies with its key only; the image
// holds the payload as a layer with the signature annotation; a second
// signer's signature is appended, and a Verifier finds each signer's.
func TestSignatureImage(t *testing.T) {
	first, err := ParseKey(context.Background(), "first", newKey(t, "", nil), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := ParseKey(context.Background(), "second", newKey(t, "", nil), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	image, err := name.NewDigest("registry.example.com/b@sha256:" + strings.Repeat("cd", 32))
	if err != nil {
		t.Fatal(err)
	}
	payload := Payload(image)
	sig, err := first.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Verifies(payload, sig) || second.Verifies(payload, sig) || first.Verifies([]byte("other"), sig) {
		t.Fatal("a signature verifies with the wrong key or payload, or not with its own")
	}

	for _, docker := range []bool{false, true} {
		img, err := SignatureImage(nil, []Signature{{Payload: payload, Signature: sig}}, docker)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		wantManifest, wantConfig := types.OCIManifestSchema1, types.OCIConfigJSON
		if docker {
			wantManifest, wantConfig = types.DockerManifestSchema2, types.DockerConfigJSON
		}
		if m.MediaType != wantManifest || m.Config.MediaType != wantConfig || len(m.Layers) != 1 ||
			m.Layers[0].MediaType != PayloadMediaType || m.Layers[0].Annotations[SignatureAnnotation] != sig {
			t.Errorf("docker %v: manifest %+v", docker, m)
		}
		layers, _ := img.Layers()
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		content, _ := io.ReadAll(rc)
		_ = rc.Close()
		if string(content) != string(payload) {
			t.Errorf("docker %v: layer holds %q, want the payload", docker, content)
		}
		if got := signedBy(t, m, payload, first, second); !slices.Equal(got, []bool{true, false}) {
			t.Errorf("docker %v: signed by first and second: %v, want first only", docker, got)
		}
		if got := signedBy(t, nil, payload, first); !slices.Equal(got, []bool{false}) {
			t.Errorf("no signature image: signed %v", got)
		}

		// A second signer appends.
		sig2, _ := second.Sign(payload)
		both, err := SignatureImage(img, []Signature{{Payload: payload, Signature: sig2}}, docker)
		if err != nil {
			t.Fatal(err)
		}
		m2, _ := both.Manifest()
		if got := signedBy(t, m2, payload, first, second); len(m2.Layers) != 2 || m2.MediaType != wantManifest || !slices.Equal(got, []bool{true, true}) {
			t.Errorf("docker %v: after the second signer: %+v, signed %v", docker, m2, got)
		}
	}
}
