package registry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/lru"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// retryAfterHolds remembers until when a registry asked to be left alone
// (Retry-After on a 429 or a 503), so that no request of this Client goes
// there before then, whatever woke the caller: its own requeue, a changed
// spec, a resync, another object on the same images. A hold covers the
// repository the answer was about, or the whole host when the answer was
// about none (the /v2/ ping): a host held for one repository's 429 would
// stall every other repository there for as long (docs/design.md,
// "Retry-After is held in the client, per repository").
//
// A short hold (up to maxWait) is waited out inside the call, when its
// deadline allows: under a steady rate limit, calls then make progress a
// request at a time instead of failing whole and starting over. A longer
// hold fails the call at once, for the caller's requeue.
//
// What a hold is keyed on is bounded, as a registry chooses it: an answer
// to a request the call did not address (a redirect to a fresh path, a
// token service) holds the call's own place, a path whose repository is
// longer than a repository name may be holds its host, and at most
// maxHolds are kept, the least recently used forgotten first (a forgotten
// hold costs one early request, answered with the same Retry-After).
type retryAfterHolds struct {
	maxWait time.Duration

	mu    sync.Mutex
	holds *lru.Cache // holdKey → retryAfterHold
}

// holdKey is a host and a repository; an empty repository is the host.
type holdKey struct{ host, repo string }

type retryAfterHold struct {
	until  time.Time
	reason string // of the answer that asked for it
	place  string // what is held: the host, or host/repository
}

// maxHolds bounds the holds kept: one per place that asked to be left
// alone, each about 100 bytes.
const maxHolds = 4096

// maxHeldRepository is the longest repository a hold is kept for: the
// longest a reference may name (distribution's limit, which ggcr's name
// checks). A longer path is not one of ours; its host is held instead.
const maxHeldRepository = 255

func newRetryAfterHolds(maxWait time.Duration) *retryAfterHolds {
	return &retryAfterHolds{maxWait: maxWait, holds: lru.New(maxHolds)}
}

// heldPlace is the place an answer to req is held against: the request's
// own (host, repository), or that of the request it was redirected from,
// unless the call that sent it addressed another place (a token service),
// which is then held; a repository too long to be one is its host.
func heldPlace(req *http.Request) holdKey {
	req = addressed(req)
	key := holdKey{req.URL.Host, repositoryOf(req.URL.Path)}
	if call := callFrom(req.Context()); call != nil && call.target.Host != "" &&
		(key.host != call.target.Host || (key.repo != "" && key.repo != call.target.Repository)) {
		return holdKey{call.target.Host, call.target.Repository}
	}
	if len(key.repo) > maxHeldRepository {
		key.repo = ""
	}
	return key
}

// note records that repo (or the host, when "") answered with status and
// Retry-After d.
func (h *retryAfterHolds) note(host, repo string, status int, d time.Duration) {
	if d <= 0 {
		return
	}
	reason := meaningOf(status).reason
	until := time.Now().Add(d)
	key := holdKey{host, repo}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.holds.Get(key); !ok || until.After(old.(retryAfterHold).until) {
		h.holds.Add(key, retryAfterHold{until: until, reason: reason, place: Place{Host: host, Repository: repo}.String()})
	}
}

// left returns how long repo is held (by its own hold or its host's),
// and the hold; 0 when it is not.
func (h *retryAfterHolds) left(host, repo string) (time.Duration, retryAfterHold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var longest time.Duration
	var held retryAfterHold
	for _, key := range []holdKey{{host, ""}, {host, repo}} {
		v, ok := h.holds.Get(key)
		if !ok {
			continue
		}
		hold := v.(retryAfterHold)
		if left := hold.until.Sub(time.Now()); left <= 0 {
			h.holds.Remove(key)
		} else if left > longest {
			longest, held = left, hold
		}
	}
	return longest, held
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
	if left, hold := h.left(host, repo); left > h.maxWaitOf(ctx) {
		return at(Place{Host: host, Repository: repo}, h.heldError(host, left, hold))
	}
	return nil
}

