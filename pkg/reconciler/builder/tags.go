package builder

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// additionalTagsOf parses spec.additionalTags.
func additionalTagsOf(spec *v1alpha1.BuilderSpec) ([]name.Tag, error) {
	var out []name.Tag
	for _, t := range spec.AdditionalTags {
		tag, err := name.NewTag(t)
		if err != nil {
			return nil, failure.Permanentf(reconciler.ReasonInvalidSpec, "spec.additionalTags: %v", err)
		}
		out = append(out, tag)
	}
	return out, nil
}

// published is what publish did: the tags pointing at the image, and the
// other repositories written to (their recorded signatures and
// attestations are not to be trusted: the repository may be new).
type published struct {
	tags    []string
	written map[string]bool // by repositoryKey
}

// rewritten reports whether image (repository@digest) is in a repository
// publish wrote to.
func (p published) rewritten(image string) bool {
	d, err := name.NewDigest(image)
	return err == nil && p.written[repositoryKey(d.Context())]
}

// publish points each additional tag at latest (repository@digest) with
// Copy: one HEAD for a tag already there; else the manifests read and
// written again, blobs mounted within a registry and streamed to another.
// A tag that fails does not stop the others: the error of the first is
// returned with what the others did, so that the images published are
// signed, and status changes only once every tag is there.
func publish(ctx context.Context, reg registry.Access, tags []name.Tag, latest string, bounds registry.CopyBounds) (published, error) {
	out := published{written: map[string]bool{}}
	if len(tags) == 0 {
		return out, nil
	}
	image, err := name.NewDigest(latest)
	if err != nil {
		return out, fmt.Errorf("status.latestImage %q: %w", latest, err)
	}
	var first error
	for _, tag := range tags {
		copied, err := reg.Copy(ctx, image, tag, bounds)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if copied && repositoryKey(tag.Context()) != repositoryKey(image.Context()) {
			out.written[repositoryKey(tag.Context())] = true
		}
		out.tags = append(out.tags, tag.String())
	}
	return out, first
}

// repositoryKey names a repository as registries do: host names are
// case-insensitive (ggcr keeps their case), repository names lower case.
func repositoryKey(repo name.Repository) string {
	return strings.ToLower(repo.Name())
}

// otherRepositories are the repositories of tags other than image's, each
// once, in the tags' order: where copies of the image are signed and
// attested again.
func otherRepositories(image name.Repository, tags []string) []name.Repository {
	seen := map[string]bool{repositoryKey(image): true}
	var out []name.Repository
	for _, t := range tags {
		tag, err := name.NewTag(t)
		if err != nil || seen[repositoryKey(tag.Context())] {
			continue
		}
		seen[repositoryKey(tag.Context())] = true
		out = append(out, tag.Context())
	}
	return out
}

// copiesOf are images, then the same digests in each of repositories.
func copiesOf(images []name.Digest, repositories []name.Repository) []name.Digest {
	out := slices.Clone(images)
	for _, repo := range repositories {
		for _, image := range images {
			out = append(out, repo.Digest(image.DigestStr()))
		}
	}
	return out
}

// copyBounds bound a copy of the builder: its platforms' images, each
// within the builder layer limit (a run image's copy is bounded tighter).
func (r *Core) copyBounds(builds int) registry.CopyBounds {
	layers := r.MaxLayers
	if layers <= 0 {
		layers = cnb.DefaultMaxLayers
	}
	return registry.CopyBounds{ImageLayers: layers, AllLayers: layers * max(builds, 1)}
}
