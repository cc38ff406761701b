package builder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
)

// multiFixture is a fixture over image indexes: a two-platform stack and
// lifecycle, a buildpackage for both platforms (example/hello) and one for
// amd64 only (example/x86).
func multiFixture(t *testing.T) *fixture {
	x := newFixture(t)
	f := x.f
	writeIndex := func(repo string) func(v1.ImageIndex, error) v1.ImageIndex {
		return func(index v1.ImageIndex, err error) v1.ImageIndex {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.WriteIndex(f.Ref(repo), index); err != nil {
				t.Fatal(err)
			}
			return index
		}
	}
	build := writeIndex("multi/build:1")(sampleimages.StackIndex("io.buildpacks.stacks.jammy", 1000, amd64, arm64))
	writeIndex("multi/run:1")(sampleimages.StackIndex("io.buildpacks.stacks.jammy", 0, amd64, arm64))
	dir := t.TempDir()
	binaries := map[string]string{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
		if err := os.WriteFile(path, []byte("lifecycle for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		binaries[p] = path
	}
	writeIndex("multi/lifecycle:0.21.0")(sampleimages.LifecycleIndex(binaries, "0.21.0"))
	hello := writeIndex("multi/hello:1")(sampleimages.BuildpackageIndex([]v1.Platform{amd64, arm64},
		sampleimages.Buildpack{ID: "example/hello", Version: "1.0.0", Detect: "exit 0\n", Build: "exit 0\n"}))
	x86, err := sampleimages.BuildpackageFor(amd64, sampleimages.Buildpack{ID: "example/x86", Version: "1.0.0", Detect: "exit 0\n", Build: "exit 0\n"})
	if err != nil {
		t.Fatal(err)
	}
	f.Write("multi/x86:1", x86)

	buildDigest, _ := build.Digest()
	x.stack.Status.BuildImage = v1alpha1.ResolvedImage{Image: f.Addr + "/multi/build:1", LatestImage: f.Addr + "/multi/build@" + buildDigest.String()}
	x.stack.Status.RunImage = v1alpha1.ResolvedRunImage{Image: f.Addr + "/multi/run:1"}
	x.stack.Status.Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}

	// The store's status, as its reconciler writes it: the first
	// platform's layer, and the platforms.
	x.store.Status.Buildpacks = nil
	for _, source := range []struct {
		repo      string
		digest    v1.Hash
		children  []v1.Image
		platforms []v1alpha1.Platform
	}{
		{"multi/hello", mustDigest(t, hello), []v1.Image{mustChild(t, hello, 0), mustChild(t, hello, 1)},
			[]v1alpha1.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}},
		{"multi/x86", mustDigest(t, x86), []v1.Image{x86}, []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}},
	} {
		var bps []v1alpha1.StoreBuildpack
		for i, child := range source.children {
			cf, _ := child.ConfigFile()
			m, _ := child.Manifest()
			these, err := cnb.Buildpackage(f.Addr+"/"+source.repo+"@"+source.digest.String(), cf, m)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				bps = these
			} else {
				bps[0].Targets = append(bps[0].Targets, these[0].Targets...)
			}
		}
		for i := range bps {
			bps[i].Platforms = source.platforms
		}
		x.store.Status.Buildpacks = append(x.store.Status.Buildpacks, bps...)
	}
	cnb.SortBuildpacks(x.store.Status.Buildpacks)
	return x
}

