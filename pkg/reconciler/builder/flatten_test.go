package builder

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestFlattenedBuilder: spec.flatten puts the buildpacks it names in one
// layer; another controller (its own registry client and scratch
// directory) makes the same image of the same inputs; the scratch files go
// once the builder is pushed; a name the builder lacks, or layers over the
// budget, stall it and keep its image.
func TestFlattenedBuilder(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	x.addToStore(t, "bp/php:1", registrytest.Buildpack{ID: "example/php", Version: "8.0.0", API: "0.10", Size: 32 << 10})
	x.addToStore(t, "bp/node:1", registrytest.Buildpack{ID: "example/node", Version: "2.0.0", API: "0.10", Size: 32 << 10})
	order := []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go"}, {ID: "example/php"}, {ID: "example/node"}}}}
	builder := func(name string, flatten *v1alpha1.Flatten) *v1alpha1.Builder {
		return x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag, b.Spec.Order, b.Spec.Flatten = name, x.f.Addr+"/builders/"+name+":latest", order, flatten
		})
	}
	controller := func(scratch string) Config {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cfg := x.config()
		cfg.Registry = registry.New(ctx, registry.Options{LoopbackRegistries: true, Timeout: 5 * time.Second})
		cfg.Lifecycle = NewLifecycleSource(time.Hour)
		cfg.Flattening = Flattening{ScratchDir: scratch}
		return cfg
	}
	build := func(cfg Config, b *v1alpha1.Builder) (*v1alpha1.Builder, v1.Image) {
		t.Helper()
		got, events, err, _, _ := x.runWith(t, cfg, b, lifecycle)
		rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
			MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
		ref, err := name.NewDigest(got.Status.Platforms[0].Image)
		if err != nil {
			t.Fatal(err)
		}
		img, err := cfg.Registry.As(nil).ReadImage(context.Background(), ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		return got, img.Image
	}
	layersOf := func(img v1.Image) (int, map[string]map[string]struct{ LayerDiffID string }) {
		t.Helper()
		layers, _ := img.Layers()
		cf, _ := img.ConfigFile()
		var label map[string]map[string]struct{ LayerDiffID string }
		if err := json.Unmarshal([]byte(cf.Config.Labels[cnb.LabelBuildpackLayers]), &label); err != nil {
			t.Fatal(err)
		}
		return len(layers), label
	}

	_, plain := build(controller(t.TempDir()), builder("plain", nil))
	plainLayers, plainLabel := layersOf(plain)
	scratchA := t.TempDir()
	flat, flatImage := build(controller(scratchA), builder("flat", &v1alpha1.Flatten{All: true}))
	flatLayers, flatLabel := layersOf(flatImage)
	if flatLayers != plainLayers-2 {
		t.Errorf("flattened builder: %d layers, unflattened %d: want the 3 buildpack layers in 1", flatLayers, plainLayers)
	}
	shared := flatLabel["example/go"]["1.1.0"].LayerDiffID
	if shared == "" || flatLabel["example/php"]["8.0.0"].LayerDiffID != shared || flatLabel["example/node"]["2.0.0"].LayerDiffID != shared ||
		shared == plainLabel["example/go"]["1.1.0"].LayerDiffID {
		t.Errorf("layers label does not name one new layer for the three: %+v", flatLabel)
	}
	if files, _ := os.ReadDir(scratchA); len(files) != 0 {
		t.Errorf("scratch directory holds %d entries after the push", len(files))
	}

	// Another controller, the same inputs: the same image.
	_, again := build(controller(t.TempDir()), builder("flat-again", &v1alpha1.Flatten{All: true}))
	flatDigest, _ := flatImage.Digest()
	againDigest, _ := again.Digest()
	if flatDigest != againDigest {
		t.Errorf("the same flattened builder from another controller: %s, first %s", againDigest, flatDigest)
	}
	// A controller that remembers its flattened layers rebuilds a
	// flattened builder (its description changed) whose repository holds
	// the layer without reading a buildpack layer or uploading it again.
	remembering := controller(t.TempDir())
	remembering.Flattening.Memory = NewFlattenMemory(16)
	first, _, err, _, _ := x.runWith(t, remembering, builder("remembered", &v1alpha1.Flatten{All: true}), lifecycle)
	if !first.Status.IsReady() {
		t.Fatalf("remembered: %v", err)
	}
	changed := builder("remembered", &v1alpha1.Flatten{All: true})
	changed.Status, changed.Spec.Description = first.Status, "rebuilt"
	x.f.ForgetRequests()
	rebuilt, _, err, _, _ := x.runWith(t, remembering, changed, lifecycle)
	if !rebuilt.Status.IsReady() || rebuilt.Status.LatestImage == first.Status.LatestImage {
		t.Fatalf("rebuilt: ready %v, latestImage %s (first %s): %v", rebuilt.Status.IsReady(), rebuilt.Status.LatestImage, first.Status.LatestImage, err)
	}
	flatLayer, err := flatImage.LayerByDiffID(mustHash(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	layerDigest, _ := flatLayer.Digest()
	if reads, uploads := x.f.Count(http.MethodGet, "/v2/bp/"), x.f.Count(http.MethodPut, strings.Replace(layerDigest.String(), ":", "%3A", 1)); reads != 0 || uploads != 0 {
		t.Errorf("rebuild remembering its flattened layer: %d buildpack reads, %d uploads of it; want none: %q", reads, uploads, x.f.Requests())
	}

	// Another grouping is another builder.
	_, grouped := build(controller(t.TempDir()), builder("flat-again",
		&v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"example/php", "example/node"}}}}))
	if n, _ := layersOf(grouped); n != plainLayers-1 {
		t.Errorf("php and node flattened: %d layers, want %d", n, plainLayers-1)
	}

	for name, tc := range map[string]struct {
		flatten  *v1alpha1.Flatten
		maxBytes int64
		reason   string
		message  string
	}{
		"a buildpack the builder lacks": {&v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"example/php", "example/ruby"}}}}, 0,
			cnb.ReasonFlattenNotInBuilder, "spec.flatten names example/ruby, which the builder does not have (it has example/go@1.1.0, example/node@2.0.0, example/php@8.0.0)"},
		"over the budget": {&v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"example/go", "example/php"}}}}, 16 << 10,
			cnb.ReasonFlattenTooLarge, "16384 bytes (--max-flattened-bytes): flatten fewer buildpacks"},
	} {
		t.Run(name, func(t *testing.T) {
			b := builder("flat", tc.flatten)
			b.Status = flat.Status
			cfg := controller(t.TempDir())
			cfg.Flattening.MaxBytes = tc.maxBytes
			failed, events, err, _, _ := x.runWith(t, cfg, b, lifecycle)
			rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: tc.reason, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{tc.reason}, MessageContains: tc.message})
			if failed.Status.LatestImage != flat.Status.LatestImage {
				t.Errorf("latestImage %q, want %q kept", failed.Status.LatestImage, flat.Status.LatestImage)
			}
		})
	}
}

