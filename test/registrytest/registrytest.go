// Package registrytest runs a real registry on a loopback port for tests,
// with faults injected into chosen requests and a switch to refuse
// connections and recover: go-containerregistry's in-memory registry, or a
// proxy in front of another registry (the distribution registry, say).
package registrytest

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// Registry is a registry behind a handler that injects faults into chosen
// requests. It listens on a port it can stop and restart, so tests can also
// refuse connections and recover.
type Registry struct {
	t testing.TB
	// Handler is the registry itself, without faults.
	Handler http.Handler
	Addr    string // host:port
	// auth is what the helpers that push and resolve log in with.
	auth authn.Authenticator
	// network is the in-memory network it listens on (NewOn); nil: a
	// loopback port.
	network *Network

	mu       sync.Mutex
	server   *http.Server
	rules    []*faultRule
	requests []string // "METHOD path?query" of every request that reached the handler
	stop     chan struct{}
}

// faultRule applies act to requests matching method (or any, when empty)
// and a path containing pathPart, times times (forever when times < 0).
type faultRule struct {
	method   string
	pathPart string
	times    int
	act      func(w http.ResponseWriter, r *http.Request)
}

// New starts ggcr's in-memory registry, behaving as the distribution
// registry does towards pushes (likeDistribution), stopped when the test
// ends.
func New(t testing.TB) *Registry {
	t.Helper()
	return start(t, likeDistribution{next: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))}, authn.Anonymous)
}

// NewOn is New on the in-memory network n, for tests in a synctest bubble:
// clients reach it through n.Transport().
func NewOn(t testing.TB, n *Network) *Registry {
	t.Helper()
	return startOn(t, n, likeDistribution{next: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))}, authn.Anonymous)
}

// NewWithReferrers is New with the OCI 1.1 referrers API (which the
// distribution registry, like New, lacks).
func NewWithReferrers(t testing.TB) *Registry {
	t.Helper()
	return start(t, likeDistribution{next: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)), ggcrregistry.WithReferrersSupport(true)),
		referrers: true}, authn.Anonymous)
}

// NewTakingBlobsInPost is New, but the registry takes a blob sent whole in
// the POST that opens its upload (the distribution spec's single-request
// upload, which the distribution registry ignores).
func NewTakingBlobsInPost(t testing.TB) *Registry {
	t.Helper()
	return start(t, likeDistribution{next: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))), postTakesBlob: true}, authn.Anonymous)
}

// NewLax starts ggcr's in-memory registry as it is: no cross-repository
// mounts, and a manifest naming blobs it lacks accepted (a registry that does
// not check, which pushes must not trust).
func NewLax(t testing.TB) *Registry {
	t.Helper()
	return start(t, ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))), authn.Anonymous)
}

// DeleteBlob deletes a blob behind its clients' backs, as a garbage
// collection would (the in-memory registry's blobs are in every repository
// at once).
func (f *Registry) DeleteBlob(digest v1.Hash) {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodDelete, "/v2/any/blobs/"+digest.String(), nil)
	rec := httptest.NewRecorder()
	f.Handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted && rec.Code != http.StatusOK {
		f.t.Fatalf("deleting blob %s: %d %s", digest, rec.Code, rec.Body)
	}
}

// InFrontOf starts a proxy to the registry at upstream (host:port), through
// which faults reach clients of that real registry. The helpers that push
// and resolve log in with auth. Requests keep their Host header, so the
// upload locations upstream answers point back at the proxy.
func InFrontOf(t testing.TB, upstream string, auth authn.Authenticator) *Registry {
	t.Helper()
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstream})
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	return start(t, proxy, auth)
}

func start(t testing.TB, handler http.Handler, auth authn.Authenticator) *Registry {
	return startOn(t, nil, handler, auth)
}

func startOn(t testing.TB, n *Network, handler http.Handler, auth authn.Authenticator) *Registry {
	f := &Registry{t: t, Handler: handler, auth: auth, network: n, stop: make(chan struct{})}
	l, err := f.listen("")
	if err != nil {
		t.Fatal(err)
	}
	f.Addr = l.Addr().String()
	f.serve(l)
	t.Cleanup(func() {
		close(f.stop)
		f.Down()
	})
	return f
}

func (f *Registry) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(f.serveHTTP)}
	f.mu.Lock()
	f.server = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// listen listens on addr ("": a new loopback address).
func (f *Registry) listen(addr string) (net.Listener, error) {
	if f.network != nil {
		return f.network.listen(addr)
	}
	return net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
}

// remoteOptions are the options of the helpers' own requests.
func (f *Registry) remoteOptions() []remote.Option {
	opts := []remote.Option{remote.WithAuth(f.auth)}
	if f.network != nil {
		opts = append(opts, remote.WithTransport(f.network.Transport()))
	}
	return opts
}

// Down stops listening: connections are refused until up.
func (f *Registry) Down() {
	f.mu.Lock()
	srv := f.server
	f.server = nil
	f.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Up listens again on the same address.
func (f *Registry) Up() {
	l, err := f.listen(f.Addr)
	if err != nil {
		f.t.Fatalf("listening again on %s: %v", f.Addr, err)
	}
	f.serve(l)
}

// Inject makes the next times requests (all, when times < 0) with method
// (any, when empty) and a path containing pathPart get act's answer.
func (f *Registry) Inject(method, pathPart string, times int, act func(http.ResponseWriter, *http.Request)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &faultRule{method: method, pathPart: pathPart, times: times, act: act})
}

// ForgetRequests clears the request log, e.g. after setting up images.
func (f *Registry) ForgetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
}

