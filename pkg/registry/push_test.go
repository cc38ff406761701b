package registry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestPushRequests counts, at the registry, what pushes cost (issue 29's
// table): a repository remembered to hold the layers costs the config and
// the manifest; one of its own a mount per layer more; an unchanged image
// the manifest PUT alone. A small blob (the config) costs two requests at a
// registry that ignores blobs in the POST (learned at the first), one at
// one that takes them. The registry probe is made first, as it is once per
// registry and process.
func TestPushRequests(t *testing.T) {
	t.Run("distribution", func(t *testing.T) { testPushRequests(t, registrytest.New(t), 2) })
	t.Run("single POST", func(t *testing.T) { testPushRequests(t, registrytest.NewTakingBlobsInPost(t), 1) })
}

// testPushRequests: small is what a small blob's upload costs at f.
func testPushRequests(t *testing.T, f *registrytest.Registry, small int) {
	const layers = 5
	c := newTestClient(t, Options{})
	ctx := context.Background()
	f.PushLayers("stack/build:1", randomLayers(t, layers), nil, nil)
	read, err := c.As(nil).ReadImage(ctx, f.Ref("stack/build:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	builder := func(label string) v1.Image {
		cfg, err := read.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Config.Labels = map[string]string{"which": label}
		img, err := mutate.ConfigFile(read.Image, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	write := func(tag string, img v1.Image) []string {
		t.Helper()
		f.ForgetRequests()
		if _, err := c.As(nil).Write(ctx, f.Ref(tag).(name.Tag), img); err != nil {
			t.Fatal(err)
		}
		return f.Requests()
	}
	// The probe, with a first builder: a mount per layer, the config, the manifest.
	probe := write("builders/first:1", builder("first"))
	if n := count(probe, "PUT", "/manifests/sha256:"); n != 2 {
		t.Errorf("probe: %d manifest PUTs by digest, want 2: %v", n, probe)
	}
	for _, tc := range []struct {
		name string
		tag  string
		img  v1.Image
		want int
	}{
		{"new builder in a repository of its own, L layers mounted", "builders/own:1", builder("own"), layers + small + 1},
		{"new builder in a repository that holds its layers", "builders/own:2", builder("own 2"), small + 1},
		{"unchanged builder written again", "builders/own:2", builder("own 2"), 1},
	} {
		reqs := write(tc.tag, tc.img)
		if len(reqs) != tc.want {
			t.Errorf("%s: %d requests, want %d: %v", tc.name, len(reqs), tc.want, reqs)
		}
		checkComplete(t, f, tc.tag)
	}
}

// TestForgottenBlob: a blob deleted behind the client's back (a garbage
// collection) while it remembers the repository holding it costs one
// refused manifest PUT, then a push that asks; the image is whole.
func TestForgottenBlob(t *testing.T) {
	f := registrytest.New(t)
	c := newTestClient(t, Options{})
	ctx := context.Background()
	own := randomLayers(t, 2) // uploaded by the client, not mountable
	first, err := mutate.AppendLayers(mustRandom(t), own...)
	if err != nil {
		t.Fatal(err)
	}
	tag := f.Ref("team/builder:1").(name.Tag)
	if _, err := c.As(nil).Write(ctx, tag, first); err != nil {
		t.Fatal(err)
	}
	gone, _ := own[1].Digest()
	f.DeleteBlob(gone)
	second, err := mutate.Config(first, v1.Config{Labels: map[string]string{"rebuilt": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	f.ForgetRequests()
	if _, err := c.As(nil).Write(ctx, tag, second); err != nil {
		t.Fatal(err)
	}
	reqs := f.Requests()
	if n := count(reqs, "PUT", "/manifests/1"); n != 2 {
		t.Errorf("%d manifest PUTs, want 2 (refused, then after asking): %v", n, reqs)
	}
	if n := count(reqs, "PUT", gone.Hex) + count(reqs, "POST", gone.Hex); n != 1 {
		t.Errorf("the deleted blob was uploaded %d times, want once: %v", n, reqs)
	}
	checkComplete(t, f, "team/builder:1")
}

// TestRefusedManifestRetriedOnce: a registry that keeps refusing a
// manifest for a missing blob gets one retry, not a loop, and the error is
// transient.
func TestRefusedManifestRetriedOnce(t *testing.T) {
	f := registrytest.New(t)
	c := newTestClient(t, Options{})
	ctx := context.Background()
	img := mustRandom(t)
	tag := f.Ref("team/builder:1").(name.Tag)
	if _, err := c.As(nil).Write(ctx, tag, img); err != nil {
		t.Fatal(err)
	}
	f.Inject(http.MethodPut, "/manifests/1", -1, registrytest.Answer(400, nil,
		registrytest.OCIError("MANIFEST_BLOB_UNKNOWN", "blob unknown to registry")))
	f.ForgetRequests()
	_, err := c.As(nil).Write(ctx, tag, img)
	if e := Classify(err); err == nil || e.Class != failure.Transient {
		t.Fatalf("err = %v, want a transient error", err)
	}
	if n := count(f.Requests(), "PUT", "/manifests/1"); n != 2 {
		t.Errorf("%d manifest PUTs, want 2: %v", n, f.Requests())
	}
}

// TestLaxRegistryIsAsked: on a registry that accepts manifests naming blobs
// it lacks, the memory is never trusted: a blob deleted behind the client's
// back is uploaded again, where trusting would have written a manifest
// with a hole in it. The probe's accepted manifest is deleted again.
func TestLaxRegistryIsAsked(t *testing.T) {
	f := registrytest.NewLax(t)
	c := newTestClient(t, Options{})
	ctx := context.Background()
	own := randomLayers(t, 2)
	first, err := mutate.AppendLayers(mustRandom(t), own...)
	if err != nil {
		t.Fatal(err)
	}
	tag := f.Ref("team/builder:1").(name.Tag)
	f.ForgetRequests()
	if _, err := c.As(nil).Write(ctx, tag, first); err != nil {
		t.Fatal(err)
	}
	if n := count(f.Requests(), "DELETE", "/manifests/sha256:"); n != 1 {
		t.Errorf("%d probe manifests deleted, want 1: %v", n, f.Requests())
	}
	gone, _ := own[0].Digest()
	f.DeleteBlob(gone)
	second, err := mutate.Config(first, v1.Config{Labels: map[string]string{"rebuilt": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	f.ForgetRequests()
	if _, err := c.As(nil).Write(ctx, tag, second); err != nil {
		t.Fatal(err)
	}
	if n := count(f.Requests(), "PUT", "/manifests/sha256:"); n != 0 {
		t.Errorf("the registry was probed again: %v", f.Requests())
	}
	checkComplete(t, f, "team/builder:1")
}

func TestBlobMemoryBounded(t *testing.T) {
	m := newBlobMemory(3)
	h := func(i int) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064d", i)} }
	m.remember("r/a", h(1), h(2))
	m.remember("r/b", h(3))
	m.has("r/a", h(1)) // used: h(2) is now the oldest
	m.remember("r/b", h(4))
	if m.len() != 3 || m.has("r/a", h(2)) || !m.has("r/a", h(1)) || !m.has("r/b", h(4)) {
		t.Errorf("after eviction: len %d, has h2 %v, h1 %v, h4 %v", m.len(), m.has("r/a", h(2)), m.has("r/a", h(1)), m.has("r/b", h(4)))
	}
	m.forget("r/b")
	if m.len() != 1 || m.has("r/b", h(3)) || !m.has("r/a", h(1)) {
		t.Errorf("after forget: len %d", m.len())
	}
	none := newBlobMemory(-1)
	none.remember("r/a", h(1))
	if none.has("r/a", h(1)) {
		t.Error("a memory of size -1 remembered")
	}
}

// checkComplete reads the image at ref back whole, every blob included.
func checkComplete(t *testing.T, f *registrytest.Registry, ref string) {
	t.Helper()
	img, err := remote.Image(f.Ref(ref))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("%s is not whole: %v", ref, err)
	}
}

func randomLayers(t *testing.T, n int) []v1.Layer {
	t.Helper()
	var out []v1.Layer
	for range n {
		l, err := random.Layer(1024, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

func mustRandom(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// count counts requests ("METHOD path?query") with method whose path
// contains part.
func count(reqs []string, method, part string) int {
	n := 0
	for _, r := range reqs {
		if m, rest, _ := strings.Cut(r, " "); m == method && strings.Contains(rest, part) {
			n++
		}
	}
	return n
}

// TestMountRefusedAsksTarget: at a registry that answers a mount with an
// upload (no mounts, or a source without the blob), the push asks whether
// the target holds the layer before sending it: layers the target has are
// neither downloaded from the source nor sent.
func TestMountRefusedAsksTarget(t *testing.T) {
	f := registrytest.NewLax(t) // no mounts; blobs shared by every repository
	f.PushLayers("stack/build:1", randomLayers(t, 3), nil, nil)
	c := newTestClient(t, Options{})
	ctx := context.Background()
	base, err := c.As(nil).ReadImage(ctx, f.Ref("stack/build:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ForgetRequests()
	if _, err := c.As(nil).Write(ctx, f.Ref("builders/one:1").(name.Tag), base.Image); err != nil {
		t.Fatal(err)
	}
	reqs := f.Requests()
	if n := count(reqs, "GET", "/blobs/"); n != 0 {
		t.Errorf("%d layers downloaded from the source: %v", n, reqs)
	}
	mounts := count(reqs, "POST", "mount=")
	if n := count(reqs, "HEAD", "/blobs/"); n != mounts || mounts < 3 {
		t.Errorf("%d HEADs of blobs after %d mounts were refused, want one each: %v", n, mounts, reqs)
	}
	if n := count(reqs, "PUT", "/blobs/uploads/") - 1; n != 0 { // the probe's blob aside
		t.Errorf("%d layers sent that the target held: %v", n, reqs)
	}
	checkComplete(t, f, "builders/one:1")
}

// TestProbedPerFamily: a registry's manifest checks are probed for OCI and
// Docker manifests apart, each once.
func TestProbedPerFamily(t *testing.T) {
	f := registrytest.New(t)
	c := newTestClient(t, Options{})
	ctx := context.Background()
	oci := mutate.MediaType(mustRandom(t), types.OCIManifestSchema1)
	docker := mustRandom(t) // random images are Docker's
	f.ForgetRequests()
	for i, img := range []v1.Image{oci, docker, oci, docker} {
		if _, err := c.As(nil).Write(ctx, f.Ref(fmt.Sprintf("team/app:%d", i)).(name.Tag), img); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(f.Requests(), "PUT", "/manifests/sha256:"); n != 4 {
		t.Errorf("%d probe manifests, want 2 per family: %v", n, f.Requests())
	}
}

// TestFailingPushRetriesOneAtATime: the blobs of a push move at once, and
// all of them meet a repository that fails; they retry one at a time, so
// the failure costs the first try of each and the retries of one, not the
// retries of every blob. A blip (the first tries fail, the retries get
// through) still ends in a pushed image.
func TestFailingPushRetriesOneAtATime(t *testing.T) {
	img, err := random.Image(1024, 6) // more blobs than pushJobs move at once
	if err != nil {
		t.Fatal(err)
	}
	steps := Options{}.withDefaults().Retry.Steps
	t.Run("the repository keeps failing", func(t *testing.T) {
		inBubble(t, func(t *testing.T, network *registrytest.Network) {
			f := registrytest.NewOn(t, network)
			c := newBubbleClient(t, network, Options{})
			f.Inject("", "/team/app/", -1, registrytest.Answer(503, nil, ""))
			f.ForgetRequests()
			if _, err := c.As(nil).Write(context.Background(), f.Ref("team/app:1").(name.Tag), img); Classify(err).Reason != ReasonRegistryUnavailable {
				t.Fatalf("Write: %v", err)
			}
			// The registry's traits are probed first (its tries), then the
			// first blob goes alone: its tries fail for good without an
			// answer, and the push is over. Each blob retrying, it was
			// steps + pushJobs×steps (15); each blob's first try and one's
			// retries, steps + pushJobs + steps-1 (9).
			if n := f.Count("", "/team/app/"); n != 2*steps {
				t.Errorf("%d requests into the failing repository, want %d (the traits probe's tries, one blob's): %q", n, 2*steps, f.Requests())
			}
		})
	})
	t.Run("the repository fails after the traits are known", func(t *testing.T) {
		inBubble(t, func(t *testing.T, network *registrytest.Network) {
			f := registrytest.NewOn(t, network)
			c := newBubbleClient(t, network, Options{})
			if _, err := c.As(nil).Write(context.Background(), f.Ref("team/other:1").(name.Tag), img); err != nil {
				t.Fatal(err)
			}
			f.Inject("", "/team/app/", -1, registrytest.Answer(503, nil, ""))
			f.ForgetRequests()
			if _, err := c.As(nil).Write(context.Background(), f.Ref("team/app:1").(name.Tag), img); Classify(err).Reason != ReasonRegistryUnavailable {
				t.Fatalf("Write: %v", err)
			}
			// The first blob's mount goes alone, and fails for good.
			if n := f.Count("", "/team/app/"); n != steps {
				t.Errorf("%d requests into the failing repository, want %d (one mount's tries): %q", n, steps, f.Requests())
			}
		})
	})
	t.Run("a repository asking to wait", func(t *testing.T) {
		inBubble(t, func(t *testing.T, network *registrytest.Network) {
			f := registrytest.NewOn(t, network)
			c := newBubbleClient(t, network, Options{})
			if _, err := c.As(nil).Write(context.Background(), f.Ref("team/other:1").(name.Tag), img); err != nil {
				t.Fatal(err)
			}
			f.Inject("", "/team/app/", -1, registrytest.Answer(429, map[string]string{"Retry-After": "60"}, ""))
			f.ForgetRequests()
			if _, err := c.As(nil).Write(context.Background(), f.Ref("team/app:1").(name.Tag), img); Classify(err).Reason != ReasonRateLimited {
				t.Fatalf("Write: %v", err)
			}
			if n := f.Count("", "/team/app/"); n != 1 {
				t.Errorf("%d requests into the repository after it asked to wait, want 1: %q", n, f.Requests())
			}
		})
	})
	t.Run("a blip", func(t *testing.T) {
		inBubble(t, func(t *testing.T, network *registrytest.Network) {
			f := registrytest.NewOn(t, network)
			c := newBubbleClient(t, network, Options{})
			// Fewer failures in a row than one exchange's tries.
			f.Inject("POST", "/team/app/", steps-1, registrytest.Answer(503, nil, ""))
			tag := f.Ref("team/app:1").(name.Tag)
			digest, err := c.As(nil).Write(context.Background(), tag, img)
			if err != nil {
				t.Fatalf("Write through a blip: %v", err)
			}
			if want, _ := img.Digest(); digest.DigestStr() != want.String() {
				t.Errorf("pushed %s, want %s", digest.DigestStr(), want)
			}
		})
	})
}
