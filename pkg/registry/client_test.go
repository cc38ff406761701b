package registry

import (
	"context"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestResolveWarmIsOneHead(t *testing.T) {
	f := registrytest.New(t)
	img := f.Push("team/app:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()

	desc, err := c.Resolve(ctx, f.Ref("team/app:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if desc.Ref.DigestStr() != want.String() || desc.Ref.Context().String() != f.Addr+"/team/app" {
		t.Errorf("Resolve = %s, want %s@%s", desc.Ref, f.Addr+"/team/app", want)
	}
	before := c.Stats()
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), Anonymous); err != nil {
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
	amd64, _ = mutate.ConfigFile(amd64, &v1.ConfigFile{OS: "linux", Architecture: "amd64"})
	arm64, _ = mutate.ConfigFile(arm64, &v1.ConfigFile{OS: "linux", Architecture: "arm64", Variant: "v8"})
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
		got, err := c.ReadImage(ctx, f.Ref("team/multi:1"), tc.platform, nil)
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
	}
	_, err := c.ReadImage(ctx, f.Ref("team/multi:1"), &v1.Platform{OS: "linux", Architecture: "s390x"}, nil)
	if Classify(err) != Permanent || Reason(err) != ReasonPlatformNotFound {
		t.Errorf("missing platform: %v (%s)", err, Reason(err))
	}
}

// TestWriteKeepsLayersLazy: an image built on one read through the Client is
// written to another repository without downloading its layers (ggcr tries
// to mount each), and writing it again uploads nothing.
func TestWriteKeepsLayersLazy(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/base:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()

	base, err := c.ReadImage(ctx, f.Ref("team/base:1"), nil, nil)
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
	pushed, err := c.Write(ctx, tag, built, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := built.Digest()
	if pushed.DigestStr() != want.String() {
		t.Errorf("Write returned %s, want digest %s", pushed, want)
	}
	first := c.Stats().Sub(before)
	// No layer of the base is downloaded. (The in-memory registry shares
	// blobs across repositories, so ggcr's HEAD finds them and does not
	// even mount; the e2e against the distribution registry checks mounts.)
	if n := f.Count("GET", "/blobs/"); n != 0 {
		t.Errorf("%d blob downloads while writing", n)
	}
	if first.TotalBytesDown() > 4096 {
		t.Errorf("%d bytes down while writing; layers were downloaded", first.TotalBytesDown())
	}

	f.ForgetRequests()
	before = c.Stats()
	if _, err := c.Write(ctx, tag, built, nil); err != nil {
		t.Fatal(err)
	}
	second := c.Stats().Sub(before)
	if second.TotalBytesUp() != 0 || f.Count("PUT", "") != 0 || f.Count("POST", "") != 0 {
		t.Errorf("second identical write uploaded %d bytes: %v", second.TotalBytesUp(), second.Requests)
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
	img, err := c.ReadImage(ctx, f.Ref("team/base:1"), nil, nil)
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
	if _, err := c.Resolve(ctx, ref, Anonymous); err != nil { // warm: ping and session
		b.Fatal(err)
	}
	before := c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Resolve(ctx, ref, Anonymous); err != nil {
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
