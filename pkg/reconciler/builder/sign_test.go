package builder

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestBuilderSigned: with a cosign key among its ServiceAccount's secrets a
// builder's image is signed as cosign does; the signature is recorded and
// not pushed again at resyncs, nor added twice when the status was lost; a
// second key adds its own; a key that does not decrypt stalls the builder
// before anything is pushed.
func TestBuilderSigned(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	first, _ := cosigntest.KeyPair(t, "pass")
	second, _ := cosigntest.KeyPair(t, "")
	firstKey, err := cosign.ParseKey("first", first, []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	secondKey, _ := cosign.ParseKey("second", second, nil)
	account := func(secrets ...string) *corev1.ServiceAccount {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}}
		for _, s := range secrets {
			sa.Secrets = append(sa.Secrets, corev1.ObjectReference{Name: s})
		}
		return sa
	}
	objects := func(sa *corev1.ServiceAccount) []runtime.Object {
		return []runtime.Object{sa, cosigntest.Secret("apps", "first", first, "pass"), cosigntest.Secret("apps", "second", second, ""),
			cosigntest.Secret("apps", "wrong", first, "guess"),
			// A docker config among them: not a signing Secret.
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "other"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": nil}}}
	}
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })

	got, events, err, _ := x.run(t, b, lifecycle, objects(account("other", "first", "gone"))...)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	image, err := name.NewDigest(got.Status.LatestImage)
	if err != nil {
		t.Fatal(err)
	}
	sigTag := cosign.SignatureTag(image.Context(), image)
	signatures := func() []string { // the signature image's layers, as which key signed them
		t.Helper()
		img, err := remote.Image(sigTag)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := img.Manifest()
		var out []string
		for _, l := range m.Layers {
			who := "?"
			for n, k := range map[string]*cosign.Key{"first": firstKey, "second": secondKey} {
				if k.Verifies(cosign.Payload(image), l.Annotations[cosign.SignatureAnnotation]) {
					who = n
				}
			}
			out = append(out, who)
		}
		return out
	}
	if diff := cmp.Diff([]string{"first"}, signatures()); diff != "" {
		t.Errorf("signatures (-want +got):\n%s", diff)
	}
	sigDigest, _ := x.f.Resolve(sigTag.String())
	wantStatus := []v1alpha1.ImageSignature{{Image: got.Status.LatestImage, SigningSecret: "apps/first", KeyID: firstKey.ID,
		Signature: sigTag.String() + "@" + strings.TrimPrefix(sigDigest, sigTag.Context().String()+"@")}}
	if diff := cmp.Diff(wantStatus, got.Status.Signatures); diff != "" {
		t.Errorf("status.signatures (-want +got):\n%s", diff)
	}

	// A resync: the recorded signature is trusted, one HEAD in all.
	x.f.ForgetRequests()
	again, _, err, _ := x.run(t, got, lifecycle, objects(account("other", "first", "gone"))...)
	if !again.Status.IsReady() || !cmp.Equal(again.Status.Signatures, got.Status.Signatures) ||
		!cmp.Equal(x.f.Requests(), []string{"HEAD /v2/builders/go/manifests/latest"}) {
		t.Errorf("resync: ready %v (%v), signatures %+v, requests %v", again.Status.IsReady(), err, again.Status.Signatures, x.f.Requests())
	}

	// The status lost its signatures (its write failed, say): the
	// signature image is read, found signed, and nothing is pushed.
	lost := got.DeepCopy()
	lost.Status.Signatures = nil
	x.f.ForgetRequests()
	found, _, err, _ := x.run(t, lost, lifecycle, objects(account("other", "first", "gone"))...)
	if !found.Status.IsReady() || !cmp.Equal(found.Status.Signatures, got.Status.Signatures) || x.f.Count("PUT", "") != 0 {
		t.Errorf("status lost: ready %v (%v), signatures %+v, requests %v", found.Status.IsReady(), err, found.Status.Signatures, x.f.Requests())
	}
	if diff := cmp.Diff([]string{"first"}, signatures()); diff != "" {
		t.Errorf("signatures after the status was lost (-want +got):\n%s", diff)
	}

	// A second key: its signature is added beside the first.
	both, _, err, _ := x.run(t, got, lifecycle, objects(account("first", "second"))...)
	if !both.Status.IsReady() || len(both.Status.Signatures) != 2 || both.Status.Signatures[1].SigningSecret != "apps/second" {
		t.Errorf("second key: ready %v (%v), signatures %+v", both.Status.IsReady(), err, both.Status.Signatures)
	}
	if diff := cmp.Diff([]string{"first", "second"}, signatures()); diff != "" {
		t.Errorf("signatures after the second key (-want +got):\n%s", diff)
	}

	// A Secret that does not decrypt: a permanent error naming it, before
	// any push (a changed env would otherwise push a new builder).
	changed := both.DeepCopy()
	changed.Spec.Env = []v1alpha1.BuildEnv{{Name: "GOFLAGS", Value: "-trimpath"}}
	x.f.ForgetRequests()
	failed, events, err, _ := x.run(t, changed, lifecycle, objects(account("first", "wrong"))...)
	rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cosign.ReasonInvalidSigningKey, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{cosign.ReasonInvalidSigningKey},
		MessageContains: "secret apps/wrong: cosign.key does not decrypt with cosign.password"})
	if failed.Status.LatestImage != got.Status.LatestImage || len(x.f.Requests()) != 0 {
		t.Errorf("bad key: latestImage %s (want %s kept), requests %v", failed.Status.LatestImage, got.Status.LatestImage, x.f.Requests())
	}
}

