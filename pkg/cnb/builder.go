package cnb

import (
	"maps"
	"slices"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Lifecycle is the CNB lifecycle put in a builder.
type Lifecycle struct {
	// Layer holds /cnb/lifecycle/ and /cnb/lifecycle.toml: the last layer of
	// the lifecycle image, reused as is.
	Layer   v1.Layer
	Version string
	APIs    v1alpha1.LifecycleAPIs
}

// RunImage is a run image and its mirrors.
type RunImage struct {
	Image   string
	Mirrors []string
}

// BuildpackLayer is a buildpack and the layer (from its store image) that
// holds it.
type BuildpackLayer struct {
	Buildpack v1alpha1.StoreBuildpack
	Layer     v1.Layer
}

// BuilderSpec is everything a builder image is made of.
type BuilderSpec struct {
	// BuildImage is the stack's build image, the base.
	BuildImage v1.Image
	Stack      *Stack
	// RunImage and RunImageMirrors name where built apps run.
	RunImage        string
	RunImageMirrors []string
	// AdditionalRunImages are more run images, listed after RunImage in
	// /cnb/run.toml and the metadata label for a platform to choose.
	AdditionalRunImages []RunImage
	Lifecycle           Lifecycle
	// Buildpacks are all buildpacks of the resolved order, children of
	// meta-buildpacks included.
	Buildpacks []BuildpackLayer
	Order      []v1alpha1.OrderEntry // resolved: every entry has a version
	// Extensions are the image extensions of OrderExtensions (resolved),
	// laid out in their layers under /cnb/extensions/<id>/<version>/.
	Extensions      []BuildpackLayer
	OrderExtensions []v1alpha1.OrderEntry
	// System are the system buildpacks (resolved), or nil: /cnb/system.toml.
	System           *v1alpha1.SystemBuildpacks
	AdditionalLabels map[string]string
	// Env are build-time variables for buildpacks, written to
	// /cnb/build-config/env/ (see ValidateEnv).
	Env []EnvVar
	// CreatedBy is the version of buildsmith, for the builder metadata.
	CreatedBy string
	// Description is the builder's description, in the builder metadata
	// label where pack writes builder.toml's description.
	Description string
	// MaxLayers is the most layers the builder image may have, its build
	// image's included; 0 means DefaultMaxLayers.
	MaxLayers int
}

// DefaultMaxLayers is the most layers a builder image may have by default.
// Container runtimes stack an image's layers in one overlay mount, and
// refuse images much deeper than this (Docker's overlay2 stops at 128
// lower directories, "max depth exceeded"); Paketo's largest builder is at
// 121.
const DefaultMaxLayers = 127

// ReasonTooManyLayers: the builder image would have more layers than allowed.
const ReasonTooManyLayers = "TooManyLayers"

// AssembleBuilder builds the builder image: the build image, then a layer
// of directories, the lifecycle layer, the buildpack layers (each layer once,
// however many buildpacks it holds) and a layer of configuration files, with
// the labels platforms read. Buildpack and lifecycle layers are used as they
// are (lazy remote layers stay lazy). The same spec gives the same digest.
func AssembleBuilder(spec BuilderSpec) (v1.Image, error) {
	mediaType := LayerMediaType(spec.BuildImage)
	dirs, err := directoriesLayer(spec.Stack.UserID, spec.Stack.GroupID, mediaType)
	if err != nil {
		return nil, err
	}
	files, err := configFilesLayer(spec, mediaType)
	if err != nil {
		return nil, err
	}

	layers := []v1.Layer{dirs, spec.Lifecycle.Layer}
	seen := map[string]bool{}
	for _, bp := range slices.Concat(sortedBuildpackLayers(spec.Buildpacks), sortedBuildpackLayers(spec.Extensions)) {
		if seen[bp.Buildpack.DiffID] {
			continue // a flattened buildpackage holds several buildpacks in one layer
		}
		seen[bp.Buildpack.DiffID] = true
		layers = append(layers, bp.Layer)
	}
	layers = append(layers, files)
	if err := checkLayerCount(spec, len(layers)); err != nil {
		return nil, err
	}

	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "buildsmith"}}
	}
	img, err := mutate.Append(spec.BuildImage, adds...)
	if err != nil {
		return nil, err
	}
	config, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	labels, err := builderLabels(spec)
	if err != nil {
		return nil, err
	}
	cfg := config.Config.DeepCopy()
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	maps.Copy(cfg.Labels, labels)
	cfg.WorkingDir = "/layers"
	return mutate.Config(img, *cfg)
}

func sortedBuildpackLayers(bps []BuildpackLayer) []BuildpackLayer {
	out := slices.Clone(bps)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Buildpack, out[j].Buildpack
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Version < b.Version
	})
	return out
}

// checkLayerCount refuses a builder of more layers than spec allows, before
// anything is pushed: a registry takes such an image, and every build on it
// fails later, on a node.
func checkLayerCount(spec BuilderSpec, own int) error {
	base, err := spec.BuildImage.Layers()
	if err != nil {
		return err
	}
	limit := spec.MaxLayers
	if limit <= 0 {
		limit = DefaultMaxLayers
	}
	if total := len(base) + own; total > limit {
		return failure.Permanentf(ReasonTooManyLayers,
			"the builder image would have %d layers, more than %d (--max-builder-layers): %d of the build image, %d of buildpacks, extensions and the lifecycle, 2 of its own; "+
				"fewer buildpacks, or buildpackages that hold several buildpacks in one layer, make fewer",
			total, limit, len(base), own-2)
	}
	return nil
}
