package cnb

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

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

// epoch is the modification time of every file buildsmith writes, the one
// reproducible builds use (the zip epoch, 1980-01-01T00:00:01Z), so that the
// same inputs give the same layer digests.
var epoch = time.Date(1980, time.January, 1, 0, 0, 1, 0, time.UTC)

// Lifecycle is the CNB lifecycle put in a builder.
type Lifecycle struct {
	// Layer holds /cnb/lifecycle/ and /cnb/lifecycle.toml: the last layer of
	// the lifecycle image, reused as is.
	Layer   v1.Layer
	Version string
	APIs    v1alpha1.LifecycleAPIs
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
	Lifecycle       Lifecycle
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
	mediaType := types.OCILayer
	if mt, err := spec.BuildImage.MediaType(); err == nil && mt == types.DockerManifestSchema2 {
		mediaType = types.DockerLayer
	}
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

// tarEntry is a file or directory of a layer buildsmith writes.
type tarEntry struct {
	path     string // without leading slash
	mode     int64
	uid, gid int
	content  []byte // nil for a directory
}

// directoriesLayer makes the directories the lifecycle expects: /workspace
// and /layers owned by the build user, the rest by root.
func directoriesLayer(uid, gid int, mediaType types.MediaType) (v1.Layer, error) {
	entries := []tarEntry{
		{path: "cnb", mode: 0o755},
		{path: "cnb/build-config", mode: 0o755},
		{path: "cnb/build-config/env", mode: 0o755},
		{path: "cnb/buildpacks", mode: 0o755},
		{path: "cnb/extensions", mode: 0o755},
		{path: "layers", mode: 0o755, uid: uid, gid: gid},
		{path: "platform", mode: 0o755},
		{path: "platform/env", mode: 0o755},
		{path: "workspace", mode: 0o755, uid: uid, gid: gid},
	}
	return tarLayer(entries, mediaType)
}

// configFilesLayer holds /cnb/order.toml, /cnb/run.toml (read by platform
// API 0.12 and later), /cnb/stack.toml (read before 0.12): the builder
// cannot know which platform API the platform will use; and the build-time
// env files, if any.
func configFilesLayer(spec BuilderSpec, mediaType types.MediaType) (v1.Layer, error) {
	order, err := encodeTOML(orderTOML{Order: tomlOrder(spec.Order), OrderExtensions: tomlOrder(spec.OrderExtensions)})
	if err != nil {
		return nil, err
	}
	image := runImageTOML{Image: spec.RunImage, Mirrors: spec.RunImageMirrors}
	run, err := encodeTOML(runTOML{Images: []runImageTOML{image}})
	if err != nil {
		return nil, err
	}
	stack, err := encodeTOML(stackTOML{RunImage: image})
	if err != nil {
		return nil, err
	}
	env, err := envEntries(spec.Env)
	if err != nil {
		return nil, err
	}
	entries := append([]tarEntry{
		{path: "cnb", mode: 0o755},
		{path: "cnb/order.toml", mode: 0o644, content: order},
		{path: "cnb/run.toml", mode: 0o644, content: run},
		{path: "cnb/stack.toml", mode: 0o644, content: stack},
	}, env...)
	if system := systemOf(spec.System); system != nil {
		raw, err := encodeTOML(systemTOML{System: *system})
		if err != nil {
			return nil, err
		}
		entries = append(entries, tarEntry{path: "cnb/system.toml", mode: 0o644, content: raw})
	}
	return tarLayer(entries, mediaType)
}

// tarLayer writes entries, sorted by path, with fixed times and owners.
func tarLayer(entries []tarEntry, mediaType types.MediaType) (v1.Layer, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch,
			AccessTime: epoch, ChangeTime: epoch, Format: tar.FormatPAX,
		}
		if e.content == nil {
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(mediaType))
}

// TOML files of the lifecycle.

type orderTOML struct {
	Order           []groupTOML `toml:"order"`
	OrderExtensions []groupTOML `toml:"order-extensions,omitempty"`
}

type groupTOML struct {
	Group []refTOML `toml:"group"`
}

type refTOML struct {
	ID       string `toml:"id"`
	Version  string `toml:"version"`
	Optional bool   `toml:"optional,omitempty"`
}

type runTOML struct {
	Images []runImageTOML `toml:"images"`
}

type stackTOML struct {
	RunImage runImageTOML `toml:"run-image"`
}

type runImageTOML struct {
	Image   string   `toml:"image"`
	Mirrors []string `toml:"mirrors,omitempty"`
}

// systemTOML is /cnb/system.toml; its JSON is the label pack writes.
type systemTOML struct {
	System systemLists `toml:"system"`
}

type systemLists struct {
	Pre  systemList `toml:"pre,omitempty" json:"pre,omitzero"`
	Post systemList `toml:"post,omitempty" json:"post,omitzero"`
}

type systemList struct {
	Buildpacks []moduleRef `toml:"buildpacks,omitempty" json:"buildpacks,omitempty"`
}

type moduleRef struct {
	ID      string `toml:"id" json:"id"`
	Version string `toml:"version" json:"version"`
}

// systemOf is what /cnb/system.toml and its label hold; nil when there are
// no system buildpacks (neither is written then).
func systemOf(s *v1alpha1.SystemBuildpacks) *systemLists {
	if s == nil || len(s.Pre)+len(s.Post) == 0 {
		return nil
	}
	list := func(refs []v1alpha1.SystemBuildpackRef) systemList {
		var out systemList
		for _, ref := range refs {
			out.Buildpacks = append(out.Buildpacks, moduleRef(ref))
		}
		return out
	}
	return &systemLists{Pre: list(s.Pre), Post: list(s.Post)}
}

func tomlOrder(order []v1alpha1.OrderEntry) []groupTOML {
	out := make([]groupTOML, len(order))
	for i, entry := range order {
		for _, ref := range entry.Group {
			out[i].Group = append(out[i].Group, refTOML(ref))
		}
	}
	return out
}

func encodeTOML(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

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
	meta := builderMetadata{
		Description: spec.Description,
		Buildpacks:  []buildpackInfo{},
		Stack:       stackMetadata{RunImage: runImage},
		Images:      []runImageMetadata{runImage},
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
		LabelBuildpackOrder:  spec.Order,
		LabelBuildpackLayers: buildpackLayers,
		LabelLifecycleAPIs:   labelAPIs(spec.Lifecycle.APIs),
	}
	if len(spec.Extensions) > 0 {
		values[LabelExtensionLayers] = extensionLayers
		values[LabelOrderExtensions] = spec.OrderExtensions
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