// ClearFaults removes every injected fault.
func (f *Registry) ClearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Count returns how many requests with method (any when empty) and a path
// containing pathPart reached the registry.
func (f *Registry) Count(method, pathPart string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		m, p, _ := strings.Cut(r, " ")
		if (method == "" || m == method) && strings.Contains(p, pathPart) {
			n++
		}
	}
	return n
}

func (f *Registry) serveHTTP(w http.ResponseWriter, r *http.Request) {
	w, r = f.track(w, r) // traffic.go: counts requests and bytes
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
	var act func(http.ResponseWriter, *http.Request)
	for _, rule := range f.rules {
		if (rule.method == "" || rule.method == r.Method) && strings.Contains(r.URL.Path, rule.pathPart) && rule.times != 0 {
			if rule.times > 0 {
				rule.times--
			}
			act = rule.act
			break
		}
	}
	f.mu.Unlock()
	if act != nil {
		act(w, r)
		return
	}
	f.Handler.ServeHTTP(w, r)
}

// Ref returns a reference to repo:tag (or repo@digest) in this registry.
func (f *Registry) Ref(s string) name.Reference {
	f.t.Helper()
	ref, err := name.ParseReference(f.Addr + "/" + s)
	if err != nil {
		f.t.Fatal(err)
	}
	return ref
}

// Push writes a random image to repo:tag with plain ggcr, and returns it.
func (f *Registry) Push(s string) v1.Image {
	f.t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		f.t.Fatal(err)
	}
	f.Write(s, img)
	return img
}

// Write pushes img to repo:tag.
func (f *Registry) Write(s string, img v1.Image) {
	f.t.Helper()
	if err := remote.Write(f.Ref(s), img, f.remoteOptions()...); err != nil {
		f.t.Fatal(err)
	}
}

// Faults.

// Answer answers with code, headers and body.
func Answer(code int, headers map[string]string, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if body != "" && w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// OCIError is a distribution-spec error body.
func OCIError(code, message string) string {
	return fmt.Sprintf(`{"errors":[{"code":%q,"message":%q}]}`, code, message)
}

// Reset closes the connection with a TCP RST before answering.
func Reset(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	switch c := conn.(type) {
	case *net.TCPConn:
		_ = c.SetLinger(0)
	case interface{ Reset() error }: // a Network's
		_ = c.Reset()
		return
	}
	_ = conn.Close()
}

// CutShort promises a body of 4096 bytes, sends 10, and closes.
func CutShort(w http.ResponseWriter, _ *http.Request) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	writeRaw(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n"+
		"Content-Length: 4096\r\n\r\n{\"schemaV")
}

func writeRaw(buf *bufio.ReadWriter, s string) {
	_, _ = buf.WriteString(s)
	_ = buf.Flush()
}

// Hang answers nothing until the client gives up or the test ends.
func (f *Registry) Hang(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.stop:
	}
}

// MalformedManifest answers a manifest GET with a body that is not JSON,
// under its true digest.
func MalformedManifest(w http.ResponseWriter, r *http.Request) {
	body := "{this is not a manifest"
	h, _, _ := v1.SHA256(strings.NewReader(body))
	w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	w.Header().Set("Docker-Content-Digest", h.String())
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

// Requests returns "METHOD path?query" of every request that reached the
// registry since the last ForgetRequests.
func (f *Registry) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// PushImage pushes a linux/amd64 image with one layer and the given labels
// and environment (a stack image, say).
func (f *Registry) PushImage(repo string, labels map[string]string, env ...string) v1.Image {
	f.t.Helper()
	layer, err := random.Layer(128, types.OCILayer)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.PushLayers(repo, []v1.Layer{layer}, labels, env)
}

// Buildpack describes a buildpack in a test buildpackage.
type Buildpack struct {
	ID, Version, API string
	// Size is the size of its (random) layer; 256 bytes when 0.
	Size int64
}

// PushBuildpackage pushes Buildpackage(buildpacks...).
func (f *Registry) PushBuildpackage(repo string, buildpacks ...Buildpack) v1.Image {
	f.t.Helper()
	img, err := Buildpackage(buildpacks...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.Write(repo, img)
	return img
}

// Buildpackage makes a linux/amd64 buildpackage with one (random) layer per
// buildpack.
func Buildpackage(buildpacks ...Buildpack) (v1.Image, error) {
	layers := make([]sampleimages.BuildpackLayer, 0, len(buildpacks))
	for _, bp := range buildpacks {
		layer, err := random.Layer(cmp.Or(bp.Size, 256), types.OCILayer)
		if err != nil {
			return nil, err
		}
		layers = append(layers, sampleimages.BuildpackLayer{ID: bp.ID, Version: bp.Version, Layer: layer,
			Metadata: map[string]any{"api": bp.API}})
	}
	return sampleimages.BuildpackageOfLayers(v1.Platform{OS: "linux", Architecture: "amd64"}, layers...)
}

// PushLayers pushes an OCI linux/amd64 image of layers with labels and env.
func (f *Registry) PushLayers(repo string, layers []v1.Layer, labels map[string]string, env []string) v1.Image {
	f.t.Helper()
	img, err := sampleimages.Image(layers, labels, env...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.Write(repo, img)
	return img
}

// Resolve returns repository@digest of what ref points at now.
func (f *Registry) Resolve(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", err
	}
	desc, err := remote.Head(r, f.remoteOptions()...)
	if err != nil {
		return "", err
	}
	return r.Context().Digest(desc.Digest.String()).String(), nil
}
