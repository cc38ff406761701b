package registry

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// faultyRegistry is ggcr's in-memory registry behind a handler that injects
// faults into chosen requests. It listens on a port it can stop and restart,
// so tests can also refuse connections and recover.
type faultyRegistry struct {
	t       testing.TB
	handler http.Handler
	addr    string

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

func newFaultyRegistry(t testing.TB) *faultyRegistry {
	t.Helper()
	f := &faultyRegistry{
		t:       t,
		handler: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))),
		stop:    make(chan struct{}),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	f.serve(l)
	t.Cleanup(func() {
		close(f.stop)
		f.down()
	})
	return f
}

func (f *faultyRegistry) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(f.serveHTTP)}
	f.mu.Lock()
	f.server = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// down stops listening: connections are refused until up.
func (f *faultyRegistry) down() {
	f.mu.Lock()
	srv := f.server
	f.server = nil
	f.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// up listens again on the same address.
func (f *faultyRegistry) up() {
	l, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("listening again on %s: %v", f.addr, err)
	}
	f.serve(l)
}

func (f *faultyRegistry) inject(method, pathPart string, times int, act func(http.ResponseWriter, *http.Request)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &faultRule{method: method, pathPart: pathPart, times: times, act: act})
}

// forgetRequests clears the request log, e.g. after setting up images.
func (f *faultyRegistry) forgetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
}

func (f *faultyRegistry) clearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// count returns how many requests with method (any when empty) and a path
// containing pathPart reached the registry.
func (f *faultyRegistry) count(method, pathPart string) int {
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

func (f *faultyRegistry) serveHTTP(w http.ResponseWriter, r *http.Request) {
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
	f.handler.ServeHTTP(w, r)
}

// ref returns a reference to repo:tag (or repo@digest) in this registry.
func (f *faultyRegistry) ref(s string) name.Reference {
	f.t.Helper()
	ref, err := name.ParseReference(f.addr + "/" + s)
	if err != nil {
		f.t.Fatal(err)
	}
	return ref
}

// push writes a random image to repo:tag, bypassing the faults' subject, the
// Client, and returns it.
func (f *faultyRegistry) push(s string) v1.Image {
	f.t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := remote.Write(f.ref(s), img); err != nil {
		f.t.Fatal(err)
	}
	return img
}

// Faults.

func answer(code int, headers map[string]string, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func ociError(code, message string) string {
	return fmt.Sprintf(`{"errors":[{"code":%q,"message":%q}]}`, code, message)
}

// reset closes the connection with a TCP RST before answering.
func reset(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// cutShort promises a body of 4096 bytes, sends 10, and closes.
func cutShort(w http.ResponseWriter, _ *http.Request) {
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

// hang answers nothing until the client gives up or the test ends.
func (f *faultyRegistry) hang(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.stop:
	}
}

// malformedManifest answers a manifest GET with a body that is not JSON,
// under its true digest.
func malformedManifest(w http.ResponseWriter, r *http.Request) {
	body := "{this is not a manifest"
	h, _, _ := v1.SHA256(strings.NewReader(body))
	w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	w.Header().Set("Docker-Content-Digest", h.String())
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

// newTestClient returns a Client with a short deadline, for fault tests.
func newTestClient(t testing.TB, opts Options) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return New(ctx, opts)
}
