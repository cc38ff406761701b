package registry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// failingWriter fails every write.
type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// TestReadLayer: a layer is read as stored in one GET, checked against its
// digest; the registry's errors are classified as any read's, and the
// writer's come back as they are.
func TestReadLayer(t *testing.T) {
	f := registrytest.New(t)
	img, _ := random.Image(2048, 1)
	f.Write("team/bp:1", img)
	layers, _ := img.Layers()
	digest, _ := layers[0].Digest()
	rc, _ := layers[0].Compressed()
	want, _ := io.ReadAll(rc)
	size := int64(len(want))
	ref := f.Ref("team/bp:1").Context().Digest(digest.String())
	c := newTestClient(t, Options{})
	ctx := context.Background()

	f.ForgetRequests()
	var got bytes.Buffer
	if err := c.As(nil).ReadLayer(ctx, ref, size, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("read %d bytes, not the layer's %d", got.Len(), len(want))
	}
	if n := f.Count(http.MethodGet, "/blobs/"); n != 1 {
		t.Errorf("%d blob GETs, want 1", n)
	}

	diskFull := errors.New("no space left on device")
	if err := c.As(nil).ReadLayer(ctx, ref, size, failingWriter{diskFull}); err != diskFull {
		t.Errorf("the writer's error came back as %v", err)
	}

	// Other bytes under the digest: an error, not a layer.
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Answer(http.StatusOK, nil, string(bytes.Repeat([]byte{'x'}, len(want)))))
	if err := c.As(nil).ReadLayer(ctx, ref, size, io.Discard); err == nil {
		t.Error("bytes that are not the digest's were taken")
	}
	f.ClearFaults()
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Answer(http.StatusNotFound, nil, registrytest.OCIError("BLOB_UNKNOWN", "gone")))
	err := c.As(nil).ReadLayer(ctx, ref, size, io.Discard)
	if e, ok := failure.As(err); !ok || e.Class == failure.Transient {
		t.Errorf("missing blob: %v (%+v), want it classified, not Transient", err, e)
	}
	f.ClearFaults()
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Reset)
	err = c.As(nil).ReadLayer(ctx, ref, size, io.Discard)
	if e, ok := failure.As(err); !ok || e.Class != failure.Transient {
		t.Errorf("connection reset: %v (%+v), want Transient", err, e)
	}
}

// endless answers with the bytes of chunk again and again, chunked (no
// Content-Length), until the client goes away.
func endless(chunk []byte) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
}

// trickle answers with a byte every interval until the client goes away.
func trickle(interval time.Duration) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(interval):
			}
		}
	}
}

// countingWriter counts what it is given.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// TestReadLayerTakesTheDeclaredSizeOnly: a registry answering a layer GET
// with a body that never ends (chunked, no Content-Length) fails the read
// at the first byte past the size the manifest declares; nothing beyond
// the size reaches the writer (the scratch file), and hardly more is read
// off the wire. A body that trickles is cut at the read's deadline, which
// grows with the size at --registry-min-read-rate.
func TestReadLayerTakesTheDeclaredSizeOnly(t *testing.T) {
	f := registrytest.New(t)
	img, _ := random.Image(2296, 1)
	f.Write("team/bp:1", img)
	layers, _ := img.Layers()
	digest, _ := layers[0].Digest()
	size, _ := layers[0].Size()
	ref := f.Ref("team/bp:1").Context().Digest(digest.String())
	c := newTestClient(t, Options{})
	ctx := context.Background()

	f.Inject(http.MethodGet, "/blobs/", -1, endless(bytes.Repeat([]byte{'x'}, 32<<10)))
	before := c.Stats()
	var got countingWriter
	err := c.As(nil).ReadLayer(ctx, ref, size, &got)
	if e := Classify(err); err == nil || e.Class != failure.Transient || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("an endless body: %v (%+v), want a transient error saying it sent more than declared", err, e)
	}
	if got.n > size {
		t.Errorf("%d bytes reached the writer, more than the %d declared", got.n, size)
	}
	if down := c.Stats().Sub(before).TotalBytesDown(); down > size+64<<10 {
		t.Errorf("%d bytes read off the wire for a layer of %d", down, size)
	}

	f.ClearFaults()
	f.Inject(http.MethodGet, "/blobs/", -1, trickle(20*time.Millisecond))
	slow := newTestClient(t, Options{Timeout: 100 * time.Millisecond, MinReadRate: 1 << 20})
	start := time.Now()
	err = slow.As(nil).ReadLayer(ctx, ref, size, io.Discard)
	if e := Classify(err); err == nil || e.Class != failure.Transient || !strings.Contains(err.Error(), "--registry-min-read-rate") {
		t.Fatalf("a trickling body: %v, want a transient error naming --registry-min-read-rate", err)
	}
	// The deadline is 100 ms plus 2296 bytes at 1 MiB/s: a trickle of 50
	// bytes a second would otherwise take 46 s.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a trickling body held the read for %v", took)
	}
}
