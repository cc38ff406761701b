package registry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestReadLayer: a layer is read uncompressed in one GET; the registry's
// errors are classified as any read's, and an error of the caller's that
// has a class keeps it.
func TestReadLayer(t *testing.T) {
	f := registrytest.New(t)
	img, _ := random.Image(2048, 1)
	f.Write("team/bp:1", img)
	layers, _ := img.Layers()
	digest, _ := layers[0].Digest()
	rc, _ := layers[0].Uncompressed()
	want, _ := io.ReadAll(rc)
	ref := f.Ref("team/bp:1").Context().Digest(digest.String())
	c := newTestClient(t, Options{})
	ctx := context.Background()

	f.ForgetRequests()
	var got []byte
	if err := c.As(nil).ReadLayer(ctx, ref, func(r io.Reader) (err error) {
		got, err = io.ReadAll(r)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("read %d bytes, not the layer's %d", len(got), len(want))
	}
	if n := f.Count(http.MethodGet, "/blobs/"); n != 1 {
		t.Errorf("%d blob GETs, want 1", n)
	}

	mine := failure.Permanentf("FlattenTooLarge", "too large")
	err := c.As(nil).ReadLayer(ctx, ref, func(io.Reader) error { return mine })
	if e, ok := failure.As(err); !ok || e.Class != failure.Permanent || e.Reason != mine.Reason || err.Error() != mine.Error() {
		t.Errorf("the caller's error came back as %v (%+v)", err, e)
	}

	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Answer(http.StatusNotFound, nil, registrytest.OCIError("BLOB_UNKNOWN", "gone")))
	err = c.As(nil).ReadLayer(ctx, ref, func(io.Reader) error { t.Error("read called for a missing blob"); return nil })
	if e, ok := failure.As(err); !ok || e.Class == failure.Transient {
		t.Errorf("missing blob: %v (%+v), want it classified, not Transient", err, e)
	}
	f.ClearFaults()
	f.Inject(http.MethodGet, "/blobs/", -1, registrytest.Reset)
	err = c.As(nil).ReadLayer(ctx, ref, func(io.Reader) error { t.Error("read called for a reset"); return nil })
	if e, ok := failure.As(err); !ok || e.Class != failure.Transient {
		t.Errorf("connection reset: %v (%+v), want Transient", err, e)
	}
}
