package builder

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestSignaturesBounded: status.signatures (one entry per image and key)
// takes at most MaxSignatures entries in MaxSignaturesBytes; past either,
// a permanent TooManySignatures error names the numbers and the limit.
func TestSignaturesBounded(t *testing.T) {
	private, _ := cosigntest.KeyPair(t, "")
	key, err := cosign.ParseKey(context.Background(), "k", private, nil, cosign.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// keys are n keys (one key, parsed once, in n Secrets) of Secrets
	// named with nameLen characters, sending their signatures to repo
	// ("": the image's own).
	keys := func(n, nameLen int, repo string) []signingKey {
		var out []signingKey
		for i := range n {
			k := signingKey{secret: fmt.Sprintf("apps/%0*d", nameLen, i), key: key}
			if repo != "" {
				r, err := name.NewRepository(repo)
				if err != nil {
					t.Fatal(err)
				}
				k.repository = &r
			}
			out = append(out, k)
		}
		return out
	}
	images := func(n int, repo string) []name.Digest {
		var out []name.Digest
		for i := range n {
			d, err := name.NewDigest(fmt.Sprintf("%s@sha256:%064x", repo, i))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	const repo = "registry.example.com/builders/go"
	long := "registry.example.com/" + strings.Repeat("x", 230)
	for _, tc := range []struct {
		name    string
		images  []name.Digest
		keys    []signingKey
		formats signatureFormats // zero: sig
		message string           // "": within the bounds
	}{
		{name: "one image, one key", images: images(1, repo), keys: keys(1, 8, "")},
		{name: "one image, 256 keys", images: images(1, repo), keys: keys(256, 8, "")},
		{name: "an index of 16 platforms, 15 keys", images: images(17, repo), keys: keys(15, 8, "")},
		{name: "one image, 257 keys", images: images(1, repo), keys: keys(257, 8, ""),
			message: "the builder's images × signing keys make 1 × 257 = 257 signatures, more than the 256 status.signatures holds"},
		{name: "an index of 16 platforms, 16 keys", images: images(17, repo), keys: keys(16, 8, ""),
			message: "make 17 × 16 = 272 signatures, more than the 256 status.signatures holds: sign with fewer keys"},
		{name: "256 signatures of long names", images: images(4, long), keys: keys(64, 250, long),
			message: "make 4 × 64 = 256 signatures taking 276 KiB, more than the 256 KiB status.signatures holds"},
		{name: "a few signatures of long names", images: images(4, long), keys: keys(32, 250, long)},
		{name: "one image, 256 keys, as bundles", images: images(1, repo), keys: keys(256, 8, ""), formats: signatureFormats{bundle: true}},
		{name: "one image, 128 keys, in both formats", images: images(1, repo), keys: keys(128, 8, ""), formats: signatureFormats{sig: true, bundle: true}},
		{name: "one image, 129 keys, in both formats", images: images(1, repo), keys: keys(129, 8, ""), formats: signatureFormats{sig: true, bundle: true},
			message: "the builder's images × signing keys × formats make 1 × 129 × 2 = 258 signatures, more than the 256 status.signatures holds"},
		{name: "bundles of long names", images: images(4, long), keys: keys(64, 250, long), formats: signatureFormats{bundle: true},
			message: "make 4 × 64 = 256 signatures taking 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			formats := tc.formats
			if formats == (signatureFormats{}) {
				formats.sig = true
			}
			err := checkSignatures(tc.images, tc.keys, formats)
			if tc.message == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			f, ok := failure.As(err)
			if !ok || f.Class != failure.Permanent || f.Reason != ReasonTooManySignatures || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %v (%+v), want Permanent %s containing %q", err, f, ReasonTooManySignatures, tc.message)
			}
		})
	}
}

// TestBuilderTooManySignatures: keys that would make more signatures than
// status.signatures holds stall the builder with TooManySignatures, naming
// the limit, before any signature is read or written: a signed builder
// keeps its status (image and signatures) as it was, and a new one records
// neither. The limit is lowered to 2, so that three keys pass it.
func TestBuilderTooManySignatures(t *testing.T) {
	defer func(n int) { maxSignatures = n }(maxSignatures)
	maxSignatures = 2
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	objects := func(names ...string) []runtime.Object {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}}
		out := []runtime.Object{sa}
		for _, n := range names {
			sa.Secrets = append(sa.Secrets, corev1.ObjectReference{Name: n})
			private, _ := cosigntest.KeyPair(t, "")
			out = append(out, cosigntest.Secret("apps", n, private, ""))
		}
		return out
	}
	two, three := objects("one", "two"), objects("one", "two", "three")
	three[1], three[2] = two[1], two[2] // the same keys one and two
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })

	// At the limit: signed.
	signed, _, err, _ := x.run(t, b, lifecycle, two...)
	if !signed.Status.IsReady() || len(signed.Status.Signatures) != 2 {
		t.Fatalf("two keys: ready %v (%v), signatures %+v", signed.Status.IsReady(), err, signed.Status.Signatures)
	}
	image, _ := name.NewDigest(signed.Status.LatestImage)
	sigTag := cosign.SignatureTag(image.Context(), image).String()
	before, _ := x.f.Resolve(sigTag)

	const message = "the builder's images × signing keys make 1 × 3 = 3 signatures, more than the 2 status.signatures holds"
	// A third key: refused whole before anything is read or written, the
	// status as it was.
	x.f.ForgetRequests()
	failed, events, err, _ := x.run(t, signed, lifecycle, three...)
	rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonTooManySignatures, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{ReasonTooManySignatures}, MessageContains: message})
	if failed.Status.LatestImage != signed.Status.LatestImage || !cmp.Equal(failed.Status.Signatures, signed.Status.Signatures) {
		t.Errorf("status changed: latestImage %s, signatures %+v", failed.Status.LatestImage, failed.Status.Signatures)
	}
	if got := x.f.Requests(); len(got) != 0 {
		t.Errorf("requests %v, want none", got)
	}
	if after, _ := x.f.Resolve(sigTag); after != before {
		t.Errorf("the signature tag moved: %s, was %s", after, before)
	}

	// A new builder: refused before its push, nothing pushed.
	other := x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.ServiceAccountName, b.Spec.Tag = "other", "signer", x.f.Addr+"/builders/other:latest"
	})
	x.f.ForgetRequests()
	fresh, events, err, _ := x.run(t, other, lifecycle, three...)
	rt.Check(t, fresh, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonTooManySignatures, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{ReasonTooManySignatures}, MessageContains: message})
	if fresh.Status.LatestImage != "" || len(fresh.Status.Signatures) != 0 || x.f.Count("PUT", "") != 0 {
		t.Errorf("new builder: latestImage %q, signatures %+v, %d PUTs", fresh.Status.LatestImage, fresh.Status.Signatures, x.f.Count("PUT", ""))
	}

	// Two keys within the limit, and an additional tag in another
	// repository: its copy's signatures count too, refused before the push.
	published := x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.ServiceAccountName, b.Spec.Tag = "published", "signer", x.f.Addr+"/builders/published:latest"
		b.Spec.AdditionalTags = []string{x.f.Addr + "/builders/published:v1", x.f.Addr + "/elsewhere/published:latest"}
	})
	x.f.ForgetRequests()
	copies, events, err, _ := x.run(t, published, lifecycle, two...)
	rt.Check(t, copies, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonTooManySignatures, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{ReasonTooManySignatures},
		MessageContains: "the builder's images × signing keys make 2 × 2 = 4 signatures"})
	if x.f.Count("PUT", "") != 0 {
		t.Errorf("%d PUTs for a builder whose copies' signatures status could not hold", x.f.Count("PUT", ""))
	}
}

