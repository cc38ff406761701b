package cnb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// LabelBuildpackLayers lists the buildpacks of a buildpackage (or builder)
// and the layer each lives in; LabelExtensionLayers the image extensions of
// an extension package (or builder), in the same shape.
const (
	LabelBuildpackLayers = "io.buildpacks.buildpack.layers"
	LabelExtensionLayers = "io.buildpacks.extension.layers"
)

// maxLabelSize bounds a label we parse; real ones are a few KiB.
const maxLabelSize = 1 << 20

// Reasons of store errors.
const (
	ReasonInvalidBuildpackage = "InvalidBuildpackage"
	ReasonDuplicateBuildpack  = "DuplicateBuildpack"
	ReasonTooManyBuildpacks   = "TooManyBuildpacks"
)

// layerInfo is one id@version entry of io.buildpacks.buildpack.layers, as
// pack writes it; read from buildpackages, written into builders.
type layerInfo struct {
	API         string                     `json:"api"`
	Stacks      []v1alpha1.BuildpackStack  `json:"stacks,omitempty"`
	Targets     []v1alpha1.BuildpackTarget `json:"targets,omitempty"`
	Order       []v1alpha1.OrderEntry      `json:"order,omitempty"`
	LayerDiffID string                     `json:"layerDiffID"`
	Homepage    string                     `json:"homepage,omitempty"`
	Name        string                     `json:"name,omitempty"`
}

// Buildpackage lists the buildpacks of a buildpackage image, given its
// config and manifest; storeImage is the image as repository@digest.
// Buildpacks are sorted by id, then version.
func Buildpackage(storeImage string, config *v1.ConfigFile, manifest *v1.Manifest) ([]v1alpha1.StoreBuildpack, error) {
	if _, ok := config.Config.Labels[LabelBuildpackLayers]; !ok {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s has no %s label: not a buildpackage", storeImage, LabelBuildpackLayers)
	}
	return modules(storeImage, config, manifest, LabelBuildpackLayers)
}

// Package is what a store source holds: a buildpackage's buildpacks, an
// extension package's image extensions (pack writes either kind of
// package; an image with both labels has both).
type Package struct {
	Buildpacks, Extensions []v1alpha1.StoreBuildpack
}

// ReadPackage lists the buildpacks and image extensions of a buildpackage
// or extension package, as Buildpackage lists buildpacks.
func ReadPackage(storeImage string, config *v1.ConfigFile, manifest *v1.Manifest) (Package, error) {
	_, buildpacks := config.Config.Labels[LabelBuildpackLayers]
	_, extensions := config.Config.Labels[LabelExtensionLayers]
	if !buildpacks && !extensions {
		return Package{}, failure.Permanentf(ReasonInvalidBuildpackage, "%s has neither a %s nor a %s label: not a buildpackage or extension package",
			storeImage, LabelBuildpackLayers, LabelExtensionLayers)
	}
	var p Package
	var err error
	if buildpacks {
		if p.Buildpacks, err = modules(storeImage, config, manifest, LabelBuildpackLayers); err != nil {
			return Package{}, err
		}
	}
	if extensions {
		if p.Extensions, err = modules(storeImage, config, manifest, LabelExtensionLayers); err != nil {
			return Package{}, err
		}
	}
	addLicenses(config, &p)
	return p, nil
}

// modules lists the modules (buildpacks or extensions) that label says the
// image holds.
func modules(storeImage string, config *v1.ConfigFile, manifest *v1.Manifest, label string) ([]v1alpha1.StoreBuildpack, error) {
	raw := config.Config.Labels[label]
	if len(raw) > maxLabelSize {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s is larger than %d bytes", storeImage, label, maxLabelSize)
	}
	var layers map[string]map[string]layerInfo
	if err := decodeStrict(raw, &layers); err != nil {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s: %v", storeImage, label, err)
	}
	kind := "buildpack"
	if label == LabelExtensionLayers {
		kind = "extension"
	}
	if len(config.RootFS.DiffIDs) != len(manifest.Layers) {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: %d diffIDs for %d layers", storeImage, len(config.RootFS.DiffIDs), len(manifest.Layers))
	}
	layerOf := make(map[string]v1.Descriptor, len(manifest.Layers))
	for i, diffID := range config.RootFS.DiffIDs {
		layerOf[diffID.String()] = manifest.Layers[i]
	}

	var out []v1alpha1.StoreBuildpack
	for id, versions := range layers {
		for version, info := range versions {
			if id == "" || version == "" {
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s has an entry without id or version", storeImage, label)
			}
			layer, ok := layerOf[info.LayerDiffID]
			if !ok {
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: %s %s@%s names layer %q, which the image does not have",
					storeImage, kind, id, version, info.LayerDiffID)
			}
			if info.API == "" && len(info.Order) == 0 {
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: %s %s@%s has no api", storeImage, kind, id, version)
			}
			order, err := packageOrder(info.Order)
			if err != nil {
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: %s %s@%s: order: %v", storeImage, kind, id, version, err)
			}
			out = append(out, v1alpha1.StoreBuildpack{
				ID: id, Version: version, Homepage: info.Homepage, API: info.API,
				DiffID: info.LayerDiffID, Digest: layer.Digest.String(), Size: layer.Size,
				StoreImage: v1alpha1.ImageSource{Image: storeImage},
				Order:      order, Stacks: info.Stacks, Targets: info.Targets,
			})
		}
	}
	SortBuildpacks(out)
	return out, nil
}

