package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// The bounds the controller runs with here, and the chart's memory limit.
const (
	hostileFlattenBudget = 16 << 20 // --max-flattened-bytes
	hostileFlattens      = 2        // --max-concurrent-flattens
	chartMemoryLimit     = 512 << 20
	// floodHosts answer every request 401 with floodHeaderBytes of headers.
	floodHosts       = 24
	floodHeaderBytes = 8 << 20
	// endlessLayerSize is what the manifest declares of the layer whose GET
	// never ends: big enough that a scratch file growing past it shows.
	endlessLayerSize = 4 << 20
	// signatureLayers is the size of the .sig image: over
	// --max-signature-layers, under the 1,024 layers any image read may
	// have (a bigger one is InvalidImage before it is a signature image).
	signatureLayers = 1000
)

// TestHostileRegistry (issue 37): a tenant whose own registry serves, at
// once, a zstd layer asking for a 512 MiB window, a layer GET whose body
// never ends, 24 hosts answering 401 with 8 MiB of headers, a signature
// image of 1,000 layers, and reads redirected to fresh 16 KiB paths
// answered 429 Retry-After: 86400. Each of its objects says which bound it
// met, within 90 s; beside it a calm tenant's five builders turn Ready; the
// controller stays up, below the chart's memory limit, keeping none of the
// headers, and its scratch directory within 2 × --max-concurrent-flattens ×
// --max-flattened-bytes.
func TestHostileRegistry(t *testing.T) {
	w := newFaultWorld(t, "tranquil")
	h := newHostileRegistry(t)
	floods := startHeaderFloods(t, floodHosts)
	scratch := flattenScratchDir(t)
	profiling := enableProfiling(t)
	p := controllertest.Start(t, controller, controllertest.Options{Kubeconfig: env.Kubeconfig, Namespace: systemNamespace,
		DisableHA: true, Args: []string{"--scratch-dir", scratch, "--profiling-port", strconv.Itoa(profiling),
			"--max-flattened-bytes", strconv.Itoa(hostileFlattenBudget), "--max-concurrent-flattens", strconv.Itoa(hostileFlattens)}})
	// Checked even when a status check below fails: the figures say why.
	defer checkStayedWithinBounds(t, p, scratch, sampleScratch(t, scratch))

	w.objects.create(t)
	w.waitStoreStack(t)
	started := time.Now()
	hostile := h.createObjects(t, w, floods)
	calm := []string{w.name}
	for i := 1; i < 5; i++ {
		calm = append(calm, fmt.Sprintf("%s-%d", w.name, i))
	}
	for _, name := range calm {
		w.createBuilder(t, name)
	}
	calmTook := waitBuildersReady(t, w.ns, calm, 90*time.Second)
	t.Logf("the calm tenant's %d builders Ready %v after they were created (each: %v)", len(calm), maxDuration(calmTook), calmTook)

	eventually(t, max(90*time.Second-time.Since(started), 5*time.Second), "every hostile object to say which bound it met",
		func() (bool, string) { return hostile.check(t) })
	t.Logf("every hostile object had its status %v after they were created", time.Since(started).Round(100*time.Millisecond))
	hostile.log(t)
	checkKeptHeap(t, profiling)
	h.checkTraffic(t, floods)
}

// checkStayedWithinBounds checks that the controller still runs (it was
// started once: alive means it never crashed nor restarted), that its peak
// RSS stayed under the chart's memory limit, and that its scratch directory
// was used and never held more than 2 × --max-concurrent-flattens ×
// --max-flattened-bytes.
func checkStayedWithinBounds(t *testing.T, p *controllertest.Process, scratch string, scratchPeak func() int64) {
	if err := stillRunning(p.PID()); err != nil {
		t.Errorf("the controller did not stay up: %v", err)
	}
	rss := p.PeakRSS()
	t.Logf("controller peak RSS (VmHWM): %.0f MiB", float64(rss)/(1<<20))
	if rss == 0 || rss > chartMemoryLimit {
		t.Errorf("the controller's peak RSS is %d bytes: want some, under the chart's limit of %d", rss, chartMemoryLimit)
	}
	peak, bound := scratchPeak(), int64(2*hostileFlattens*hostileFlattenBudget)
	t.Logf("scratch directory: peak %.1f MiB (bound %d MiB)", float64(peak)/(1<<20), bound>>20)
	if peak > bound {
		t.Errorf("the scratch directory reached %d bytes, more than 2 × %d flattens × %d bytes", peak, hostileFlattens, hostileFlattenBudget)
	}
	if info, err := os.Stat(scratch); err != nil || info.ModTime().Year() <= 2000 {
		t.Errorf("the controller never wrote in its --scratch-dir %s (%v): the flattens proved nothing", scratch, err)
	}
}

