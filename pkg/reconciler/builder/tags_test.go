package builder

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestBuilderAdditionalTags: a builder is published to its additional tags,
// in its own repository, another one of its registry and another registry;
// the copies in other repositories are signed there, by the same keys; a
// resync costs a HEAD per tag; a tag moved behind the builder's back is
// put back without a rebuild; and a registry that refuses one makes the
// builder not Ready, as its own tag's would, saying which, status kept.
func TestBuilderAdditionalTags(t *testing.T) {
	x := newFixture(t)
	other := registrytest.New(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	key, _ := cosigntest.KeyPair(t, "")
	signer := []corev1.ObjectReference{{Name: "signer"}}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "publisher"}, Secrets: signer}
	secret := cosigntest.Secret("apps", "signer", key, "")
	tags := []string{x.f.Addr + "/builders/go:1.2", x.f.Addr + "/published/go:latest", other.Addr + "/mirror/go:latest"}
	b := x.builder(func(b *v1alpha1.Builder) {
		b.Spec.ServiceAccountName = "publisher"
		b.Spec.AdditionalTags = tags
	})

	got, events, err, _ := x.run(t, b, lifecycle, account, secret)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	latest, err := name.NewDigest(got.Status.LatestImage)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tags, got.Status.AdditionalTags); diff != "" {
		t.Errorf("status.additionalTags (-want +got):\n%s", diff)
	}
	resolve := func(f *registrytest.Registry, ref string) string {
		t.Helper()
		at, err := f.Resolve(ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		return at[strings.Index(at, "@")+1:]
	}
	for i, tag := range tags {
		f := x.f
		if i == 2 {
			f = other
		}
		if d := resolve(f, tag); d != latest.DigestStr() {
			t.Errorf("%s points at %s, want the builder %s", tag, d, latest.DigestStr())
		}
	}
	// One signature per repository the image is in, each in its own.
	var signed []string
	for _, s := range got.Status.Signatures {
		signed = append(signed, s.Image)
	}
	wantSigned := []string{latest.String(), x.f.Addr + "/published/go@" + latest.DigestStr(), other.Addr + "/mirror/go@" + latest.DigestStr()}
	if diff := cmp.Diff(wantSigned, signed); diff != "" {
		t.Errorf("signed images (-want +got):\n%s", diff)
	}
	for _, image := range wantSigned {
		digest, _ := name.NewDigest(image)
		f := x.f
		if digest.RegistryStr() == other.Addr {
			f = other
		}
		if _, err := f.Resolve(cosign.SignatureTag(digest.Context(), digest).String()); err != nil {
			t.Errorf("no signature of %s in its repository: %v", image, err)
		}
	}

	// A resync: a HEAD of the builder's tag, and one of each additional tag.
	x.f.ForgetRequests()
	other.ForgetRequests()
	again, _, err, traffic := x.run(t, got, lifecycle, account, secret)
	if heads := traffic.Total(http.MethodHead); !again.Status.IsReady() || traffic.Total() != heads || heads != int64(1+len(tags)) {
		t.Errorf("resync: ready %v (%v), %d requests (%d HEADs), want %d HEADs: %q %q", again.Status.IsReady(), err,
			traffic.Total(), heads, 1+len(tags), x.f.Requests(), other.Requests())
	}

	// The mirror's tag moved behind the builder's back: put back, its
	// repository's signature checked again; nothing rebuilt.
	other.Push("mirror/go:latest")
	x.f.ForgetRequests()
	moved, _, err, _ := x.run(t, again, lifecycle, account, secret)
	if !moved.Status.IsReady() || resolve(other, tags[2]) != latest.DigestStr() || moved.Status.LatestImage != got.Status.LatestImage {
		t.Errorf("after the mirror's tag moved: ready %v (%v), mirror at %s, latest %s", moved.Status.IsReady(), err,
			resolve(other, tags[2]), moved.Status.LatestImage)
	}
	if n := x.f.Count(http.MethodPut, "/builders/go/manifests/"); n != 0 {
		t.Errorf("the builder was pushed again (%d PUTs) for a moved additional tag: %q", n, x.f.Requests())
	}
	if n := x.f.Count("", ".sig"); n != 0 {
		t.Errorf("%d requests for the signatures of the repositories nothing was written to: %q", n, x.f.Requests())
	}
	if n := other.Count("", ".sig"); n == 0 {
		t.Errorf("the signature of the mirror, written to again, was not checked: %q", other.Requests())
	}

	// The other registry refuses the builder's credentials: not Ready, as
	// for its own tag, saying where; what status says is kept.
	other.Push("mirror/go:latest") // moved again, and now refused
	other.Inject("", "/mirror/go/", -1, registrytest.Answer(http.StatusForbidden, nil, registrytest.OCIError("DENIED", "no")))
	refused, events, err, _ := x.run(t, moved, lifecycle, account, secret)
	rt.Check(t, refused, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: registry.ReasonUnauthorized, Reconciling: true,
		Requeue: rt.Poll, MinDelay: 30 * time.Second, MaxDelay: 2 * time.Minute, MessageContains: other.Addr + "/v2/mirror/go/",
		EventReasons: []string{registry.ReasonUnauthorized}})
	if refused.Status.LatestImage != got.Status.LatestImage {
		t.Errorf("status.latestImage %q after a refusal, want it kept", refused.Status.LatestImage)
	}
	if !slices.Equal(refused.Status.AdditionalTags, tags) {
		t.Errorf("status.additionalTags %q after a refusal, want them kept", refused.Status.AdditionalTags)
	}

	// A new builder one of whose registries refuses: its own image is
	// pushed, published where it can be and signed there; status waits.
	fresh := x.builder(func(b *v1alpha1.Builder) {
		b.Name, b.Spec.ServiceAccountName, b.Spec.Tag = "fresh", "publisher", x.f.Addr+"/builders/fresh:latest"
		b.Spec.AdditionalTags = []string{other.Addr + "/mirror/go:fresh", x.f.Addr + "/published/fresh:latest"}
	})
	partial, _, err, _ := x.run(t, fresh, lifecycle, account, secret)
	if ready := partial.Status.GetCondition(v1alpha1.ConditionReady); ready == nil || ready.Reason != registry.ReasonUnauthorized || partial.Status.LatestImage != "" {
		t.Errorf("a refused additional tag: Ready %+v (%v), latestImage %q; want Unauthorized, status as it was", ready, err, partial.Status.LatestImage)
	}
	pushed := resolve(x.f, fresh.Spec.Tag)
	for _, repo := range []string{"builders/fresh", "published/fresh"} {
		image, _ := name.NewDigest(x.f.Addr + "/" + repo + "@" + pushed)
		if _, err := x.f.Resolve(cosign.SignatureTag(image.Context(), image).String()); err != nil {
			t.Errorf("%s, published, is not signed while another tag is refused: %v", image, err)
		}
	}
}

