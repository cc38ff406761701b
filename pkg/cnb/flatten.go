package cnb

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

const (
	// ReasonFlattenNotInBuilder: spec.flatten names a buildpack the
	// builder does not have.
	ReasonFlattenNotInBuilder = "FlattenNotInBuilder"
	// ReasonFlattenTooLarge: a builder's flattened layers would be larger
	// than --max-flattened-bytes.
	ReasonFlattenTooLarge = "FlattenTooLarge"
	// ReasonScratchUnavailable: the controller could not write a
	// flattened layer to its scratch directory (full, or not writable).
	ReasonScratchUnavailable = "ScratchUnavailable"
	// ReasonInvalidBuildpackLayer: a buildpack's layer is not a tar
	// archive that can be flattened (its digest checked out: the
	// buildpackage must change).
	ReasonInvalidBuildpackLayer = "InvalidBuildpackLayer"
)

// Bounds of what a flattened layer's entries may hold, whatever the budget:
// a longer name could not be a path on Linux, and each directory is
// remembered (by a hash) until the layer is written.
const (
	maxEntryName     = 4096
	maxFlattenedDirs = 1 << 16
)

// FlattenOptions say where and how flattened layers are made.
type FlattenOptions struct {
	// Dir holds the flattened layers' files; they are read until the
	// builder is pushed, and the caller removes them then.
	Dir string
	// Budget bounds the flattened layers, uncompressed; one budget may be
	// shared by the calls for the platforms of one builder.
	Budget *FlattenBudget
	// MediaType is the media type of the builder's other layers.
	MediaType types.MediaType
	// Read calls read with the uncompressed contents of bp's layer. An
	// error it returns with a class keeps it; one without is the layer's
	// content's (InvalidBuildpackLayer).
	Read func(bp BuildpackLayer, read func(io.Reader) error) error
	// Made are the layers flattened already, by what they were made of:
	// the platforms of a builder share them where their buildpack layers
	// are the same. Nil: none kept.
	Made map[string]BuildpackLayer
	// Remembered, when set, knows layers flattened before: one it knows
	// is made only when its content is read, so that a push that finds it
	// in the repository (a rebuild after a stack patch) reads no
	// buildpack layer at all.
	Remembered FlattenMemory
}

// FlattenMemory remembers what flattened layers were, by what they were
// made of: the DiffIDs of their buildpack layers, each checked against the
// layer's content when it was made (a DiffID declared over other bytes
// fails the flatten, and nothing is remembered of it).
type FlattenMemory interface {
	Get(key string) (FlattenedLayer, bool)
	Add(key string, layer FlattenedLayer)
	// Forget drops what is remembered under key (it turned out wrong).
	Forget(key string)
}

// FlattenedLayer is what a flattened layer was: its digests and size.
type FlattenedLayer struct {
	DiffID, Digest string
	Size           int64
}

// FlattenBudget is how many bytes flattened layers may take, and have left.
type FlattenBudget struct{ Max, Left int64 }

// NewFlattenBudget is a budget of max bytes.
func NewFlattenBudget(max int64) *FlattenBudget { return &FlattenBudget{Max: max, Left: max} }

// Flatten returns bps with the layers that f puts together replaced, each
// group by one layer holding theirs in the order the builder would have
// them (by buildpack id and version), a directory once. Every buildpack of
// a group then names that layer (its DiffID, Digest and Size). A group of
// one layer keeps it as it is. The same layers give the same flattened
// layer, byte for byte: entries are copied as they are, and compressed by
// this binary's gzip at a fixed level with an empty header.
func Flatten(bps []BuildpackLayer, f *v1alpha1.Flatten, opts FlattenOptions) ([]BuildpackLayer, error) {
	if f == nil {
		return bps, nil
	}
	ordered := sortedBuildpackLayers(bps)
	modules := make([]v1alpha1.StoreBuildpack, len(ordered))
	for i, bp := range ordered {
		modules[i] = bp.Buildpack
	}
	flattened := map[string]BuildpackLayer{} // by the DiffID it replaces
	for _, group := range planFlatten(modules, f) {
		if len(group) < 2 {
			continue
		}
		units := make([]BuildpackLayer, len(group))
		key := string(opts.MediaType)
		for i, unit := range group {
			units[i] = ordered[unit]
			key += " " + units[i].Buildpack.DiffID
		}
		layer, made := opts.Made[key]
		if !made {
			var err error
			if layer, err = flattenedLayer(key, units, opts); err != nil {
				return nil, err
			}
			if opts.Made != nil {
				opts.Made[key] = layer
			}
		}
		for _, unit := range units {
			flattened[unit.Buildpack.DiffID] = layer
		}
	}
	out := make([]BuildpackLayer, len(bps))
	for i, bp := range bps {
		out[i] = bp
		if layer, ok := flattened[bp.Buildpack.DiffID]; ok {
			out[i].Layer = layer.Layer
			out[i].Buildpack.DiffID, out[i].Buildpack.Digest, out[i].Buildpack.Size =
				layer.Buildpack.DiffID, layer.Buildpack.Digest, layer.Buildpack.Size
		}
	}
	return out, nil
}

