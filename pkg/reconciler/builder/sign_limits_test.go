package builder

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
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
		message string // "": within the bounds
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSignatures(tc.images, tc.keys)
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
}
