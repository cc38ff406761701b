package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
)

// fingerprintOf digests every input of the builder image, and nothing
// else: a buildpack counts by its layer and its metadata, not by the
// buildpackage it came from (re-pushing a buildpackage with the same layer
// changes no builder).
func fingerprintOf(stack *v1alpha1.ClusterStack, builds []platformBuild, resolved, extensions *cnb.ResolvedOrder,
	spec *v1alpha1.BuilderSpec, version string) string {
	platforms := make([]string, len(builds)) // each built, with its lifecycle image
	for i, b := range builds {
		platforms[i] = b.platform.String() + "=" + b.lifecycle.Digest
	}
	var extensionModules []v1alpha1.StoreBuildpack
	var orderExtensions []v1alpha1.OrderEntry
	if extensions != nil {
		extensionModules, orderExtensions = fingerprinted(extensions.Buildpacks), extensions.Order
	}
	runImage, mirrors := runImageOf(stack, spec)
	raw, _ := json.Marshal(struct {
		BuildImage, RunImage, Tag, Version string
		RunImageMirrors                    []string
		Platforms                          []string
		Buildpacks                         []v1alpha1.StoreBuildpack
		Order                              []v1alpha1.OrderEntry
		Labels                             map[string]string
		Env                                []v1alpha1.BuildEnv
		// Omitted when empty: the fingerprints of builders from before
		// system buildpacks, extensions, descriptions, flattening and
		// additional run images stay the same.
		System          *v1alpha1.SystemBuildpacks `json:",omitempty"`
		Extensions      []v1alpha1.StoreBuildpack  `json:",omitempty"`
		OrderExtensions []v1alpha1.OrderEntry      `json:",omitempty"`
		Description     string                     `json:",omitempty"`
		Flatten         *v1alpha1.Flatten          `json:",omitempty"`
		MoreRunImages   []cnb.RunImage             `json:",omitempty"`
	}{stack.Status.BuildImage.LatestImage, runImage, spec.Tag, version, mirrors,
		platforms, fingerprinted(resolved.Buildpacks), resolved.Order, spec.AdditionalLabels, spec.Env, resolved.System,
		extensionModules, orderExtensions, spec.Description, spec.Flatten, additionalRunImagesOf(stack, spec)})
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fingerprinted is what of each buildpack (or extension) is an input of
// the builder image.
func fingerprinted(modules []v1alpha1.StoreBuildpack) []v1alpha1.StoreBuildpack {
	out := make([]v1alpha1.StoreBuildpack, len(modules))
	for i, bp := range modules {
		// The layer's digests identify a single-platform buildpack; the
		// store image does not (another buildpackage may hold the same
		// layer). For an index, the layer is the first platform's only:
		// the index's digest stands for the other platforms' layers.
		if len(bp.Platforms) <= 1 {
			bp.StoreImage = v1alpha1.ImageSource{}
		}
		// Which platforms the store has it for counts only through the
		// platforms built (below): a platform the builder does not build
		// changes nothing.
		bp.Platforms = nil
		// Licenses go into the SBOM, not the image: the attestations are
		// made anew when they change (status.attestedDocuments).
		bp.Licenses = nil
		out[i] = bp
	}
	return out
}