// TestAdditionalTagsValidated: additional tags are tags, named once, not the
// builder's own, and at most MaxAdditionalTags.
func TestAdditionalTagsValidated(t *testing.T) {
	spec := func(tags ...string) *v1alpha1.BuilderSpec {
		return &v1alpha1.BuilderSpec{Tag: "registry.example/builders/go:latest", Stack: v1alpha1.StackRef{Name: "jammy"},
			Store: v1alpha1.StoreRef{Name: "default"}, Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go"}}}},
			AdditionalTags: tags}
	}
	many := make([]string, v1alpha1.MaxAdditionalTags+1)
	for i := range many {
		many[i] = "registry.example/builders/go:" + strings.Repeat("v", i+1)
	}
	for _, tc := range []struct {
		name string
		spec *v1alpha1.BuilderSpec
		want string // in the error; "" for none
	}{
		{"tags in other repositories and registries", spec("registry.example/builders/go:1", "other.example/go:latest"), ""},
		{"a digest", spec("registry.example/builders/go@sha256:" + strings.Repeat("a", 64)), "additionalTags[0]"},
		{"not a reference", spec("Not A Tag"), "additionalTags[0]"},
		{"the builder's own tag", spec("registry.example/builders/go"), "same tag as spec.tag"},
		{"the builder's own tag, its host in capitals", spec("Registry.Example/builders/go:latest"), "same tag as spec.tag"},
		{"another tag differing in case only", spec("registry.example/builders/go:Latest"), ""},
		{"twice", spec("other.example/go:1", "other.example/go:1"), "additionalTags[1]"},
		{"too many", spec(many...), "additionalTags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &v1alpha1.ClusterBuilder{ObjectMeta: metav1.ObjectMeta{Name: "go"}, Spec: v1alpha1.ClusterBuilderSpec{BuilderSpec: *tc.spec}}
			err := b.Validate(t.Context())
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// TestSignatureTagsCountCopies: a key that sends its signatures to a
// repository of its own signs every copy of the image into one tag, a
// layer per copy; keys signing beside each image do not add up across
// repositories.
func TestSignatureTagsCountCopies(t *testing.T) {
	tag, _ := name.NewTag("registry.example/builders/go:latest")
	elsewhere, _ := name.NewRepository("registry.example/signatures")
	var others []string
	for i := range 3 {
		others = append(others, fmt.Sprintf("registry.example/copy-%d/go:latest", i))
	}
	images := copiesOf(plannedImages(tag, 1), otherRepositories(tag.Context(), others)) // 4 repositories
	key := func(id string, repository *name.Repository) signingKey {
		return signingKey{key: &cosign.Key{ID: id}, repository: repository, maxSignatureLayers: 6}
	}
	for _, tc := range []struct {
		name string
		keys []signingKey
		ok   bool
	}{
		{"two keys beside each image: 2 layers a tag", []signingKey{key("a", nil), key("b", nil)}, true},
		{"one key elsewhere: 4 copies, 4 layers", []signingKey{key("a", &elsewhere)}, true},
		{"two keys elsewhere: 8 layers in one tag, over 6", []signingKey{key("a", &elsewhere), key("b", &elsewhere)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSignatureTags(images, tc.keys)
			if f, _ := failure.As(err); tc.ok != (err == nil) || !tc.ok && f.Reason != ReasonTooManySignatures {
				t.Errorf("checkSignatureTags = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
