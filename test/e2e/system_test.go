package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// markerBuildpack passes detection and writes a launch layer named after
// itself whose marker says it built.
func markerBuildpack(id string) sampleimages.Buildpack {
	layer := strings.TrimPrefix(id, "example/")
	return sampleimages.Buildpack{ID: id, Version: "1.0.0", Detect: "exit 0\n",
		Build: fmt.Sprintf("mkdir -p \"$CNB_LAYERS_DIR/%[1]s\"\necho built > \"$CNB_LAYERS_DIR/%[1]s/marker\"\n"+
			"printf '[types]\\nlaunch = true\\n' > \"$CNB_LAYERS_DIR/%[1]s.toml\"\n", layer)}
}

// TestSystemBuildpacks: a builder with spec.system gets /cnb/system.toml,
// and the real lifecycle, run at platform API 0.15, detects and builds the
// pre buildpack before the group's and the post one after.
func TestSystemBuildpacks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	f := registrytest.New(t)
	objects := storeStack{Addr: f.Addr, Name: "system",
		Buildpackages: []string{"buildpacks/hello:1.0.0", "buildpacks/pre:1.0.0", "buildpacks/post:1.0.0"}, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	for _, id := range []string{"pre", "post"} {
		bp, err := sampleimages.Buildpackage(markerBuildpack("example/" + id))
		push(t, f, "buildpacks/"+id+":1.0.0", bp, err)
	}
	const ns = "system"
	tenantNamespace(t, ns)
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)
	objects.create(t)
	objects.createBuilder(t, ns, "system", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder(),
		System: &v1alpha1.SystemBuildpacks{Pre: []v1alpha1.SystemBuildpackRef{{ID: "example/pre"}}, Post: []v1alpha1.SystemBuildpackRef{{ID: "example/post"}}}}})

	builder := readyBuilder(t, ns, "system", 30*time.Second)
	if s := builder.Status.System; s == nil || len(s.Pre) != 1 || s.Pre[0].Version != "1.0.0" || len(s.Post) != 1 || s.Post[0].Version != "1.0.0" {
		t.Errorf("status.system: %+v", s)
	}
	img := pullImage(t, builder.Status.LatestImage)

	w := unpackBuilder(t, img)
	rootfs, layers, common := w.rootfs, w.layers, w.args()
	runLifecycleAt(t, "0.15", rootfs, "detector", append(common,
		"-order", filepath.Join(rootfs, "cnb/order.toml"),
		"-system", filepath.Join(rootfs, "cnb/system.toml"),
		"-run", filepath.Join(rootfs, "cnb/run.toml"))...)
	group, err := os.ReadFile(filepath.Join(layers, "group.toml"))
	if err != nil {
		t.Fatal(err)
	}
	pre, hello, post := strings.Index(string(group), `"example/pre"`), strings.Index(string(group), `"example/hello"`), strings.Index(string(group), `"example/post"`)
	if pre < 0 || hello < 0 || post < 0 || !(pre < hello && hello < post) {
		t.Fatalf("group.toml does not have pre, the group, post in that order:\n%s", group)
	}
	runLifecycleAt(t, "0.15", rootfs, "builder", common...)
	for _, marker := range []string{"example_pre/pre/marker", "example_hello/hello/marker", "example_post/post/marker"} {
		if _, err := os.Stat(filepath.Join(layers, marker)); err != nil {
			t.Errorf("%s: %v", marker, err)
		}
	}
}
