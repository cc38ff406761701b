package registry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

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
	ref := f.Ref("team/bp:1").Context().Digest(digest.String())
	c := newTestClient(t, Options{})
	ctx := context.Background()

	f.ForgetRequests()
	var got bytes.Buffer
	if err := c.As(nil).ReadLayer(ctx, ref, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("read %d bytes, not the layer's %d", got.Len(), len(want))
	}
	if n := f.Count(http.MethodGet, "/blobs/"); n != 1 {
		t.Errorf("%d blob GETs, want 1", n)
	}

	diskFull := errors.New("no space left on device")
	if err := c.As(nil).ReadLayer(ctx, ref, failingWriter{diskFull}); err != diskFull {
		t.Errorf("the writer's error came back as %v", err)
	}

	// Other bytes under the digest: an error, not a layer.
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Answer(http.StatusOK, nil, string(bytes.Repeat([]byte{'x'}, len(want)))))
	if err := c.As(nil).ReadLayer(ctx, ref, io.Discard); err == nil {
		t.Error("bytes that are not the digest's were taken")
	}
	f.ClearFaults()
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Answer(http.StatusNotFound, nil, registrytest.OCIError("BLOB_UNKNOWN", "gone")))
	err := c.As(nil).ReadLayer(ctx, ref, io.Discard)
	if e, ok := failure.As(err); !ok || e.Class == failure.Transient {
		t.Errorf("missing blob: %v (%+v), want it classified, not Transient", err, e)
	}
	f.ClearFaults()
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Reset)
	err = c.As(nil).ReadLayer(ctx, ref, io.Discard)
	if e, ok := failure.As(err); !ok || e.Class != failure.Transient {
		t.Errorf("connection reset: %v (%+v), want Transient", err, e)
	}
}