// flattenedLayer is the layer of units: made now, or, when opts remembers
// it, made only if its content is read.
func flattenedLayer(key string, units []BuildpackLayer, opts FlattenOptions) (BuildpackLayer, error) {
	if opts.Remembered != nil {
		if known, ok := opts.Remembered.Get(key); ok {
			return lazyFlattened(key, known, units, opts)
		}
	}
	layer, err := writeFlattened(units, opts)
	if err != nil {
		return BuildpackLayer{}, err
	}
	if opts.Remembered != nil {
		opts.Remembered.Add(key, FlattenedLayer{DiffID: layer.Buildpack.DiffID, Digest: layer.Buildpack.Digest, Size: layer.Buildpack.Size})
	}
	return layer, nil
}

// CheckFlatten checks that every buildpack f names is one of modules (the
// builder's, on any of its platforms).
func CheckFlatten(modules []v1alpha1.StoreBuildpack, f *v1alpha1.Flatten) error {
	if f == nil {
		return nil
	}
	index := indexModules(modules)
	var unknown []string
	for _, name := range flattenNames(f) {
		if len(index.named(name)) == 0 {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		names := moduleNames(modules)
		slices.Sort(names)
		return failure.Permanentf(ReasonFlattenNotInBuilder, "spec.flatten names %s, which the builder does not have (it has %s)",
			listOf(unknown, 10), listOf(names, 10))
	}
	return nil
}

func flattenNames(f *v1alpha1.Flatten) []string {
	var names []string
	for _, group := range f.Groups {
		names = append(names, group.Buildpacks...)
	}
	return append(names, f.Except...)
}

// planFlatten groups the layers of modules (sorted as the builder has
// them): each group lists, in that order, the index of one buildpack of
// each of its layers. A layer is the buildpacks of one DiffID (a
// buildpackage may hold several in one), and goes where the first of
// them is named: the first group naming one, else all (unless one of
// them is excepted), else its own layer. A name none of modules answers
// to is skipped: CheckFlatten checked it against every platform's, and
// this platform lacks an optional buildpack.
func planFlatten(modules []v1alpha1.StoreBuildpack, f *v1alpha1.Flatten) [][]int {
	layerOf := make([]int, len(modules)) // module → its layer's first module
	first := map[string]int{}
	for i, bp := range modules {
		if at, ok := first[bp.DiffID]; ok {
			layerOf[i] = at
		} else {
			first[bp.DiffID], layerOf[i] = i, i
		}
	}
	index := indexModules(modules)
	all := len(f.Groups)
	groupOf := map[int]int{} // layer → group
	for g, group := range f.Groups {
		for _, name := range group.Buildpacks {
			for _, i := range index.named(name) {
				if _, taken := groupOf[layerOf[i]]; !taken {
					groupOf[layerOf[i]] = g
				}
			}
		}
	}
	excepted := map[int]bool{}
	for _, name := range f.Except {
		for _, i := range index.named(name) {
			excepted[layerOf[i]] = true
		}
	}
	if f.All {
		for i := range modules {
			if _, grouped := groupOf[layerOf[i]]; !grouped && !excepted[layerOf[i]] {
				groupOf[layerOf[i]] = all
			}
		}
	}
	groups := make([][]int, all+1)
	for i := range modules {
		if g, ok := groupOf[i]; ok && layerOf[i] == i {
			groups[g] = append(groups[g], i)
		}
	}
	return groups
}

// moduleIndex finds modules by id.
type moduleIndex struct {
	modules []v1alpha1.StoreBuildpack
	byID    map[string][]int
}

func indexModules(modules []v1alpha1.StoreBuildpack) moduleIndex {
	x := moduleIndex{modules: modules, byID: map[string][]int{}}
	for i, bp := range modules {
		x.byID[bp.ID] = append(x.byID[bp.ID], i)
	}
	return x
}

// named are the modules name (id, or id@version) stands for, with the
// buildpacks of a meta-buildpack's order, and of theirs: each module once.
func (x moduleIndex) named(name string) []int {
	var found []int
	seen := map[int]bool{}
	var add func(id, version string)
	add = func(id, version string) {
		for _, i := range x.byID[id] {
			if (version != "" && x.modules[i].Version != version) || seen[i] {
				continue
			}
			seen[i] = true
			found = append(found, i)
			for _, entry := range x.modules[i].Order {
				for _, child := range entry.Group {
					add(child.ID, child.Version)
				}
			}
		}
	}
	id, version, _ := strings.Cut(name, "@")
	add(id, version)
	slices.Sort(found)
	return found
}

func moduleNames(modules []v1alpha1.StoreBuildpack) []string {
	names := make([]string, len(modules))
	for i, bp := range modules {
		names[i] = bp.ID + "@" + bp.Version
	}
	return names
}

// listOf joins names, the first max of them.
func listOf(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// writeFlattened writes the entries of units' layers, in turn, into one
// gzipped layer file in opts.Dir.
func writeFlattened(units []BuildpackLayer, opts FlattenOptions) (BuildpackLayer, error) {
	file, err := os.CreateTemp(opts.Dir, "flattened-*.tar.gz")
	if err != nil {
		return BuildpackLayer{}, ScratchError(err)
	}
	defer file.Close()
	zw, err := gzip.NewWriterLevel(scratchWriter{file}, gzip.BestSpeed)
	if err != nil {
		return BuildpackLayer{}, err
	}
	tw := tar.NewWriter(zw)
	copied := &entryCopier{out: tw, dirs: map[[sha256.Size]byte]bool{}, budget: opts.Budget}
	for _, unit := range units {
		copyLayer := func(r io.Reader) error { return copied.copyLayer(r, unit.Buildpack.DiffID) }
		if err := opts.Read(unit, copyLayer); err != nil {
			if _, classified := failure.As(err); classified {
				return BuildpackLayer{}, err
			}
			return BuildpackLayer{}, failure.Permanentf(ReasonInvalidBuildpackLayer, "buildpack %s@%s: its layer %s cannot be flattened: %v",
				unit.Buildpack.ID, unit.Buildpack.Version, unit.Buildpack.DiffID, err)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close(), file.Close()); err != nil {
		return BuildpackLayer{}, ScratchError(err)
	}
	layer, err := tarball.LayerFromFile(file.Name(), tarball.WithMediaType(opts.MediaType))
	if err != nil {
		return BuildpackLayer{}, ScratchError(err)
	}
	diffID, err := layer.DiffID()
	if err != nil {
		return BuildpackLayer{}, ScratchError(err)
	}
	digest, err := layer.Digest()
	if err != nil {
		return BuildpackLayer{}, ScratchError(err)
	}
	size, err := layer.Size()
	if err != nil {
		return BuildpackLayer{}, ScratchError(err)
	}
	return BuildpackLayer{
		Buildpack: v1alpha1.StoreBuildpack{DiffID: diffID.String(), Digest: digest.String(), Size: size},
		Layer:     layer,
	}, nil
}

// LayerMediaType is the media type of the layers buildsmith adds to an
// image based on base: Docker's for a Docker image, else OCI's.
func LayerMediaType(base v1.Image) types.MediaType {
	if mt, err := base.MediaType(); err == nil && mt == types.DockerManifestSchema2 {
		return types.DockerLayer
	}
	return types.OCILayer
}

// lazyFlattened is a flattened layer known by its digests, made when its
// content is first read. The same inputs give the same bytes, so what is
// made is what was known; were it not (another build of the controller),
// reading it fails rather than give bytes under another digest.
func lazyFlattened(key string, known FlattenedLayer, units []BuildpackLayer, opts FlattenOptions) (BuildpackLayer, error) {
	diffID, err := v1.NewHash(known.DiffID)
	if err != nil {
		return BuildpackLayer{}, err
	}
	digest, err := v1.NewHash(known.Digest)
	if err != nil {
		return BuildpackLayer{}, err
	}
	l := &lazyLayer{diffID: diffID, digest: digest, size: known.Size, mediaType: opts.MediaType}
	l.make = func() (v1.Layer, error) {
		made, err := writeFlattened(units, opts)
		if err != nil {
			return nil, err
		}
		if made.Buildpack.Digest != known.Digest {
			// Wrong, whatever made it so: the next push makes it anew.
			opts.Remembered.Forget(key)
			return nil, &failure.Error{Class: failure.Transient, Reason: ReasonScratchUnavailable,
				Err: fmt.Errorf("the flattened layer came out as %s, not the %s made before of the same layers", made.Buildpack.Digest, known.Digest)}
		}
		return made.Layer, nil
	}
	return BuildpackLayer{Buildpack: v1alpha1.StoreBuildpack{DiffID: known.DiffID, Digest: known.Digest, Size: known.Size}, Layer: l}, nil
}

// lazyLayer is a layer whose content is made on first read.
type lazyLayer struct {
	diffID, digest v1.Hash
	size           int64
	mediaType      types.MediaType
	make           func() (v1.Layer, error)

	once  sync.Once
	layer v1.Layer
	err   error
}

func (l *lazyLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *lazyLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *lazyLayer) Size() (int64, error)                { return l.size, nil }
func (l *lazyLayer) MediaType() (types.MediaType, error) { return l.mediaType, nil }

func (l *lazyLayer) made() (v1.Layer, error) {
	l.once.Do(func() { l.layer, l.err = l.make() })
	return l.layer, l.err
}

func (l *lazyLayer) Compressed() (io.ReadCloser, error) {
	layer, err := l.made()
	if err != nil {
		return nil, err
	}
	return layer.Compressed()
}

func (l *lazyLayer) Uncompressed() (io.ReadCloser, error) {
	layer, err := l.made()
	if err != nil {
		return nil, err
	}
	return layer.Uncompressed()
}
