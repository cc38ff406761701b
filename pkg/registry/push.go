package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// A push writes an artifact and what it references to one repository in
// the fewest requests the bytes allow (docs/design.md, "Pushes"): a blob the
// repository is remembered to hold costs nothing, one another repository
// of the registry holds costs a mount, a small one an upload (one POST with
// the body, or a POST and a PUT with it), a big one of unknown whereabouts a
// HEAD first; each manifest one PUT.
type push struct {
	c    *Client
	repo name.Repository
	key  string // the repository in Client.blobs
	http *http.Client
	// trusted: the registry refuses a manifest whose blobs it lacks
	// (registryTraits), so the memory may stand in for asking.
	trusted bool
	// checked: the memory is not used (the push after a refusal).
	checked bool
	skipped atomic.Bool // a blob or manifest was taken as held on the memory's word
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
	scopes := []string{repo.Scope(transport.PushScope)}
	sources, err := mountSources(a, repo)
	if err != nil {
		return nil, err
	}
	for _, from := range sources {
		scopes = append(scopes, from.Scope(transport.PullScope))
	}
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, transport.NewUserAgent(c.pings, c.opts.UserAgent), scopes)
	if err != nil {
		return nil, err
	}
	p := &push{c: c, repo: repo, key: repo.Name(), http: &http.Client{Transport: rt}}
	p.trusted = c.traits.trusted(ctx, p)
	return p, nil
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
	var held []v1.Hash
	switch a := a.(type) {
	case v1.ImageIndex:
		index, err := a.IndexManifest()
		if err != nil {
			return err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(pushJobs)
		for _, child := range index.Manifests {
			// Always PUT (one request, as a HEAD would be): that registries
			// refuse an index naming a manifest they lack is not probed.
			var m remote.Taggable
			switch {
			case child.MediaType.IsIndex():
				idx, err := a.ImageIndex(child.Digest)
				if err != nil {
					return err
				}
				m = idx
			case child.MediaType.IsImage():
				img, err := a.Image(child.Digest)
				if err != nil {
					return err
				}
				m = img
			default:
				return fmt.Errorf("index entry %s: media type %q is neither an image nor an index", child.Digest, child.MediaType)
			}
			g.Go(func() error { return p.artifact(gctx, p.repo.Digest(child.Digest.String()), m) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	case v1.Image:
		blobs, err := imageBlobs(a)
		if err != nil {
			return err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(pushJobs)
		for _, b := range blobs {
			digest, err := b.Digest()
			if err != nil {
				return err
			}
			held = append(held, digest)
			g.Go(func() error { return p.blob(gctx, digest, b) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	if err := p.putManifest(ctx, ref, a); err != nil {
		return err
	}
	p.c.blobs.remember(p.key, held...)
	return nil
}

// imageBlobs lists img's distributable layers and its config.
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

// remembered says whether the memory may stand in for the registry about key.
func (p *push) remembered(blob v1.Hash) bool {
	if !p.trusted || p.checked || !p.c.blobs.holds(p.key, blob) {
		return false
	}
	p.skipped.Store(true)
	return true
}

// blob makes sure the repository holds l.
func (p *push) blob(ctx context.Context, digest v1.Hash, l v1.Layer) error {
	if p.remembered(digest) {
		return nil
	}
	from := mountSource(l, p.repo)
	if from == nil {
		size, err := l.Size()
		if err != nil {
			return err
		}
		if size > smallBlob || mountedFrom(l, p.repo) {
			held, err := p.headBlob(ctx, digest)
			if err != nil || held {
				if held {
					p.c.blobs.remember(p.key, digest)
				}
				return err
			}
		}
	}
	host := p.repo.RegistryStr()
	err := p.retry(ctx, func() error {
		var whole v1.Layer // sent in the POST
		if size, err := l.Size(); err == nil && from == nil && size <= smallBlob && p.c.traits.sendsInPost(host) {
			whole = l
		}
		location, err := p.startUpload(ctx, digest, from, whole)
		if whole != nil && refusedAsClient(err) {
			// A registry that refuses a body in the POST: open the
			// upload as usual, and send it no more such bodies.
			p.c.traits.ignoresPost(host)
			whole = nil
			location, err = p.startUpload(ctx, digest, from, nil)
		}
		if err != nil || location == nil {
			return err // or mounted, or taken whole
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

// mountSource is the repository of the same registry l was read from, if
// any other than repo: a mount from there costs one request and no bytes.
func mountSource(l v1.Layer, repo name.Repository) *name.Repository {
	ml, ok := l.(*remote.MountableLayer)
	if !ok {
		return nil
	}
	from := ml.Reference.Context()
	if from.RegistryStr() != repo.RegistryStr() || from.RepositoryStr() == repo.RepositoryStr() {
		return nil
	}
	return &from
}

// mountedFrom says whether l was read from repo itself: it is likely held,
// worth a HEAD whatever its size.
func mountedFrom(l v1.Layer, repo name.Repository) bool {
	ml, ok := l.(*remote.MountableLayer)
	return ok && ml.Reference.Context().Name() == repo.Name()
}

// mountSources lists the repositories a's layers may be mounted from, for
// the token's scopes.
func mountSources(a remote.Taggable, repo name.Repository) ([]name.Repository, error) {
	seen := map[string]bool{}
	var out []name.Repository
	var walk func(a remote.Taggable) error
	walk = func(a remote.Taggable) error {
		switch a := a.(type) {
		case v1.ImageIndex:
			index, err := a.IndexManifest()
			if err != nil {
				return err
			}
			for _, child := range index.Manifests {
				var m remote.Taggable
				var err error
				switch {
				case child.MediaType.IsIndex():
					m, err = a.ImageIndex(child.Digest)
				case child.MediaType.IsImage():
					m, err = a.Image(child.Digest)
				default:
					continue
				}
				if err != nil {
					return err
				}
				if err := walk(m); err != nil {
					return err
				}
			}
		case v1.Image:
			layers, err := a.Layers()
			if err != nil {
				return err
			}
			for _, l := range layers {
				if from := mountSource(l, repo); from != nil && !seen[from.Name()] {
					seen[from.Name()] = true
					out = append(out, *from)
				}
			}
		}
		return nil
	}
	return out, walk(a)
}

func (p *push) url(path string) *url.URL {
	return &url.URL{Scheme: p.repo.Scheme(), Host: p.repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/%s", p.repo.RepositoryStr(), path)}
}

// send makes one request and checks its answer is one of want; the body of
// the answer is drained.
func (p *push) send(ctx context.Context, method string, u *url.URL, body io.Reader, size int64, header http.Header, want ...int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, want...); err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp, nil
}

func (p *push) headBlob(ctx context.Context, digest v1.Hash) (bool, error) {
	var held bool
	err := p.retry(ctx, func() error {
		resp, err := p.send(ctx, http.MethodHead, p.url("blobs/"+digest.String()), nil, 0, nil, http.StatusOK, http.StatusNotFound)
		held = err == nil && resp.StatusCode == http.StatusOK
		return err
	})
	return held, err
}

// startUpload opens the upload of digest: a mount from from (when not nil),
// or with the blob whole in the POST (when whole is not nil). It returns where
// to send the bytes, nil when the registry has the blob now.
func (p *push) startUpload(ctx context.Context, digest v1.Hash, from *name.Repository, whole v1.Layer) (*url.URL, error) {
	u := p.url("blobs/uploads/")
	var body io.Reader
	var size int64
	switch {
	case from != nil:
		u.RawQuery = url.Values{"mount": {digest.String()}, "from": {from.RepositoryStr()}}.Encode()
	case whole != nil:
		u.RawQuery = url.Values{"digest": {digest.String()}}.Encode()
		rc, err := whole.Compressed()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		if size, err = whole.Size(); err != nil {
			return nil, err
		}
		body = rc
	}
	header := http.Header{"Content-Type": {"application/octet-stream"}}
	resp, err := p.send(ctx, http.MethodPost, u, body, size, header, http.StatusCreated, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusCreated {
		return nil, nil
	}
	location, err := resp.Location()
	if err != nil {
		return nil, fmt.Errorf("upload of %s: the registry gave no location: %w", digest, err)
	}
	return location, nil
}

// finishUpload sends l's bytes in one PUT (the monolithic upload of the
// distribution spec).
func (p *push) finishUpload(ctx context.Context, location *url.URL, digest v1.Hash, l v1.Layer) error {
	size, err := l.Size()
	if err != nil {
		return err
	}
	body, err := l.Compressed()
	if err != nil {
		return err
	}
	defer body.Close()
	q := location.Query()
	q.Set("digest", digest.String())
	location.RawQuery = q.Encode()
	header := http.Header{"Content-Type": {"application/octet-stream"}}
	_, err = p.send(ctx, http.MethodPut, location, body, size, header, http.StatusCreated)
	return err
}

// putManifest PUTs m's manifest at ref.
func (p *push) putManifest(ctx context.Context, ref name.Reference, m remote.Taggable) error {
	raw, err := m.RawManifest()
	if err != nil {
		return err
	}
	mediaType := types.DockerManifestSchema2
	if withType, ok := m.(interface {
		MediaType() (types.MediaType, error)
	}); ok {
		if mediaType, err = withType.MediaType(); err != nil {
			return err
		}
	}
	header := http.Header{"Content-Type": {string(mediaType)}}
	return p.retry(ctx, func() error {
		_, err := p.send(ctx, http.MethodPut, p.url("manifests/"+ref.Identifier()), bytes.NewReader(raw), int64(len(raw)), header,
			http.StatusOK, http.StatusCreated, http.StatusAccepted)
		return err
	})
}

// retry runs op again after failures the client retries in-call, on
// Options.Retry's backoff; each try sends its body anew.
func (p *push) retry(ctx context.Context, op func() error) error {
	backoff := p.c.opts.Retry
	for try := 1; ; try++ {
		err := op()
		if err == nil || try >= p.c.opts.Retry.Steps || !p.c.retryInCall(err) {
			return err
		}
		timer := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
	}
}

// refusedAsClient says whether err is a registry refusing a request for
// what it is (4xx), not for the credentials, the repository or the rate.
func refusedAsClient(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	switch te.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusTooManyRequests, http.StatusRequestTimeout:
		return false
	}
	return te.StatusCode >= 400 && te.StatusCode < 500
}

// refusedForMissing says whether err is a registry refusing a manifest for
// a blob it names that the repository lacks.
func refusedForMissing(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode >= 500 {
		return false
	}
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestBlobUnknownErrorCode, transport.BlobUnknownErrorCode:
			return true
		}
	}
	return false
}