// bogusSignatures are n well-formed signatures of payload by a key nobody
// has: what a tenant's registry fills a signature image with so that
// checking it costs a verification per layer and key.
func bogusSignatures(t *testing.T, payload []byte, n int) []cosign.Signature {
	t.Helper()
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	var out []cosign.Signature
	for range n {
		sig, err := ecdsa.SignASN1(rand.Reader, other, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cosign.Signature{Payload: payload, Signature: base64.StdEncoding.EncodeToString(sig)})
	}
	return out
}

// putSignatures writes the signature image of signatures at tag, as
// another writer (the tenant's registry) does.
func putSignatures(t *testing.T, tag name.Tag, signatures ...[]cosign.Signature) string {
	t.Helper()
	img, err := cosign.SignatureImage(nil, slices.Concat(signatures...), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	return digest.String()
}

// TestSignatureImageTooLarge: a signature image of more layers than
// --max-signature-layers (lowered to 4 here) is refused before any of its
// signatures is verified or anything written, and one our signature would
// take past the bound is not written either: the builder waits with
// SignatureImageTooLarge, naming the tag, the count, the limit and the
// flag. At the bound, the image is checked and extended as any other.
func TestSignatureImageTooLarge(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	private, _ := cosigntest.KeyPair(t, "")
	key, err := cosign.ParseKey(context.Background(), "k", private, nil, cosign.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "signing"}}}
	secret := cosigntest.Secret("apps", "signing", private, "")
	cfg := x.config()
	cfg.Signing.MaxSignatureLayers = 4
	signed, _, err, _, _ := x.runWith(t, cfg, x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" }), lifecycle, sa, secret)
	if !signed.Status.IsReady() || len(signed.Status.Signatures) != 1 {
		t.Fatalf("ready %v (%v), signatures %+v", signed.Status.IsReady(), err, signed.Status.Signatures)
	}
	image, _ := name.NewDigest(signed.Status.LatestImage)
	tag := cosign.SignatureTag(image.Context(), image)
	payload := cosign.Payload(image)
	sig, _ := key.Sign(payload)
	ours := []cosign.Signature{{Payload: payload, Signature: sig}}

	for _, tc := range []struct {
		name       string
		signatures [][]cosign.Signature
		message    string // "": signed
		verified   int64
		written    bool // a signature image was written
	}{
		{name: "4 layers, ours among them: checked, nothing written", signatures: [][]cosign.Signature{bogusSignatures(t, payload, 3), ours}, verified: 4},
		{name: "3 layers: ours makes 4", signatures: [][]cosign.Signature{bogusSignatures(t, payload, 3)}, verified: 3, written: true},
		{name: "5 layers: refused unread", signatures: [][]cosign.Signature{bogusSignatures(t, payload, 4), ours},
			message: "the signature image at " + tag.String() + " has 5 layers, more than the 4 a signature image may have (--max-signature-layers)"},
		{name: "a layer of 100 KiB: refused unread", signatures: [][]cosign.Signature{{{Payload: make([]byte, 100<<10), Signature: "AAAA"}}},
			message: "the signature image at " + tag.String() + " has a layer of 102400 bytes, more than the 65536 a signature's payload may take"},
		{name: "4 layers, not ours: refused unwritten", signatures: [][]cosign.Signature{bogusSignatures(t, payload, 4)}, verified: 4,
			message: "the signature image at " + tag.String() + " has 4 layers, and the builder's 1 new signature(s) would take it past the 4 a signature image may have (--max-signature-layers)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			there := putSignatures(t, tag, tc.signatures...)
			lost := signed.DeepCopy() // its signatures not recorded: the tag is read
			lost.Status.Signatures = nil
			x.f.ForgetRequests()
			before := cosign.Verifications()
			got, events, err, _, _ := x.runWith(t, cfg, lost, lifecycle, sa, secret)
			if n := cosign.Verifications() - before; n != tc.verified {
				t.Errorf("%d verifications, want %d", n, tc.verified)
			}
			if n := x.f.Count("PUT", ".sig"); n != map[bool]int{true: 1}[tc.written] {
				t.Errorf("%d signature images written, want written %v", n, tc.written)
			}
			if tc.message == "" {
				if !got.Status.IsReady() || len(got.Status.Signatures) != 1 || tc.written == strings.HasSuffix(got.Status.Signatures[0].Signature, "@"+there) {
					t.Errorf("ready %v (%v), signatures %+v (the tag named %s)", got.Status.IsReady(), err, got.Status.Signatures, there)
				}
				return
			}
			rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonSignatureImageTooLarge, Reconciling: true,
				Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
				EventReasons: []string{ReasonSignatureImageTooLarge}, MessageContains: tc.message})
		})
	}
}

