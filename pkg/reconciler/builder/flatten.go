package builder

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/utils/lru"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// DefaultMaxFlattenedBytes bounds the flattened layers of one builder,
// uncompressed, by default: Paketo's largest builders hold a few hundred MB
// of buildpacks.
const DefaultMaxFlattenedBytes = 1 << 30

// Flattening is where and how big flattened layers are made.
type Flattening struct {
	// ScratchDir holds the flattened layers of the builders being pushed
	// ("": the system's temporary directory).
	ScratchDir string
	// MaxBytes bounds the flattened layers of one builder (all its
	// platforms), uncompressed (0: the default). With the number of
	// workers, it bounds the scratch space in use.
	MaxBytes int64
	// Memory remembers the layers flattened, so that a rebuild whose
	// repository holds its flattened layers reads no buildpack layer; nil:
	// every push flattens.
	Memory *FlattenMemory
	// MaxZstdWindow bounds the window a zstd buildpack layer may ask for
	// (0: cnb.DefaultMaxZstdWindow).
	MaxZstdWindow int64
	// Slots bound the pushes that flatten at once; nil: no bound.
	Slots *FlattenSlots
}

// DefaultRememberedFlattenedLayers is how many flattened layers a
// controller remembers by default (about 100 bytes each).
const DefaultRememberedFlattenedLayers = 4096

// FlattenMemory remembers flattened layers (their digests and size) by
// what they were made of, the least recently used forgotten first.
type FlattenMemory struct{ cache *lru.Cache }

// NewFlattenMemory remembers up to size flattened layers.
func NewFlattenMemory(size int) *FlattenMemory { return &FlattenMemory{cache: lru.New(size)} }

// Get implements cnb.FlattenMemory.
func (m *FlattenMemory) Get(key string) (cnb.FlattenedLayer, bool) {
	v, ok := m.cache.Get(sha256.Sum256([]byte(key)))
	if !ok {
		return cnb.FlattenedLayer{}, false
	}
	return v.(cnb.FlattenedLayer), true
}

// Add implements cnb.FlattenMemory. Keys are hashed: what a layer is made
// of names every buildpack layer in it.
func (m *FlattenMemory) Add(key string, layer cnb.FlattenedLayer) {
	m.cache.Add(sha256.Sum256([]byte(key)), layer)
}

// Forget implements cnb.FlattenMemory.
func (m *FlattenMemory) Forget(key string) { m.cache.Remove(sha256.Sum256([]byte(key))) }

// scratchDir is a directory of one push's flattened layers, what they may
// take, and those made so far (its platforms share them); path is "" when
// the builder flattens nothing.
type scratchDir struct {
	path    string
	budget  *cnb.FlattenBudget
	made    map[string]cnb.BuildpackLayer
	release func() // its slot
}

// scratch makes the directory for a push of a builder of spec, in
// namespace, once it has a slot, and returns the context to push in (it
// ends when the slot was held too long).
func (f Flattening) scratch(ctx context.Context, namespace string, spec *v1alpha1.BuilderSpec) (context.Context, scratchDir, error) {
	if spec.Flatten == nil {
		return ctx, scratchDir{}, nil
	}
	ctx, release, err := f.Slots.acquire(ctx, namespace)
	if err != nil {
		return nil, scratchDir{}, err
	}
	dir, err := os.MkdirTemp(f.ScratchDir, "flatten-")
	if err != nil {
		release()
		return nil, scratchDir{}, &failure.Error{Class: failure.Transient, Reason: cnb.ReasonScratchUnavailable,
			Err: fmt.Errorf("making a scratch directory for flattened layers (--scratch-dir): %w", err)}
	}
	limit := f.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxFlattenedBytes
	}
	return ctx, scratchDir{path: dir, budget: cnb.NewFlattenBudget(limit), made: map[string]cnb.BuildpackLayer{}, release: release}, nil
}

// RemoveStale removes the scratch directories of pushes a crash cut short
// (a restarted container keeps its emptyDir): before any push of this
// process begins.
func (f Flattening) RemoveStale() error {
	dirs, err := filepath.Glob(filepath.Join(cmp.Or(f.ScratchDir, os.TempDir()), "flatten-*"))
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the directory, once the push no longer reads its layers,
// and gives its slot back.
func (s scratchDir) remove() {
	if s.path != "" {
		_ = os.RemoveAll(s.path)
		s.release()
	}
}

// flattenOptions are cnb.FlattenOptions that read each layer from the
// buildpackage it came from: downloaded whole into the scratch directory
// first (reg's circuits, classification and digest check, at the
// network's pace), then read from there, so that neither a slow disk
// stalls the registry's answer nor a layer's content is taken for the
// registry's fault.
func (f Flattening) options(ctx context.Context, reg registry.Access, dir scratchDir, mediaType types.MediaType) cnb.FlattenOptions {
	opts := cnb.FlattenOptions{
		Dir:       dir.path,
		Budget:    dir.budget,
		MediaType: mediaType,
		Made:      dir.made,
		Read: func(bp cnb.BuildpackLayer, read func(io.Reader) error) error {
			digest, err := bp.Layer.Digest()
			if err != nil {
				return err
			}
			size, err := bp.Layer.Size()
			if err != nil {
				return err
			}
			if size > dir.budget.Left {
				return failure.Permanentf(cnb.ReasonFlattenTooLarge, "buildpack %s@%s: its layer of %d bytes would take the flattened layers past %d bytes (--max-flattened-bytes): "+
					"flatten fewer buildpacks", bp.Buildpack.ID, bp.Buildpack.Version, size, dir.budget.Max)
			}
			store, err := name.NewDigest(bp.Buildpack.StoreImage.Image)
			if err != nil {
				return failure.Permanentf(ReasonStoreNotReady, "buildpack %s@%s: store image %q: %v", bp.Buildpack.ID, bp.Buildpack.Version, bp.Buildpack.StoreImage.Image, err)
			}
			blob, err := os.CreateTemp(dir.path, "blob-*")
			if err != nil {
				return cnb.ScratchError(err)
			}
			defer os.Remove(blob.Name())
			defer blob.Close()
			if err := reg.ReadLayer(ctx, store.Context().Digest(digest.String()), size, cnb.ScratchWriter(blob)); err != nil {
				return err
			}
			if _, err := blob.Seek(0, io.SeekStart); err != nil {
				return cnb.ScratchError(err)
			}
			rc, err := cnb.Uncompressed(blob, f.MaxZstdWindow)
			if err != nil {
				return err
			}
			defer rc.Close()
			return read(rc)
		},
	}
	if f.Memory != nil {
		opts.Remembered = f.Memory
	}
	return opts
}
