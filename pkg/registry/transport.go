package registry

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RequestKey groups counted requests.
type RequestKey struct {
	Host   string
	Method string
	// Status is "2xx", "3xx", "4xx", "5xx", or "error" when no answer came.
	Status string
}

// Stats is a snapshot of a Client's requests. ggcr's in-call retries and
// token exchanges are counted one by one: these are requests on the wire.
type Stats struct {
	Requests map[RequestKey]int64
	// BytesUp and BytesDown count request and response bodies by host.
	BytesUp   map[string]int64
	BytesDown map[string]int64
}

// Total returns the number of requests, optionally only those with the
// given method (e.g. Total("HEAD")).
func (s Stats) Total(methods ...string) int64 {
	var n int64
	for k, v := range s.Requests {
		if len(methods) == 0 || slices.Contains(methods, k.Method) {
			n += v
		}
	}
	return n
}

// TotalBytesUp returns the bytes sent to all registries.
func (s Stats) TotalBytesUp() int64 { return sum(s.BytesUp) }

// TotalBytesDown returns the bytes received from all registries.
func (s Stats) TotalBytesDown() int64 { return sum(s.BytesDown) }

// Sub returns the requests and bytes in s that are not in before.
func (s Stats) Sub(before Stats) Stats {
	out := Stats{Requests: map[RequestKey]int64{}, BytesUp: map[string]int64{}, BytesDown: map[string]int64{}}
	for k, v := range s.Requests {
		if d := v - before.Requests[k]; d != 0 {
			out.Requests[k] = d
		}
	}
	for k, v := range s.BytesUp {
		if d := v - before.BytesUp[k]; d != 0 {
			out.BytesUp[k] = d
		}
	}
	for k, v := range s.BytesDown {
		if d := v - before.BytesDown[k]; d != 0 {
			out.BytesDown[k] = d
		}
	}
	return out
}

// accountingTransport is the innermost RoundTripper under ggcr's retry and
// auth layers, so it sees every attempt. It counts requests and bytes, holds
// requests to a registry until the Retry-After it asked for, waits out short
// ones and sends again, and records the Retry-After it gives up on on the
// call state of the request's context.
type accountingTransport struct {
	inner http.RoundTripper
	waits *retryAfterHolds
	// failing reports whether a circuit covering place is open: a request
	// waiting out a Retry-After is not sent again into a place that
	// another call has found failing meanwhile (set once, before use).
	failing func(Place) bool

	names *hostNames

	mu        sync.Mutex
	requests  map[RequestKey]int64
	bytesUp   map[string]int64
	bytesDown map[string]int64
}

// OtherHosts is the host the requests, bytes and circuits of the registries
// beyond Options.NamedHosts (and of those that never answered) are counted
// under.
const OtherHosts = "other"

// hostNames are the hosts counted under their own name, at most max: a
// host gets a name when it first answers (a registry, not a made-up name
// that never resolves), while names are left. Hosts are tenants' choice (a
// builder's tag), so every per-host count (requests, bytes, probes, the
// metrics' host label) goes through one bounded set.
type hostNames struct {
	mu    sync.Mutex
	named map[string]bool
	max   int
}

func newHostNames(max int) *hostNames { return &hostNames{named: map[string]bool{}, max: max} }

// of returns the name host is counted under; answered says that host has
// just answered.
func (n *hostNames) of(host string, answered bool) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.named[host] {
		return host
	}
	if answered && (n.max <= 0 || len(n.named) < n.max) {
		n.named[host] = true
		return host
	}
	return OtherHosts
}

func newAccountingTransport(inner http.RoundTripper, waits *retryAfterHolds, names *hostNames) *accountingTransport {
	return &accountingTransport{
		inner:     inner,
		waits:     waits,
		names:     names,
		requests:  map[RequestKey]int64{},
		bytesUp:   map[string]int64{},
		bytesDown: map[string]int64{},
	}
}

// maxRetryAfterResends bounds how often one request is sent again after
// waiting out a Retry-After.
const maxRetryAfterResends = 10