func mustDigest(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustChild(t *testing.T, index v1.ImageIndex, i int) v1.Image {
	t.Helper()
	m, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := index.Image(m.Manifests[i].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func order(ids ...string) []v1alpha1.OrderEntry {
	var group []v1alpha1.BuildpackRef
	for _, id := range ids {
		group = append(group, v1alpha1.BuildpackRef{ID: id})
	}
	return []v1alpha1.OrderEntry{{Group: group}}
}

// TestMultiPlatformBuilder: over indexes, a builder is built for every
// platform its parts share, as an index at the tag; an amd64-only
// buildpack narrows the default build and status says why; targets choose,
// and a target a part lacks stalls the builder naming both.
func TestMultiPlatformBuilder(t *testing.T) {
	x := multiFixture(t)
	lifecycle := x.f.Addr + "/multi/lifecycle:0.21.0"
	ready := rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute,
		EventReasons: []string{"Ready"}}

	t.Run("default: every common platform, as an index", func(t *testing.T) {
		b := x.builder(func(b *v1alpha1.Builder) { b.Spec.Order = order("example/hello") })
		got, events, err, _ := x.run(t, b, lifecycle)
		rt.Check(t, got, err, events, ready)
		index, err := remote.Index(mustRef(t, got.Status.LatestImage))
		if err != nil {
			t.Fatalf("latestImage %s is not an index: %v", got.Status.LatestImage, err)
		}
		m, _ := index.IndexManifest()
		if len(m.Manifests) != 2 || len(got.Status.Platforms) != 2 || len(got.Status.SkippedPlatforms) != 0 {
			t.Fatalf("index of %d, status platforms %+v, skipped %v", len(m.Manifests), got.Status.Platforms, got.Status.SkippedPlatforms)
		}
		for i, p := range got.Status.Platforms {
			img := x.read(t, p.Image)
			cf, _ := img.ConfigFile()
			files, err := sampleimages.Files(img)
			if err != nil {
				t.Fatal(err)
			}
			wantArch := []string{"amd64", "arm64"}[i]
			if p.Arch != wantArch || cf.Architecture != wantArch || m.Manifests[i].Platform.Architecture != wantArch {
				t.Errorf("platform %d: status %+v, config %s, index %+v", i, p, cf.Architecture, m.Manifests[i].Platform)
			}
			if got := files["cnb/lifecycle/lifecycle"]; got != "lifecycle for linux/"+wantArch {
				t.Errorf("%s builder holds the lifecycle %q", wantArch, got)
			}
			if !strings.Contains(files["cnb/buildpacks/example_hello/1.0.0/buildpack.toml"], `arch = "`+wantArch+`"`) {
				t.Errorf("%s builder holds another platform's buildpack:\n%s", wantArch, files["cnb/buildpacks/example_hello/1.0.0/buildpack.toml"])
			}
		}

		// Unchanged: one HEAD of the tag, nothing pushed.
		x.f.ForgetRequests()
		again, _, _, traffic := x.run(t, got, lifecycle)
		if again.Status.LatestImage != got.Status.LatestImage || traffic.TotalBytesUp() != 0 ||
			!cmp.Equal(x.f.Requests(), []string{"HEAD /v2/builders/go/manifests/latest"}) {
			t.Errorf("unchanged index builder: %s, %d bytes up, requests %v", again.Status.LatestImage, traffic.TotalBytesUp(), x.f.Requests())
		}
	})

	t.Run("an amd64-only buildpack: amd64 only, and status says why", func(t *testing.T) {
		b := x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag = "x86", x.f.Addr+"/builders/x86:latest"
			b.Spec.Order = order("example/hello", "example/x86")
		})
		got, events, err, _ := x.run(t, b, lifecycle)
		rt.Check(t, got, err, events, ready)
		if len(got.Status.Platforms) != 1 || got.Status.Platforms[0].Arch != "amd64" || got.Status.Platforms[0].Image != got.Status.LatestImage {
			t.Errorf("platforms %+v, latestImage %s", got.Status.Platforms, got.Status.LatestImage)
		}
		if len(got.Status.SkippedPlatforms) != 1 || !strings.Contains(got.Status.SkippedPlatforms[0], "linux/arm64") ||
			!strings.Contains(got.Status.SkippedPlatforms[0], "example/x86@1.0.0") {
			t.Errorf("skippedPlatforms %q", got.Status.SkippedPlatforms)
		}
		if _, err := remote.Image(mustRef(t, got.Status.LatestImage)); err != nil {
			t.Errorf("one platform: latestImage is not an image: %v", err)
		}
	})

	t.Run("an optional amd64-only buildpack: both platforms, arm64 without it", func(t *testing.T) {
		b := x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag = "optional", x.f.Addr+"/builders/optional:latest"
			b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}, {ID: "example/x86", Optional: true}}}}
		})
		got, events, err, _ := x.run(t, b, lifecycle)
		rt.Check(t, got, err, events, ready)
		if len(got.Status.Platforms) != 2 {
			t.Fatalf("platforms %+v", got.Status.Platforms)
		}
		for _, p := range got.Status.Platforms {
			files, err := sampleimages.Files(x.read(t, p.Image))
			if err != nil {
				t.Fatal(err)
			}
			_, hasX86 := files["cnb/buildpacks/example_x86/1.0.0/buildpack.toml"]
			if hasX86 != (p.Arch == "amd64") || strings.Contains(files["cnb/order.toml"], "example/x86") != (p.Arch == "amd64") {
				t.Errorf("%s builder: x86 buildpack %v, order.toml:\n%s", p.Arch, hasX86, files["cnb/order.toml"])
			}
		}
	})

	t.Run("published to another registry: the index and each platform's image copied and signed there", func(t *testing.T) {
		other := registrytest.New(t)
		key, _ := cosigntest.KeyPair(t, "")
		account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "publisher"},
			Secrets: []corev1.ObjectReference{{Name: "signer"}}}
		b := x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag, b.Spec.ServiceAccountName = "mirrored", x.f.Addr+"/builders/mirrored:latest", "publisher"
			b.Spec.Order = order("example/hello")
			b.Spec.AdditionalTags = []string{other.Addr + "/mirror/hello:latest"}
		})
		got, events, err, _ := x.run(t, b, lifecycle, account, cosigntest.Secret("apps", "signer", key, ""))
		rt.Check(t, got, err, events, ready)
		images := []string{got.Status.LatestImage}
		for _, p := range got.Status.Platforms {
			images = append(images, p.Image)
		}
		if len(images) != 3 || len(got.Status.Signatures) != 2*len(images) {
			t.Fatalf("images %q, %d signatures; want an index and two platforms' images, each signed in both repositories", images, len(got.Status.Signatures))
		}
		for _, image := range images {
			digest, _ := name.NewDigest(image)
			copied, _ := name.NewDigest(other.Addr + "/mirror/hello@" + digest.DigestStr())
			if _, err := other.Resolve(copied.String()); err != nil {
				t.Errorf("%s not copied: %v", copied, err)
			}
			if _, err := other.Resolve(cosign.SignatureTag(copied.Context(), copied).String()); err != nil {
				t.Errorf("%s not signed in its repository: %v", copied, err)
			}
		}
	})

	for _, tc := range []struct {
		name    string
		order   []string
		targets []v1alpha1.Target
		want    rt.Outcome
	}{{
		name: "target arm64: an arm64 builder", order: []string{"example/hello"},
		targets: []v1alpha1.Target{{Platform: v1alpha1.Platform{OS: "linux", Arch: "arm64"}}},
		want:    ready,
	}, {
		name: "target arm64 with an amd64-only buildpack: stalled", order: []string{"example/hello", "example/x86"},
		targets: []v1alpha1.Target{{Platform: v1alpha1.Platform{OS: "linux", Arch: "arm64"}}},
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonPlatformUnsupported, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonPlatformUnsupported}, MessageContains: "linux/arm64 is not in buildpack example/x86@1.0.0"},
	}, {
		name: "target the stack lacks: stalled", order: []string{"example/hello"},
		targets: []v1alpha1.Target{{Platform: v1alpha1.Platform{OS: "linux", Arch: "riscv64"}}},
		want: rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonPlatformUnsupported, Stalled: true, Requeue: rt.NoRequeue,
			EventReasons: []string{cnb.ReasonPlatformUnsupported}, MessageContains: "ClusterStack jammy"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := x.builder(func(b *v1alpha1.Builder) {
				b.Name, b.Spec.Tag = "targets", x.f.Addr+"/builders/targets:latest"
				b.Spec.Order, b.Spec.Targets = order(tc.order...), tc.targets
			})
			got, events, err, _ := x.run(t, b, lifecycle)
			rt.Check(t, got, err, events, tc.want)
			if tc.want.Ready == corev1.ConditionTrue {
				if len(got.Status.Platforms) != 1 || got.Status.Platforms[0].Arch != "arm64" {
					t.Errorf("platforms %+v", got.Status.Platforms)
				}
				cf, _ := x.read(t, got.Status.LatestImage).ConfigFile()
				if cf.Architecture != "arm64" {
					t.Errorf("the builder image is %s", cf.Architecture)
				}
			}
		})
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestTwoPlatformCost compares the registry traffic of one two-platform
// builder with that of two single-platform ones (each in a repository of
// its own, cold), and logs both: the index costs one more manifest, and
// nothing is uploaded twice.
func TestTwoPlatformCost(t *testing.T) {
	x := multiFixture(t)
	lifecycle := x.f.Addr + "/multi/lifecycle:0.21.0"
	run := func(name string, targets ...v1alpha1.Target) registryTraffic {
		b := x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag = name, x.f.Addr+"/builders/"+name+":latest"
			b.Spec.Order, b.Spec.Targets = order("example/hello"), targets
		})
		got, _, _, traffic := x.run(t, b, lifecycle)
		if !got.Status.IsReady() {
			t.Fatalf("%s: %+v", name, got.Status.Conditions)
		}
		return registryTraffic{requests: traffic.Total(), puts: traffic.Total("PUT"), up: traffic.TotalBytesUp()}
	}
	// Warm the client's cache of the shared images first, as a running
	// controller has it.
	run("warm")
	both := run("both")
	amd := run("amd", v1alpha1.Target{Platform: v1alpha1.Platform{OS: "linux", Arch: "amd64"}})
	arm := run("arm", v1alpha1.Target{Platform: v1alpha1.Platform{OS: "linux", Arch: "arm64"}})
	singles := registryTraffic{requests: amd.requests + arm.requests, puts: amd.puts + arm.puts, up: amd.up + arm.up}
	t.Logf("one two-platform builder: %d requests, %d PUTs, %d bytes up; two single-platform builders: %d requests, %d PUTs, %d bytes up",
		both.requests, both.puts, both.up, singles.requests, singles.puts, singles.up)
	if both.puts != singles.puts+1 {
		t.Errorf("%d PUTs for the index builder, want the two builders' %d and the index", both.puts, singles.puts)
	}
	if both.up > singles.up+4096 {
		t.Errorf("the index builder uploaded %d bytes, two single builders %d", both.up, singles.up)
	}
}

