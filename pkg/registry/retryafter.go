package registry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// retryAfterHolds remembers until when a registry asked to be left alone
// (Retry-After on a 429 or a 503), so that no request of this Client goes
// there before then, whatever woke the caller: its own requeue, a changed
// spec, a resync, another object on the same images. A hold covers the
// repository the answer was about, or the whole host when the answer was
// about none (the /v2/ ping): holding the host for one repository's 429
// stalled every other repository there for as long (bench/results.md § 4),
// and a registry that limits per account answers each repository's first
// request with its own 429 anyway.
//
// A short hold (up to maxWait) is waited out inside the call, when its
// deadline allows: under a steady rate limit, calls then make progress a
// request at a time instead of failing whole and starting over. A longer
// hold fails the call at once, for the caller's requeue.
type retryAfterHolds struct {
	clock   clock.Clock
	maxWait time.Duration

	mu    sync.Mutex
	holds map[holdKey]retryAfterHold
}

// holdKey is a host and a repository; an empty repository is the host.
type holdKey struct{ host, repo string }

type retryAfterHold struct {
	until  time.Time
	reason string // of the answer that asked for it
}

func newRetryAfterHolds(clk clock.Clock, maxWait time.Duration) *retryAfterHolds {
	return &retryAfterHolds{clock: clk, maxWait: maxWait, holds: map[holdKey]retryAfterHold{}}
}

// note records that repo (or the host, when "") answered with status and
// Retry-After d.
func (h *retryAfterHolds) note(host, repo string, status int, d time.Duration) {
	if d <= 0 {
		return
	}
	reason := ReasonRegistryUnavailable
	if status == http.StatusTooManyRequests {
		reason = ReasonRateLimited
	}
	until := h.clock.Now().Add(d)
	key := holdKey{host, repo}
	h.mu.Lock()
	defer h.mu.Unlock()
	if until.After(h.holds[key].until) {
		h.holds[key] = retryAfterHold{until: until, reason: reason}
	}
	if len(h.holds) > maxHoldsBeforePrune {
		// Holds are dropped when looked up after they end; those of places
		// nobody asks for again (a tenant's thousand repositories) go here.
		now := h.clock.Now()
		for k, hold := range h.holds {
			if !hold.until.After(now) {
				delete(h.holds, k)
			}
		}
	}
}

// maxHoldsBeforePrune is the number of holds above which a new one sweeps
// the ended ones away.
const maxHoldsBeforePrune = 1024

// left returns how long repo is held (by its own hold or its host's),
// and why; 0 when it is not.
func (h *retryAfterHolds) left(host, repo string) (time.Duration, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var longest time.Duration
	var reason string
	for _, key := range []holdKey{{host, ""}, {host, repo}} {
		hold, ok := h.holds[key]
		if !ok {
			continue
		}
		if left := hold.until.Sub(h.clock.Now()); left <= 0 {
			delete(h.holds, key)
		} else if left > longest {
			longest, reason = left, hold.reason
		}
	}
	return longest, reason
}

// maxHoldWaitKey carries a call's own cap on waiting out holds.
type maxHoldWaitKey struct{}

// WithMaxHoldWait returns ctx whose registry calls wait out a Retry-After
// of at most d inside the call (less than the client's
// MaxRetryAfterWait); a longer one fails the call at once, as any hold
// beyond MaxRetryAfterWait does. 0: fail on the first Retry-After. For
// callers that must report something before they may wait.
func WithMaxHoldWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, maxHoldWaitKey{}, max(d, 0))
}

// maxWaitOf is how long a call on ctx waits out a hold.
func (h *retryAfterHolds) maxWaitOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(maxHoldWaitKey{}).(time.Duration); ok {
		return min(d, h.maxWait)
	}
	return h.maxWait
}

// check fails a call on ctx that would have to wait longer than it may.
func (h *retryAfterHolds) check(ctx context.Context, host, repo string) *failure.Error {
	if left, reason := h.left(host, repo); left > h.maxWaitOf(ctx) {
		held := h.heldError(host, left, reason)
		held.Repository = repo
		return held
	}
	return nil
}

// wait returns when repo is no longer held; or at once with an error when
// the hold is longer than ctx's calls may wait or than what is left of ctx.
func (h *retryAfterHolds) wait(ctx context.Context, host, repo string) error {
	for {
		left, reason := h.left(host, repo)
		if left == 0 {
			return nil
		}
		if deadline, ok := ctx.Deadline(); left > h.maxWaitOf(ctx) || (ok && h.clock.Now().Add(left).After(deadline)) {
			return h.heldError(host, left, reason)
		}
		timer := h.clock.NewTimer(left)
		waited := worker.Wait(ctx)
		select {
		case <-ctx.Done():
			timer.Stop()
			waited()
			return ctx.Err()
		case <-timer.C():
			waited()
		}
	}
}

func (h *retryAfterHolds) heldError(host string, left time.Duration, reason string) *failure.Error {
	return &failure.Error{Class: failure.Transient, Reason: reason, Host: host, RetryAfter: left,
		Err: fmt.Errorf("%s asked not to be called for another %s (Retry-After); not calling it until then",
			host, left.Round(100*time.Millisecond))}
}

// repositoryOf returns the repository a registry API path is about
// ("/v2/team/app/manifests/1" → "team/app"), "" for other paths.
func repositoryOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return ""
	}
	for _, kind := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.LastIndex(rest, kind); i > 0 {
			return rest[:i]
		}
	}
	return ""
}
