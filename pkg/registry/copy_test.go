package registry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestCopy: an index is copied under its own digest, its blobs mounted
// within a registry and uploaded across registries; a copy already in place
// costs one HEAD.
func TestCopy(t *testing.T) {
	src := registrytest.New(t)
	amd64, _ := random.Image(1024, 2)
	arm64, _ := random.Image(1024, 2)
	index := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: withPlatform(t, amd64, "amd64", ""), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: withPlatform(t, arm64, "arm64", ""), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	if err := remote.WriteIndex(src.Ref("stacks/run:1"), index); err != nil {
		t.Fatal(err)
	}
	digest, _ := index.Digest()
	from := src.Ref("stacks/run:1").Context().Digest(digest.String())
	c := newTestClient(t, Options{})
	ctx := context.Background()

	copied := func(f *registrytest.Registry, to name.Tag) {
		t.Helper()
		got, err := f.Resolve(to.String())
		if err != nil {
			t.Fatal(err)
		}
		if want := to.Context().Digest(digest.String()).String(); got != want {
			t.Errorf("%s points at %s, want %s", to, got, want)
		}
	}

	// The index's blobs: 2 layers and a config for each platform.
	blobs := map[string]bool{}
	for _, img := range []v1.Image{amd64, arm64} {
		m, _ := withPlatform(t, img, "x", "").Manifest()
		for _, l := range m.Layers {
			blobs[l.Digest.String()] = true
		}
	}
	for _, img := range []v1.Image{withPlatform(t, amd64, "amd64", ""), withPlatform(t, arm64, "arm64", "")} {
		cfg, _ := img.ConfigName()
		blobs[cfg.String()] = true
	}
	uploaded := func(f *registrytest.Registry) int {
		n := 0
		for _, r := range f.Requests() {
			if method, path, _ := strings.Cut(r, " "); method == http.MethodPut && strings.Contains(path, "/blobs/uploads/") {
				if _, d, ok := strings.Cut(path, "digest="); ok && blobs[strings.Replace(d, "%3A", ":", 1)] {
					n++
				}
			}
		}
		return n
	}

	// Within a registry: every blob mounted, none uploaded; each manifest
	// read once.
	to, _ := name.NewTag(src.Addr + "/builders/go:run-1")
	src.ForgetRequests()
	if wrote, err := c.As(nil).Copy(ctx, from, to, CopyBounds{}); err != nil || !wrote {
		t.Fatalf("Copy = %v, %v; want a copy written", wrote, err)
	}
	copied(src, to)
	if up, mounts, reads := uploaded(src), src.Count(http.MethodPost, "mount="), src.Count(http.MethodGet, "/stacks/run/manifests/"); up != 0 || mounts != 6 || reads != 3 {
		t.Errorf("copy within a registry: %d blobs uploaded, %d mounted, %d manifests read; want 0, 6 and 3: %q", up, mounts, reads, src.Requests())
	}
	src.ForgetRequests()
	if wrote, err := c.As(nil).Copy(ctx, from, to, CopyBounds{}); err != nil || wrote {
		t.Fatalf("Copy again = %v, %v; want nothing written", wrote, err)
	}
	if got := src.Requests(); len(got) != 1 || src.Count(http.MethodHead, "/manifests/run-1") != 1 {
		t.Errorf("copying again sent %q, want one HEAD", got)
	}

	// To another registry: every blob uploaded, read from the source.
	dst := registrytest.New(t)
	across, _ := name.NewTag(dst.Addr + "/builders/go:run-1")
	if _, err := c.As(nil).Copy(ctx, from, across, CopyBounds{}); err != nil {
		t.Fatal(err)
	}
	copied(dst, across)
	if up := uploaded(dst); up != len(blobs) {
		t.Errorf("copy across registries: %d blobs uploaded, want %d", up, len(blobs))
	}
}

