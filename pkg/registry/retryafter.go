package registry

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// retryAfterHolds remembers, per registry host, until when the registry
// asked to be left alone (Retry-After on a 429 or a 503), so that no
// request of this Client reaches it before then, whatever woke the caller:
// its own requeue, a changed spec, a resync, a second object on the same
// registry. Per host, because registries limit by account or client
// address, not by repository.
//
// A short hold (up to maxWait) is waited out inside the call, when its
// deadline allows: under a steady rate limit, calls then make progress a
// request at a time instead of failing whole and starting over. A longer
// hold fails the call at once, for the caller's requeue.
type retryAfterHolds struct {
	now     func() time.Time
	maxWait time.Duration

	mu    sync.Mutex
	holds map[string]retryAfterHold
}

type retryAfterHold struct {
	until  time.Time
	reason string // of the answer that asked for it
}

func newRetryAfterHolds(now func() time.Time, maxWait time.Duration) *retryAfterHolds {
	return &retryAfterHolds{now: now, maxWait: maxWait, holds: map[string]retryAfterHold{}}
}

// note records that host answered with status and Retry-After d.
func (h *retryAfterHolds) note(host string, status int, d time.Duration) {
	if d <= 0 {
		return
	}
	reason := ReasonRegistryUnavailable
	if status == http.StatusTooManyRequests {
		reason = ReasonRateLimited
	}
	until := h.now().Add(d)
	h.mu.Lock()
	defer h.mu.Unlock()
	if until.After(h.holds[host].until) {
		h.holds[host] = retryAfterHold{until: until, reason: reason}
	}
}

// left returns how long host is held, and why; 0 when it is not.
func (h *retryAfterHolds) left(host string) (time.Duration, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold, ok := h.holds[host]
	if !ok {
		return 0, ""
	}
	left := hold.until.Sub(h.now())
	if left <= 0 {
		delete(h.holds, host)
		return 0, ""
	}
	return left, hold.reason
}

// check fails a call that would have to wait longer than maxWait for host.
func (h *retryAfterHolds) check(host string) *Error {
	if left, reason := h.left(host); left > h.maxWait {
		return h.heldError(host, left, reason)
	}
	return nil
}

// wait returns when host is no longer held; or at once with an error when
// the hold is longer than maxWait or than what is left of ctx.
func (h *retryAfterHolds) wait(ctx context.Context, host string) error {
	for {
		left, reason := h.left(host)
		if left == 0 {
			return nil
		}
		if deadline, ok := ctx.Deadline(); left > h.maxWait || (ok && h.now().Add(left).After(deadline)) {
			return h.heldError(host, left, reason)
		}
		timer := time.NewTimer(left)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

func (h *retryAfterHolds) heldError(host string, left time.Duration, reason string) *Error {
	return &Error{Class: Transient, Reason: reason, Host: host, RetryAfter: left,
		Err: fmt.Errorf("%s asked not to be called for another %s (Retry-After); not calling it until then",
			host, left.Round(100*time.Millisecond))}
}
