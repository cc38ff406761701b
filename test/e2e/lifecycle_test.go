package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestClusterLifecycle: a builder that names a ClusterLifecycle gets that
// lifecycle (the real one, which then detects and builds from it); changing
// the ClusterLifecycle rebuilds that builder and no other, and changing the
// lifecycle-image ConfigMap rebuilds the others and not that one.
func TestClusterLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	objects := storeStack{Addr: f.Addr, Name: "lifecycles", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	// The same lifecycle with one more label: another image, as a rebuilt
	// lifecycle image would be.
	lifecycle, err := sampleimages.Lifecycle(filepath.Join(env.Root, "bin", "lifecycle"), "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := lifecycle.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.Config.Labels["org.opencontainers.image.revision"] = "next"
	rebuilt, err := mutate.ConfigFile(lifecycle, cf)
	push(t, f, "buildsmith/lifecycle:next", rebuilt, err)
	plain, next := f.Addr+"/buildsmith/lifecycle:0.21.0", f.Addr+"/buildsmith/lifecycle:next"

	const ns = "lifecycles"
	tenantNamespace(t, ns)
	useLifecycleImage(t, plain)
	startController(t)

	bs := client.BuildsmithV1alpha1()
	objects.create(t)
	if _, err := bs.ClusterLifecycles().Create(ctx, &v1alpha1.ClusterLifecycle{ObjectMeta: metav1.ObjectMeta{Name: "pinned"},
		Spec: v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: plain}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.ClusterLifecycles().Delete(ctx, "pinned", metav1.DeleteOptions{}) })
	objects.createBuilder(t, ns, "pinned", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder(),
		Lifecycle: &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: "pinned"}}})
	objects.createBuilder(t, ns, "default", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})

	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterlifecycle/pinned")
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait clusterlifecycle/pinned: %v\n%s", err, out)
	}
	out, _ := env.Kubectl("get", "clusterlifecycle/pinned").CombinedOutput()
	t.Logf("kubectl get clusterlifecycle/pinned:\n%s", out)
	lc, err := bs.ClusterLifecycles().Get(ctx, "pinned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lc.Status.Version != "0.21.0" || len(lc.Status.Platforms) != 1 || lc.Status.Image.LatestImage == "" {
		t.Errorf("ClusterLifecycle status: %+v", lc.Status)
	}

	// Both builders Ready; each says which lifecycle image it has.
	builders := func(what string, want func(pinned, def *v1alpha1.Builder) bool) (pinned, def *v1alpha1.Builder) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() (bool, string) {
			var err error
			if pinned, err = bs.Builders(ns).Get(ctx, "pinned", metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			if def, err = bs.Builders(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			return pinned.Status.IsReady() && def.Status.IsReady() && want(pinned, def),
				fmt.Sprintf("pinned %+v %+v, default %+v %+v", pinned.Status.Conditions, pinned.Status.Lifecycle, def.Status.Conditions, def.Status.Lifecycle)
		})
		return pinned, def
	}
	pinned, def := builders("both builders Ready", func(pinned, def *v1alpha1.Builder) bool {
		return pinned.Status.Lifecycle.Image == lc.Status.Image.LatestImage && def.Status.Lifecycle.Image != ""
	})
	// The ClusterLifecycle's lifecycle runs from the builder.
	img := pullImage(t, pinned.Status.LatestImage)
	if marker := buildApp(t, img, "example/hello"); marker == "" {
		t.Error("the pinned builder's lifecycle built nothing")
	}

	// The ClusterLifecycle moves to another image: the pinned builder is
	// rebuilt with it, the default one is not touched.
	// Pushes and reads of a builder's tag: a builder not reconciled at
	// all has neither (a reconcile that changes nothing still HEADs it).
	pushes := func(builder string) int { return f.Count("PUT", "/builders/"+builder+"/manifests/latest") }
	heads := func(builder string) int { return f.Count("HEAD", "/builders/"+builder+"/manifests/latest") }
	defaultPushes, defaultHeads := pushes("default"), heads("default")
	lc.Spec.Image = next
	if _, err := bs.ClusterLifecycles().Update(ctx, lc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var nextDigest string
	eventually(t, 30*time.Second, "ClusterLifecycle at the new image", func() (bool, string) {
		lc, err := bs.ClusterLifecycles().Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		nextDigest = lc.Status.Image.LatestImage
		return lc.Status.Image.Image == next && lc.Status.IsReady(), fmt.Sprintf("%+v", lc.Status)
	})
	pinned2, def2 := builders("the pinned builder rebuilt with the new lifecycle", func(pinned, _ *v1alpha1.Builder) bool {
		return pinned.Status.Lifecycle.Image == nextDigest
	})
	if pinned2.Status.Fingerprint == pinned.Status.Fingerprint {
		t.Errorf("pinned builder: same fingerprint after its lifecycle changed")
	}
	if def2.Status.Fingerprint != def.Status.Fingerprint || def2.Status.LatestImage != def.Status.LatestImage ||
		pushes("default") != defaultPushes || heads("default") != defaultHeads {
		t.Errorf("default builder reconciled for the ClusterLifecycle: fingerprint %s → %s, latestImage %s → %s, %d new pushes, %d new HEADs",
			def.Status.Fingerprint, def2.Status.Fingerprint, def.Status.LatestImage, def2.Status.LatestImage,
			pushes("default")-defaultPushes, heads("default")-defaultHeads)
	}

	// The lifecycle-image ConfigMap moves: the default builder follows it,
	// the pinned one is not touched.
	pinnedPushes, pinnedHeads := pushes("pinned"), heads("pinned")
	useLifecycleImage(t, next)
	_, def3 := builders("the default builder rebuilt with the new default lifecycle", func(_, def *v1alpha1.Builder) bool {
		return def.Status.Lifecycle.Image == nextDigest // the same image as the ClusterLifecycle's now
	})
	if def3.Status.Fingerprint == def2.Status.Fingerprint {
		t.Errorf("default builder: same fingerprint after the default lifecycle changed")
	}
	pinned3, err := bs.Builders(ns).Get(ctx, "pinned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pinned3.Status.Fingerprint != pinned2.Status.Fingerprint || pushes("pinned") != pinnedPushes || heads("pinned") != pinnedHeads {
		t.Errorf("pinned builder reconciled for the ConfigMap: fingerprint %s → %s, %d new pushes, %d new HEADs",
			pinned2.Status.Fingerprint, pinned3.Status.Fingerprint, pushes("pinned")-pinnedPushes, heads("pinned")-pinnedHeads)
	}
}
