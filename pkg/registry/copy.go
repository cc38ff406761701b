package registry

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Copy puts the image or index src names at dst, manifests as they are (so
// under the same digest), with what they reference: blobs mounted within a
// registry, streamed from src's registry to dst's otherwise. One HEAD when
// dst already points at src's digest; copied says whether anything was
// written. bounds bound what is copied.
func (a Access) Copy(ctx context.Context, src name.Digest, dst name.Tag, bounds CopyBounds) (copied bool, err error) {
	if desc, found, err := a.Lookup(ctx, dst); err != nil {
		return false, err
	} else if found && desc.Ref.DigestStr() == src.DigestStr() {
		return false, nil
	}
	artifact, err := a.readArtifact(ctx, src, bounds.withDefaults())
	if err != nil {
		return false, err
	}
	if _, err = a.Write(ctx, dst, artifact); err != nil {
		return false, err
	}
	return true, nil
}

// What one Copy takes: the index is the source registry's to write, and
// every manifest it names is read and written again, every layer mounted or
// moved. A run image's index names an image per platform (and an
// attestation manifest each, as BuildKit writes them), a few layers each.
const (
	// maxCopyManifests bounds the manifests an index names, at all levels.
	maxCopyManifests = 128
	// maxCopyDepth bounds its nesting: an index, an index it names, their
	// images.
	maxCopyDepth = 3
	// maxCopyLayers bounds the layers of each image copied, and
	// maxCopyAllLayers those of all of them.
	maxCopyLayers    = 256
	maxCopyAllLayers = 1024
	// maxCopyManifestBytes bounds the manifests read and held, together
	// (each is bounded by the client's manifest limit already).
	maxCopyManifestBytes = 8 << 20
)

// CopyBounds bound the layers one Copy takes, by image and in all; zero:
// maxCopyLayers and maxCopyAllLayers, sized for run images. A builder's
// copies take its own bounds (its platforms × its layer limit).
type CopyBounds struct {
	ImageLayers, AllLayers int
}

func (b CopyBounds) withDefaults() CopyBounds {
	if b.ImageLayers <= 0 {
		b.ImageLayers = maxCopyLayers
	}
	if b.AllLayers <= 0 {
		b.AllLayers = maxCopyAllLayers
	}
	return b
}

// ReasonImageTooLarge: what Copy was asked to copy names more manifests,
// nesting or layers than it takes.
const ReasonImageTooLarge = "ImageTooLarge"

// readArtifact reads the manifest src names; what it references is read
// only when used, under the client's lifetime (as ReadImage's layers are),
// and is refused past the bounds of a copy.
func (a Access) readArtifact(ctx context.Context, src name.Digest, bounds CopyBounds) (Artifact, error) {
	c := a.client
	if insecure, ok := c.hosts.reference(src).(name.Digest); ok {
		src = insecure
	}
	var out Artifact
	err := c.do(ctx, src.Context(), c.opts.Timeout, func(_ context.Context, s *session) error {
		desc, err := s.puller.Get(c.lifetime, src)
		if err != nil {
			return err
		}
		budget := &copyBudget{src: src, bounds: bounds}
		switch {
		case desc.MediaType.IsIndex():
			var index v1.ImageIndex
			if index, err = desc.ImageIndex(); err == nil {
				out, err = resolveChildren(index, budget, 1)
			}
		case desc.MediaType.IsImage():
			var img v1.Image
			if img, err = desc.Image(); err == nil {
				out, err = img, budget.image(img)
			}
		default:
			err = permanentError(ReasonInvalidImage, src.RegistryStr(), fmt.Errorf("%s: media type %q is neither an image nor an index", src, desc.MediaType))
		}
		return err
	}, a.keychain)
	return out, err
}

// resolvedIndex is an index whose children were read once: a push walks
// them twice (for the repositories to mount from, then to push them), and a
// remote index reads a child's manifest each time it is asked for it.
type resolvedIndex struct {
	remote   v1.ImageIndex
	children map[v1.Hash]remote.Taggable
}

func resolveChildren(index v1.ImageIndex, budget *copyBudget, depth int) (*resolvedIndex, error) {
	if err := budget.index(index, depth); err != nil {
		return nil, err
	}
	children, err := indexChildren(index)
	if err != nil {
		return nil, err
	}
	out := &resolvedIndex{remote: index, children: map[v1.Hash]remote.Taggable{}}
	for _, child := range children {
		switch c := child.(type) {
		case v1.ImageIndex:
			if child, err = resolveChildren(c, budget, depth+1); err != nil {
				return nil, err
			}
		case v1.Image:
			if err := budget.image(c); err != nil {
				return nil, err
			}
		}
		digest, err := partial.Digest(child)
		if err != nil {
			return nil, err
		}
		out.children[digest] = child
	}
	return out, nil
}

// copyBudget is what a copy has taken so far.
type copyBudget struct {
	src                           name.Digest
	bounds                        CopyBounds
	manifests, layers, manifestsB int
}

// index counts an index at depth (1: the one asked for) and the manifests
// it names, before any of them is read.
func (b *copyBudget) index(index v1.ImageIndex, depth int) error {
	m, err := index.IndexManifest()
	if err != nil {
		return err
	}
	if depth >= maxCopyDepth {
		return b.tooLarge("nests indexes %d deep, more than the %d a copy takes", depth, maxCopyDepth-1)
	}
	if b.manifests += len(m.Manifests); b.manifests > maxCopyManifests {
		return b.tooLarge("names %d manifests, more than the %d a copy takes", b.manifests, maxCopyManifests)
	}
	size, err := index.Size()
	if err != nil {
		return err
	}
	return b.manifestBytes(size)
}

// image refuses an image of more layers than a copy takes, or that takes
// the copy past its bounds (its manifest is read now rather than by the
// push).
func (b *copyBudget) image(img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	if len(m.Layers) > b.bounds.ImageLayers {
		return b.tooLarge("has an image of %d layers, more than the %d a copy takes", len(m.Layers), b.bounds.ImageLayers)
	}
	if b.layers += len(m.Layers); b.layers > b.bounds.AllLayers {
		return b.tooLarge("has images of %d layers together, more than the %d a copy takes", b.layers, b.bounds.AllLayers)
	}
	size, err := img.Size()
	if err != nil {
		return err
	}
	return b.manifestBytes(size)
}

func (b *copyBudget) manifestBytes(size int64) error {
	if b.manifestsB += int(size); b.manifestsB > maxCopyManifestBytes {
		return b.tooLarge("has manifests of %d bytes together, more than the %d a copy takes", b.manifestsB, maxCopyManifestBytes)
	}
	return nil
}

func (b *copyBudget) tooLarge(format string, args ...any) error {
	return permanentError(ReasonImageTooLarge, b.src.RegistryStr(), fmt.Errorf("%s "+format, append([]any{b.src}, args...)...))
}

func (r *resolvedIndex) MediaType() (types.MediaType, error)       { return r.remote.MediaType() }
func (r *resolvedIndex) Digest() (v1.Hash, error)                  { return r.remote.Digest() }
func (r *resolvedIndex) Size() (int64, error)                      { return r.remote.Size() }
func (r *resolvedIndex) IndexManifest() (*v1.IndexManifest, error) { return r.remote.IndexManifest() }
func (r *resolvedIndex) RawManifest() ([]byte, error)              { return r.remote.RawManifest() }

func (r *resolvedIndex) Image(h v1.Hash) (v1.Image, error) {
	if img, ok := r.children[h].(v1.Image); ok {
		return img, nil
	}
	return r.remote.Image(h)
}

func (r *resolvedIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	if index, ok := r.children[h].(v1.ImageIndex); ok {
		return index, nil
	}
	return r.remote.ImageIndex(h)
}
