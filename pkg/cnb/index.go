package cnb

import (
	"errors"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// PlatformImage is the builder image assembled for one platform.
type PlatformImage struct {
	Platform Platform
	Image    v1.Image
}

// AssembleIndex makes the OCI image index of a multi-platform builder: one
// manifest per platform, each descriptor naming its platform (os,
// architecture, variant) and keeping its image's media type. Manifests are
// sorted by platform, so that the same images give the same index digest
// whatever order they were built in.
//
// Each image's config must be of its platform (a wrong one would make
// clients pull the wrong binaries), and no platform may appear twice; both
// are Permanent errors.
func AssembleIndex(images []PlatformImage) (v1.ImageIndex, error) {
	if len(images) == 0 {
		return nil, errors.New("an image index needs at least one image")
	}
	sorted := slices.Clone(images)
	slices.SortFunc(sorted, func(a, b PlatformImage) int { return comparePlatforms(a.Platform, b.Platform) })

	adds := make([]mutate.IndexAddendum, len(sorted))
	seen := map[Platform]bool{}
	for i, pi := range sorted {
		// linux/arm64 and linux/arm64/v8 are one platform to a client.
		key := pi.Platform.Normalize()
		if seen[key] {
			return nil, failure.Permanentf(ReasonPlatformMismatch, "two images for platform %s", key)
		}
		seen[key] = true
		if err := checkImagePlatform(pi); err != nil {
			return nil, err
		}
		p := pi.Platform.V1()
		adds[i] = mutate.IndexAddendum{Add: pi.Image, Descriptor: v1.Descriptor{Platform: &p}}
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}

// checkImagePlatform compares the platform an index entry will claim with
// the one the image's config says.
func checkImagePlatform(pi PlatformImage) error {
	cf, err := pi.Image.ConfigFile()
	if err != nil {
		return err
	}
	own := Platform{OS: cf.OS, Arch: cf.Architecture, Variant: cf.Variant}
	if !pi.Platform.Matches(own) {
		return failure.Permanentf(ReasonPlatformMismatch, "image for platform %s has a config of %s", pi.Platform, own)
	}
	return nil
}
