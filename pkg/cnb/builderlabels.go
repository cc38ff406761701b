package cnb

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Labels a builder image carries (the shapes pack and kpack write).
const (
	LabelBuilderMetadata = "io.buildpacks.builder.metadata"
	LabelBuildpackOrder  = "io.buildpacks.buildpack.order"
	LabelBuildpackSystem = "io.buildpacks.buildpack.system"
	// LabelOrderExtensions is the builder's [[order-extensions]], as JSON.
	LabelOrderExtensions = "io.buildpacks.buildpack.order-extensions"
	LabelLifecycleVer    = "io.buildpacks.lifecycle.version"
	LabelLifecycleAPIs   = "io.buildpacks.lifecycle.apis"
	reservedLabelPrefix  = "io.buildpacks."
)

// Labels.

type builderMetadata struct {
	Description string             `json:"description"`
	Buildpacks  []buildpackInfo    `json:"buildpacks"`
	Extensions  []buildpackInfo    `json:"extensions,omitempty"`
	Stack       stackMetadata      `json:"stack"`
	Images      []runImageMetadata `json:"images"`
	Lifecycle   lifecycleMetadata  `json:"lifecycle"`
	CreatedBy   map[string]string  `json:"createdBy"`
}

type buildpackInfo struct {
	ID       string `json:"id"`
	Version  string `json:"version"`
	Homepage string `json:"homepage,omitempty"`
}

type stackMetadata struct {
	RunImage runImageMetadata `json:"runImage"`
}

type runImageMetadata struct {
	Image   string   `json:"image"`
	Mirrors []string `json:"mirrors,omitempty"`
}

type lifecycleMetadata struct {
	Version string            `json:"version"`
	API     map[string]string `json:"api"`
	APIs    lifecycleAPIs     `json:"apis"`
}

// lifecycleAPIs is the shape of io.buildpacks.lifecycle.apis: both lists
// always present, [] when empty.
type lifecycleAPIs struct {
	Buildpack apiVersions `json:"buildpack"`
	Platform  apiVersions `json:"platform"`
}

type apiVersions struct {
	Deprecated []string `json:"deprecated"`
	Supported  []string `json:"supported"`
}

func labelAPIs(apis v1alpha1.LifecycleAPIs) lifecycleAPIs {
	list := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	return lifecycleAPIs{
		Buildpack: apiVersions{Deprecated: list(apis.Buildpack.Deprecated), Supported: list(apis.Buildpack.Supported)},
		Platform:  apiVersions{Deprecated: list(apis.Platform.Deprecated), Supported: list(apis.Platform.Supported)},
	}
}

func builderLabels(spec BuilderSpec) (map[string]string, error) {
	labels := map[string]string{}
	for k, v := range spec.AdditionalLabels {
		if strings.HasPrefix(k, reservedLabelPrefix) {
			return nil, failure.Permanentf("InvalidSpec", "additional label %q would override a buildpacks label", k)
		}
		labels[k] = v
	}
	runImage := runImageMetadata{Image: spec.RunImage, Mirrors: spec.RunImageMirrors}
	images := []runImageMetadata{runImage}
	for _, more := range spec.AdditionalRunImages {
		images = append(images, runImageMetadata(more))
	}
	meta := builderMetadata{
		Description: spec.Description,
		Buildpacks:  []buildpackInfo{},
		Stack:       stackMetadata{RunImage: runImage},
		Images:      images,
		Lifecycle: lifecycleMetadata{
			Version: spec.Lifecycle.Version,
			API: map[string]string{
				"buildpack": lowest(spec.Lifecycle.APIs.Buildpack),
				"platform":  lowest(spec.Lifecycle.APIs.Platform),
			},
			APIs: labelAPIs(spec.Lifecycle.APIs),
		},
		CreatedBy: map[string]string{"name": "buildsmith", "version": spec.CreatedBy},
	}
	layersOf := func(modules []BuildpackLayer, info *[]buildpackInfo) map[string]map[string]layerInfo {
		layers := map[string]map[string]layerInfo{}
		for _, bl := range sortedBuildpackLayers(modules) {
			bp := bl.Buildpack
			*info = append(*info, buildpackInfo{ID: bp.ID, Version: bp.Version, Homepage: bp.Homepage})
			if layers[bp.ID] == nil {
				layers[bp.ID] = map[string]layerInfo{}
			}
			layers[bp.ID][bp.Version] = layerInfo{API: bp.API, Stacks: bp.Stacks, Targets: bp.Targets,
				Order: bp.Order, LayerDiffID: bp.DiffID, Homepage: bp.Homepage}
		}
		return layers
	}
	buildpackLayers := layersOf(spec.Buildpacks, &meta.Buildpacks)
	extensionLayers := layersOf(spec.Extensions, &meta.Extensions)
	values := map[string]any{
		LabelBuilderMetadata: meta,
		LabelBuildpackOrder:  labelOrder(spec.Order),
		LabelBuildpackLayers: buildpackLayers,
		LabelLifecycleAPIs:   labelAPIs(spec.Lifecycle.APIs),
	}
	if len(spec.Extensions) > 0 {
		values[LabelExtensionLayers] = extensionLayers
		values[LabelOrderExtensions] = labelOrder(spec.OrderExtensions)
	}
	if system := systemOf(spec.System); system != nil {
		values[LabelBuildpackSystem] = system
	}
	for key, value := range values {
		raw, err := json.Marshal(value) // maps marshal with sorted keys
		if err != nil {
			return nil, fmt.Errorf("label %s: %w", key, err)
		}
		labels[key] = string(raw)
	}
	labels[LabelLifecycleVer] = spec.Lifecycle.Version
	return labels, nil
}

// lowest returns the lowest API version listed (what the single-version
// "api" fields of older tools mean).
func lowest(v v1alpha1.APIVersions) string {
	all := append(slices.Clone(v.Deprecated), v.Supported...)
	best := ""
	for _, a := range all {
		if best == "" || apiLess(a, best) {
			best = a
		}
	}
	return best
}

// apiLess compares "major.minor" API versions numerically.
func apiLess(a, b string) bool {
	var am, an, bm, bn int
	_, _ = fmt.Sscanf(a, "%d.%d", &am, &an)
	_, _ = fmt.Sscanf(b, "%d.%d", &bm, &bn)
	if am != bm {
		return am < bm
	}
	return an < bn
}

// labelOrder is an order as pack writes it into a label: order.toml's
// groups, exec-env under its TOML name, not the API's execEnv.
func labelOrder(order []v1alpha1.OrderEntry) []groupTOML {
	if order == nil {
		return nil
	}
	return tomlOrder(order)
}