// waitStoreStack waits for the calm tenant's store and stack, which the
// hostile tenant's builders use too.
func (w *faultWorld) waitStoreStack(t *testing.T) {
	t.Helper()
	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterstore/"+w.name, "clusterstack/"+w.name)
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
}

// waitBuildersReady waits until each builder of ns is Ready with an image,
// and returns how long each took from now (as first seen, polled every
// 100 ms).
func waitBuildersReady(t *testing.T, ns string, names []string, timeout time.Duration) []time.Duration {
	t.Helper()
	start := time.Now()
	took := make([]time.Duration, len(names))
	eventually(t, timeout, "the calm tenant's builders Ready", func() (bool, string) {
		var waiting []string
		for i, name := range names {
			if took[i] > 0 {
				continue
			}
			b, err := client.BuildsmithV1alpha1().Builders(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if b.Status.IsReady() && b.Status.LatestImage != "" {
				took[i] = time.Since(start).Round(100 * time.Millisecond)
				continue
			}
			waiting = append(waiting, fmt.Sprintf("%s: %s", name, readyOf(&b.Status.ConditionedStatus)))
		}
		return len(waiting) == 0, strings.Join(waiting, "\n")
	})
	return took
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// readyOf is "status reason: message" of the Ready condition, or "no
// status".
func readyOf(s *v1alpha1.ConditionedStatus) string {
	c := s.GetCondition(v1alpha1.ConditionReady)
	if c == nil {
		return "no status"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

// stillRunning fails unless pid is a live process (not a zombie): the
// controller started once, so alive means never crashed nor restarted.
func stillRunning(pid int) error {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if state, ok := strings.CutPrefix(line, "State:"); ok {
			if state = strings.TrimSpace(state); strings.HasPrefix(state, "Z") || strings.HasPrefix(state, "X") {
				return fmt.Errorf("process %d is %s", pid, state)
			}
			return nil
		}
	}
	return fmt.Errorf("process %d: no state in /proc", pid)
}

// enableProfiling turns the controllers' profiling server on
// (config-observability) and returns a free port for --profiling-port.
func enableProfiling(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(systemNamespace)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "config-observability"},
		Data: map[string]string{"runtime-profiling": "enabled"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(ctx, "config-observability", metav1.DeleteOptions{}) })
	return controllertest.FreePort(t)
}

// keptHeapLimit bounds the controller's live heap (after a collection) once
// the flood hosts have answered: keeping their headers would take
// floodHosts × floodHeaderBytes (192 MiB) on top of the ~tens of MiB it
// needs for the objects of this test.
const keptHeapLimit = 128 << 20

// checkKeptHeap reads the controller's heap after a collection (pprof's
// gc=1): what it still holds, not what it allocated on the way.
func checkKeptHeap(t *testing.T, port int) {
	t.Helper()
	var live int64
	eventually(t, 20*time.Second, "the controller's heap profile", func() (bool, string) {
		var err error
		live, err = liveHeap(port)
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("controller live heap after a collection: %.0f MiB", float64(live)/(1<<20))
	if live > keptHeapLimit {
		t.Errorf("the controller holds %d bytes of heap after the flood hosts answered, more than %d: it keeps their headers", live, keptHeapLimit)
	}
}

func liveHeap(port int) (int64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1&debug=1", port))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.Join(sc.Err(), fmt.Errorf("no HeapAlloc in the heap profile (status %s)", resp.Status))
}

// sampleScratch measures the files under dir every 100 ms until the test
// ends, and returns what reads the largest total seen.
func sampleScratch(t *testing.T, dir string) func() int64 {
	t.Helper()
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := dirSize(dir); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	end := func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(end)
	return func() int64 { end(); return peak.Load() }
}

// dirSize is the size of the regular files under dir; files vanishing
// meanwhile (the controller removes its blobs) count as gone.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}

// headerFlood is a host answering every request, /v2/ included, 401 with
// floodHeaderBytes of headers.
type headerFlood struct {
	addr     string
	requests atomic.Int64
}

// startHeaderFloods starts n flood hosts, each on a loopback port of its
// own, so that each is a registry host of its own to the controller.
func startHeaderFloods(t *testing.T, n int) []*headerFlood {
	t.Helper()
	filler := strings.Repeat("x", 64<<10)
	names := make([]string, floodHeaderBytes/len(filler))
	for i := range names {
		names[i] = fmt.Sprintf("X-Filler-%03d", i)
	}
	floods := make([]*headerFlood, n)
	for i := range floods {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &headerFlood{addr: l.Addr().String()}
		srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			f.requests.Add(1)
			hdr := rw.Header()
			hdr["Www-Authenticate"] = []string{`Bearer realm="http://` + f.addr + `/token",scope="` + filler + `"`}
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

// hostileNamespace is the hostile tenant's.
const hostileNamespace = "hostile-registry"

// hostileRegistry is the hostile tenant's own registry (ggcr's in-memory
// one on a loopback port), serving the faults of issue 37's findings 1, 2,
// 4 and 7 at once, and counting what it served.
type hostileRegistry struct {
	f *registrytest.Registry
	// endlessGets and endlessBytes: GETs of the layer whose body never
	// ends, and the bytes written into them.
	endlessGets, endlessBytes atomic.Int64
	signatureReads            atomic.Int64 // of the 1,000-layer .sig image
	redirects, limited        atomic.Int64 // 307s to fresh paths, 429s there
}

func newHostileRegistry(t *testing.T) *hostileRegistry {
	t.Helper()
	h := &hostileRegistry{f: registrytest.New(t)}
	h.pushZstd(t)
	h.pushEndless(t)
	h.serveSignatures(t)
	h.serveRedirects(t)
	return h
}

var linuxAMD64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// hostileBuildpack labels a layer as buildpack id 1.0.0 for any linux.
func hostileBuildpack(id string, layer v1.Layer) sampleimages.BuildpackLayer {
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

// pushZstd pushes hostile/zstd:1, whose first buildpack's layer is a zstd
// frame asking for a 512 MiB window (window log 29) around one raw block
// of the buildpack's tar, declaring the tar's true DiffID: decoded with
// no bound on its window, it would flatten fine.
func (h *hostileRegistry) pushZstd(t *testing.T) {
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
		hostileBuildpack("hostile/zstd-a", declaredLayer{blob: append(frame, content...), diffID: diffID}),
		hostileBuildpack("hostile/zstd-b", other))
	push(t, h.f, "hostile/zstd:1", img, err)
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
// (endlessLayerSize, declared in its manifest) is answered to every GET
// with its bytes and then more, chunked, without end.
func (h *hostileRegistry) pushEndless(t *testing.T) {
	t.Helper()
	big, err := random.Layer(endlessLayerSize, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	other, err := buildpackLayer("hostile/endless-b")
	if err != nil {
		t.Fatal(err)
	}
	img, err := sampleimages.BuildpackageOfLayers(linuxAMD64,
		hostileBuildpack("hostile/endless-a", big), hostileBuildpack("hostile/endless-b", other))
	push(t, h.f, "hostile/endless:1", img, err)
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
	h.f.Inject(http.MethodGet, "/blobs/"+digest.String(), -1, func(rw http.ResponseWriter, r *http.Request) {
		h.endlessGets.Add(1)
		rw.Header().Set("Content-Type", "application/octet-stream")
		rw.WriteHeader(http.StatusOK)
		filler := make([]byte, 32<<10)
		for sent := 0; sent < 1<<34; { // "endless": 16 GiB, until the reader hangs up
			part := filler
			if sent < len(blob) {
				// The declared bytes at ~10 MiB/s, so that the scratch
				// sampler sees the blob; the rest as fast as it goes.
				part = blob[sent:min(len(blob), sent+len(filler))]
				time.Sleep(3 * time.Millisecond)
			}
			n, err := rw.Write(part)
			sent += n
			h.endlessBytes.Add(int64(n))
			if err != nil || r.Context().Err() != nil || ctx.Err() != nil {
				return
			}
		}
	})
}

// serveSignatures answers every .sig tag (and the digest it resolves to)
// with a signature image of signatureLayers well-formed bogus signatures.
func (h *hostileRegistry) serveSignatures(t *testing.T) {
	t.Helper()
	manifest, config, err := signatureImage(signatureLayers)
	if err != nil {
		t.Fatal(err)
	}
	digest, _, _ := v1.SHA256(bytes.NewReader(manifest))
	configDigest, _, _ := v1.SHA256(bytes.NewReader(config))
	answer := func(body []byte, mediaType types.MediaType, digest v1.Hash, counted bool) func(http.ResponseWriter, *http.Request) {
		return func(rw http.ResponseWriter, r *http.Request) {
			if counted {
				h.signatureReads.Add(1)
			}
			rw.Header().Set("Content-Type", string(mediaType))
			rw.Header().Set("Docker-Content-Digest", digest.String())
			rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
			if r.Method != http.MethodHead {
				_, _ = rw.Write(body)
			}
		}
	}
	h.f.Inject("", ".sig", -1, answer(manifest, types.OCIManifestSchema1, digest, true))
	h.f.Inject("", "/manifests/"+digest.String(), -1, answer(manifest, types.OCIManifestSchema1, digest, true))
	h.f.Inject("", "/blobs/"+configDigest.String(), -1, answer(config, types.OCIConfigJSON, configDigest, false))
	t.Logf("the .sig image: %d layers, a manifest of %d KiB and a config of %d KiB", signatureLayers, len(manifest)>>10, len(config)>>10)
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
func (h *hostileRegistry) serveRedirects(t *testing.T) {
	t.Helper()
	long := strings.Repeat(strings.Repeat("a", 63)+"/", 256)
	h.f.Inject("", "/v2/hostile/limited/", -1, func(rw http.ResponseWriter, r *http.Request) {
		n := h.redirects.Add(1)
		_, ref, _ := strings.Cut(r.URL.Path, "/manifests/")
		http.Redirect(rw, r, fmt.Sprintf("/v2/fresh/%d/%smanifests/%s", n, long, ref), http.StatusTemporaryRedirect)
	})
	h.f.Inject("", "/v2/fresh/", -1, func(rw http.ResponseWriter, r *http.Request) {
		h.limited.Add(1)
		registrytest.Answer(http.StatusTooManyRequests, map[string]string{"Retry-After": "86400"},
			registrytest.OCIError("TOOMANYREQUESTS", "slow down"))(rw, r)
	})
}

// hostileObject is an object of the hostile tenant and what its status
// must come to say.
type hostileObject struct {
	kind, name string // Builder or Buildpack, in hostileNamespace
	want       string
	ok         func(*v1alpha1.ConditionedStatus) bool
	last       string // its Ready condition when last read
}

type hostileObjects []*hostileObject

// check reads every object's status once: all say what they must?
func (hs hostileObjects) check(t *testing.T) (bool, string) {
	t.Helper()
	ctx := context.Background()
	bs := client.BuildsmithV1alpha1()
	var wrong []string
	for _, o := range hs {
		var status *v1alpha1.ConditionedStatus
		if o.kind == "Buildpack" {
			b, err := bs.Buildpacks(hostileNamespace).Get(ctx, o.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			status = &b.Status.ConditionedStatus
		} else {
			b, err := bs.Builders(hostileNamespace).Get(ctx, o.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			status = &b.Status.ConditionedStatus
		}
		if o.last = readyOf(status); !o.ok(status) {
			wrong = append(wrong, fmt.Sprintf("%s/%s, want %s: %s", o.kind, o.name, o.want, o.last))
		}
	}
	return len(wrong) == 0, strings.Join(wrong, "\n")
}

// log prints each status, the flood builders' counted by reason.
func (hs hostileObjects) log(t *testing.T) {
	t.Helper()
	floods := map[string]int{}
	for _, o := range hs {
		if o.name == "flood-00" {
			t.Logf("%s/%s: %.900s", o.kind, o.name, o.last)
		}
		if strings.HasPrefix(o.name, "flood-") {
			reason, _, _ := strings.Cut(strings.TrimPrefix(o.last, "False "), ":")
			floods[reason]++
			continue
		}
		t.Logf("%s/%s: %.600s", o.kind, o.name, o.last)
	}
	t.Logf("the %d builders tagged on the flood hosts, by Ready reason: %v", floodHosts, floods)
}

// readyWith: Ready is False with reason and a message holding part.
func readyWith(s *v1alpha1.ConditionedStatus, reason, part string) bool {
	c := s.GetCondition(v1alpha1.ConditionReady)
	return c != nil && c.IsFalse() && c.Reason == reason && strings.Contains(c.Message, part)
}

// retryingAfter: Reconciling says it retries no sooner than least.
func retryingAfter(s *v1alpha1.ConditionedStatus, least time.Duration) bool {
	c := s.GetCondition(v1alpha1.ConditionReconciling)
	if c == nil || !c.IsTrue() {
		return false
	}
	in, ok := strings.CutPrefix(c.Message, "retrying in ")
	d, err := time.ParseDuration(strings.Fields(in + " ")[0])
	return ok && err == nil && d >= least
}

func isTrue(s *v1alpha1.ConditionedStatus, ct apis.ConditionType) bool {
	c := s.GetCondition(ct)
	return c != nil && c.IsTrue()
}

// createObjects creates the hostile tenant's namespace, credentials,
// Buildpacks and Builders (over the calm tenant's store and stack, which
// a platform team shares), and says what each must come to say.
func (h *hostileRegistry) createObjects(t *testing.T, w *faultWorld, floods []*headerFlood) hostileObjects {
	t.Helper()
	h.createTenant(t, w)
	ctx := context.Background()
	for _, name := range []string{"zstd", "endless", "limited"} {
		if _, err := client.BuildsmithV1alpha1().Buildpacks(hostileNamespace).Create(ctx, &v1alpha1.Buildpack{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hostileNamespace},
			Spec:       v1alpha1.BuildpackSpec{Image: h.f.Addr + "/hostile/" + name + ":1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	spec := func(tag string, order []v1alpha1.OrderEntry) v1alpha1.NamespacedBuilderSpec {
		return v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Tag: tag,
			Stack: v1alpha1.StackRef{Name: w.name}, Store: v1alpha1.StoreRef{Name: w.name}, Order: order}}
	}
	flattened := func(name string) v1alpha1.NamespacedBuilderSpec {
		s := spec(h.f.Addr+"/builders/"+name+":latest", []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{
			{ID: "hostile/" + name + "-a"}, {ID: "hostile/" + name + "-b"}}}})
		s.Sources = []v1alpha1.SourceRef{{Kind: "Buildpack", Name: name}}
		s.Flatten = &v1alpha1.Flatten{All: true}
		return s
	}
	builders := map[string]v1alpha1.NamespacedBuilderSpec{"zstd": flattened("zstd"), "endless": flattened("endless"),
		"signed": spec(h.f.Addr+"/builders/signed:latest", helloOrder())}
	signed := builders["signed"]
	signed.ServiceAccountName = "signer"
	builders["signed"] = signed
	for i, f := range floods {
		builders[fmt.Sprintf("flood-%02d", i)] = spec(f.addr+"/builders/app:latest", helloOrder())
	}
	for name, s := range builders {
		if _, err := client.BuildsmithV1alpha1().Builders(hostileNamespace).Create(ctx, &v1alpha1.Builder{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hostileNamespace}, Spec: s}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return hostileExpectations(len(floods))
}

// hostileExpectations are the statuses of createObjects' objects.
func hostileExpectations(floods int) hostileObjects {
	hs := hostileObjects{
		{kind: "Builder", name: "zstd", want: "Stalled, InvalidBuildpackLayer naming --max-zstd-window",
			ok: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, cnb.ReasonInvalidBuildpackLayer, "--max-zstd-window") && isTrue(s, v1alpha1.ConditionStalled)
			}},
		{kind: "Builder", name: "endless", want: "Reconciling, RegistryError: the registry sent more than the bytes declared",
			ok: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, registry.ReasonRegistryError, "sent more than") && isTrue(s, v1alpha1.ConditionReconciling)
			}},
		{kind: "Builder", name: "signed", want: "SignatureImageTooLarge naming --max-signature-layers",
			ok: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, builder.ReasonSignatureImageTooLarge, "--max-signature-layers")
			}},
		{kind: "Buildpack", name: "limited", want: "RateLimited, retrying no sooner than the Retry-After (hours)",
			ok: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, registry.ReasonRateLimited, "") && retryingAfter(s, time.Hour)
			}},
	}
	for i := range floods {
		hs = append(hs, &hostileObject{kind: "Builder", name: fmt.Sprintf("flood-%02d", i), want: "any reason in Ready=False",
			ok: func(s *v1alpha1.ConditionedStatus) bool {
				c := s.GetCondition(v1alpha1.ConditionReady)
				return c != nil && c.IsFalse() && c.Reason != ""
			}})
	}
	return hs
}

// createTenant creates the hostile namespace: its default ServiceAccount
// reads the shared images (the calm registry's pull Secret), and "signer"
// also signs with a cosign key.
func (h *hostileRegistry) createTenant(t *testing.T, w *faultWorld) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostileNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	private, _ := cosigntest.KeyPair(t, "pw")
	signing := cosigntest.Secret(hostileNamespace, "signing", private, "pw")
	signing.ResourceVersion = ""
	for _, s := range []*corev1.Secret{signing, {ObjectMeta: metav1.ObjectMeta{Name: "registry", Namespace: hostileNamespace},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(w.f.Addr, registryUser, registryPassword)}}} {
		if _, err := kube.CoreV1().Secrets(hostileNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pull := []corev1.LocalObjectReference{{Name: "registry"}}
	for _, sa := range []*corev1.ServiceAccount{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, ImagePullSecrets: pull},
		{ObjectMeta: metav1.ObjectMeta{Name: "signer"}, ImagePullSecrets: pull, Secrets: []corev1.ObjectReference{{Name: "signing"}}},
	} {
		if _, err := kube.CoreV1().ServiceAccounts(hostileNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkTraffic checks that each fault was met: the endless body read, the
// .sig image read, a redirect answered 429, every flood host asked.
func (h *hostileRegistry) checkTraffic(t *testing.T, floods []*headerFlood) {
	t.Helper()
	t.Logf("endless layer: %d GETs, %.1f MiB written into them; .sig image: %d reads; hostile/limited: %d redirects, %d answered 429",
		h.endlessGets.Load(), float64(h.endlessBytes.Load())/(1<<20), h.signatureReads.Load(), h.redirects.Load(), h.limited.Load())
	if h.endlessGets.Load() == 0 || h.signatureReads.Load() == 0 || h.limited.Load() == 0 {
		t.Errorf("a fault was never met")
	}
	var asked []string
	for _, f := range floods {
		if n := f.requests.Load(); n == 0 {
			t.Errorf("flood host %s was never asked", f.addr)
		} else {
			asked = append(asked, strconv.FormatInt(n, 10))
		}
	}
	sort.Strings(asked)
	t.Logf("requests to each flood host: %s", strings.Join(asked, " "))
}