// packageOrder is a meta-buildpack's order as a label gives it, checked as
// status takes it: every group with buildpacks, every buildpack with an
// id. Only id, version and optional are kept: what else the label says
// (an execEnv, which pack writes as exec-env) is not the store's to record,
// and unchecked it could make every status write refused.
func packageOrder(order []v1alpha1.OrderEntry) ([]v1alpha1.OrderEntry, error) {
	if order == nil {
		return nil, nil
	}
	out := make([]v1alpha1.OrderEntry, len(order))
	for i, entry := range order {
		if len(entry.Group) == 0 {
			return nil, fmt.Errorf("group %d is empty", i)
		}
		out[i].Group = make([]v1alpha1.BuildpackRef, len(entry.Group))
		for j, ref := range entry.Group {
			if ref.ID == "" {
				return nil, fmt.Errorf("group %d, entry %d has no id", i, j)
			}
			out[i].Group[j] = v1alpha1.BuildpackRef{ID: ref.ID, Version: ref.Version, Optional: ref.Optional}
		}
	}
	return out, nil
}

// PlatformBuildpacks are the buildpacks of a buildpackage index's image for
// one platform.
type PlatformBuildpacks struct {
	Platform   Platform
	Buildpacks []v1alpha1.StoreBuildpack
}

// IndexBuildpacks lists the buildpacks of a buildpackage index, given its
// images': each id@version once, described by the first platform's layer
// (a builder looks up each platform's own, see BuildpackDiffID), with every
// platform that has it and every target their buildpack.toml files name.
func IndexBuildpacks(images []PlatformBuildpacks) []v1alpha1.StoreBuildpack {
	var out []v1alpha1.StoreBuildpack
	position := map[string]int{} // id@version → index in out
	for _, img := range images {
		for _, bp := range img.Buildpacks {
			key := bp.ID + "@" + bp.Version
			i, seen := position[key]
			if !seen {
				i, position[key] = len(out), len(out)
				bp.Platforms, bp.Targets = nil, slices.Clone(bp.Targets)
				out = append(out, bp)
			} else {
				for _, target := range bp.Targets {
					if !slices.ContainsFunc(out[i].Targets, func(t v1alpha1.BuildpackTarget) bool { return reflect.DeepEqual(t, target) }) {
						out[i].Targets = append(out[i].Targets, target)
					}
				}
			}
			out[i].Platforms = append(out[i].Platforms, APIPlatforms([]Platform{img.Platform})...)
		}
	}
	return out
}

// BuildpackDiffID returns the diffID of the layer that holds id@version in a
// buildpackage image (its config and manifest; storeImage names it in
// messages), or false when the image holds no such buildpack. With
// extension, the same for an image extension of an extension package.
func BuildpackDiffID(storeImage string, config *v1.ConfigFile, manifest *v1.Manifest, id, version string, extension bool) (v1.Hash, bool, error) {
	label := LabelBuildpackLayers
	if extension {
		label = LabelExtensionLayers
	}
	if _, ok := config.Config.Labels[label]; !ok {
		return v1.Hash{}, false, failure.Permanentf(ReasonInvalidBuildpackage, "%s has no %s label", storeImage, label)
	}
	buildpacks, err := modules(storeImage, config, manifest, label)
	if err != nil {
		return v1.Hash{}, false, err
	}
	for _, bp := range buildpacks {
		if bp.ID == id && bp.Version == version {
			// Buildpackage found the diffID among the config's.
			diffID, err := v1.NewHash(bp.DiffID)
			return diffID, err == nil, err
		}
	}
	return v1.Hash{}, false, nil
}

