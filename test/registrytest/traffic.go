package registrytest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Traffic is what reached a registry, request by request: method, kind of
// endpoint, repository, status and bytes in both directions. Every Registry
// has one (Registry.Traffic); a Proxy counts the traffic to any registry,
// e.g. the distribution registry, which mounts blobs across repositories.
type Traffic struct {
	mu       sync.Mutex
	requests []*Request
}

// Request is one request a registry answered (or is answering).
type Request struct {
	At     time.Time
	Method string
	// Kind is "ping" (/v2/), "manifest", "blob", "upload" (blob upload
	// sessions: POST, PATCH, PUT), "mount" (a POST ?mount=), "tags",
	// "referrers" or "other".
	Kind string
	// Repo is the repository ("" for ping and other).
	Repo string
	// Ref is the tag or digest of a manifest or blob, or the digest a
	// finished upload (PUT ?digest=) carries.
	Ref   string
	Query string

	status   atomic.Int64 // 200 until WriteHeader says otherwise
	bytesIn  atomic.Int64 // request body
	bytesOut atomic.Int64 // response body
}

// Status is the answer's status code.
func (r *Request) Status() int { return int(r.status.Load()) }

// BytesIn is the size of the request body read so far.
func (r *Request) BytesIn() int64 { return r.bytesIn.Load() }

// BytesOut is the size of the response body written so far.
func (r *Request) BytesOut() int64 { return r.bytesOut.Load() }

// String is "METHOD kind repo ref status".
func (r *Request) String() string {
	return strings.Join([]string{r.Method, r.Kind, r.Repo, r.Ref, http.StatusText(r.Status())}, " ")
}

var traffics sync.Map // *Registry → *Traffic

// Traffic returns the registry's traffic log, which counts every request
// since the registry started (or since Traffic().Reset()).
func (f *Registry) Traffic() *Traffic {
	t, _ := traffics.LoadOrStore(f, &Traffic{})
	return t.(*Traffic)
}

// track records r in f's traffic log and returns the writer and request to
// serve it with, which count the bytes.
func (f *Registry) track(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	return f.Traffic().Track(w, r)
}

// Track records r and returns a writer and a request that count its bytes.
func (t *Traffic) Track(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	req := classify(r.Method, r.URL)
	req.At = time.Now()
	req.status.Store(http.StatusOK)
	t.mu.Lock()
	t.requests = append(t.requests, req)
	t.mu.Unlock()
	if r.Body != nil && r.Body != http.NoBody {
		r = r.Clone(r.Context())
		r.Body = &countingBody{ReadCloser: r.Body, n: &req.bytesIn}
	}
	return &countingWriter{ResponseWriter: w, req: req}, r
}

// Reset forgets every request so far.
func (t *Traffic) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests = nil
}

// Requests returns the requests so far, oldest first.
func (t *Traffic) Requests() []*Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Request(nil), t.requests...)
}

// Summary adds up the requests so far.
func (t *Traffic) Summary() Summary { return Summarize(t.Requests()) }

// Summary is a count of requests by method and kind, and of bytes.
type Summary struct {
	Requests int
	// ByKind counts by "METHOD kind", e.g. "PUT manifest", "HEAD blob".
	ByKind   map[string]int
	BytesIn  int64 // request bodies (uploads)
	BytesOut int64 // response bodies (downloads)
	// Status counts by status code.
	Status map[int]int
}

// Summarize adds up requests.
func Summarize(reqs []*Request) Summary {
	s := Summary{ByKind: map[string]int{}, Status: map[int]int{}}
	for _, r := range reqs {
		s.Requests++
		s.ByKind[r.Method+" "+r.Kind]++
		s.BytesIn += r.BytesIn()
		s.BytesOut += r.BytesOut()
		s.Status[r.Status()]++
	}
	return s
}

// Filter returns the requests for which keep is true.
func Filter(reqs []*Request, keep func(*Request) bool) []*Request {
	var out []*Request
	for _, r := range reqs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// classify names the endpoint of a distribution-spec request.
func classify(method string, u *url.URL) *Request {
	r := &Request{Method: method, Query: u.RawQuery, Kind: "other"}
	p := strings.TrimPrefix(u.Path, "/v2/")
	if p == u.Path {
		return r
	}
	if p == "" {
		r.Kind = "ping"
		return r
	}
	for _, sep := range []string{"/manifests/", "/blobs/uploads/", "/blobs/", "/tags/list", "/referrers/"} {
		i := strings.LastIndex(p, sep)
		if i < 0 {
			continue
		}
		r.Repo, r.Ref = p[:i], p[i+len(sep):]
		switch sep {
		case "/manifests/":
			r.Kind = "manifest"
		case "/blobs/uploads/":
			r.Kind, r.Ref = "upload", u.Query().Get("digest")
			if method == http.MethodPost && u.Query().Get("mount") != "" {
				r.Kind, r.Ref = "mount", u.Query().Get("mount")
			}
		case "/blobs/":
			r.Kind = "blob"
		case "/tags/list":
			r.Kind = "tags"
		case "/referrers/":
			r.Kind = "referrers"
		}
		return r
	}
	return r
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type countingWriter struct {
	http.ResponseWriter
	req         *Request
	wroteHeader bool
}

func (w *countingWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.req.status.Store(int64(code))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(p)
	w.req.bytesOut.Add(int64(n))
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack lets the faults that cut connections (Reset, CutShort) through;
// such a request counts as status 0.
func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.req.status.Store(0)
	return w.ResponseWriter.(http.Hijacker).Hijack()
}

// Proxy is a reverse proxy on a loopback port that records the traffic to
// another registry.
type Proxy struct {
	Addr    string // host:port
	Traffic *Traffic
}

// NewProxy starts a proxy to the registry at upstream (host:port, plain
// HTTP), stopped when the test ends. The registry sees the proxy's address
// as its host, so the upload locations it answers lead back through the
// proxy.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String(), Traffic: &Traffic{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstream})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, r = p.Traffic.Track(w, r)
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}
