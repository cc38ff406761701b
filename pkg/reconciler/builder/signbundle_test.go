package builder

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/cosigntest"
)

// TestBuilderSignedAsBundle: with spec.signing.format bundle, the index
// and each platform's image carry a cosign v3 signature bundle as a
// referrer (one per key, though the key is in two Secrets), and no .sig
// tag; a resync signs nothing again; with both, the .sig tag too; with
// attestations, an image's bundle and attestations share one listing.
func TestBuilderSignedAsBundle(t *testing.T) {
	x := multiFixture(t)
	lifecycle := x.f.Addr + "/multi/lifecycle:0.21.0"
	private, _ := cosigntest.KeyPair(t, "pass")
	key, err := cosign.ParseKey(context.Background(), "k", private, []byte("pass"), cosign.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	signer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "key"}, {Name: "copy"}}}
	secrets := []runtime.Object{signer, cosigntest.Secret("apps", "key", private, "pass"), cosigntest.Secret("apps", "copy", private, "pass")}
	ready := rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}}
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.Order = order("example/hello")
		b.Spec.ServiceAccountName = "signer"
		b.Spec.Signing = &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBundle}
	})

	got, events, err, _ := x.run(t, b, lifecycle, secrets...)
	rt.Check(t, got, err, events, ready)
	if len(got.Status.Platforms) != 2 {
		t.Fatalf("platforms %+v, want two", got.Status.Platforms)
	}
	images := []string{got.Status.LatestImage, got.Status.Platforms[0].Image, got.Status.Platforms[1].Image}
	sigs := got.Status.Signatures
	if len(sigs) != 2*len(images) {
		t.Fatalf("status.signatures %+v, want one per image and Secret", sigs)
	}
	for n, image := range images {
		ref, _ := name.NewDigest(image)
		first, second := sigs[2*n], sigs[2*n+1]
		if first.Image != image || first.Format != v1alpha1.SignatureFormatBundle || first.ListedBy != registry.ListedByTag ||
			first.KeyID != key.ID || first.SigningSecret != "apps/key" || second.SigningSecret != "apps/copy" || second.Signature != first.Signature {
			t.Errorf("signatures of %s: %+v, %+v", image, first, second)
		}
		statement := bundledStatement(t, first.Signature)
		if statement.PredicateType != attest.SignPredicateType || len(statement.Subject) != 1 || statement.Subject[0].Digest["sha256"] != ref.DigestStr()[7:] {
			t.Errorf("statement of %s: %+v", first.Signature, statement)
		}
		referrers, err := remote.Referrers(ref)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := referrers.IndexManifest()
		if len(m.Manifests) != 1 || m.Manifests[0].ArtifactType != cosign.BundleMediaType {
			t.Errorf("referrers of %s: %+v", image, m.Manifests)
		}
		signature, _ := remote.Image(mustRef(t, first.Signature))
		if sm, _ := signature.Manifest(); sm == nil || sm.Subject == nil || sm.Subject.Digest.String() != ref.DigestStr() ||
			sm.Subject.MediaType != map[bool]types.MediaType{true: types.OCIImageIndex, false: types.OCIManifestSchema1}[n == 0] {
			t.Errorf("referrer %s of %s: manifest %+v", first.Signature, image, sm)
		}
		if _, err := remote.Head(cosign.SignatureTag(ref.Context(), ref)); err == nil {
			t.Errorf("a .sig tag was written for %s", image)
		}
	}

	// A resync: the signatures recorded are trusted.
	x.f.ForgetRequests()
	again, events, err, _ := x.run(t, got, lifecycle, secrets...)
	rt.Check(t, again, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
	if n := x.f.Count("", "/manifests/sha256:"); n != 0 || len(again.Status.Signatures) != len(sigs) {
		t.Errorf("a resync read or wrote %d manifests by digest (%v); signatures %+v", n, x.f.Requests(), again.Status.Signatures)
	}

	// Both formats: the .sig tags are added, the bundles kept.
	both := again.DeepCopy()
	both.Spec.Signing.Format = v1alpha1.SignatureFormatBoth
	x.f.ForgetRequests()
	got, events, err, _ = x.run(t, both, lifecycle, secrets...)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
	formats := map[string]int{}
	for _, s := range got.Status.Signatures {
		formats[s.Format]++
	}
	if formats[""] != 2*len(images) || formats[v1alpha1.SignatureFormatBundle] != 2*len(images) {
		t.Errorf("signatures in both formats: %+v", got.Status.Signatures)
	}
	for _, image := range images {
		ref, _ := name.NewDigest(image)
		if _, err := remote.Head(cosign.SignatureTag(ref.Context(), ref)); err != nil {
			t.Errorf("no .sig tag for %s: %v", image, err)
		}
	}
	if n := x.f.Count("PUT", "/manifests/sha256:"); n != 0 {
		t.Errorf("the bundles recorded were pushed again: %v", x.f.Requests())
	}

	// Attested too: the index's signature bundle and its attestations by
	// the same key share one listing, as each platform's bundle has one.
	cfg := x.config()
	cfg.Attestations = AttestSigned
	run, err := x.f.Resolve(x.f.Addr + "/multi/run:1")
	if err != nil {
		t.Fatal(err)
	}
	x.stack.Status.RunImage.LatestImage = run // the provenance names it by digest
	attested := x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.Tag = "attested", x.f.Addr+"/builders/attested:latest"
		b.Spec.Order = order("example/hello")
		b.Spec.ServiceAccountName = "signer"
		b.Spec.Signing = &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBundle}
	})
	x.f.ForgetRequests()
	got, events, err, _, _ = x.runWith(t, cfg, attested, lifecycle, secrets...)
	rt.Check(t, got, err, events, ready)
	if len(got.Status.Signatures) != 6 || len(got.Status.Attestations) != 4 {
		t.Fatalf("signatures %+v, attestations %+v", got.Status.Signatures, got.Status.Attestations)
	}
	if reads, writes := x.f.Count("GET", "/manifests/sha256-"), x.f.Count("PUT", "/manifests/sha256-"); reads != 3 || writes != 3 {
		t.Errorf("the fallback tags were read %d and written %d times, want once for each of 3 images: %v", reads, writes, x.f.Requests())
	}
	ref, _ := name.NewDigest(got.Status.LatestImage)
	referrers, err := remote.Referrers(ref)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := referrers.IndexManifest(); len(m.Manifests) != 3 {
		t.Errorf("the index's referrers %+v, want its signature, SBOM and provenance", m.Manifests)
	}
}

