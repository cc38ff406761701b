package builder

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/cosigntest"
)

// TestBuilderAttested: with --builder-attestations=all, a builder with a
// signing key carries its SBOM and provenance as cosign v3 bundles
// referring to its image, each a statement about it signed by the key; one
// without keys its SBOM alone; a resync attaches nothing again.
func TestBuilderAttested(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	run := x.f.PushImage("stack/run:1", nil)
	runDigest, _ := run.Digest()
	x.stack.Status.RunImage.LatestImage = x.f.Addr + "/stack/run@" + runDigest.String()
	private, _ := cosigntest.KeyPair(t, "pass")
	key, err := cosign.ParseKey(context.Background(), "k", private, []byte("pass"), cosign.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := x.config()
	cfg.Attestations = AttestAll
	signer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}, Secrets: []corev1.ObjectReference{{Name: "key"}}}
	ready := rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}}

	signed := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })
	got, events, err, _, _ := x.runWith(t, cfg, signed, lifecycle, signer, cosigntest.Secret("apps", "key", private, "pass"))
	rt.Check(t, got, err, events, ready)
	image, _ := name.NewDigest(got.Status.LatestImage)
	atts := got.Status.Attestations
	if len(atts) != 2 || atts[0].PredicateType != attest.SPDXPredicateType || atts[1].PredicateType != attest.ProvenancePredicateType {
		t.Fatalf("status.attestations %+v, want the SBOM and the provenance", atts)
	}
	for _, a := range atts {
		if a.Image != got.Status.LatestImage || a.ListedBy != registry.ListedByTag || a.SigningSecret != "apps/key" || a.KeyID != key.ID {
			t.Errorf("attestation %+v", a)
		}
		statement := bundledStatement(t, a.Referrer)
		if statement.PredicateType != a.PredicateType || len(statement.Subject) != 1 || statement.Subject[0].Digest["sha256"] != image.DigestStr()[7:] {
			t.Errorf("statement of %s: %+v", a.Referrer, statement)
		}
	}
	index, err := remote.Referrers(image)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := index.IndexManifest()
	if len(m.Manifests) != 2 || !slices.ContainsFunc(m.Manifests, func(d v1.Descriptor) bool { return d.ArtifactType == cosign.BundleMediaType }) {
		t.Errorf("referrers %+v", m.Manifests)
	}

	// A resync: the same image, the attestations recorded: none again.
	x.f.ForgetRequests()
	again, events, err, _, _ := x.runWith(t, cfg, got, lifecycle, signer, cosigntest.Secret("apps", "key", private, "pass"))
	rt.Check(t, again, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
	if n := x.f.Count("", "/manifests/sha256"); n != 0 {
		t.Errorf("a resync wrote or read %d referrer manifests: %v", n, x.f.Requests())
	}
	if !slices.Equal(again.Status.Attestations, atts) {
		t.Errorf("attestations after a resync %+v, want %+v", again.Status.Attestations, atts)
	}

	// The run image moved under its tag: the builder image is the same
	// (it names the tag), but its SBOM and provenance name the new digest,
	// so they are attached anew, without a push.
	moved := x.f.PushImage("stack/run:1", map[string]string{"moved": "yes"})
	movedDigest, _ := moved.Digest()
	x.stack.Status.RunImage.LatestImage = x.f.Addr + "/stack/run@" + movedDigest.String()
	x.f.ForgetRequests()
	anew, events, err, _, _ := x.runWith(t, cfg, again, lifecycle, signer, cosigntest.Secret("apps", "key", private, "pass"))
	rt.Check(t, anew, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
	if anew.Status.LatestImage != got.Status.LatestImage || x.f.Count("PUT", "/manifests/latest") != 0 {
		t.Errorf("the builder was pushed again (%s): %v", anew.Status.LatestImage, x.f.Requests())
	}
	if anew.Status.AttestedDocuments == got.Status.AttestedDocuments || len(anew.Status.Attestations) != 2 ||
		anew.Status.Attestations[0].Referrer == atts[0].Referrer || anew.Status.Attestations[1].Referrer == atts[1].Referrer {
		t.Errorf("after the run image moved: attestations %+v (documents %s), want new ones of new documents (were %s)",
			anew.Status.Attestations, anew.Status.AttestedDocuments, got.Status.AttestedDocuments)
	}

	// Licenses found in the store's packages' labels (after an upgrade,
	// say): the image is the same, not pushed again, but its SBOM is not:
	// attested anew.
	for i := range x.store.Status.Buildpacks {
		x.store.Status.Buildpacks[i].Licenses = []v1alpha1.BuildpackLicense{{Type: "Apache-2.0"}, {Type: "MIT OR ISC", URI: "https://example.com/l"}}
	}
	x.f.ForgetRequests()
	licensed, events, err, _, _ := x.runWith(t, cfg, anew, lifecycle, signer, cosigntest.Secret("apps", "key", private, "pass"))
	rt.Check(t, licensed, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute})
	if licensed.Status.Fingerprint != anew.Status.Fingerprint || x.f.Count("PUT", "/manifests/latest") != 0 {
		t.Errorf("licenses changed the builder: fingerprint %s (was %s), requests %v", licensed.Status.Fingerprint, anew.Status.Fingerprint, x.f.Requests())
	}
	if licensed.Status.AttestedDocuments == anew.Status.AttestedDocuments {
		t.Errorf("licenses did not change the attested documents (%s)", licensed.Status.AttestedDocuments)
	}

	// No keys: the SBOM alone, unsigned. It declares the licenses the
	// store found.
	unsigned := x.builder(func(b *v1alpha1.Builder) { b.Name, b.Spec.Tag = "plain", x.f.Addr+"/builders/plain:latest" })
	plain, events, err, _, _ := x.runWith(t, cfg, unsigned, lifecycle)
	rt.Check(t, plain, err, events, ready)
	a := plain.Status.Attestations
	if len(a) != 1 || a[0].PredicateType != attest.SPDXPredicateType || a[0].SigningSecret != "" {
		t.Fatalf("status.attestations of a builder without keys: %+v", a)
	}
	if sbom := referrerLayer(t, a[0].Referrer); !bytes.Contains(sbom, []byte(`"name":"example/go","versionInfo":"1.1.0"`)) ||
		!bytes.Contains(sbom, []byte(`"licenseDeclared":"Apache-2.0 AND (MIT OR ISC)"`)) {
		t.Errorf("the SBOM does not declare example/go's licenses: %s", sbom)
	}
}

// referrerLayer is the content of the one layer of referrer.
func referrerLayer(t *testing.T, referrer string) []byte {
	t.Helper()
	ref, err := name.NewDigest(referrer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%s: %d layers", referrer, len(layers))
	}
	rc, _ := layers[0].Compressed()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type inTotoStatement struct {
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
}

// bundledStatement is the statement in the bundle of referrer.
func bundledStatement(t *testing.T, referrer string) inTotoStatement {
	t.Helper()
	var b struct {
		DSSEEnvelope struct {
			Payload string `json:"payload"`
		} `json:"dsseEnvelope"`
	}
	if err := json.Unmarshal(referrerLayer(t, referrer), &b); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(b.DSSEEnvelope.Payload)
	var s inTotoStatement
	if err := json.Unmarshal(payload, &s); err != nil {
		t.Fatal(err)
	}
	return s
}
