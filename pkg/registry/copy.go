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
// dst already points at src's digest.
func (a Access) Copy(ctx context.Context, src name.Digest, dst name.Tag) error {
	if desc, found, err := a.Lookup(ctx, dst); err != nil {
		return err
	} else if found && desc.Ref.DigestStr() == src.DigestStr() {
		return nil
	}
	artifact, err := a.readArtifact(ctx, src)
	if err != nil {
		return err
	}
	_, err = a.Write(ctx, dst, artifact)
	return err
}

// readArtifact reads the manifest src names; what it references is read
// only when used, under the client's lifetime (as ReadImage's layers are).
func (a Access) readArtifact(ctx context.Context, src name.Digest) (Artifact, error) {
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
		switch {
		case desc.MediaType.IsIndex():
			var index v1.ImageIndex
			if index, err = desc.ImageIndex(); err == nil {
				out, err = resolveChildren(index)
			}
		case desc.MediaType.IsImage():
			out, err = desc.Image()
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

func resolveChildren(index v1.ImageIndex) (*resolvedIndex, error) {
	children, err := indexChildren(index)
	if err != nil {
		return nil, err
	}
	out := &resolvedIndex{remote: index, children: map[v1.Hash]remote.Taggable{}}
	for _, child := range children {
		if nested, ok := child.(v1.ImageIndex); ok {
			if child, err = resolveChildren(nested); err != nil {
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
