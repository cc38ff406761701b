package e2e

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestMultiPlatformBuilder: over a two-platform stack, lifecycle (the real
// v0.21.0 for amd64 and, cross-compiled, arm64) and buildpackage, one
// Builder pushes an index of two builders. The amd64 one runs the real
// detector and builder, and bin/build sees spec.env; the arm64 one holds an
// aarch64 lifecycle and lists the same buildpacks. Adding an amd64-only
// buildpack to the order makes the builder amd64 only, and status says why.
func TestMultiPlatformBuilder(t *testing.T) {
	ctx := context.Background()
	f := registrytest.New(t)
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	pushMultiPlatformSamples(t, f, "io.buildpacks.stacks.multi")
	x86, err := sampleimages.BuildpackageFor(amd64, sampleimages.Buildpack{ID: "example/x86", Version: "1.0.0", Detect: "exit 0\n", Build: "exit 0\n"})
	push(t, f, "buildpacks/x86:1", x86, err)

	const ns = "platforms"
	tenantNamespace(t, ns)
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)

	bs := client.BuildsmithV1alpha1()
	objects := storeStack{Addr: f.Addr, Name: "platforms",
		Buildpackages: []string{"buildpacks/hello:1", "buildpacks/x86:1"}, StackID: "io.buildpacks.stacks.multi"}
	objects.create(t)
	objects.createBuilder(t, ns, "multi", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
		Order: helloOrder(),
		Env:   []v1alpha1.BuildEnv{{Name: "HELLO_GREETING", Value: "on amd64"}},
	}})
	if out, err := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "-n", ns, "builder/multi").CombinedOutput(); err != nil {
		b, _ := bs.Builders(ns).Get(ctx, "multi", metav1.GetOptions{})
		t.Fatalf("kubectl wait: %v\n%s\n%+v", err, out, b.Status.Conditions)
	}
	out, _ := env.Kubectl("get", "-n", ns, "builder/multi", "-o", "yaml").CombinedOutput()
	t.Logf("kubectl get builder -o yaml:\n%s", out)
	b, err := bs.Builders(ns).Get(ctx, "multi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(b.Status.LatestImage)
	if err != nil {
		t.Fatal(err)
	}
	index, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("latestImage is not an index: %v", err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 2 || len(b.Status.Platforms) != 2 {
		t.Fatalf("index of %d images, status.platforms %+v", len(manifest.Manifests), b.Status.Platforms)
	}
	images := map[string]v1.Image{}
	for _, p := range b.Status.Platforms {
		img, err := remote.Image(mustDigestRef(t, p.Image))
		if err != nil {
			t.Fatal(err)
		}
		images[p.Arch] = img
	}

	if marker := buildApp(t, images["amd64"], "example/hello"); strings.TrimSpace(marker) != "built hello.txt on amd64" {
		t.Errorf("amd64 builder: bin/build wrote %q", marker)
	}
	files, err := sampleimages.Files(images["arm64"])
	if err != nil {
		t.Fatal(err)
	}
	if bin, err := elf.NewFile(bytes.NewReader([]byte(files["cnb/lifecycle/lifecycle"]))); err != nil || bin.Machine != elf.EM_AARCH64 {
		t.Errorf("arm64 builder's lifecycle: %v", err)
	}
	if a, r := buildpacksOf(t, images["amd64"]), buildpacksOf(t, images["arm64"]); !slices.Equal(a, r) || len(a) != 1 {
		t.Errorf("buildpacks in the labels: amd64 %v, arm64 %v", a, r)
	}

	// An amd64-only buildpack in the order: amd64 only, and why.
	b.Spec.Order[0].Group = append(b.Spec.Order[0].Group, v1alpha1.BuildpackRef{ID: "example/x86"})
	if _, err := bs.Builders(ns).Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "an amd64-only builder", func() (bool, string) {
		b, err := bs.Builders(ns).Get(ctx, "multi", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := b.Status
		return s.IsReady() && s.ObservedGeneration == b.Generation && len(s.Platforms) == 1 && s.Platforms[0].Arch == "amd64" &&
				len(s.SkippedPlatforms) == 1 && strings.Contains(s.SkippedPlatforms[0], "linux/arm64") && strings.Contains(s.SkippedPlatforms[0], "example/x86"),
			fmt.Sprintf("platforms %+v, skipped %q, %+v", s.Platforms, s.SkippedPlatforms, s.Conditions)
	})
}

func mustDigestRef(t *testing.T, s string) name.Digest {
	t.Helper()
	d, err := name.NewDigest(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// buildpacksOf lists id@version of the buildpacks a builder's metadata
// label lists.
func buildpacksOf(t *testing.T, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Buildpacks []struct{ ID, Version string }
	}
	if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.builder.metadata"]), &meta); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, bp := range meta.Buildpacks {
		out = append(out, bp.ID+"@"+bp.Version)
	}
	return out
}