type registryTraffic struct{ requests, puts, up int64 }

// TestBuilderTargetDistributions: a target's distributions must include
// the stack's distro, or the builder stalls naming both.
func TestBuilderTargetDistributions(t *testing.T) {
	x := multiFixture(t)
	lifecycle := x.f.Addr + "/multi/lifecycle:0.21.0"
	arm64 := func(distros ...v1alpha1.TargetDistribution) []v1alpha1.Target {
		return []v1alpha1.Target{{Platform: v1alpha1.Platform{OS: "linux", Arch: "arm64"}, Distributions: distros}}
	}
	for _, tc := range []struct {
		name    string
		distro  *v1alpha1.Distro
		targets []v1alpha1.Target
		message string // "" for Ready
	}{{
		name: "the stack's distro and version", distro: &v1alpha1.Distro{Name: "ubuntu", Version: "22.04"},
		targets: arm64(v1alpha1.TargetDistribution{Name: "debian"}, v1alpha1.TargetDistribution{Name: "ubuntu", Versions: []string{"20.04", "22.04"}}),
	}, {
		name: "any version of the stack's distro", distro: &v1alpha1.Distro{Name: "ubuntu", Version: "24.04"},
		targets: arm64(v1alpha1.TargetDistribution{Name: "ubuntu"}),
	}, {
		name: "another version", distro: &v1alpha1.Distro{Name: "ubuntu", Version: "24.04"},
		targets: arm64(v1alpha1.TargetDistribution{Name: "ubuntu", Versions: []string{"22.04"}}),
		message: "the linux/arm64 target is for ubuntu 22.04; the stack is ubuntu 24.04",
	}, {
		name:    "a stack that does not say: nothing to check",
		targets: arm64(v1alpha1.TargetDistribution{Name: "ubuntu", Versions: []string{"22.04"}}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			x.stack.Status.Distro = tc.distro
			b := x.builder(func(b *v1alpha1.Builder) {
				b.Name, b.Spec.Tag = "distros", x.f.Addr+"/builders/distros:latest"
				b.Spec.Order, b.Spec.Targets = order("example/hello"), tc.targets
			})
			got, events, err, _ := x.run(t, b, lifecycle)
			want := rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync, MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}}
			if tc.message != "" {
				want = rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonDistroMismatch, Stalled: true, Requeue: rt.NoRequeue,
					EventReasons: []string{cnb.ReasonDistroMismatch}, MessageContains: tc.message}
			}
			rt.Check(t, got, err, events, want)
		})
	}
}
