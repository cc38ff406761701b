package registry

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Bounds on what a registry may make the controller hold in memory. Real
// manifests are a few KiB (an index of many platforms, tens of KiB) and
// configs rarely more than a few hundred KiB; ggcr alone would read a
// manifest of up to 100 MiB, and a hostile or broken registry could make
// every reconcile do so.
const (
	maxManifestSize = 4 << 20
	maxConfigSize   = 8 << 20
	// maxImageLayers bounds the layers of an image read: each is an object
	// kept with the image (container runtimes refuse more than 128 in a
	// running image; a signature image holds one per signature).
	maxImageLayers = 1024
)

// limitTransport fails a manifest answer larger than maxManifestSize: at
// once when its Content-Length says so, else once its body passes the
// limit. The error is permanent (the same manifest will be as large next
// time) and names the manifest and the size.
//
// It also names the flag when net/http refused an answer for headers over
// --registry-max-header-bytes (Transport.MaxResponseHeaderBytes): that
// error has no type of its own, and without the flag's name a tenant reads
// only "transport connection broken" (or, where ggcr tried HTTPS first,
// "HTTP response to HTTPS client").
type limitTransport struct {
	next           http.RoundTripper
	maxHeaderBytes int64
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil && headersTooLarge(err, t.maxHeaderBytes) {
		return nil, placed(Place{Host: req.URL.Host}, failure.Waiting, ReasonRegistryError, 0, fmt.Errorf(
			"%s %s: the registry answered with more than %s of headers (--registry-max-header-bytes); not read",
			req.Method, redactURL(req.URL), byteSize(t.maxHeaderBytes)))
	}
	if err != nil || req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/manifests/") {
		return resp, err
	}
	if resp.ContentLength > maxManifestSize {
		_ = resp.Body.Close()
		return nil, tooLarge(req, "manifest", resp.ContentLength, maxManifestSize)
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, limit: maxManifestSize, tooLarge: func() error {
		return tooLarge(req, "manifest", -1, maxManifestSize)
	}}
	return resp, nil
}

// headersTooLarge reports whether err is net/http's refusal of an answer
// whose headers are over limit: an error in err's chain whose text is
// exactly the one net/http writes for it (HTTP/1.x, the limit in it) or
// its HTTP/2 transport's (the limit it advertised). Exactly, not as a part:
// some of net/http's errors quote what the registry sent, and a registry
// must not pass its own failure off as this one.
func headersTooLarge(err error, limit int64) bool {
	http1 := fmt.Sprintf("net/http: server response headers exceeded %d bytes; aborted", limit)
	const http2 = "http2: response header list larger than advertised limit"
	for errs := []error{err}; len(errs) > 0; {
		e := errs[len(errs)-1]
		errs = errs[:len(errs)-1]
		if text := e.Error(); text == http1 || text == http2 {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				errs = append(errs, next)
			}
		case interface{ Unwrap() []error }:
			errs = append(errs, u.Unwrap()...)
		}
	}
	return false
}

// limitedBody fails a read past limit bytes.
type limitedBody struct {
	io.ReadCloser
	limit    int64
	read     int64
	tooLarge func() error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		return n, b.tooLarge()
	}
	return n, err
}

// tooLarge is the permanent error of a thing of size bytes (-1: unknown,
// a body read up to the limit) where limit are allowed.
func tooLarge(req *http.Request, what string, size, limit int64) *failure.Error {
	is := "is larger than"
	if size >= 0 {
		is = fmt.Sprintf("is %s, more than", byteSize(size))
	}
	return permanentError(ReasonInvalidImage, req.URL.Host, fmt.Errorf("the %s at %s %s the %s allowed",
		what, redactURL(req.URL), is, byteSize(limit)))
}

// byteSize prints n bytes in the largest binary unit it has a whole of.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
