package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// The registry API exchanges of a push (the distribution spec's blob and
// manifest requests), each sent once with its expected answers; which to
// make is push.go's.

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
	var has bool
	err := p.retry(ctx, func() error {
		resp, err := p.send(ctx, http.MethodHead, p.url("blobs/"+digest.String()), nil, 0, nil, http.StatusOK, http.StatusNotFound)
		has = err == nil && resp.StatusCode == http.StatusOK
		return err
	})
	return has, err
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
		resp, err := p.send(ctx, http.MethodPut, p.url("manifests/"+ref.Identifier()), bytes.NewReader(raw), int64(len(raw)), header,
			http.StatusOK, http.StatusCreated, http.StatusAccepted)
		if err == nil {
			if subject := resp.Header.Get("OCI-Subject"); subject != "" {
				p.subjects.Store(ref.Identifier(), subject)
			}
		}
		return err
	})
}

// retry runs op, and again after failures the client retries in-call, on
// Options.Retry's backoff; each try sends its body anew. Until the
// repository has answered the push, and while one of its exchanges
// retries, the push's exchanges go one at a time; once one has failed for
// good without an answer, the others send nothing (pushPacing).
func (p *push) retry(ctx context.Context, op func() error) error {
	mine, err := p.pacing.take(ctx, true)
	if err != nil {
		return err
	}
	defer func() {
		if mine {
			p.pacing.give()
		}
	}()
	backoff := p.c.opts.Retry
	for try := 1; ; try++ {
		err := op()
		answered := repositoryAnswered(err)
		if answered {
			p.pacing.answered()
		}
		if err == nil || try >= p.c.opts.Retry.Steps || !p.c.retryInCall(err) {
			if !answered {
				p.pacing.end(err)
			}
			return err
		}
		if !mine {
			if mine, _ = p.pacing.take(ctx, false); !mine {
				return err
			}
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

// pushPacing paces a push's exchanges by what the repository says. Until it
// has answered one, they go one at a time: a push into a failing
// repository costs its first exchange's tries, not those of every blob
// moving at once. While one retries, they go one at a time again (the
// blobs in flight have each met the failure). Once one has failed for good
// without an answer, the push is over and the others send nothing: its
// error fails them, before the push's context is cancelled.
type pushPacing struct {
	turn         chan struct{} // taken by the exchange going alone
	answeredOnce sync.Once
	answeredCh   chan struct{} // closed when the repository first answers
	overOnce     sync.Once
	overCh       chan struct{} // closed, after err is set, when the push is over
	err          error
}

func newPushPacing() pushPacing {
	return pushPacing{turn: make(chan struct{}, 1), answeredCh: make(chan struct{}), overCh: make(chan struct{})}
}

// take waits for the turn, and reports whether it has it; unlessAnswered:
// not once the repository has answered (then it returns false at once).
// It fails when the push is over or ctx ends.
func (t *pushPacing) take(ctx context.Context, unlessAnswered bool) (bool, error) {
	var answered <-chan struct{} // nil: never ready
	if unlessAnswered {
		answered = t.answeredCh
	}
	select {
	case <-t.overCh:
		return false, t.err
	case <-answered:
		return false, nil
	default:
	}
	select {
	case t.turn <- struct{}{}:
		select {
		case <-t.overCh: // ended by the exchange that gave the turn
			t.give()
			return false, t.err
		default:
			return true, nil
		}
	case <-answered:
		return false, nil
	case <-t.overCh:
		return false, t.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (t *pushPacing) give() { <-t.turn }

func (t *pushPacing) answered() { t.answeredOnce.Do(func() { close(t.answeredCh) }) }

// end makes the push over, failing with err.
func (t *pushPacing) end(err error) {
	t.overOnce.Do(func() {
		t.err = err
		close(t.overCh)
	})
}

// repositoryAnswered says whether an exchange's outcome is the repository
// answering (success, or a refusal), not failing (a status meaning an
// outage, or no answer at all).
func repositoryAnswered(err error) bool {
	if err == nil {
		return true
	}
	var te *transport.Error
	return errors.As(err, &te) && !meaningOf(te.StatusCode).outage
}

// refusedAsClient says whether err is a registry refusing a request for
// what it is (a status meaning a permanent error: a 4xx other than 401,
// 403, 404, 408 and 429), not for the credentials, the repository or the
// rate.
func refusedAsClient(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && meaningOf(te.StatusCode).class == failure.Permanent
}

// refusedForMissing says whether err is a registry refusing a manifest PUT
// for a blob it names that the repository lacks.
func refusedForMissing(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode >= 500 || te.Request == nil ||
		te.Request.Method != http.MethodPut || !strings.Contains(te.Request.URL.Path, "/manifests/") {
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
