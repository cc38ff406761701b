package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// A push writes an artifact and what it references to one repository in
// the fewest requests the bytes allow (docs/design.md, "Pushes"): a blob the
// repository is remembered to hold costs nothing; one another repository of
// the registry holds (it was read from there, or the memory saw it there) a
// mount; a small one an upload (one POST with the body, or a POST and a PUT
// with it); a big one of unknown whereabouts a HEAD first; each manifest one
// PUT.
type push struct {
	c    *Client
	repo name.Repository
	key  string // the repository in Client.blobs
	http *http.Client
	// checked: the memory is not used (the push after a refusal).
	checked bool
	skipped atomic.Bool        // a blob was taken as held on the memory's word
	blobs   singleflight.Group // one transfer per digest, however many images name it
	pacing  pushPacing
	// subjects are the OCI-Subject headers of the manifest PUTs, by
	// reference: a registry with the referrers API answers one for a
	// manifest with a subject, which it then lists.
	subjects sync.Map // identifier → subject digest
}

// smallBlob is the size up to which a blob of unknown whereabouts is
// uploaded without asking first — one request (sent whole in the POST) or
// two, whether the registry has it or not, against a HEAD and then two — and
// sent whole in the POST: at most this many bytes are sent in vain.
const smallBlob = 64 << 10

// pushJobs is how many blobs of one push move at once.
const pushJobs = 4

func (c *Client) newPush(ctx context.Context, kc authn.Keychain, repo name.Repository, a Artifact) (*push, error) {
	auth, err := authn.Resolve(ctx, orAnonymous(kc), repo)
	if err != nil {
		return nil, err
	}
	p := &push{c: c, repo: repo, key: repo.Name(), pacing: newPushPacing()}
	scopes := []string{repo.Scope(transport.PushScope)}
	sources, err := p.mountSources(a)
	if err != nil {
		return nil, err
	}
	for _, from := range sources {
		scopes = append(scopes, from.Scope(transport.PullScope))
	}
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, transport.NewUserAgent(c.transport, c.opts.UserAgent), scopes)
	if err != nil {
		return nil, err
	}
	p.http = &http.Client{Transport: rt, CheckRedirect: sameHostRedirects}
	return p, nil
}

// sameHostRedirects follows a registry's redirects (blob downloads go to
// storage elsewhere, but a push's requests do not) only within its host.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("a redirect from %s to another host, %s, refused", via[0].URL.Host, req.URL.Host)
	}
	return nil
}

// write pushes a to ref. When the registry refuses a manifest for a blob the
// memory said it holds (garbage collected, say), the repository's memory is
// forgotten and the push made again asking about every blob: one retry,
// never a manifest naming a missing blob.
func (p *push) write(ctx context.Context, ref name.Reference, a Artifact) error {
	err := p.artifact(ctx, ref, a)
	if err == nil || !p.skipped.Load() || !refusedForMissing(err) {
		return err
	}
	p.c.blobs.forget(p.key)
	p.checked = true
	return p.artifact(ctx, ref, a)
}

// artifact pushes what a references, then a's manifest.
func (p *push) artifact(ctx context.Context, ref name.Reference, a remote.Taggable) error {
	// Everything a references is resolved before anything moves, so that
	// no transfer outlives a failure to resolve.
	var children []remote.Taggable
	var layers []v1.Layer
	var trusted bool
	switch a := a.(type) {
	case v1.ImageIndex:
		var err error
		if children, err = indexChildren(a); err != nil {
			return err
		}
	case v1.Image:
		var err error
		if layers, err = imageBlobs(a); err != nil {
			return err
		}
		mediaType, err := a.MediaType()
		if err != nil {
			return err
		}
		trusted = p.trusts(ctx, mediaType)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pushJobs)
	// Index children are always PUT (one request, as the HEAD that would
	// skip them): that registries refuse an index naming a manifest they
	// lack is not probed.
	for _, child := range children {
		digest, err := partial.Digest(child)
		if err != nil {
			return err
		}
		g.Go(func() error { return p.artifact(gctx, p.repo.Digest(digest.String()), child) })
	}
	digests := make([]v1.Hash, len(layers))
	for i, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			return err
		}
		digests[i] = digest
		g.Go(func() error {
			_, err, _ := p.blobs.Do(digest.String(), func() (any, error) { return nil, p.blob(gctx, digest, l, trusted) })
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := p.putManifest(ctx, ref, a); err != nil {
		return err
	}
	p.c.blobs.remember(p.key, digests...)
	return nil
}

// trusts says whether the memory may stand in for the registry about the
// blobs of a manifest of mediaType: the registry was seen to refuse such a
// manifest naming blobs it lacks (registryTraits).
func (p *push) trusts(ctx context.Context, mediaType types.MediaType) bool {
	if p.checked || p.c.opts.RememberedBlobs < 0 {
		return false
	}
	return p.c.traits.trusted(ctx, p, mediaType)
}

// indexChildren resolves the images and indexes idx names.
func indexChildren(idx v1.ImageIndex) ([]remote.Taggable, error) {
	index, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []remote.Taggable
	for _, child := range index.Manifests {
		switch {
		case child.MediaType.IsIndex():
			m, err := idx.ImageIndex(child.Digest)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		case child.MediaType.IsImage():
			m, err := idx.Image(child.Digest)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		default:
			// Attestations and other artifacts as index entries: what
			// buildsmith assembles has none.
			return nil, &failure.Error{Class: failure.Permanent, Reason: ReasonInvalidImage,
				Err: fmt.Errorf("index entry %s: media type %q is neither an image nor an index", child.Digest, child.MediaType)}
		}
	}
	return out, nil
}

// imageBlobs lists img's distributable layers and its config. A streamed
// layer (no digest before it is read) is refused by the caller's Digest:
// what buildsmith assembles has none.
func imageBlobs(img v1.Image) ([]v1.Layer, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var out []v1.Layer
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, err
		}
		if mt.IsDistributable() {
			out = append(out, l)
		}
	}
	config, err := partial.ConfigLayer(img)
	if err != nil {
		return nil, err
	}
	return append(out, config), nil
}

