package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// sbomReferrer is a referrer of subject holding an SBOM.
func sbomReferrer(t *testing.T, subject v1.Image, sbom string) v1.Image {
	t.Helper()
	desc, err := partial.Descriptor(subject)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReferrer(*desc, "application/spdx+json", map[string]string{"org.opencontainers.image.title": "sbom"},
		ReferrerLayer{MediaType: "application/spdx+json", Data: []byte(sbom)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWriteReferrer: a referrer is found by ggcr's remote.Referrers (what
// ORAS and cosign do: the API, else the fallback tag) on a registry with
// the referrers API and on one without; without, it is added to the
// fallback index beside what is there, once however often it is written,
// in as few requests as that takes.
func TestWriteReferrers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		registry func(testing.TB) *registrytest.Registry
		listed   string
		// requests is what a second referrer costs: its blob (POST and
		// PUT: the empty config is held), its manifest, and without the
		// API the fallback index (GET, PUT). The first pays the
		// registry's probes once (the referrers API, the manifest check).
		requests int
	}{
		{"with the referrers API", registrytest.NewWithReferrers, ListedByAPI, 3},
		{"without", registrytest.New, ListedByTag, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.registry(t)
			subject := f.Push("team/builder:1")
			subjectDigest, _ := subject.Digest()
			ref := f.Ref("team/builder@" + subjectDigest.String()).(name.Digest)
			c := newTestClient(t, Options{})

			var written []string
			for _, sbom := range []string{`{"spdxVersion":"SPDX-2.3"}`, `{"spdxVersion":"SPDX-2.3","name":"other"}`} {
				f.ForgetRequests()
				got, listed, err := c.As(nil).WriteReferrers(context.Background(), ref, sbomReferrer(t, subject, sbom))
				if err != nil || listed != tc.listed || len(got) != 1 {
					t.Fatalf("WriteReferrers = %v, %q, %v; want one listed %q", got, listed, err, tc.listed)
				}
				written = append(written, got[0].DigestStr())
				t.Logf("%s: %d requests: %v", tc.name, len(f.Requests()), f.Requests())
			}
			if n := len(f.Requests()); n != tc.requests {
				t.Errorf("a second referrer cost %d requests, want %d", n, tc.requests)
			}
			f.ForgetRequests()
			if _, _, err := c.As(nil).WriteReferrers(context.Background(), ref, sbomReferrer(t, subject, `{"spdxVersion":"SPDX-2.3"}`)); err != nil {
				t.Fatal(err)
			}
			if n := f.Count(http.MethodPut, "/manifests/sha256-"); n != 0 {
				t.Errorf("the same referrer again rewrote the fallback tag %d times", n)
			}

			index, err := remote.Referrers(ref)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := index.IndexManifest()
			var found []string
			for _, d := range m.Manifests {
				// ggcr's registry lists a referrer under its config's media
				// type, not its artifactType (which the manifest has).
				artifactType := d.ArtifactType == "application/spdx+json" || tc.listed == ListedByAPI && d.ArtifactType == string(types.OCIEmptyJSON)
				if !artifactType || d.Annotations["org.opencontainers.image.title"] != "sbom" {
					t.Errorf("referrer listed as %+v", d)
				}
				found = append(found, d.Digest.String())
				desc, err := remote.Get(ref.Context().Digest(d.Digest.String()))
				if err != nil {
					t.Fatal(err)
				}
				var manifest v1.Manifest
				if err := json.Unmarshal(desc.Manifest, &manifest); err != nil || manifest.ArtifactType != "application/spdx+json" ||
					manifest.Subject == nil || manifest.Subject.Digest != subjectDigest || manifest.Config.MediaType != types.OCIEmptyJSON {
					t.Errorf("referrer %s: %s", d.Digest, desc.Manifest)
				}
			}
			if strings.Join(found, ",") != strings.Join(written, ",") && strings.Join(found, ",") != written[1]+","+written[0] {
				t.Errorf("referrers %v, want %v", found, written)
			}
		})
	}
}

// TestReferrersTagWithoutMediaType: an index that leaves its mediaType out
// (image-spec before 1.1), served as an OCI index, is added to.
func TestReferrersTagWithoutMediaType(t *testing.T) {
	f := registrytest.New(t)
	subject := f.Push("team/builder:1")
	subjectDigest, _ := subject.Digest()
	tag := "sha256-" + subjectDigest.Hex
	listed, err := partial.Descriptor(f.Push("team/builder:listed"))
	if err != nil {
		t.Fatal(err)
	}
	other := fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":%q,"size":%d,"digest":%q}]}`, listed.MediaType, listed.Size, listed.Digest)
	f.Inject(http.MethodGet, "/manifests/"+tag, 1, registrytest.Answer(200, map[string]string{"Content-Type": string(types.OCIImageIndex)}, other))
	ref := f.Ref("team/builder@" + subjectDigest.String()).(name.Digest)
	if _, _, err := newTestClient(t, Options{}).As(nil).WriteReferrers(context.Background(), ref, sbomReferrer(t, subject, "{}")); err != nil {
		t.Fatal(err)
	}
	index, err := remote.Index(f.Ref("team/builder:" + tag))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := index.IndexManifest()
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != 2 {
		t.Errorf("the fallback index: %+v", m)
	}
}

// TestReferrersTagBounded: a fallback tag holding no index, or an index of
// too many referrers, is not rewritten: the write waits (the registry's
// tag must change), saying why.
func TestReferrersTagBounded(t *testing.T) {
	many := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for i := range maxReferrers {
		many.Manifests = append(many.Manifests, v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: 1,
			Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", i)}})
	}
	full, _ := json.Marshal(many)
	for _, tc := range []struct {
		name, body, contentType, says string
	}{
		{"not an index", `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`, string(types.OCIManifestSchema1), "holds no OCI image index"},
		{"too many referrers", string(full), string(types.OCIImageIndex), "lists 1024 referrers"},
		{"too large", `{"schemaVersion":2,"manifests":[],"annotations":{"x":"` + strings.Repeat("x", maxReferrersIndexSize) + `"}}`,
			string(types.OCIImageIndex), "is larger than the 1.0 MiB a referrers index may be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := registrytest.New(t)
			subject := f.Push("team/builder:1")
			subjectDigest, _ := subject.Digest()
			f.Inject(http.MethodGet, "/manifests/sha256-", -1, registrytest.Answer(200, map[string]string{"Content-Type": tc.contentType}, tc.body))
			_, _, err := newTestClient(t, Options{}).As(nil).WriteReferrers(context.Background(),
				f.Ref("team/builder@"+subjectDigest.String()).(name.Digest), sbomReferrer(t, subject, "{}"))
			e, ok := failure.As(err)
			if !ok || e.Class != failure.Waiting || e.Reason != ReasonInvalidReferrersTag || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v, want a Waiting %s saying %q", err, ReasonInvalidReferrersTag, tc.says)
			}
			if n := f.Count(http.MethodPut, "/manifests/sha256-"); n != 0 {
				t.Errorf("the tag was rewritten %d times", n)
			}
		})
	}
}
