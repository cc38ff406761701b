package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// stallTransport cuts requests that stop making progress, so that a
// registry that accepts connections and never answers (a hang) is noticed
// in seconds rather than at a call's deadline: no answer to a read within
// answer, no answer to a write within writeAnswer after its body was sent
// (a registry may check a big upload before answering), an answer's body
// that moved no byte for answer (a registry that has begun to answer sends
// as fast as the network takes it), or an upload that the registry took no
// byte of for idle (registries and proxies may buffer, throttle or pause
// big uploads). A transfer that moves is never cut, however long it takes.
type stallTransport struct {
	next                      http.RoundTripper
	answer, writeAnswer, idle time.Duration
}

// stallError is a request cut for not making progress. It is a timeout, as
// net.Error sees it, so it is classified with the other network timeouts.
type stallError struct {
	method, url, what string
	after             time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%s %s: %s for %s", e.method, e.url, e.what, e.after)
}
func (e *stallError) Timeout() bool   { return true }
func (e *stallError) Temporary() bool { return true }

func (t *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	w := &watchdog{cancel: cancel, method: req.Method, url: redactURL(req.URL)}
	// A write waits longer for its answer once its body is sent (the
	// registry may check a big upload first); bodiless ones (starting an
	// upload, a mount) are answered as quickly as reads.
	answer := t.answer
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody && req.Method != http.MethodGet && req.Method != http.MethodHead {
		answer = t.writeAnswer
	}
	req = req.WithContext(ctx)
	if hasBody {
		w.expect("the registry took none of the request body", t.idle)
		req.Body = &progressBody{ReadCloser: req.Body, w: w, done: func() { w.expect("no answer", answer) }}
	} else {
		w.expect("no answer", answer)
	}
	// Sending, waiting for the answer and reading it: the worker may serve
	// another reconcile meanwhile (turns.Turns).
	waited := worker.Wait(req.Context())
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		waited()
		w.stop()
		if stalled := w.stalled(ctx); stalled != nil {
			err = stalled
		}
		cancel(nil)
		return nil, err
	}
	w.expect("the answer's body stopped", t.answer)
	resp.Body = &progressBody{ReadCloser: resp.Body, w: w, ctx: ctx, done: func() { waited(); w.stop(); cancel(nil) }}
	return resp, nil
}

// watchdog cancels a request when it made no progress for its limit.
type watchdog struct {
	cancel      context.CancelCauseFunc
	method, url string

	mu       sync.Mutex
	what     string
	limit    time.Duration
	progress time.Time
	timer    *time.Timer
	stopped  bool
}

// expect starts waiting up to limit for progress, what being the failure
// when none comes.
func (w *watchdog) expect(what string, limit time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.what, w.limit, w.progress = what, limit, time.Now()
	if w.timer == nil {
		w.timer = time.AfterFunc(limit, w.fire)
	} else {
		w.timer.Reset(limit)
	}
}

func (w *watchdog) moved() {
	w.mu.Lock()
	w.progress = time.Now()
	w.mu.Unlock()
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	// Progress since the timer was set: wait the rest from then.
	if quiet := time.Since(w.progress); quiet < w.limit {
		w.timer.Reset(w.limit - quiet)
		return
	}
	w.stopped = true
	w.cancel(&stallError{method: w.method, url: w.url, what: w.what, after: w.limit})
}

func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stalled returns the stallError that cancelled ctx, if one did.
func (w *watchdog) stalled(ctx context.Context) error {
	var stalled *stallError
	if errors.As(context.Cause(ctx), &stalled) {
		return stalled
	}
	return nil
}

// progressBody tells its watchdog about every byte moved, and calls done at
// the end (EOF or Close), once.
type progressBody struct {
	io.ReadCloser
	w    *watchdog
	ctx  context.Context // the request's, for the stall as the error; nil for request bodies
	once sync.Once
	done func()
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.moved()
	}
	if err == io.EOF {
		b.once.Do(b.done)
	} else if err != nil && b.ctx != nil {
		if stalled := b.w.stalled(b.ctx); stalled != nil {
			err = stalled
		}
	}
	return n, err
}

func (b *progressBody) Close() error {
	err := b.ReadCloser.Close()
	if b.ctx != nil { // a request body is closed by the transport when sent, not when answered
		b.once.Do(b.done)
	}
	return err
}
