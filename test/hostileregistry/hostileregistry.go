// Package hostileregistry is a tenant's own registry answering as an
// attacker would (issue 37), for the e2e test and the bench that run it
// beside a calm tenant: a zstd layer asking for a 512 MiB window, a layer
// GET whose body never ends, a signature image of 1,000 layers, reads
// redirected to fresh long paths answered 429 Retry-After: 86400, and hosts
// answering every request 401 with 8 MiB of headers. It also holds the
// objects a tenant creates over it and what each must come to say, and a
// sampler of the controller's scratch directory.
package hostileregistry

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

const (
	// FloodHeaderBytes is what a flood host answers in headers.
	FloodHeaderBytes = 8 << 20
	// EndlessLayerSize is what the manifest declares of the layer whose
	// GET never ends: big enough that a scratch file growing past it shows.
	EndlessLayerSize = 4 << 20
	// SignatureLayers is the size of the .sig image: over
	// --max-signature-layers, under the 1,024 layers any image read may
	// have (a bigger one is InvalidImage before it is a signature image).
	SignatureLayers = 1000
)

// Registry is the hostile tenant's registry (ggcr's in-memory one on a
// loopback port), serving every fault at once and counting what it served.
type Registry struct {
	*registrytest.Registry
	// EndlessGets and EndlessBytes: GETs of the layer whose body never
	// ends, and the bytes written into them.
	EndlessGets, EndlessBytes atomic.Int64
	SignatureReads            atomic.Int64 // GETs of the 1,000-layer .sig image's manifest
	Redirects, Limited        atomic.Int64 // 307s to fresh paths, 429s there
}

// New starts the registry with hostile/zstd:1 and hostile/endless:1 pushed,
// every .sig tag answered with the big signature image, and every request
// about hostile/limited redirected.
func New(t testing.TB) *Registry {
	t.Helper()
	h := &Registry{Registry: registrytest.New(t)}
	h.pushZstd(t)
	h.pushEndless(t)
	h.serveSignatures(t)
	h.serveRedirects(t)
	return h
}

// Traffic says how often each fault was met, or an error naming the first
// that never was.
func (h *Registry) Traffic() (string, error) {
	s := fmt.Sprintf("endless layer: %d GETs, %.1f MiB written into them; .sig image: %d reads; hostile/limited: %d redirects, %d answered 429",
		h.EndlessGets.Load(), float64(h.EndlessBytes.Load())/(1<<20), h.SignatureReads.Load(), h.Redirects.Load(), h.Limited.Load())
	switch {
	case h.EndlessGets.Load() == 0:
		return s, errors.New("the endless layer was never read")
	case h.SignatureReads.Load() == 0:
		return s, errors.New("the signature image was never read")
	case h.Limited.Load() == 0:
		return s, errors.New("no redirect of hostile/limited was followed")
	}
	return s, nil
}

var linuxAMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// buildpack labels a layer as buildpack id 1.0.0 for any linux.
func buildpack(id string, layer v1.Layer) sampleimages.BuildpackLayer {
	return sampleimages.BuildpackLayer{ID: id, Version: "1.0.0", Layer: layer,
		Metadata: map[string]any{"api": "0.10", "targets": []map[string]string{{"os": "linux"}}}}
}

// buildpackLayer is a gzipped layer of buildpack id 1.0.0's files.
func buildpackLayer(id string) (v1.Layer, error) {
	dir := "cnb/buildpacks/" + strings.ReplaceAll(id, "/", "_") + "/1.0.0/"
	return sampleimages.Layer(sampleimages.File{Path: "cnb/", Mode: 0o755}, sampleimages.File{Path: "cnb/buildpacks/", Mode: 0o755},
		sampleimages.File{Path: dir, Mode: 0o755},
		sampleimages.File{Path: dir + "buildpack.toml", Mode: 0o644,
			Content: fmt.Appendf(nil, "api = \"0.10\"\n\n[buildpack]\n  id = %q\n  version = \"1.0.0\"\n\n[[targets]]\n  os = \"linux\"\n", id)},
		sampleimages.File{Path: dir + "bin/detect", Mode: 0o755, Content: []byte("#!/bin/sh\nexit 0\n")},
		sampleimages.File{Path: dir + "bin/build", Mode: 0o755, Content: []byte("#!/bin/sh\nexit 0\n")})
}

func (h *Registry) write(t testing.TB, repo string, img v1.Image, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	h.Write(repo, img)
}