// wait returns when repo is no longer held; or at once with an error when
// the hold is longer than ctx's calls may wait or than what is left of ctx.
func (h *retryAfterHolds) wait(ctx context.Context, host, repo string) error {
	for {
		left, hold := h.left(host, repo)
		if left == 0 {
			return nil
		}
		if deadline, ok := ctx.Deadline(); left > h.maxWaitOf(ctx) || (ok && time.Now().Add(left).After(deadline)) {
			return h.heldError(host, left, hold)
		}
		timer := time.NewTimer(left)
		waited := worker.Wait(ctx)
		select {
		case <-ctx.Done():
			timer.Stop()
			waited()
			return ctx.Err()
		case <-timer.C:
			waited()
		}
	}
}

func (h *retryAfterHolds) heldError(host string, left time.Duration, hold retryAfterHold) *failure.Error {
	return placed(Place{Host: host}, failure.Transient, hold.reason, left,
		fmt.Errorf("%s asked not to be called for another %s (Retry-After); not calling it until then",
			hold.place, left.Round(100*time.Millisecond)))
}

// retryAfterNotes notes the Retry-After of every answer in the holds
// (retryAfterHolds). The circuits' probes are sent through it: noted, but
// neither held nor sent again.
type retryAfterNotes struct {
	next  http.RoundTripper
	holds *retryAfterHolds
}

func (t *retryAfterNotes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		place := heldPlace(req)
		t.holds.note(place.host, place.repo, resp.StatusCode, parseRetryAfter(resp, time.Now()))
	}
	return resp, err
}

// retryAfterWaits keeps requests from a place until the Retry-After it
// asked for (retryAfterHolds), waits out a short one and sends the request
// again, and notes on the call the Retry-After it gave up on, for the
// call's error. It sits above retryAfterNotes, which notes the holds.
type retryAfterWaits struct {
	next  http.RoundTripper
	holds *retryAfterHolds
	// failing reports whether a circuit covering place is open: a request
	// waiting out a Retry-After is not sent again into a place that
	// another call has found failing meanwhile.
	failing func(Place) bool
}

// maxRetryAfterResends bounds how often one request is sent again after
// waiting out a Retry-After.
const maxRetryAfterResends = 10

func (t *retryAfterWaits) RoundTrip(req *http.Request) (*http.Response, error) {
	place := heldPlace(req)
	host, repo := place.host, place.repo
	for resends := 0; ; resends++ {
		if err := t.holds.wait(req.Context(), host, repo); err != nil {
			return nil, err
		}
		resp, err := t.next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		d := parseRetryAfter(resp, time.Now())
		if d <= 0 {
			return resp, nil
		}
		replay, ok := rewound(req)
		// (wait waits out the hold when it is short enough.)
		if !ok || resends == maxRetryAfterResends || t.holds.wait(req.Context(), host, repo) != nil ||
			t.failing(Place{Host: host, Repository: repo}) {
			// Given up: the caller's error carries the Retry-After.
			if call := callFrom(req.Context()); call != nil {
				call.noteRetryAfter(d)
			}
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		req = replay
	}
}

// rewound returns req ready to be sent again: as it is when it has no body,
// with a fresh body when it can make one, and false when it cannot (a
// streamed upload).
func rewound(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	again := req.Clone(req.Context())
	again.Body = body
	return again, true
}

// parseRetryAfter reads Retry-After (seconds or an HTTP date) from an
// answer whose status gives it a meaning (429 and 503, see meaningOf).
func parseRetryAfter(resp *http.Response, now time.Time) time.Duration {
	if !meaningOf(resp.StatusCode).retryAfter {
		return 0
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Clamp absurd values: a day is long enough to mean "much later".
		return min(time.Duration(secs)*time.Second, 24*time.Hour)
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return min(at.Sub(now), 24*time.Hour)
	}
	return 0
}
