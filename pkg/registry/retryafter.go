package registry

import (
	"fmt"
	"sync"
	"time"
)

// retryAfterHolds remembers, per registry host, until when the registry
// asked to be left alone (Retry-After on a 429 or a 503), so that no call
// of this Client reaches it before then, whatever woke the caller: its own
// requeue, a changed spec, a resync, a second object on the same registry.
// Per host, because registries limit by account or client address, not by
// repository.
type retryAfterHolds struct {
	now func() time.Time

	mu    sync.Mutex
	holds map[string]retryAfterHold
}

type retryAfterHold struct {
	until  time.Time
	reason string // of the answer that asked for it
}

func newRetryAfterHolds(now func() time.Time) *retryAfterHolds {
	return &retryAfterHolds{now: now, holds: map[string]retryAfterHold{}}
}

// note records a failed call's Retry-After, if any.
func (h *retryAfterHolds) note(host string, e *Error) {
	if e.RetryAfter <= 0 {
		return
	}
	until := h.now().Add(e.RetryAfter)
	h.mu.Lock()
	defer h.mu.Unlock()
	if until.After(h.holds[host].until) {
		h.holds[host] = retryAfterHold{until: until, reason: e.Reason}
	}
}

// check returns a transient error with the time left when host asked to be
// left alone until later, nil otherwise.
func (h *retryAfterHolds) check(host string) *Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold, ok := h.holds[host]
	if !ok {
		return nil
	}
	left := hold.until.Sub(h.now())
	if left <= 0 {
		delete(h.holds, host)
		return nil
	}
	return &Error{Class: Transient, Reason: hold.reason, Host: host, RetryAfter: left,
		Err: fmt.Errorf("%s asked not to be called again before %s (Retry-After); not calling it until then",
			host, hold.until.UTC().Format(time.RFC3339))}
}