// blob makes sure the repository holds l. trusted: the memory may say so.
func (p *push) blob(ctx context.Context, digest v1.Hash, l v1.Layer, trusted bool) error {
	if trusted && p.c.blobs.has(p.key, digest) {
		p.skipped.Store(true)
		return nil
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	if from := p.mountSource(l, digest); from != nil {
		mounted, err := p.mount(ctx, digest, from)
		if err == nil && mounted {
			p.c.blobs.remember(p.key, digest)
			return nil
		}
		if !repositoryAnswered(err) {
			return err // the registry failing, not the mount
		}
		// Not mounted (a registry without mounts, a source without the
		// blob, a mount refused): the target may hold it all the same.
		return p.upload(ctx, digest, l, true)
	}
	return p.upload(ctx, digest, l, size > smallBlob || mountedFrom(l, p.repo))
}

// mount asks the registry to mount digest from from; false when it opened
// an upload instead (which is left to expire).
func (p *push) mount(ctx context.Context, digest v1.Hash, from *name.Repository) (bool, error) {
	var mounted bool
	err := p.retry(ctx, func() error {
		location, err := p.startUpload(ctx, digest, from, nil)
		mounted = err == nil && location == nil
		return err
	})
	return mounted, err
}

// upload sends l's bytes, asking first whether the repository holds it when
// ask is set.
func (p *push) upload(ctx context.Context, digest v1.Hash, l v1.Layer, ask bool) error {
	if ask {
		has, err := p.headBlob(ctx, digest)
		if err != nil || has {
			if has {
				p.c.blobs.remember(p.key, digest)
			}
			return err
		}
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	host := p.repo.RegistryStr()
	err = p.retry(ctx, func() error {
		var whole v1.Layer // sent in the POST
		if size <= smallBlob && p.c.traits.sendsInPost(host) {
			whole = l
		}
		location, err := p.startUpload(ctx, digest, nil, whole)
		if whole != nil && refusedAsClient(err) {
			// A registry that refuses a body in the POST: open the
			// upload as usual, and send it no more such bodies.
			p.c.traits.ignoresPost(host)
			whole = nil
			location, err = p.startUpload(ctx, digest, nil, nil)
		}
		if err != nil || location == nil {
			return err // or taken whole
		}
		if whole != nil {
			p.c.traits.ignoresPost(host)
		}
		return p.finishUpload(ctx, location, digest, l)
	})
	if err == nil {
		p.c.blobs.remember(p.key, digest)
	}
	return err
}

// mountSource is a repository of the same registry to mount l from: the one
// it was read from, else one the memory saw holding it (another builder's,
// for the layers the controller writes itself). A mount answered 201 is the
// registry's word; the memory only picks where to ask.
func (p *push) mountSource(l v1.Layer, digest v1.Hash) *name.Repository {
	if ml, ok := l.(*remote.MountableLayer); ok {
		from := ml.Reference.Context()
		if from.RegistryStr() == p.repo.RegistryStr() && from.RepositoryStr() != p.repo.RepositoryStr() {
			return &from
		}
		return nil
	}
	source, ok := p.c.blobs.repositoryWith(p.repo.RegistryStr(), digest, p.key)
	if !ok {
		return nil
	}
	from, err := name.NewRepository(source, p.nameOptions()...)
	if err != nil {
		return nil
	}
	return &from
}

// nameOptions parse a repository of the push's registry as it was given.
func (p *push) nameOptions() []name.Option {
	if p.repo.Scheme() == "http" {
		return []name.Option{name.Insecure}
	}
	return nil
}

// mountedFrom says whether l was read from repo itself: it is likely held,
// worth a HEAD whatever its size.
func mountedFrom(l v1.Layer, repo name.Repository) bool {
	ml, ok := l.(*remote.MountableLayer)
	return ok && ml.Reference.Context().Name() == repo.Name()
}

// mountSources lists the repositories a's layers may be mounted from, for
// the token's scopes.
func (p *push) mountSources(a remote.Taggable) ([]name.Repository, error) {
	seen := map[string]bool{}
	var out []name.Repository
	var walk func(a remote.Taggable) error
	walk = func(a remote.Taggable) error {
		switch a := a.(type) {
		case v1.ImageIndex:
			children, err := indexChildren(a)
			if err != nil {
				return err
			}
			for _, child := range children {
				if err := walk(child); err != nil {
					return err
				}
			}
		case v1.Image:
			layers, err := imageBlobs(a)
			if err != nil {
				return err
			}
			for _, l := range layers {
				digest, err := l.Digest()
				if err != nil {
					return err
				}
				if from := p.mountSource(l, digest); from != nil && !seen[from.Name()] {
					seen[from.Name()] = true
					out = append(out, *from)
				}
			}
		}
		return nil
	}
	return out, walk(a)
}