// TestFlattenedMultiPlatformBuilder: each platform flattens the buildpacks
// it has; a name only some platforms have (an optional buildpack) is no
// error, one none has stalls the builder.
func TestFlattenedMultiPlatformBuilder(t *testing.T) {
	x := multiFixture(t)
	lifecycle := x.f.Addr + "/multi/lifecycle:0.21.0"
	orderWithX86 := []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}, {ID: "example/x86", Optional: true}}}}
	layers := func(image string) int {
		t.Helper()
		n, err := x.read(t, image).Layers()
		if err != nil {
			t.Fatal(err)
		}
		return len(n)
	}
	build := func(name string, flatten *v1alpha1.Flatten) *v1alpha1.Builder {
		t.Helper()
		b, events, err, _ := x.run(t, x.builder(func(b *v1alpha1.Builder) {
			b.Name, b.Spec.Tag, b.Spec.Order, b.Spec.Flatten = name, x.f.Addr+"/builders/"+name+":latest", orderWithX86, flatten
		}), lifecycle)
		if flatten != nil && len(flatten.Except) > 0 && flatten.Except[0] == "example/ghost" {
			rt.Check(t, b, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cnb.ReasonFlattenNotInBuilder, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{cnb.ReasonFlattenNotInBuilder},
				MessageContains: "spec.flatten names example/ghost, which the builder does not have (it has example/hello@1.0.0, example/x86@1.0.0)"})
			return b
		}
		if !b.Status.IsReady() || len(b.Status.Platforms) != 2 {
			t.Fatalf("%s: ready %v, platforms %+v (%v)", name, b.Status.IsReady(), b.Status.Platforms, err)
		}
		return b
	}
	plain := build("plain", nil)
	all := build("all", &v1alpha1.Flatten{All: true})
	// amd64 has hello and x86, flattened into one layer; arm64 has hello
	// alone, which stays as it is.
	for i, want := range []int{layers(plain.Status.Platforms[0].Image) - 1, layers(plain.Status.Platforms[1].Image)} {
		if got := layers(all.Status.Platforms[i].Image); got != want {
			t.Errorf("%s: %d layers flattened, want %d", all.Status.Platforms[i].Platform, got, want)
		}
	}
	digestOf := func(image string) string { _, d, _ := strings.Cut(image, "@"); return d }
	if digestOf(all.Status.Platforms[1].Image) != digestOf(plain.Status.Platforms[1].Image) {
		t.Errorf("arm64, with nothing to flatten, differs from the plain builder's: %s, %s", all.Status.Platforms[1].Image, plain.Status.Platforms[1].Image)
	}
	// x86 is named though arm64 lacks it.
	except := build("except", &v1alpha1.Flatten{All: true, Except: []string{"example/x86"}})
	if got, want := layers(except.Status.Platforms[0].Image), layers(plain.Status.Platforms[0].Image); got != want {
		t.Errorf("amd64 with x86 excepted: %d layers, want %d", got, want)
	}
	build("ghost", &v1alpha1.Flatten{All: true, Except: []string{"example/ghost"}})
}

func mustHash(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