// signImageFixture is a signature tag holding n bogus signatures of an
// image, and two keys that have not signed it.
func signImageFixture(t *testing.T, x *fixture, n int) (name.Digest, signatureTag, []signingKey) {
	t.Helper()
	image, err := name.NewDigest(x.f.Addr + "/builders/go@sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	where := signatureTag{tag: cosign.SignatureTag(image.Context(), image)}
	putSignatures(t, where.tag, bogusSignatures(t, cosign.Payload(image), n))
	var keys []signingKey
	for i := range 2 {
		private, _ := cosigntest.KeyPair(t, "")
		key, err := cosign.ParseKey(context.Background(), "k", private, nil, cosign.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, signingKey{secret: fmt.Sprintf("apps/k%d", i), key: key})
	}
	return image, where, keys
}

// TestSignImageVerifiesEachSignatureOnce: a signature image full of bogus
// signatures is verified once per layer and key, not again when the tag
// is read again in the same reconcile (its first write lost to another
// writer): 2 keys × 10 layers, 20 verifications, not 40.
func TestSignImageVerifiesEachSignatureOnce(t *testing.T) {
	x := newFixture(t)
	image, where, keys := signImageFixture(t, x, 10)
	x.f.ForgetRequests()
	x.f.Inject("PUT", ".sig", 1, registrytest.Answer(201, nil, "")) // lost
	before := cosign.Verifications()
	got, err := signImage(context.Background(), x.client.As(nil), image, where, keys)
	if err != nil {
		t.Fatal(err)
	}
	if n := cosign.Verifications() - before; n != 20 || x.f.Count("PUT", ".sig") != 2 {
		t.Errorf("%d verifications and %d writes, want 20 and 2 (the lost one, then again)", n, x.f.Count("PUT", ".sig"))
	}
	r, _ := name.ParseReference(got)
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := img.Manifest(); len(m.Layers) != 12 {
		t.Errorf("%d layers, want the 10 there and 2 added", len(m.Layers))
	}
}

// verifiedAtMost is a context that ends once the process has made n more
// verifications than when it was made: a reconcile cancelled while a
// signature image is checked.
type verifiedAtMost struct {
	context.Context
	start, n int64
}

func (c verifiedAtMost) Err() error {
	if cosign.Verifications()-c.start >= c.n {
		return context.Canceled
	}
	return nil
}

// TestSignImageStopsWithItsContext: a reconcile cancelled while a
// signature image is checked verifies nothing more and writes nothing.
func TestSignImageStopsWithItsContext(t *testing.T) {
	x := newFixture(t)
	image, where, keys := signImageFixture(t, x, 10)
	x.f.ForgetRequests()
	before := cosign.Verifications()
	_, err := signImage(verifiedAtMost{Context: context.Background(), start: before, n: 3}, x.client.As(nil), image, where, keys)
	if !errors.Is(err, context.Canceled) || cosign.Verifications()-before != 3 || x.f.Count("PUT", "") != 0 {
		t.Errorf("error %v after %d verifications and %d PUTs, want %v after 3 and none",
			err, cosign.Verifications()-before, x.f.Count("PUT", ""), context.Canceled)
	}
}

// TestSignatureTagsBounded: more keys signing into one signature tag than
// a signature image may have layers are refused before the builder is
// pushed (their signatures could never be written); the same number
// spread over two repositories passes. A key in two Secrets counts once.
func TestSignatureTagsBounded(t *testing.T) {
	images := plannedImages(name.MustParseReference("registry.example.com/builders/go:latest").(name.Tag), 1)
	elsewhere, _ := name.NewRepository("registry.example.com/signatures")
	key := func(id string, repo *name.Repository) signingKey {
		return signingKey{secret: "apps/" + id, key: &cosign.Key{ID: id}, repository: repo, maxSignatureLayers: 2}
	}
	for _, tc := range []struct {
		name    string
		keys    []signingKey
		refused bool
	}{
		{name: "2 keys, one tag", keys: []signingKey{key("a", nil), key("b", nil)}},
		{name: "a key twice and another, one tag", keys: []signingKey{key("a", nil), key("b", nil), key("a", nil)}},
		{name: "3 keys over two tags", keys: []signingKey{key("a", nil), key("b", nil), key("c", &elsewhere)}},
		{name: "3 keys, one tag", keys: []signingKey{key("a", nil), key("b", nil), key("c", nil)}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSignatures(images, tc.keys, signatureFormats{sig: true})
			f, ok := failure.As(err)
			const message = "more than 2 signatures (one per signing key and repository the builder is published to) go into the signature tags of registry.example.com/builders/go, the most layers a signature image may have (--max-signature-layers)"
			if tc.refused != (err != nil) || tc.refused && (!ok || f.Class != failure.Permanent || f.Reason != ReasonTooManySignatures || !strings.Contains(err.Error(), message)) {
				t.Errorf("error %v, want refused %v with %q", err, tc.refused, message)
			}
		})
	}
}
