package cosign

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
)

// signedBy is what a new Verifier of keys says of manifest.
func signedBy(t *testing.T, manifest *v1.Manifest, payload []byte, keys ...*Key) []bool {
	t.Helper()
	signed, err := NewVerifier(payload, keys).Signed(context.Background(), manifest)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// parsedKey is a new P-256 key, parsed as a Secret's would be.
func parsedKey(t *testing.T) *Key {
	t.Helper()
	k, err := ParseKey(context.Background(), "test", newKey(t, "", nil), nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// bogus returns n well-formed signatures of payload by keys nobody has:
// what a tenant fills a signature image with to make checking it cost.
func bogus(t *testing.T, payload []byte, n int) []Signature {
	t.Helper()
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var out []Signature
	for range n {
		sig, err := ecdsa.SignASN1(rand.Reader, other, digest(payload))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Signature{Payload: payload, Signature: base64.StdEncoding.EncodeToString(sig)})
	}
	return out
}

func testPayload(t *testing.T) []byte {
	t.Helper()
	image, err := name.NewDigest("registry.example.com/b@sha256:" + strings.Repeat("cd", 32))
	if err != nil {
		t.Fatal(err)
	}
	return Payload(image)
}

// manifestOf is the manifest of the signature image of signatures.
func manifestOf(t *testing.T, signatures ...[]Signature) *v1.Manifest {
	t.Helper()
	img, err := SignatureImage(nil, slices.Concat(signatures...), false)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestVerifier: only layers holding the payload are verified, each
// signature at most once per key however often the Verifier is asked, a
// layer no more once it matched a key, nothing once every key matched.
// Counted with Verifications: a Verifier that verified every layer with
// every key at every read (what cosign.Signed did) fails each row.
func TestVerifier(t *testing.T) {
	payload := testPayload(t)
	a, b := parsedKey(t), parsedKey(t)
	sign := func(k *Key) []Signature {
		sig, err := k.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		return []Signature{{Payload: payload, Signature: sig}}
	}
	const n = 10
	junk := bogus(t, payload, n)
	otherPayload := bogus(t, []byte(`{"other":"payload"}`), n) // other layers: cannot match
	for _, tc := range []struct {
		name     string
		manifest *v1.Manifest
		want     []bool
		verified int64 // by the first look; the second verifies nothing
	}{
		{name: "none yet", manifest: nil, want: []bool{false, false}},
		{name: "bogus signatures: each once per key", manifest: manifestOf(t, junk), want: []bool{false, false}, verified: 2 * n},
		{name: "layers of another payload: none", manifest: manifestOf(t, otherPayload), want: []bool{false, false}},
		{name: "one signature, repeated: once per key", manifest: manifestOf(t, junk[:1], junk[:1], junk[:1]), want: []bool{false, false}, verified: 2},
		{name: "a's first: a stops there, its layer is not b's", manifest: manifestOf(t, sign(a), junk),
			want: []bool{true, false}, verified: 1 + n},
		{name: "both first: nothing after them", manifest: manifestOf(t, sign(b), sign(a), junk),
			want: []bool{true, true}, verified: 2 + 1},
		{name: "a after the bogus ones", manifest: manifestOf(t, junk, sign(a)),
			want: []bool{true, false}, verified: 2*n + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVerifier(payload, []*Key{a, b})
			for look := range 2 {
				before := Verifications()
				got, err := v.Signed(context.Background(), tc.manifest)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.verified
				if look > 0 {
					want = 0
				}
				if n := Verifications() - before; n != want || !slices.Equal(got, tc.want) {
					t.Errorf("look %d: signed %v after %d verifications, want %v after %d", look, got, n, tc.want, want)
				}
			}
		})
	}
}

// TestVerifierKeyInTwoSecrets: a key listed twice (two Secrets holding it)
// is found signed, both times, by its one signature and one verification.
func TestVerifierKeyInTwoSecrets(t *testing.T) {
	payload := testPayload(t)
	a := parsedKey(t)
	sig, err := a.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	before := Verifications()
	got := signedBy(t, manifestOf(t, []Signature{{Payload: payload, Signature: sig}}), payload, a, a)
	if n := Verifications() - before; !slices.Equal(got, []bool{true, true}) || n != 1 {
		t.Errorf("signed %v after %d verifications, want both after 1", got, n)
	}
}

// cancelledAfter is a context that ends once the process has made n more
// verifications than when it was made.
type cancelledAfter struct {
	context.Context
	start, n int64
}

func (c cancelledAfter) Err() error {
	if Verifications()-c.start >= c.n {
		return context.Canceled
	}
	return nil
}

// TestVerifierStopsWithItsContext: a reconcile cancelled while a signature
// image is checked verifies nothing more.
func TestVerifierStopsWithItsContext(t *testing.T) {
	payload := testPayload(t)
	m := manifestOf(t, bogus(t, payload, 20))
	before := Verifications()
	ctx := cancelledAfter{Context: context.Background(), start: before, n: 3}
	_, err := NewVerifier(payload, []*Key{parsedKey(t), parsedKey(t)}).Signed(ctx, m)
	if !errors.Is(err, context.Canceled) || Verifications()-before != 3 {
		t.Errorf("error %v after %d verifications, want %v after 3", err, Verifications()-before, context.Canceled)
	}
}

// TestVerificationsBounded: however many other keys' signatures a
// signature image holds, a Verifier verifies at most MaxVerifications of
// them; and one key named by 32 Secrets verifies each signature once.
func TestVerificationsBounded(t *testing.T) {
	payload := testPayload(t)
	m := manifestOf(t, bogus(t, payload, MaxVerifications+50))
	before := Verifications()
	signed, err := NewVerifier(payload, []*Key{parsedKey(t), parsedKey(t)}).Signed(context.Background(), m)
	if n := Verifications() - before; err != nil || n != MaxVerifications || slices.Contains(signed, true) {
		t.Errorf("%d bogus signatures × 2 keys: %v, %v after %d verifications, want none signed after %d", MaxVerifications+50, signed, err, n, MaxVerifications)
	}

	key := parsedKey(t)
	same := make([]*Key, 32)
	for i := range same {
		same[i] = key
	}
	few := manifestOf(t, bogus(t, payload, 10))
	before = Verifications()
	if _, err := NewVerifier(payload, same).Signed(context.Background(), few); err != nil || Verifications()-before != 10 {
		t.Errorf("one key in 32 Secrets, 10 bogus signatures: %v after %d verifications, want 10", err, Verifications()-before)
	}
}

// TestVerificationsWaitForATurn: signature checks run in the process's CPU
// turns, shared with key decryptions: while every turn is taken, a check
// verifies nothing and waits on its context.
func TestVerificationsWaitForATurn(t *testing.T) {
	payload := testPayload(t)
	m := manifestOf(t, bogus(t, payload, 5))
	key := parsedKey(t) // decrypting it takes a turn too
	if err := cpuTurns.Acquire(context.Background(), MaxDecryptions); err != nil {
		t.Fatal(err)
	}
	before := Verifications()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := NewVerifier(payload, []*Key{key}).Signed(ctx, m)
	cpuTurns.Release(MaxDecryptions)
	if !errors.Is(err, context.DeadlineExceeded) || Verifications() != before {
		t.Errorf("every turn taken: %v after %d verifications, want %v after none", err, Verifications()-before, context.DeadlineExceeded)
	}
	if _, err := NewVerifier(payload, []*Key{key}).Signed(context.Background(), m); err != nil || Verifications() == before {
		t.Errorf("a turn free: %v after %d verifications", err, Verifications()-before)
	}
}

// TestSignatureImageAsMutateMakesIt: the image SignatureImage makes in one
// pass is, byte for byte, the one mutate.Append made: a signature image
// pushed before is extended as it was.
func TestSignatureImageAsMutateMakesIt(t *testing.T) {
	payload := testPayload(t)
	sigs := bogus(t, payload, 3)
	appended := func(img v1.Image, sigs []Signature) v1.Image {
		for _, s := range sigs {
			var err error
			img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(s.Payload, PayloadMediaType),
				Annotations: map[string]string{SignatureAnnotation: s.Signature}})
			if err != nil {
				t.Fatal(err)
			}
		}
		return img
	}
	for _, docker := range []bool{false, true} {
		first, err := SignatureImage(nil, sigs[:2], docker)
		if err != nil {
			t.Fatal(err)
		}
		mutated := appended(emptySignatureImage(docker), sigs[:2])
		both, err := SignatureImage(mutated, sigs[2:], docker)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			got, want v1.Image
		}{{first, mutated}, {both, appended(mutated, sigs[2:])}} {
			gotManifest, _ := tc.got.RawManifest()
			wantManifest, _ := tc.want.RawManifest()
			gotConfig, _ := tc.got.RawConfigFile()
			wantConfig, _ := tc.want.RawConfigFile()
			if !bytes.Equal(gotManifest, wantManifest) || !bytes.Equal(gotConfig, wantConfig) {
				t.Errorf("docker %v:\nmanifest %s\nconfig %s\nwant\nmanifest %s\nconfig %s", docker, gotManifest, gotConfig, wantManifest, wantConfig)
			}
			layers, _ := tc.got.Layers()
			for i, l := range layers {
				d, _ := l.Digest()
				byDigest, err := tc.got.LayerByDigest(d)
				if err != nil || byDigest == nil {
					t.Errorf("docker %v: layer %d (%s) not found by digest: %v", docker, i, d, err)
				}
			}
		}
	}
}

