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
// and the layer each lives in.
const LabelBuildpackLayers = "io.buildpacks.buildpack.layers"

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
	raw, ok := config.Config.Labels[LabelBuildpackLayers]
	if !ok {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s has no %s label: not a buildpackage", storeImage, LabelBuildpackLayers)
	}
	if len(raw) > maxLabelSize {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s is larger than %d bytes", storeImage, LabelBuildpackLayers, maxLabelSize)
	}
	var layers map[string]map[string]layerInfo
	if err := decodeStrict(raw, &layers); err != nil {
		return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s: %v", storeImage, LabelBuildpackLayers, err)
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
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s has an entry without id or version", storeImage, LabelBuildpackLayers)
			}
			layer, ok := layerOf[info.LayerDiffID]
			if !ok {
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: buildpack %s@%s names layer %q, which the image does not have",
					storeImage, id, version, info.LayerDiffID)
			}
			if info.API == "" && len(info.Order) == 0 {
				return nil, failure.Permanentf(ReasonInvalidBuildpackage, "%s: buildpack %s@%s has no api", storeImage, id, version)
			}
			out = append(out, v1alpha1.StoreBuildpack{
				ID: id, Version: version, Homepage: info.Homepage, API: info.API,
				DiffID: info.LayerDiffID, Digest: layer.Digest.String(), Size: layer.Size,
				StoreImage: v1alpha1.ImageSource{Image: storeImage},
				Order:      info.Order, Stacks: info.Stacks, Targets: info.Targets,
			})
		}
	}
	SortBuildpacks(out)
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
// messages), or false when the image holds no such buildpack.
func BuildpackDiffID(storeImage string, config *v1.ConfigFile, manifest *v1.Manifest, id, version string) (v1.Hash, bool, error) {
	buildpacks, err := Buildpackage(storeImage, config, manifest)
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
	seen := map[string]v1alpha1.StoreBuildpack{}
	var out []v1alpha1.StoreBuildpack
	for _, buildpacks := range sources {
		for _, bp := range buildpacks {
			key := bp.ID + "@" + bp.Version
			if prev, ok := seen[key]; ok {
				if prev.DiffID != bp.DiffID {
					return nil, failure.Permanentf(ReasonDuplicateBuildpack,
						"buildpack %s is in %s and in %s with different contents", key, prev.StoreImage.Image, bp.StoreImage.Image)
				}
				continue
			}
			seen[key] = bp
			out = append(out, bp)
		}
	}
	if len(out) > MaxStoreBuildpacks {
		return nil, failure.Permanentf(ReasonTooManyBuildpacks,
			"the sources hold %d buildpacks, more than the %d a store lists: split them over several stores", len(out), MaxStoreBuildpacks)
	}
	// Entries carry what the buildpackages' labels say (stacks, mixins,
	// targets, orders), which a label of up to maxLabelSize can make large.
	if b, err := json.Marshal(out); err == nil && len(b) > MaxStoreStatusBytes {
		return nil, failure.Permanentf(ReasonTooManyBuildpacks,
			"the sources' %d buildpacks take %d KiB in status, more than the %d KiB a store lists: split them over several stores",
			len(out), len(b)>>10, MaxStoreStatusBytes>>10)
	}
	SortBuildpacks(out)
	return out, nil
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
