package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

func TestResolveWarmIsOneHead(t *testing.T) {
	f := registrytest.New(t)
	img := f.Push("team/app:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()

	desc, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if desc.Ref.DigestStr() != want.String() || desc.Ref.Context().String() != f.Addr+"/team/app" {
		t.Errorf("Resolve = %s, want %s@%s", desc.Ref, f.Addr+"/team/app", want)
	}
	before := c.Stats()
	if _, err := c.As(Anonymous).Resolve(ctx, f.Ref("team/app:1")); err != nil {
		t.Fatal(err)
	}
	if d := c.Stats().Sub(before); d.Total() != 1 || d.Total("HEAD") != 1 {
		t.Errorf("warm resolve made %v, want one HEAD", d.Requests)
	}
}

func TestReadImageChoosesPlatformFromIndex(t *testing.T) {
	f := registrytest.New(t)
	amd64, _ := random.Image(100, 1)
	arm64, _ := random.Image(100, 2)
	amd64 = withPlatform(t, amd64, "amd64", "")
	arm64 = withPlatform(t, arm64, "arm64", "v8")
	index := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	)
	if err := remote.WriteIndex(f.Ref("team/multi:1"), index); err != nil {
		t.Fatal(err)
	}
	indexDigest, _ := index.Digest()
	c := newTestClient(t, Options{})
	ctx := context.Background()

	for _, tc := range []struct {
		platform *v1.Platform
		want     v1.Image
	}{
		{nil, amd64},
		{&v1.Platform{OS: "linux", Architecture: "arm64"}, arm64},
		{&v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, arm64},
	} {
		got, err := c.As(nil).ReadImage(ctx, f.Ref("team/multi:1"), tc.platform)
		if err != nil {
			t.Fatal(err)
		}
		wantDigest, _ := tc.want.Digest()
		if got.Digest != wantDigest || got.Ref.DigestStr() != indexDigest.String() {
			t.Errorf("platform %v: got image %s from %s, want %s from index %s", tc.platform, got.Digest, got.Ref, wantDigest, indexDigest)
		}
		if got.Platform == nil || got.Config.Architecture != got.Platform.Architecture {
			t.Errorf("platform %v: chose %v with config arch %q", tc.platform, got.Platform, got.Config.Architecture)
		}
		wantPlatforms := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}}
		if diff := cmp.Diff(wantPlatforms, got.Platforms); diff != "" {
			t.Errorf("platform %v: platforms of the index (-want +got):\n%s", tc.platform, diff)
		}
	}
	plain, err := c.As(nil).ReadImage(ctx, f.Ref("team/multi@"+mustDigest(t, arm64).String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.Platform{{OS: "linux", Architecture: "arm64", Variant: "v8"}}, plain.Platforms); diff != "" {
		t.Errorf("platforms of a plain image (-want +got):\n%s", diff)
	}
	_, err = c.As(nil).ReadImage(ctx, f.Ref("team/multi:1"), &v1.Platform{OS: "linux", Architecture: "s390x"})
	if e := Classify(err); e.Class != failure.Permanent || e.Reason != ReasonPlatformNotFound {
		t.Errorf("missing platform: %v (%s)", err, e.Reason)
	}
}