// TestDockerMediaTypesKey: a key whose Secret asks for Docker media types
// (its registry refuses OCI manifests) signs at the .sig tag and attests
// nothing; asked for a bundle, the builder stalls before it is pushed.
func TestDockerMediaTypesKey(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	private, _ := cosigntest.KeyPair(t, "pass")
	secret := cosigntest.Secret("apps", "key", private, "pass")
	secret.Annotations = map[string]string{AnnotationDockerMediaTypes: "true"}
	signer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}, Secrets: []corev1.ObjectReference{{Name: "key"}}}
	cfg := x.config()
	cfg.Attestations = AttestSigned
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })

	got, events, err, _, _ := x.runWith(t, cfg, b, lifecycle, signer, secret)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
		EventReasons: []string{"Ready"}})
	if len(got.Status.Signatures) != 1 || got.Status.Signatures[0].Format != "" || len(got.Status.Attestations) != 0 || got.Status.AttestedDocuments != "" {
		t.Errorf("signatures %+v, attestations %+v: want the .sig tag's alone", got.Status.Signatures, got.Status.Attestations)
	}

	bundled := x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.Tag = "bundled", x.f.Addr+"/builders/bundled:latest"
		b.Spec.ServiceAccountName = "signer"
		b.Spec.Signing = &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBundle}
	})
	x.f.ForgetRequests()
	stalled, events, err, _, _ := x.runWith(t, cfg, bundled, lifecycle, signer, secret)
	rt.Check(t, stalled, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cosign.ReasonInvalidSigningKey, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{cosign.ReasonInvalidSigningKey},
		MessageContains: "secret apps/key asks for Docker media types (annotation kpack.io/cosign.docker-media-types), and spec.signing.format bundle asks for a Sigstore bundle"})
	if n := x.f.Count("PUT", "/builders/bundled/"); n != 0 {
		t.Errorf("a builder that cannot be signed was pushed: %v", x.f.Requests())
	}
}

// TestSigningWithoutKeys: a builder whose spec.signing asks for
// signatures and whose ServiceAccount holds no cosign key stalls before it
// is pushed, saying so; the key added, it is pushed signed.
func TestSigningWithoutKeys(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	private, _ := cosigntest.KeyPair(t, "pass")
	cfg := x.config()
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.ServiceAccountName = "signer"
		b.Spec.Signing = &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBundle}
	})
	keyless := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}}
	stalled, events, err, _, _ := x.runWith(t, cfg, b, lifecycle, keyless)
	rt.Check(t, stalled, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: ReasonNoSigningKeys, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{ReasonNoSigningKeys},
		MessageContains: "spec.signing asks for signed images, and ServiceAccount apps/signer lists no Secret holding a cosign key (cosign.key)"})
	if n := x.f.Count("PUT", "/builders/go/"); n != 0 {
		t.Errorf("a builder that cannot be signed was pushed: %v", x.f.Requests())
	}

	signer := keyless.DeepCopy()
	signer.Secrets = []corev1.ObjectReference{{Name: "key"}}
	got, events, err, _, _ := x.runWith(t, cfg, stalled, lifecycle, signer, cosigntest.Secret("apps", "key", private, "pass"))
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
		EventReasons: []string{"Ready"}})
	if len(got.Status.Signatures) != 1 || got.Status.Signatures[0].Format != v1alpha1.SignatureFormatBundle {
		t.Errorf("signatures %+v, want one bundle", got.Status.Signatures)
	}
}

// TestSignedAgainWhenPushedAgain: a builder pushed again at the same digest
// (its tag moved away, and its repository lost the signature meanwhile) is
// signed again: what status recorded is not taken for what the registry
// holds after a push.
func TestSignedAgainWhenPushedAgain(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	private, _ := cosigntest.KeyPair(t, "pass")
	signer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}, Secrets: []corev1.ObjectReference{{Name: "key"}}}
	secret := cosigntest.Secret("apps", "key", private, "pass")
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.ServiceAccountName = "signer"
		b.Spec.Signing = &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBoth}
	})
	got, events, err, _ := x.run(t, b, lifecycle, signer, secret)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
		EventReasons: []string{"Ready"}})
	image, _ := name.NewDigest(got.Status.LatestImage)
	sigTag := cosign.SignatureTag(image.Context(), image)
	if err := remote.Delete(sigTag); err != nil {
		t.Fatal(err)
	}
	x.f.PushImage("builders/go:latest", map[string]string{"someone": "else"})

	again, events, err, _ := x.run(t, got, lifecycle, signer, secret)
	rt.Check(t, again, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
	if again.Status.LatestImage != got.Status.LatestImage {
		t.Fatalf("latestImage %s, want the same digest %s pushed again", again.Status.LatestImage, got.Status.LatestImage)
	}
	if _, err := remote.Head(sigTag); err != nil {
		t.Errorf("the .sig tag lost is not written again: %v", err)
	}
	if len(again.Status.Signatures) != 2 {
		t.Errorf("signatures %+v", again.Status.Signatures)
	}
}
