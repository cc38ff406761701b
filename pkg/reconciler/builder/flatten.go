package builder

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"

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
}

// scratchDir is a directory of one push's flattened layers, and what they
// may take; "" when the builder flattens nothing.
type scratchDir struct {
	path   string
	budget *cnb.FlattenBudget
}

// scratch makes the directory for a push of a builder of spec.
func (f Flattening) scratch(spec *v1alpha1.BuilderSpec) (scratchDir, error) {
	if spec.Flatten == nil {
		return scratchDir{}, nil
	}
	dir, err := os.MkdirTemp(f.ScratchDir, "flatten-")
	if err != nil {
		return scratchDir{}, &failure.Error{Class: failure.Transient, Reason: cnb.ReasonScratchUnavailable,
			Err: fmt.Errorf("making a scratch directory for flattened layers (--scratch-dir): %w", err)}
	}
	limit := f.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxFlattenedBytes
	}
	return scratchDir{path: dir, budget: cnb.NewFlattenBudget(limit)}, nil
}

// remove deletes the directory, once the push no longer reads its layers.
func (s scratchDir) remove() {
	if s.path != "" {
		_ = os.RemoveAll(s.path)
	}
}

// options are cnb.FlattenOptions reading each layer from the buildpackage
// it came from, with reg's circuits, classification and timeouts.
func flattenOptions(ctx context.Context, reg registry.Access, dir scratchDir, mediaType types.MediaType) cnb.FlattenOptions {
	return cnb.FlattenOptions{
		Dir:       dir.path,
		Budget:    dir.budget,
		MediaType: mediaType,
		Read: func(bp cnb.BuildpackLayer, read func(io.Reader) error) error {
			digest, err := bp.Layer.Digest()
			if err != nil {
				return err
			}
			store, err := name.NewDigest(bp.Buildpack.StoreImage.Image)
			if err != nil {
				return failure.Permanentf(ReasonStoreNotReady, "buildpack %s@%s: store image %q: %v", bp.Buildpack.ID, bp.Buildpack.Version, bp.Buildpack.StoreImage.Image, err)
			}
			return reg.ReadLayer(ctx, store.Context().Digest(digest.String()), read)
		},
	}
}