// TestWriteKeepsLayersLazy: an image built on one read through the Client is
// written to another repository without downloading its layers (each is
// mounted), and writing it again sends its manifest alone.
func TestWriteKeepsLayersLazy(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/base:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()

	base, err := c.As(nil).ReadImage(ctx, f.Ref("team/base:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	extra, _ := random.Layer(64, types.OCILayer)
	built, err := mutate.AppendLayers(base.Image, extra)
	if err != nil {
		t.Fatal(err)
	}
	f.ForgetRequests()
	before := c.Stats()
	tag := f.Ref("team/builder:latest").(name.Tag)
	pushed, err := c.As(nil).Write(ctx, tag, built)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := built.Digest()
	if pushed.DigestStr() != want.String() {
		t.Errorf("Write returned %s, want digest %s", pushed, want)
	}
	first := c.Stats().Sub(before)
	// No layer of the base is downloaded: each is mounted.
	if n := f.Count("POST", "mount="); n != 2 {
		t.Errorf("%d mounts, want one per layer of the base (2): %v", n, f.Requests())
	}
	if n := f.Count("GET", "/blobs/"); n != 0 {
		t.Errorf("%d blob downloads while writing", n)
	}
	if first.TotalBytesDown() > 4096 {
		t.Errorf("%d bytes down while writing; layers were downloaded", first.TotalBytesDown())
	}

	f.ForgetRequests()
	before = c.Stats()
	if _, err := c.As(nil).Write(ctx, tag, built); err != nil {
		t.Fatal(err)
	}
	// Again: the manifest PUT alone (as cheap as the HEAD that would
	// find it), the repository remembered holding every blob.
	if reqs := f.Requests(); len(reqs) != 1 || reqs[0] != "PUT /v2/team/builder/manifests/latest" {
		t.Errorf("second identical write: %v, want the manifest PUT alone", reqs)
	}
}

// TestLazyLayersOutliveTheCall: layers of a read image stay readable after
// the call's context is cancelled (ggcr binds lazy layers to the context
// they were made with).
func TestLazyLayersOutliveTheCall(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/base:1")
	c := newTestClient(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	img, err := c.As(nil).ReadImage(ctx, f.Ref("team/base:1"), nil)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if _, ok := l.(*remote.MountableLayer); !ok {
			t.Errorf("layer is %T, not mountable", l)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatalf("reading a layer after the call: %v", err)
		}
		_ = rc.Close()
	}
}

func BenchmarkResolve(b *testing.B) {
	f := registrytest.New(b)
	f.Push("team/app:1")
	c := newTestClient(b, Options{})
	ctx := context.Background()
	ref := f.Ref("team/app:1")
	if _, err := c.As(Anonymous).Resolve(ctx, ref); err != nil { // warm: ping and session
		b.Fatal(err)
	}
	before := c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.As(Anonymous).Resolve(ctx, ref); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	d := c.Stats().Sub(before)
	b.ReportMetric(float64(d.Total())/float64(b.N), "requests/op")
	if d.Total() != int64(b.N) || d.Total("HEAD") != int64(b.N) {
		b.Errorf("%d requests (%d HEAD) for %d warm resolves, want one HEAD each", d.Total(), d.Total("HEAD"), b.N)
	}
}

func withPlatform(t *testing.T, img v1.Image, arch, variant string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture, cf.Variant = "linux", arch, variant
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestBuildingOnReadLayersDownloadsNothing: an image made of layers of two
// images read through the Client (as a builder is made of a build image and
// buildpack layers) is written without a single blob download, and keeps
// the layers' media types.
func TestBuildingOnReadLayersDownloadsNothing(t *testing.T) {
	f := registrytest.New(t)
	ociImage := func(layers int) v1.Image {
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		for range layers {
			l, _ := random.Layer(256, types.OCILayer)
			img, _ = mutate.AppendLayers(img, l)
		}
		return img
	}
	for repo, img := range map[string]v1.Image{"stack/build:1": ociImage(2), "buildpacks/go:1": ociImage(1)} {
		if err := remote.Write(f.Ref(repo), img); err != nil {
			t.Fatal(err)
		}
	}
	c := newTestClient(t, Options{})
	ctx := context.Background()
	base, err := c.As(nil).ReadImage(ctx, f.Ref("stack/build:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	buildpack, err := c.As(nil).ReadImage(ctx, f.Ref("buildpacks/go:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := buildpack.Image.LayerByDiffID(buildpack.Config.RootFS.DiffIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	f.ForgetRequests()
	before := c.Stats()
	built, err := mutate.AppendLayers(base.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.As(nil).Write(ctx, f.Ref("builders/go:latest").(name.Tag), built); err != nil {
		t.Fatal(err)
	}
	if n := f.Count("GET", "/blobs/"); n != 0 {
		t.Errorf("%d blob downloads: %v", n, f.Requests())
	}
	if d := c.Stats().Sub(before); d.TotalBytesDown() > 2048 {
		t.Errorf("%d bytes down writing an image of read layers", d.TotalBytesDown())
	}
	m, _ := built.Manifest()
	for i, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer %d has media type %s, want %s", i, l.MediaType, types.OCILayer)
		}
	}
}

func TestRedact(t *testing.T) {
	err := fmt.Errorf("PATCH: %w", &url.Error{Op: "Patch",
		URL: "https://r.example/v2/team/app/blobs/uploads/abc?_state=SECRET&sig=SECRET", Err: io.ErrUnexpectedEOF})
	e := newError("r.example", 0, err)
	if strings.Contains(e.Error(), "SECRET") || !strings.Contains(e.Error(), "https://r.example/v2/team/app/blobs/uploads/abc?REDACTED") {
		t.Errorf("message = %q", e.Error())
	}
	if !errors.Is(e, io.ErrUnexpectedEOF) || Classify(e).Reason != ReasonRegistryUnavailable {
		t.Errorf("redaction lost the error chain: %v, %s", e, Classify(e).Reason)
	}
	token := newError("auth.example", 0, errors.New("no token in bearer response:\n{\"refresh_token\": \"SECRET\"}"))
	if strings.Contains(token.Error(), "SECRET") {
		t.Errorf("message = %q", token.Error())
	}
}

// TestReadByDigestIsCached: an image named by digest is read from the
// registry once per set of credentials.
func TestReadByDigestIsCached(t *testing.T) {
	f := registrytest.New(t)
	img := f.Push("team/app:1")
	digest, _ := img.Digest()
	c := newTestClient(t, Options{})
	ctx := context.Background()
	byDigest := f.Ref("team/app@" + digest.String())
	if _, err := c.As(nil).ReadImage(ctx, byDigest, nil); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	for range 5 {
		if _, err := c.As(Anonymous).ReadImage(ctx, byDigest, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Stats().Sub(before).Total(); n != 0 {
		t.Errorf("%d requests for 5 reads of a cached digest", n)
	}
	f.ForgetRequests()
	other := staticKeychain{user: "u", password: "p"} // not cacheable: read anew
	if _, err := c.As(other).ReadImage(ctx, byDigest, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.As(nil).ReadImage(ctx, f.Ref("team/app:1"), nil); err != nil {
		t.Fatal(err)
	}
	config, _ := img.ConfigName()
	want := []string{"GET /v2/team/app/manifests/" + digest.String(), "GET /v2/team/app/blobs/" + config.String(),
		"GET /v2/team/app/manifests/1"}
	if got := f.Requests(); !cmp.Equal(got, want) {
		t.Errorf("requests = %v, want manifest and config for other credentials, then the tag's manifest", got)
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestWriteIndex: an index of images built on images read through the
// Client is pushed with its images, which mount their layers; the tag then
// points at the index.
func TestWriteIndex(t *testing.T) {
	f := registrytest.New(t)
	base, _ := random.Image(1024, 2)
	amd64 := withPlatform(t, base, "amd64", "")
	arm64 := withPlatform(t, base, "arm64", "")
	f.Write("team/base:amd64", amd64)
	f.Write("team/base:arm64", arm64)
	c := newTestClient(t, Options{})
	ctx := context.Background()
	var adds []mutate.IndexAddendum
	for _, tag := range []string{"amd64", "arm64"} {
		read, err := c.As(nil).ReadImage(ctx, f.Ref("team/base:"+tag), nil)
		if err != nil {
			t.Fatal(err)
		}
		extra, _ := random.Layer(64, types.OCILayer)
		img, err := mutate.AppendLayers(read.Image, extra)
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &read.Platforms[0]}})
	}
	index := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	f.ForgetRequests()

	pushed, err := c.As(nil).Write(ctx, f.Ref("team/out:1").(name.Tag), index)
	if err != nil {
		t.Fatal(err)
	}
	if tagged, _ := f.Resolve(f.Addr + "/team/out:1"); tagged != pushed.String() || pushed.DigestStr() != mustIndexDigest(t, index) {
		t.Errorf("the tag points at %s; Write said %s; the index is %s", tagged, pushed, mustIndexDigest(t, index))
	}
	for _, a := range adds {
		if _, err := f.Resolve(f.Addr + "/team/out@" + mustDigest(t, a.Add.(v1.Image)).String()); err != nil {
			t.Errorf("an image of the index was not pushed: %v", err)
		}
	}
	if n := f.Count("GET", "/blobs/"); n != 0 {
		t.Errorf("%d blobs downloaded to push the index; the base layers should have been mounted", n)
	}
}

func mustIndexDigest(t *testing.T, index v1.ImageIndex) string {
	t.Helper()
	h, err := index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// TestReadTagAgainIsOneRequest: a tag read again costs its manifest only
// while it names the image read before; moved, it is read whole.
func TestReadTagAgainIsOneRequest(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()
	tag := f.Ref("team/app:1")
	first, err := c.As(nil).ReadImage(ctx, tag, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	again, err := c.As(nil).ReadImage(ctx, tag, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Stats().Sub(before); d.Total() != 1 || again.Ref != first.Ref {
		t.Errorf("read again: %v, %s; want one GET of the manifest and %s", d.Requests, again.Ref, first.Ref)
	}
	moved := f.Push("team/app:1")
	before = c.Stats()
	after, err := c.As(nil).ReadImage(ctx, tag, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Stats().Sub(before); d.Total("GET") != 2 || after.Digest != mustDigest(t, moved) {
		t.Errorf("read after the tag moved: %v, %s; want manifest and config of %s", d.Requests, after.Digest, mustDigest(t, moved))
	}
}

// TestReadImageCachedWhateverPlatformAsked: an image manifest's digest
// names one image whatever platform is asked for (a store reads its
// buildpackages without one, builders with theirs); an image chosen from an
// index is also that plain image under its own digest.
func TestReadImageCachedWhateverPlatformAsked(t *testing.T) {
	f := registrytest.New(t)
	plain := f.Push("team/plain:1")
	_, _, arm64 := pushAmd64Arm64Index(t, f, "team/multi:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()
	armPlatform := &v1.Platform{OS: "linux", Architecture: "arm64"}
	for _, read := range []struct {
		ref      string
		platform *v1.Platform
	}{{"team/plain:1", nil}, {"team/multi:1", armPlatform}} {
		if _, err := c.As(nil).ReadImage(ctx, f.Ref(read.ref), read.platform); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Stats()
	fromPlain, err := c.As(nil).ReadImage(ctx, f.Ref("team/plain@"+mustDigest(t, plain).String()), armPlatform)
	if err != nil {
		t.Fatal(err)
	}
	child := "team/multi@" + mustDigest(t, arm64).String()
	fromIndex, err := c.As(nil).ReadImage(ctx, f.Ref(child), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().Sub(before).Total(); n != 0 {
		t.Errorf("%d requests for images read before", n)
	}
	if fromPlain.Digest != mustDigest(t, plain) {
		t.Errorf("plain image: %s", fromPlain.Digest)
	}
	if fromIndex.Ref.String() != f.Ref(child).String() || fromIndex.Platform != nil ||
		!cmp.Equal(fromIndex.Platforms, []v1.Platform{*armPlatform}) {
		t.Errorf("index's image by its own digest: ref %s, platform %v, platforms %v; want a plain arm64 image at %s",
			fromIndex.Ref, fromIndex.Platform, fromIndex.Platforms, child)
	}
}

// TestConcurrentReadsAreShared: callers asking for the same image at the
// same time, by digest or by tag, share one read.
func TestConcurrentReadsAreShared(t *testing.T) {
	f := registrytest.New(t)
	img := f.Push("team/app:1")
	f.ForgetRequests()
	// Slow manifests, so that every caller asks while the first read is on
	// the wire.
	f.Inject("GET", "/manifests/", -1, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		f.Handler.ServeHTTP(w, r)
	})
	for _, ref := range []string{"team/app:1", "team/app@" + mustDigest(t, img).String()} {
		c := newTestClient(t, Options{}) // nothing cached
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				_, err := c.As(nil).ReadImage(context.Background(), f.Ref(ref), nil)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := f.Count("GET", "/manifests/"); n != 1 {
			t.Errorf("%s: %d manifest GETs for 8 concurrent reads, want 1: %v", ref, n, f.Requests())
		}
		f.ForgetRequests()
	}
}

// TestIndexCachedPerPlatform: an index's digest names a different image per
// platform; each platform's image, once read, serves later reads of the
// index for that platform.
func TestIndexCachedPerPlatform(t *testing.T) {
	f := registrytest.New(t)
	index, amd64, arm64 := pushAmd64Arm64Index(t, f, "team/multi:1")
	byDigest := f.Ref("team/multi@" + mustIndexDigest(t, index))
	c := newTestClient(t, Options{})
	ctx := context.Background()
	amdPlatform, armPlatform := &v1.Platform{OS: "linux", Architecture: "amd64"}, &v1.Platform{OS: "linux", Architecture: "arm64"}
	for i, read := range []struct {
		ref      name.Reference
		platform *v1.Platform
		want     v1.Image
		requests int // manifests and blobs
	}{
		{f.Ref("team/multi:1"), amdPlatform, amd64, 3}, // index, image, config
		{f.Ref("team/multi:1"), armPlatform, arm64, 3}, // the other platform: read, not the cached amd64
		{byDigest, armPlatform, arm64, 0},
		{byDigest, amdPlatform, amd64, 0},
		{byDigest, nil, amd64, 1}, // the default platform: the index, then amd64 from memory
	} {
		f.ForgetRequests()
		got, err := c.As(nil).ReadImage(ctx, read.ref, read.platform)
		if err != nil {
			t.Fatal(err)
		}
		requests := f.Count("GET", "/manifests/") + f.Count("GET", "/blobs/")
		if got.Digest != mustDigest(t, read.want) || got.Ref.DigestStr() != mustIndexDigest(t, index) ||
			got.Platform == nil || got.Platform.Architecture != got.Config.Architecture || requests != read.requests {
			t.Errorf("read %d (%v): image %s from %s for %v, %d GETs; want %s from the index, %d GETs",
				i, read.platform, got.Digest, got.Ref, got.Platform, requests, mustDigest(t, read.want), read.requests)
		}
	}
	// Read for the default platform first, the index serves the platform
	// it chose.
	c = newTestClient(t, Options{})
	if _, err := c.As(nil).ReadImage(ctx, byDigest, nil); err != nil {
		t.Fatal(err)
	}
	f.ForgetRequests()
	got, err := c.As(nil).ReadImage(ctx, byDigest, amdPlatform)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != mustDigest(t, amd64) || len(f.Requests()) != 0 {
		t.Errorf("amd64 after the default platform: %s, requests %v", got.Digest, f.Requests())
	}
}

// pushAmd64Arm64Index pushes an index of a linux/amd64 and a linux/arm64
// image (each with its platform in its config) to tag.
func pushAmd64Arm64Index(t *testing.T, f *registrytest.Registry, tag string) (index v1.ImageIndex, amd64, arm64 v1.Image) {
	t.Helper()
	amd64, _ = random.Image(100, 1)
	arm64, _ = random.Image(100, 2)
	amd64, arm64 = withPlatform(t, amd64, "amd64", ""), withPlatform(t, arm64, "arm64", "")
	index = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	if err := remote.WriteIndex(f.Ref(tag), index); err != nil {
		t.Fatal(err)
	}
	return index, amd64, arm64
}