// TestBuilderSignedWhere: the kpack.io/cosign.* annotations send
// signatures to another repository and make Docker manifests; moving the
// repository signs again there; two keys bound for one tag cost one write;
// a new image gets new signatures and the old ones leave status; a write
// another writer undid is done again; a bad annotation stalls the builder.
func TestBuilderSignedWhere(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	first, _ := cosigntest.KeyPair(t, "")
	second, _ := cosigntest.KeyPair(t, "")
	secret := func(name string, key []byte, annotations map[string]string) *corev1.Secret {
		s := cosigntest.Secret("apps", name, key, "")
		s.Annotations = annotations
		return s
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "first"}, {Name: "second"}, {Name: "first"}}} // listed twice: one signature
	elsewhere := x.f.Addr + "/signatures"
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })
	manifestOf := func(t *testing.T, ref string) *v1.Manifest {
		t.Helper()
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(r)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := img.Manifest()
		return m
	}

	// Both keys to the other repository, Docker manifests: one write.
	docker := map[string]string{AnnotationSignatureRepository: elsewhere, AnnotationDockerMediaTypes: "true"}
	x.f.ForgetRequests()
	got, _, err, _ := x.run(t, b, lifecycle, sa, secret("first", first, docker), secret("second", second, docker))
	if !got.Status.IsReady() || len(got.Status.Signatures) != 2 {
		t.Fatalf("ready %v (%v), signatures %+v", got.Status.IsReady(), err, got.Status.Signatures)
	}
	sig := got.Status.Signatures[0].Signature
	if !strings.HasPrefix(sig, elsewhere+":sha256-") || got.Status.Signatures[1].Signature != sig {
		t.Errorf("signatures not both at %s: %+v", elsewhere, got.Status.Signatures)
	}
	if m := manifestOf(t, sig); m.MediaType != types.DockerManifestSchema2 || len(m.Layers) != 2 {
		t.Errorf("signature manifest %s with %d layers, want a Docker manifest with both", m.MediaType, len(m.Layers))
	}
	if n := x.f.Count("PUT", "/signatures/manifests/"); n != 1 {
		t.Errorf("%d manifest PUTs to the signature repository, want 1", n)
	}

	// The annotation moves: the signatures follow, into an OCI manifest.
	moved, _, err, _ := x.run(t, got, lifecycle, sa, secret("first", first, nil), secret("second", second, nil))
	image, _ := name.NewDigest(got.Status.LatestImage)
	own := cosign.SignatureTag(image.Context(), image).String()
	if !moved.Status.IsReady() || len(moved.Status.Signatures) != 2 || !strings.HasPrefix(moved.Status.Signatures[0].Signature, own+"@") {
		t.Fatalf("after the annotation went: ready %v (%v), signatures %+v", moved.Status.IsReady(), err, moved.Status.Signatures)
	}
	if m := manifestOf(t, own); m.MediaType != types.OCIManifestSchema1 || len(m.Layers) != 2 {
		t.Errorf("signature manifest %s with %d layers, want an OCI manifest with both", m.MediaType, len(m.Layers))
	}

	// A new image (another env): signed anew, the old signatures gone from
	// status; the first write of its signature tag is lost (another writer
	// replaced the tag), so it is read and written again.
	changed := moved.DeepCopy()
	changed.Spec.Env = []v1alpha1.BuildEnv{{Name: "GOFLAGS", Value: "-trimpath"}}
	x.f.Inject("PUT", ".sig", 1, registrytest.Answer(201, nil, ""))
	x.f.ForgetRequests()
	rebuilt, _, err, _ := x.run(t, changed, lifecycle, sa, secret("first", first, nil), secret("second", second, nil))
	if !rebuilt.Status.IsReady() || rebuilt.Status.LatestImage == moved.Status.LatestImage || len(rebuilt.Status.Signatures) != 2 {
		t.Fatalf("rebuilt: ready %v (%v), latestImage %s, signatures %+v", rebuilt.Status.IsReady(), err, rebuilt.Status.LatestImage, rebuilt.Status.Signatures)
	}
	for _, s := range rebuilt.Status.Signatures {
		if s.Image != rebuilt.Status.LatestImage {
			t.Errorf("a signature of another image kept: %+v", s)
		}
	}
	if n := x.f.Count("PUT", ".sig"); n != 2 {
		t.Errorf("%d PUTs of the signature manifest, want 2 (the lost one, then again)", n)
	}
	if m := manifestOf(t, strings.Split(rebuilt.Status.Signatures[0].Signature, "@")[0]); len(m.Layers) != 2 {
		t.Errorf("the new image's signature manifest has %d layers, want 2", len(m.Layers))
	}

	// Bad annotations: a permanent error naming the Secret and the annotation.
	x.checkStalledWith(t, rebuilt.Status, map[string]stalledWith{
		"repository": {secret("first", first, map[string]string{AnnotationSignatureRepository: "Not A Repo"}),
			"secret apps/first: annotation kpack.io/cosign.repository"},
		"media types": {secret("first", first, map[string]string{AnnotationDockerMediaTypes: "maybe"}),
			`secret apps/first: annotation kpack.io/cosign.docker-media-types: "maybe" is not a boolean`},
	}, func(bad *corev1.Secret) []runtime.Object {
		return []runtime.Object{sa, bad, secret("second", second, nil)}
	}, b, lifecycle)
}

// stalledWith is a signing Secret that must stall the builder with
// InvalidSigningKey and a message containing message.
type stalledWith struct {
	secret  *corev1.Secret
	message string
}

func (x *fixture) checkStalledWith(t *testing.T, before v1alpha1.BuilderStatus, cases map[string]stalledWith,
	objects func(*corev1.Secret) []runtime.Object, b *v1alpha1.Builder, lifecycle string) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := b.DeepCopy()
			b.Status = before
			failed, events, err, _ := x.run(t, b, lifecycle, objects(tc.secret)...)
			rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cosign.ReasonInvalidSigningKey, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{cosign.ReasonInvalidSigningKey}, MessageContains: tc.message})
		})
	}
}