func (t *accountingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host, repo := req.URL.Host, repositoryOf(req.URL.Path)
	for resends := 0; ; resends++ {
		if err := t.waits.wait(req.Context(), host, repo); err != nil {
			return nil, err
		}
		resp, err := t.send(host, req)
		if err != nil {
			return nil, err
		}
		d := parseRetryAfter(resp, time.Now())
		if d <= 0 {
			return resp, nil
		}
		t.waits.note(host, repo, resp.StatusCode, d)
		replay, ok := rewound(req)
		// (wait waits out the hold when it is short enough.)
		if !ok || resends == maxRetryAfterResends || t.waits.wait(req.Context(), host, repo) != nil ||
			(t.failing != nil && t.failing(Place{Host: host, Repository: repo})) {
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

// sendOnce sends req once, as the circuits' probes do: counted, its
// Retry-After noted, and neither held nor sent again.
func (t *accountingTransport) sendOnce(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	resp, err := t.send(host, req)
	if err == nil {
		t.waits.note(host, repositoryOf(req.URL.Path), resp.StatusCode, parseRetryAfter(resp, time.Now()))
	}
	return resp, err
}

// send sends req once, counting it and its bytes.
func (t *accountingTransport) send(host string, req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		body := &countingReader{r: req.Body}
		req = req.Clone(req.Context())
		req.Body = body
		defer func() { t.add(host, &t.bytesUp, body.n.Load()) }()
	}
	resp, err := t.inner.RoundTrip(req)
	status := "error"
	if err == nil {
		status = strconv.Itoa(resp.StatusCode/100) + "xx"
		resp.Body = &countingBody{ReadCloser: resp.Body, done: func(n int64) { t.add(host, &t.bytesDown, n) }}
	}
	key := RequestKey{Host: t.names.of(host, err == nil), Method: req.Method, Status: status}
	t.mu.Lock()
	t.requests[key]++
	t.mu.Unlock()
	return resp, err
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

func (t *accountingTransport) add(host string, m *map[string]int64, n int64) {
	if n == 0 {
		return
	}
	name := t.names.of(host, false)
	t.mu.Lock()
	(*m)[name] += n
	t.mu.Unlock()
}

func (t *accountingTransport) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Requests: maps.Clone(t.requests), BytesUp: maps.Clone(t.bytesUp), BytesDown: maps.Clone(t.bytesDown)}
}

// parseRetryAfter reads Retry-After (seconds or an HTTP date) from a 429 or
// 503 answer, the two statuses for which RFC 9110 gives it this meaning.
func parseRetryAfter(resp *http.Response, now time.Time) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
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

// call is the state of one Client operation, carried in the context of the
// requests it makes.
type call struct {
	retryAfter atomic.Int64 // the longest Retry-After seen, in ns
	callOutage
	// admitted: the registries whose widespread failure let this call
	// through (Circuits.admit).
	admitted sync.Map // host → true
}

func (c *call) admit(host string)           { c.admitted.Store(host, true) }
func (c *call) admittedTo(host string) bool { _, ok := c.admitted.Load(host); return ok }

func (c *call) noteRetryAfter(d time.Duration) {
	for {
		old := c.retryAfter.Load()
		if int64(d) <= old || c.retryAfter.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

func (c *call) RetryAfter() time.Duration { return time.Duration(c.retryAfter.Load()) }

type callKey struct{}

func withCall(ctx context.Context) (context.Context, *call) {
	c := &call{}
	return context.WithValue(ctx, callKey{}, c), c
}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

type countingReader struct {
	r io.ReadCloser
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

// countingBody reports the bytes read from a response body when it is closed.
type countingBody struct {
	io.ReadCloser
	n    int64
	once sync.Once
	done func(int64)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.once.Do(func() { b.done(b.n) })
	}
	return n, err
}

func (b *countingBody) Close() error {
	b.once.Do(func() { b.done(b.n) })
	return b.ReadCloser.Close()
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