// TestCopyBounded: an index of more manifests than a copy takes, one nested
// too deep, and an image of too many layers are refused (permanent,
// ImageTooLarge) before anything is written.
func TestCopyBounded(t *testing.T) {
	src := registrytest.New(t)
	small, _ := random.Image(16, 1)
	indexOf := func(n int, child func(i int) mutate.IndexAddendum) v1.ImageIndex {
		var adds []mutate.IndexAddendum
		for i := range n {
			adds = append(adds, child(i))
		}
		return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	}
	platformImage := func(i int) mutate.IndexAddendum {
		return mutate.IndexAddendum{Add: withPlatform(t, small, fmt.Sprintf("arch%d", i), ""),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: fmt.Sprintf("arch%d", i)}}}
	}
	wide := indexOf(maxCopyManifests+1, platformImage)
	deep := indexOf(1, func(int) mutate.IndexAddendum {
		return mutate.IndexAddendum{Add: indexOf(1, func(int) mutate.IndexAddendum {
			return mutate.IndexAddendum{Add: indexOf(1, platformImage)}
		})}
	})
	thick, _ := random.Image(1, maxCopyLayers+1)
	thickChild := indexOf(1, func(int) mutate.IndexAddendum { return mutate.IndexAddendum{Add: thick} })
	layered, _ := random.Image(1, maxCopyLayers)
	layers := indexOf(maxCopyAllLayers/maxCopyLayers+1, func(i int) mutate.IndexAddendum {
		return mutate.IndexAddendum{Add: withPlatform(t, layered, fmt.Sprintf("arch%d", i), "")}
	})
	heavy := indexOf(3, func(i int) mutate.IndexAddendum { // manifests of 3 MiB each
		annotated := mutate.Annotations(withPlatform(t, small, fmt.Sprintf("arch%d", i), ""),
			map[string]string{"note": strings.Repeat("x", 3<<20)}).(v1.Image)
		return mutate.IndexAddendum{Add: annotated}
	})
	c := newTestClient(t, Options{})
	for _, tc := range []struct {
		name     string
		artifact remote.Taggable
		message  string
	}{
		{"an index of too many manifests", wide, "names 129 manifests, more than the 128 a copy takes"},
		{"indexes nested too deep", deep, "nests indexes 3 deep, more than the 2 a copy takes"},
		{"an image of too many layers", thick, "has an image of 257 layers, more than the 256 a copy takes"},
		{"an index of an image of too many layers", thickChild, "has an image of 257 layers, more than the 256 a copy takes"},
		{"images of too many layers together", layers, "has images of 1280 layers together, more than the 1024 a copy takes"},
		{"manifests of too many bytes together", heavy, "bytes together, more than the 8388608 a copy takes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := src.Ref("stacks/run:" + strings.ReplaceAll(tc.name, " ", "-"))
			var err error
			switch a := tc.artifact.(type) {
			case v1.ImageIndex:
				err = remote.WriteIndex(ref, a)
			case v1.Image:
				err = remote.Write(ref, a)
			}
			if err != nil {
				t.Fatal(err)
			}
			digest, _ := partial.Digest(tc.artifact)
			to, _ := name.NewTag(src.Addr + "/builders/go:copy")
			src.ForgetRequests()
			_, err = c.As(nil).Copy(context.Background(), ref.Context().Digest(digest.String()), to, CopyBounds{})
			f, ok := failure.As(err)
			if !ok || f.Class != failure.Permanent || f.Reason != ReasonImageTooLarge || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("Copy = %v (%+v), want permanent %s: %q", err, f, ReasonImageTooLarge, tc.message)
			}
			if n := src.Count(http.MethodPut, "/builders/go/") + src.Count(http.MethodPost, "/builders/go/"); n != 0 {
				t.Errorf("%d writes before the refusal: %q", n, src.Requests())
			}
			if tc.artifact == wide {
				if n := src.Count(http.MethodGet, "/stacks/run/manifests/"); n != 1 {
					t.Errorf("%d manifests read, want the index alone (refused before its manifests are read): %q", n, src.Requests())
				}
			}
		})
	}
}