// MergeBuildpacks merges the buildpacks of several buildpackages, in source
// order. The same id@version in two sources is kept once when it is the
// same layer, and is an error when it is not: a builder could not tell which
// one is meant.
func MergeBuildpacks(sources ...[]v1alpha1.StoreBuildpack) ([]v1alpha1.StoreBuildpack, error) {
	return merge("buildpack", sources)
}

// MergeExtensions merges the image extensions of several extension
// packages, as MergeBuildpacks merges buildpacks.
func MergeExtensions(sources ...[]v1alpha1.StoreBuildpack) ([]v1alpha1.StoreBuildpack, error) {
	return merge("extension", sources)
}

func merge(kind string, sources [][]v1alpha1.StoreBuildpack) ([]v1alpha1.StoreBuildpack, error) {
	seen := map[string]int{} // id@version → index in out
	var out []v1alpha1.StoreBuildpack
	for _, buildpacks := range sources {
		for _, bp := range buildpacks {
			key := bp.ID + "@" + bp.Version
			if i, ok := seen[key]; ok {
				if prev := &out[i]; prev.DiffID != bp.DiffID {
					return nil, failure.Permanentf(ReasonDuplicateBuildpack,
						"%s %s is in %s and in %s with different contents", kind, key, prev.StoreImage.Image, bp.StoreImage.Image)
				} else if len(prev.Licenses) == 0 {
					// The same layer: one source's labels may name its
					// licenses where another's do not (a builder's do).
					prev.Licenses = bp.Licenses
				}
				continue
			}
			seen[key] = len(out)
			out = append(out, bp)
		}
	}
	if len(out) > MaxStoreBuildpacks {
		return nil, failure.Permanentf(ReasonTooManyBuildpacks,
			"the sources hold %d %ss, more than the %d one status lists: split them over several stores or Buildpacks, which a builder draws from together (spec.sources)", len(out), kind, MaxStoreBuildpacks)
	}
	// Entries carry what the buildpackages' labels say (stacks, mixins,
	// targets, orders), which a label of up to maxLabelSize can make large.
	if b, err := json.Marshal(out); err == nil && len(b) > MaxStoreStatusBytes {
		return nil, failure.Permanentf(ReasonTooManyBuildpacks,
			"the sources' %d %ss take %d KiB in status, more than the %d KiB one status lists: split them over several stores or Buildpacks, which a builder draws from together (spec.sources)",
			len(out), kind, len(b)>>10, MaxStoreStatusBytes>>10)
	}
	SortBuildpacks(out)
	return out, nil
}

// CheckStoreSize checks that a store's buildpacks and extensions together
// stay within what one status can hold (each list alone was checked as it
// was merged).
func CheckStoreSize(buildpacks, extensions []v1alpha1.StoreBuildpack) error {
	if len(extensions) == 0 {
		return nil
	}
	if n := len(buildpacks) + len(extensions); n > MaxStoreBuildpacks {
		return failure.Permanentf(ReasonTooManyBuildpacks,
			"the sources hold %d buildpacks and extensions, more than the %d one status lists: split them over several stores or Buildpacks, which a builder draws from together (spec.sources)", n, MaxStoreBuildpacks)
	}
	b, _ := json.Marshal(buildpacks)
	e, _ := json.Marshal(extensions)
	if size := len(b) + len(e); size > MaxStoreStatusBytes {
		return failure.Permanentf(ReasonTooManyBuildpacks,
			"the sources' buildpacks and extensions take %d KiB in status, more than the %d KiB one status lists: split them over several stores or Buildpacks, which a builder draws from together (spec.sources)",
			size>>10, MaxStoreStatusBytes>>10)
	}
	return nil
}

// MaxStoreBuildpacks bounds a store's status.buildpacks. An entry is about
// 1 KiB with its platforms and targets, and the API server refuses objects
// over about 1.5 MiB: a store listing more would fail to save its status
// forever, so it is a clear error instead.
const MaxStoreBuildpacks = 1000

// MaxStoreStatusBytes bounds the encoded size of a store's buildpacks, for
// the same reason, whatever their number.
const MaxStoreStatusBytes = 1 << 20

// SortBuildpacks sorts by id, then version (as strings: a stable order for
// status, not a semver order).
func SortBuildpacks(bps []v1alpha1.StoreBuildpack) {
	sort.Slice(bps, func(i, j int) bool {
		if bps[i].ID != bps[j].ID {
			return bps[i].ID < bps[j].ID
		}
		return bps[i].Version < bps[j].Version
	})
}

// decodeStrict decodes one JSON value and nothing after it. Unknown fields
// are allowed: newer tools add some, and ignoring them is what pack does.
func decodeStrict(raw string, v any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON of the expected shape: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON value")
	}
	return nil
}