// pushZstd pushes hostile/zstd:1, whose first buildpack's layer is a zstd
// frame asking for a 512 MiB window (window log 29) around one raw block
// of the buildpack's tar, declaring the tar's true DiffID: decoded with
// no bound on its window, it would flatten fine.
func (h *Registry) pushZstd(t testing.TB) {
	t.Helper()
	plain, err := buildpackLayer("hostile/zstd-a")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := plain.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	content, err := io.ReadAll(rc)
	if err != nil || len(content) >= 128<<10 { // a raw block holds at most 128 KiB
		t.Fatalf("the buildpack's tar: %d bytes, %v", len(content), err)
	}
	block := uint32(len(content))<<3 | 1 // the last block, raw
	frame := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, (29 - 10) << 3}, byte(block), byte(block>>8), byte(block>>16))
	diffID, _, err := v1.SHA256(bytes.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	other, err := buildpackLayer("hostile/zstd-b")
	if err != nil {
		t.Fatal(err)
	}
	img, err := sampleimages.BuildpackageOfLayers(linuxAMD64,
		buildpack("hostile/zstd-a", declaredLayer{blob: append(frame, content...), diffID: diffID}),
		buildpack("hostile/zstd-b", other))
	h.write(t, "hostile/zstd:1", img, err)
}

// declaredLayer is a zstd blob whose DiffID is the one declared, never
// computed here: ggcr would decode it, with a 512 MiB window.
type declaredLayer struct {
	blob   []byte
	diffID v1.Hash
}

func (l declaredLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.blob))
	return h, err
}
func (l declaredLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l declaredLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l declaredLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, errors.New("the hostile zstd layer is not decoded in the test process")
}
func (l declaredLayer) Size() (int64, error)                { return int64(len(l.blob)), nil }
func (l declaredLayer) MediaType() (types.MediaType, error) { return types.OCILayerZStd, nil }

// pushEndless pushes hostile/endless:1, whose first buildpack's layer
// (EndlessLayerSize, declared in its manifest) is answered to every GET
// with its bytes and then more, chunked, without end.
func (h *Registry) pushEndless(t testing.TB) {
	t.Helper()
	big, err := random.Layer(EndlessLayerSize, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	other, err := buildpackLayer("hostile/endless-b")
	if err != nil {
		t.Fatal(err)
	}
	img, err := sampleimages.BuildpackageOfLayers(linuxAMD64,
		buildpack("hostile/endless-a", big), buildpack("hostile/endless-b", other))
	h.write(t, "hostile/endless:1", img, err)
	digest, err := big.Digest()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := big.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	h.Inject(http.MethodGet, "/blobs/"+digest.String(), -1, func(rw http.ResponseWriter, r *http.Request) {
		h.EndlessGets.Add(1)
		rw.Header().Set("Content-Type", "application/octet-stream")
		rw.WriteHeader(http.StatusOK)
		filler := make([]byte, 32<<10)
		for sent := 0; sent < 1<<34; { // "endless": 16 GiB, until the reader hangs up
			part := filler
			if sent < len(blob) {
				// The declared bytes at ~10 MiB/s, so that a scratch
				// sampler sees the blob; the rest as fast as it goes.
				part = blob[sent:min(len(blob), sent+len(filler))]
				time.Sleep(3 * time.Millisecond)
			}
			n, err := rw.Write(part)
			sent += n
			h.EndlessBytes.Add(int64(n))
			if err != nil || r.Context().Err() != nil || ctx.Err() != nil {
				return
			}
		}
	})
}

// serveSignatures answers every .sig tag (and the digest it resolves to)
// with a signature image of SignatureLayers well-formed bogus signatures.
func (h *Registry) serveSignatures(t testing.TB) {
	t.Helper()
	manifest, config, err := signatureImage(SignatureLayers)
	if err != nil {
		t.Fatal(err)
	}
	digest, _, _ := v1.SHA256(bytes.NewReader(manifest))
	configDigest, _, _ := v1.SHA256(bytes.NewReader(config))
	answer := func(body []byte, mediaType types.MediaType, digest v1.Hash, counted bool) func(http.ResponseWriter, *http.Request) {
		return func(rw http.ResponseWriter, r *http.Request) {
			if counted && r.Method == http.MethodGet {
				h.SignatureReads.Add(1)
			}
			rw.Header().Set("Content-Type", string(mediaType))
			rw.Header().Set("Docker-Content-Digest", digest.String())
			rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
			if r.Method != http.MethodHead {
				_, _ = rw.Write(body)
			}
		}
	}
	h.Inject("", ".sig", -1, answer(manifest, types.OCIManifestSchema1, digest, true))
	h.Inject("", "/manifests/"+digest.String(), -1, answer(manifest, types.OCIManifestSchema1, digest, true))
	h.Inject("", "/blobs/"+configDigest.String(), -1, answer(config, types.OCIConfigJSON, configDigest, false))
}

// signatureImage is the manifest and config of a cosign signature image of
// n layers, each the same payload with a random signature.
func signatureImage(n int) (manifest, config []byte, err error) {
	payload := []byte(`{"critical":{"identity":{"docker-reference":"hostile"},"image":{"docker-manifest-digest":"sha256:` +
		strings.Repeat("0", 64) + `"},"type":"cosign container image signature"},"optional":null}`)
	payloadDigest, size, err := v1.SHA256(bytes.NewReader(payload))
	if err != nil {
		return nil, nil, err
	}
	cf := v1.ConfigFile{OS: "linux", RootFS: v1.RootFS{Type: "layers"}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	signature := make([]byte, 72) // an ECDSA P-256 signature's size, DER
	for range n {
		_, _ = rand.Read(signature)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: cosign.PayloadMediaType, Size: size, Digest: payloadDigest,
			Annotations: map[string]string{cosign.SignatureAnnotation: base64.StdEncoding.EncodeToString(signature)}})
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, payloadDigest)
	}
	if config, err = json.Marshal(cf); err != nil {
		return nil, nil, err
	}
	configDigest, configSize, err := v1.SHA256(bytes.NewReader(config))
	if err != nil {
		return nil, nil, err
	}
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: configSize, Digest: configDigest}
	manifest, err = json.Marshal(m)
	return manifest, config, err
}

