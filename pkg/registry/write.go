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

// Write pushes img (an image, or an index and its images) to tag, asking
// the registry no more than the bytes require (see push).
func (a Access) Write(ctx context.Context, tag name.Tag, img Artifact) (name.Digest, error) {
	c := a.client
	tag = c.hosts.tag(tag)
	var out name.Digest
	err := c.do(ctx, tag.Context(), c.opts.WriteTimeout, func(ctx context.Context, _ *session) error {
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		p, err := c.newPush(ctx, a.keychain, tag.Context(), img)
		if err != nil {
			return err
		}
		if err := p.write(ctx, tag, img); err != nil {
			return err
		}
		out = tag.Context().Digest(digest.String())
		return nil
	}, a.keychain)
	return out, err
}
