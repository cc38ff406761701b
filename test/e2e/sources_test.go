package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestBuilderFromSeveralSources: a Builder draws from two ClusterStores
// and a Buildpack of its namespace; its status says where each buildpack
// came from, and the real lifecycle detects and builds the group of all
// three from the builder image.
func TestBuilderFromSeveralSources(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	objects := storeStack{Addr: f.Addr, Name: "sources", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	for _, id := range []string{"two", "own"} {
		bp, err := sampleimages.Buildpackage(markerBuildpack("example/" + id))
		push(t, f, "buildpacks/"+id+":1.0.0", bp, err)
	}
	const ns = "sources"
	tenantNamespace(t, ns)
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)
	objects.create(t)
	bs := client.BuildsmithV1alpha1()
	if _, err := bs.ClusterStores().Create(ctx, &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "sources-two"},
		Spec: v1alpha1.ClusterStoreSpec{Sources: []v1alpha1.ImageSource{{Image: f.Addr + "/buildpacks/two:1.0.0"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Buildpacks(ns).Create(ctx, &v1alpha1.Buildpack{ObjectMeta: metav1.ObjectMeta{Name: "own"},
		Spec: v1alpha1.BuildpackSpec{Image: f.Addr + "/buildpacks/own:1.0.0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objects.createBuilder(t, ns, "sources", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
		Sources: []v1alpha1.SourceRef{{Name: "sources-two"}, {Kind: "Buildpack", Name: "own"}},
		Order:   []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}, {ID: "example/two"}, {ID: "example/own"}}}}}})

	builder := readyBuilder(t, ns, "sources", 30*time.Second)
	var from []string
	for _, bp := range builder.Status.BuilderMetadata {
		from = append(from, bp.ID+" "+bp.Source)
	}
	want := []string{"example/hello ClusterStore/sources", "example/own Buildpack/own", "example/two ClusterStore/sources-two"}
	if diff := cmp.Diff(want, from); diff != "" {
		t.Errorf("where the buildpacks came from (-want +got):\n%s", diff)
	}

	img := pullImage(t, builder.Status.LatestImage)
	w := unpackBuilder(t, img)
	rootfs, layers, common := w.rootfs, w.layers, w.args()
	runLifecycle(t, rootfs, "detector", append(common,
		"-order", filepath.Join(rootfs, "cnb/order.toml"), "-run", filepath.Join(rootfs, "cnb/run.toml"))...)
	group, err := os.ReadFile(filepath.Join(layers, "group.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"example/hello", "example/two", "example/own"} {
		if !strings.Contains(string(group), `"`+id+`"`) {
			t.Errorf("group.toml has no %s:\n%s", id, group)
		}
	}
	runLifecycle(t, rootfs, "builder", common...)
	for _, marker := range []string{"example_two/two/marker", "example_own/own/marker"} {
		if _, err := os.Stat(filepath.Join(layers, marker)); err != nil {
			t.Errorf("%s: %v", marker, err)
		}
	}
}
