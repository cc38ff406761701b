package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// curlExtension passes detection and generates a build.Dockerfile.
var curlExtension = sampleimages.Extension{ID: "example/curl", Version: "1.0.0", Detect: "exit 0\n",
	Generate: "printf 'ARG base_image\\nFROM ${base_image}\\nRUN echo curl installed\\n' > \"$CNB_OUTPUT_DIR/build.Dockerfile\"\n"}

// TestImageExtensions: a ClusterStore lists the image extensions of an
// extension package; a builder with orderExtensions holds them in
// /cnb/extensions with [[order-extensions]] and the labels pack writes; the
// real lifecycle's detector (platform API 0.13) runs the extension's
// bin/detect and bin/generate from the builder and writes its Dockerfile.
func TestImageExtensions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	objects := storeStack{Addr: f.Addr, Name: "extensions",
		Buildpackages: []string{"buildpacks/hello:1.0.0", "extensions/curl:1.0.0"}, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	ext, err := sampleimages.ExtensionPackage(curlExtension)
	push(t, f, "extensions/curl:1.0.0", ext, err)
	const ns = "extensions"
	tenantNamespace(t, ns)
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)
	objects.create(t)
	objects.createBuilder(t, ns, "extended", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder(),
		OrderExtensions: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/curl"}}}}}})

	builder := readyBuilder(t, ns, "extended", 30*time.Second)
	store, err := client.BuildsmithV1alpha1().ClusterStores().Get(ctx, "extensions", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(store.Status.Extensions) != 1 || store.Status.Extensions[0].ID != "example/curl" || len(store.Status.Buildpacks) != 1 {
		t.Errorf("store status: buildpacks %+v, extensions %+v", store.Status.Buildpacks, store.Status.Extensions)
	}
	if got := builder.Status.OrderExtensions; len(got) != 1 || !reflect.DeepEqual(got[0].Group[0], v1alpha1.BuildpackRef{ID: "example/curl", Version: "1.0.0"}) {
		t.Errorf("status.orderExtensions: %+v", got)
	}
	img := pullImage(t, builder.Status.LatestImage)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	labels := cf.Config.Labels
	var meta struct {
		Extensions []struct{ ID, Version string } `json:"extensions"`
	}
	_ = json.Unmarshal([]byte(labels["io.buildpacks.builder.metadata"]), &meta)
	if !strings.Contains(labels["io.buildpacks.extension.layers"], `"example/curl":{"1.0.0"`) ||
		labels["io.buildpacks.buildpack.order-extensions"] != `[{"group":[{"id":"example/curl","version":"1.0.0"}]}]` ||
		len(meta.Extensions) != 1 || meta.Extensions[0].ID != "example/curl" {
		t.Errorf("labels: extension layers %s, order-extensions %s, metadata extensions %+v",
			labels["io.buildpacks.extension.layers"], labels["io.buildpacks.buildpack.order-extensions"], meta.Extensions)
	}

	w := unpackBuilder(t, img)
	rootfs, layers := w.rootfs, w.layers
	runLifecycle(t, rootfs, "detector", append(w.args(), "-extensions", filepath.Join(rootfs, "cnb/extensions"),
		"-order", filepath.Join(rootfs, "cnb/order.toml"), "-run", filepath.Join(rootfs, "cnb/run.toml"),
		"-analyzed", filepath.Join(layers, "analyzed.toml"), "-generated", filepath.Join(layers, "generated"))...)
	group, err := os.ReadFile(filepath.Join(layers, "group.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(group), "[[group-extensions]]") || !strings.Contains(string(group), `id = "example/curl"`) ||
		!strings.Contains(string(group), `id = "example/hello"`) {
		t.Errorf("group.toml:\n%s", group)
	}
	// At platform API 0.13 the generator keeps each extension's output as
	// <generated>/<extension>/build.Dockerfile.
	dockerfile, err := os.ReadFile(filepath.Join(layers, "generated", "example_curl", "build.Dockerfile"))
	if err != nil || !strings.Contains(string(dockerfile), "RUN echo curl installed") {
		t.Errorf("the extension's generated Dockerfile: %v\n%s", err, dockerfile)
	}
}
