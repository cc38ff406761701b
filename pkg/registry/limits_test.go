package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestSizeLimits: a manifest over 4 MiB (with or without a Content-Length)
// a config declared over 8 MiB, and an image of more than 1024 layers fail
// as permanent InvalidImage errors
// naming what and how large, after one request each: nothing is retried,
// nothing that large is read.
func TestSizeLimits(t *testing.T) {
	big := strings.Repeat(" ", 5<<20)
	tests := []struct {
		name    string
		serve   func(w http.ResponseWriter, r *http.Request)
		message string
	}{
		{"a manifest whose Content-Length is too large", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			_, _ = w.Write([]byte(big))
		}, "is 5.0 MiB, more than the 4.0 MiB allowed"},
		{"a manifest streamed without a length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			for i := 0; i < len(big); i += 64 << 10 {
				_, _ = w.Write([]byte(big[i : i+64<<10]))
				w.(http.Flusher).Flush()
			}
		}, "is larger than the 4.0 MiB allowed"},
		{"a config declared too large", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			_, _ = fmt.Fprintf(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
				"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":"sha256:%s"},"layers":[]}`,
				9<<20, strings.Repeat("a", 64))
		}, "config of"},
		{"an image of more layers than allowed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			layer := fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":1,"digest":"sha256:%s"}`, strings.Repeat("b", 64))
			_, _ = fmt.Fprintf(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
				"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":2,"digest":"sha256:%s"},"layers":[%s]}`,
				strings.Repeat("a", 64), strings.TrimSuffix(strings.Repeat(layer+",", maxImageLayers+1), ","))
		}, fmt.Sprintf("has %d layers, more than the %d", maxImageLayers+1, maxImageLayers)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := registrytest.New(t)
			f.Inject("GET", "/team/app/manifests/", -1, tc.serve)
			c := newTestClient(t, Options{})
			_, err := c.As(nil).ReadImage(context.Background(), f.Ref("team/app:1"), nil)
			e, ok := err.(*failure.Error)
			if !ok || e.Class != failure.Permanent || e.Reason != ReasonInvalidImage || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("error %v, want a permanent %s saying %q", err, ReasonInvalidImage, tc.message)
			}
			if n := f.Count("GET", "/team/app/manifests/"); n != 1 {
				t.Errorf("%d manifest GETs, want 1", n)
			}
			if n := f.Count("GET", "/blobs/"); n != 0 {
				t.Errorf("%d blob GETs, want none", n)
			}
			t.Log(err)
		})
	}
}

// TestHeadersTooLarge: net/http's refusal of headers over the bound is
// known by its exact text anywhere in the error's chain, at the bound the
// transport was given; a registry quoting that text in an answer net/http
// refuses for another reason does not pass for it.
func TestHeadersTooLarge(t *testing.T) {
	refusal := errors.New("net/http: server response headers exceeded 65536 bytes; aborted")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"as net/http returns it", &url.Error{Op: "Get", URL: "http://r.example/v2/",
			Err: fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", refusal)}, true},
		{"among ggcr's ping errors", errors.Join(errors.New("http: server gave HTTP response to HTTPS client"), &url.Error{Err: refusal}), true},
		{"HTTP/2", &url.Error{Err: errors.New("http2: response header list larger than advertised limit")}, true},
		{"another bound", errors.New("net/http: server response headers exceeded 1024 bytes; aborted"), false},
		{"quoted by the registry", &url.Error{Err: fmt.Errorf("malformed MIME header line: %q", refusal.Error())}, false},
		{"another failure", &url.Error{Err: io.ErrUnexpectedEOF}, false},
	} {
		if got := headersTooLarge(tc.err, 65536); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
