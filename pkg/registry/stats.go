package registry

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// countingTransport counts the requests on the wire and their bytes, by
// host (through hostNames' bounded set). It sits below everything that
// resends, so that each attempt is counted.
type countingTransport struct {
	next  http.RoundTripper
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
//
// When the operator lists the registries to name (Options.MetricHosts),
// those and only those are named: otherwise the first hosts to answer keep
// their names for the life of the process, and a tenant's registries may
// be among them.
type hostNames struct {
	mu    sync.Mutex
	named map[string]bool
	max   int
	// listed: the operator named the hosts; no other is given a name.
	listed bool
}

func newHostNames(max int, listed []string) *hostNames {
	n := &hostNames{named: map[string]bool{}, max: max, listed: len(listed) > 0}
	for _, host := range listed {
		n.named[host] = true
	}
	return n
}

// of returns the name host is counted under; answered says that host has
// just answered.
func (n *hostNames) of(host string, answered bool) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.named[host] {
		return host
	}
	if answered && !n.listed && (n.max <= 0 || len(n.named) < n.max) {
		n.named[host] = true
		return host
	}
	return OtherHosts
}

func newCountingTransport(next http.RoundTripper, names *hostNames) *countingTransport {
	return &countingTransport{next: next, names: names,
		requests: map[RequestKey]int64{}, bytesUp: map[string]int64{}, bytesDown: map[string]int64{}}
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	if req.Body != nil && req.Body != http.NoBody {
		body := &countingReader{r: req.Body}
		req = req.Clone(req.Context())
		req.Body = body
		defer func() { t.add(host, &t.bytesUp, body.n.Load()) }()
	}
	resp, err := t.next.RoundTrip(req)
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

func (t *countingTransport) add(host string, m *map[string]int64, n int64) {
	if n == 0 {
		return
	}
	name := t.names.of(host, false)
	t.mu.Lock()
	(*m)[name] += n
	t.mu.Unlock()
}

func (t *countingTransport) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Requests: maps.Clone(t.requests), BytesUp: maps.Clone(t.bytesUp), BytesDown: maps.Clone(t.bytesDown)}
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