// serveRedirects redirects every request about hostile/limited to a fresh
// path of 16 KiB (under --registry-max-header-bytes), answered 429 with
// Retry-After: 86400.
func (h *Registry) serveRedirects(t testing.TB) {
	t.Helper()
	long := strings.Repeat(strings.Repeat("a", 63)+"/", 256)
	h.Inject("", "/v2/hostile/limited/", -1, func(rw http.ResponseWriter, r *http.Request) {
		n := h.Redirects.Add(1)
		_, ref, _ := strings.Cut(r.URL.Path, "/manifests/")
		http.Redirect(rw, r, fmt.Sprintf("/v2/fresh/%d/%smanifests/%s", n, long, ref), http.StatusTemporaryRedirect)
	})
	h.Inject("", "/v2/fresh/", -1, func(rw http.ResponseWriter, r *http.Request) {
		h.Limited.Add(1)
		registrytest.Answer(http.StatusTooManyRequests, map[string]string{"Retry-After": "86400"},
			registrytest.OCIError("TOOMANYREQUESTS", "slow down"))(rw, r)
	})
}

// Flood is a host answering every request, /v2/ included, 401 with
// FloodHeaderBytes of headers.
type Flood struct {
	Addr     string
	Requests atomic.Int64
}

// StartFloods starts n flood hosts, each on a loopback port of its own,
// so that each is a registry host of its own to the controller.
func StartFloods(t testing.TB, n int) []*Flood {
	t.Helper()
	filler := strings.Repeat("x", 64<<10)
	names := make([]string, FloodHeaderBytes/len(filler))
	for i := range names {
		names[i] = fmt.Sprintf("X-Filler-%03d", i)
	}
	floods := make([]*Flood, n)
	for i := range floods {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &Flood{Addr: l.Addr().String()}
		srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			f.Requests.Add(1)
			hdr := rw.Header()
			hdr["Www-Authenticate"] = []string{`Bearer realm="http://` + f.Addr + `/token",scope="` + filler + `"`}
			for _, name := range names[1:] {
				hdr[name] = []string{filler}
			}
			rw.WriteHeader(http.StatusUnauthorized)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		floods[i] = f
	}
	return floods
}

// FloodTraffic is the requests each flood host had, sorted, or an error
// naming one never asked.
func FloodTraffic(floods []*Flood) ([]int64, error) {
	var asked []int64
	var never []string
	for _, f := range floods {
		n := f.Requests.Load()
		if n == 0 {
			never = append(never, f.Addr)
		}
		asked = append(asked, n)
	}
	slices.Sort(asked)
	if len(never) > 0 {
		return asked, fmt.Errorf("flood hosts never asked: %s", strings.Join(never, ", "))
	}
	return asked, nil
}
