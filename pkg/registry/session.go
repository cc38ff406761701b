package registry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"k8s.io/utils/lru"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// session is a puller for one set of credentials; it keeps authenticated
// transports (and bearer tokens) per repository, so repeated reads skip the
// /v2/ ping and the token exchange.
type session struct {
	puller  *remote.Puller
	options []remote.Option

	// For what ggcr's puller does not do to our bounds (tag listings):
	// the credentials, the transport every puller request goes through
	// (in-call retries, user agent), and the authenticated transports
	// made of them, by repository.
	keychain authn.Keychain
	base     http.RoundTripper
	readers  *lru.Cache
}

// do runs op with a deadline (none when timeout is 0) and a call state,
// classifies its error, and opens the circuit of the place where it met an
// outage.
func (c *Client) do(ctx context.Context, repo name.Repository, timeout time.Duration, op func(context.Context, *session) error, kc authn.Keychain) error {
	target := Place{Host: repo.RegistryStr(), Repository: repo.RepositoryStr()}
	if refused := c.hosts.refuse(target.Host); refused != nil {
		return refused // before any state is kept for the host
	}
	ctx, state := withCall(ctx, target)
	// The circuit first: its error names the place to wait on (and carries
	// the hold's Retry-After, before which it is not probed).
	if refused := c.circuits.refuse(ctx, target); refused != nil {
		return refused
	}
	// Begun (or let through): a widespread failure of the registry found
	// meanwhile does not cut the call's requests short.
	state.admit(target.Host)
	if wait := c.holds.check(ctx, target.Host, target.Repository); wait != nil {
		return wait
	}
	s, err := c.session(kc)
	if err != nil {
		return newError(target.Host, 0, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := op(ctx, s); err != nil {
		e := newError(target.Host, state.RetryAfter(), err)
		if failed := state.outage(); failed != nil && e.Class == failure.Transient {
			e = at(failed.place, e)
			c.circuits.trip(failed.place, e, failed.probe)
		}
		return e
	}
	return nil
}

// Keychains that implement CacheKey share cached sessions: equal keys must
// mean equal credentials.
type cacheKeyer interface{ CacheKey() string }

func (c *Client) session(kc authn.Keychain) (*session, error) {
	kc = orAnonymous(kc)
	keyer, cacheable := kc.(cacheKeyer)
	if cacheable {
		c.mu.Lock()
		defer c.mu.Unlock()
		if s, ok := c.sessions.Get(keyer.CacheKey()); ok {
			return s.(*session), nil
		}
	}
	opts := []remote.Option{
		remote.WithAuthFromKeychain(kc),
		remote.WithTransport(c.transport),
		remote.WithRetryBackoff(c.opts.Retry),
		remote.WithRetryStatusCodes(retriedStatusCodes...),
		remote.WithRetryPredicate(c.retryInCall),
		remote.WithUserAgent(c.opts.UserAgent),
	}
	puller, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, err
	}
	// As remote wraps WithTransport's.
	base := transport.NewUserAgent(transport.NewRetry(c.transport, transport.WithRetryBackoff(c.opts.Retry),
		transport.WithRetryPredicate(c.retryInCall), transport.WithRetryStatusCodes(retriedStatusCodes...)), c.opts.UserAgent)
	s := &session{puller: puller, options: opts, keychain: kc, base: base, readers: lru.New(sessionReaders)}
	if cacheable {
		c.sessions.Add(keyer.CacheKey(), s)
	}
	return s, nil
}

// sessionReaders bounds the authenticated transports a session keeps: each
// holds a bearer token, which it renews when the registry refuses it.
const sessionReaders = 64

// reader is an authenticated transport that may pull from repo, as ggcr's
// puller makes for each repository: the /v2/ ping (pingCache answers it
// mostly) and, for a registry of tokens, one token exchange, once.
// Made without a lock held: the anonymous session is everyone's, and one
// registry's hang must not hold another's listing.
func (s *session) reader(ctx context.Context, repo name.Repository) (http.RoundTripper, error) {
	if kept, ok := s.readers.Get(repo.String()); ok { // lru.Cache locks
		return kept.(http.RoundTripper), nil
	}
	auth, err := authn.Resolve(ctx, s.keychain, repo)
	if err != nil {
		return nil, err
	}
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, s.base, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	s.readers.Add(repo.String(), rt)
	return rt, nil
}

func orAnonymous(kc authn.Keychain) authn.Keychain {
	if kc == nil {
		return Anonymous
	}
	return kc
}

// retryInCall decides ggcr's in-call retries. It replaces ggcr's default
// predicate: answers with a status meaningOf retries (ggcr's write path asks
// the predicate about those too), and connections cut short. An
// answer with Retry-After is not retried by ggcr, whose sleep would ignore
// it: the transport waits out short ones itself (see retryAfterHolds), and
// the caller requeues after long ones. Refused connections, DNS failures
// and timeouts are not retried in-call either, nor anything on a registry
// with open circuits: the circuits' probes retry for every caller at once.
func (c *Client) retryInCall(err error) bool {
	if host := requestHost(err); host != "" && c.circuits.failing(host) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		if te.Request != nil {
			if state := callFrom(te.Request.Context()); state != nil && state.RetryAfter() > 0 {
				return false
			}
		}
		return meaningOf(te.StatusCode).retried
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// requestHost returns the host of the request err is about, "" if unknown.
func requestHost(err error) string {
	var te *transport.Error
	if errors.As(err, &te) && te.Request != nil {
		return te.Request.URL.Host
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		if u, perr := url.Parse(urlErr.URL); perr == nil {
			return u.Host
		}
	}
	return ""
}
