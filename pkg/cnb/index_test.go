package cnb

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// platformImage is a small image whose config says it is of p.
func platformImage(t *testing.T, p Platform, mediaType types.MediaType) PlatformImage {
	t.Helper()
	layerType := types.OCILayer
	if mediaType == types.DockerManifestSchema2 {
		layerType = types.DockerLayer
	}
	l, err := tarLayer([]tarEntry{{path: "cnb/lifecycle/lifecycle", mode: 0o755, content: []byte("ELF " + p.String())}}, layerType)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, mediaType), l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Arch, p.Variant
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return PlatformImage{Platform: p, Image: img}
}

// platformImages are made anew on each call: equal inputs, not the same
// objects.
func platformImages(t *testing.T) []PlatformImage {
	return []PlatformImage{
		platformImage(t, Platform{OS: "linux", Arch: "arm64"}, types.OCIManifestSchema1),
		platformImage(t, Platform{OS: "linux", Arch: "amd64"}, types.OCIManifestSchema1),
		platformImage(t, Platform{OS: "linux", Arch: "arm", Variant: "v7"}, types.DockerManifestSchema2),
	}
}

func TestAssembleIndex(t *testing.T) {
	images := platformImages(t)
	idx, err := AssembleIndex(images)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", mt, types.OCIImageIndex)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Platform  v1.Platform
		MediaType types.MediaType
		Digest    v1.Hash
	}
	digest := func(img v1.Image) v1.Hash {
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	want := []entry{
		{v1.Platform{OS: "linux", Architecture: "amd64"}, types.OCIManifestSchema1, digest(images[1].Image)},
		{v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, types.DockerManifestSchema2, digest(images[2].Image)},
		{v1.Platform{OS: "linux", Architecture: "arm64"}, types.OCIManifestSchema1, digest(images[0].Image)},
	}
	var got []entry
	for _, d := range m.Manifests {
		got = append(got, entry{*d.Platform, d.MediaType, d.Digest})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("manifests (-want +got):\n%s", diff)
	}
	// The children are reachable through the index, as remote.WriteIndex
	// needs them.
	for _, e := range want {
		if _, err := idx.Image(e.Digest); err != nil {
			t.Errorf("image %s: %v", e.Digest, err)
		}
	}
}

func TestAssembleIndexIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	digests := map[v1.Hash]int{}
	for i := range 20 {
		images := platformImages(t)
		if i > 0 {
			rng.Shuffle(len(images), func(a, b int) { images[a], images[b] = images[b], images[a] })
		}
		idx, err := AssembleIndex(images)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[d]++
	}
	if len(digests) != 1 {
		t.Errorf("20 builds gave %d digests: %v", len(digests), digests)
	}
}

func TestAssembleIndexRefuses(t *testing.T) {
	amd64 := Platform{OS: "linux", Arch: "amd64"}
	arm64 := Platform{OS: "linux", Arch: "arm64"}
	for _, tt := range []struct {
		name   string
		images []PlatformImage
		reason string // "" for an unclassified error
	}{{
		name: "no images",
	}, {
		name:   "a platform twice",
		images: []PlatformImage{platformImage(t, amd64, types.OCIManifestSchema1), platformImage(t, amd64, types.OCIManifestSchema1)},
		reason: ReasonPlatformMismatch,
	}, {
		name: "a platform twice, once with its baseline variant",
		images: []PlatformImage{platformImage(t, arm64, types.OCIManifestSchema1),
			platformImage(t, Platform{OS: "linux", Arch: "arm64", Variant: "v8"}, types.OCIManifestSchema1)},
		reason: ReasonPlatformMismatch,
	}, {
		name:   "an image of another platform than it claims",
		images: []PlatformImage{{Platform: arm64, Image: platformImage(t, amd64, types.OCIManifestSchema1).Image}},
		reason: ReasonPlatformMismatch,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AssembleIndex(tt.images)
			if err == nil {
				t.Fatal("no error")
			}
			e, ok := failure.As(err)
			if tt.reason == "" {
				if ok {
					t.Errorf("err = %v, classified %s", err, e.Reason)
				}
				return
			}
			if !ok || e.Reason != tt.reason || e.Class != failure.Permanent {
				t.Errorf("err = %v, want a permanent %s", err, tt.reason)
			}
		})
	}
}