// TestSignatureImageEncodesItsConfigOnce: extending a signature image of
// many layers and a big config, and reading what a push reads of the
// result (its layers, manifest and config), encodes the config once, not
// once per layer as mutate.Append's image does (issue 37: a tenant's
// image of 10,000 layers and a 740 KB config cost ~190 s of CPU).
// Measured in bytes allocated: mutate's would be layers × config, here
// 2,000 × 512 KiB = 1 GiB.
func TestSignatureImageEncodesItsConfigOnce(t *testing.T) {
	payload := testPayload(t)
	base, err := SignatureImage(nil, bogus(t, payload, 2000), false)
	if err != nil {
		t.Fatal(err)
	}
	// A config of 512 KiB more, as the tenant's registry may serve.
	img := base.(*signatureImage)
	img.config.Config.Env = []string{"X=" + strings.Repeat("x", 512<<10)}
	if img.rawConfig, err = json.Marshal(img.config); err != nil {
		t.Fatal(err)
	}
	img.manifest.Config.Digest, img.manifest.Config.Size, _ = v1.SHA256(bytes.NewReader(img.rawConfig))
	img.rawManifest, _ = json.Marshal(img.manifest)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	signed, err := SignatureImage(img, bogus(t, payload, 1), false)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := signed.Layers()
	if err != nil || len(layers) != 2001 {
		t.Fatalf("%d layers (%v), want 2001", len(layers), err)
	}
	for _, l := range layers {
		d, _ := l.Digest()
		if _, err := signed.LayerByDigest(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := partial.ConfigLayer(signed); err != nil {
		t.Fatal(err)
	}
	if _, err := signed.Digest(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<20 {
		t.Errorf("%d MiB allocated to extend a signature image of 2,000 layers and a 512 KiB config, want at most 64 MiB", allocated>>20)
	}
}
