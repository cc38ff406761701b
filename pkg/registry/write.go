package registry

import (
	"context"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Artifact is what Write pushes: an image, or an index with its images.
type Artifact interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

// Write pushes img (an image, or an index and its images) to tag. ggcr skips blobs the repository has and mounts
// layers from other repositories of the same registry; layers of images read
// through this Client are such layers, so nothing is downloaded. Each Write
// uses a fresh ggcr Pusher: a Pusher remembers every blob it ever uploaded
// and skips it without asking, which outlives a registry's garbage
// collection, and accumulates the scopes of every repository it mounted from.
func (a Access) Write(ctx context.Context, tag name.Tag, img Artifact) (name.Digest, error) {
	c, kc := a.client, a.keychain
	tag = c.hosts.tag(tag)
	var out name.Digest
	err := c.do(ctx, tag, c.opts.WriteTimeout, func(ctx context.Context, s *session) error {
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		pusher, err := remote.NewPusher(s.options...)
		if err != nil {
			return err
		}
		if err := pusher.Push(ctx, tag, img); err != nil {
			return err
		}
		out = tag.Context().Digest(digest.String())
		return nil
	}, kc)
	return out, err
}
