package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// storeStack is how the tests create their objects: a ClusterStore and a
// ClusterStack, both named Name, over images of the registry at Addr, and
// Builders over the two.
type storeStack struct {
	// Addr is the registry's host:port.
	Addr string
	Name string
	// Buildpackages are the store's sources: repositories under Addr.
	Buildpackages []string
	// StackID is the stack's id; its build image is stack/build:1 under
	// Addr.
	StackID string
	// Account holds the credentials of the store and the stack; nil for
	// none.
	Account *v1alpha1.ServiceAccountRef
}

// helloOrder is an order of example/hello alone.
func helloOrder() []v1alpha1.OrderEntry {
	return []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}}}}
}

// pushSamples pushes with push the images the objects are over: the real
// lifecycle 0.21.0 (buildsmith/lifecycle:0.21.0), the hello buildpackage
// (buildpacks/hello:1.0.0), and StackID's build and run images
// (stack/build:1, stack/run:1).
func (s storeStack) pushSamples(t *testing.T, push func(repo string, img v1.Image, err error)) {
	t.Helper()
	lifecycle, err := sampleimages.Lifecycle(filepath.Join(env.Root, "bin", "lifecycle"), "0.21.0")
	push("buildsmith/lifecycle:0.21.0", lifecycle, err)
	hello, err := sampleimages.Buildpackage(helloBuildpack)
	push("buildpacks/hello:1.0.0", hello, err)
	build, err := sampleimages.StackImage(s.StackID, cnbUID)
	push("stack/build:1", build, err)
	run, err := sampleimages.StackImage(s.StackID, 0)
	push("stack/run:1", run, err)
}

// create creates the store, then the stack over stack/run:1.
func (s storeStack) create(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	bs := client.BuildsmithV1alpha1()
	sources := make([]v1alpha1.ImageSource, 0, len(s.Buildpackages))
	for _, repo := range s.Buildpackages {
		sources = append(sources, v1alpha1.ImageSource{Image: s.Addr + "/" + repo})
	}
	if _, err := bs.ClusterStores().Create(ctx, &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.ClusterStoreSpec{ServiceAccountRef: s.Account, Sources: sources}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.ClusterStacks().Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: s.stackSpec("stack/run:1")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stackSpec is a ClusterStack over the build image and runImage (a
// repository under Addr), with the credentials.
func (s storeStack) stackSpec(runImage string) v1alpha1.ClusterStackSpec {
	return v1alpha1.ClusterStackSpec{ID: s.StackID, ServiceAccountRef: s.Account,
		BuildImage: v1alpha1.ImageSource{Image: s.Addr + "/stack/build:1"},
		RunImage:   v1alpha1.RunImageSource{Image: s.Addr + "/" + runImage}}
}

// createBuilder creates the Builder name in namespace ns over the store and
// the stack, tagged builders/<name>:latest under Addr; spec says the rest
// (its order, env, ServiceAccount).
func (s storeStack) createBuilder(t *testing.T, ns, name string, spec v1alpha1.NamespacedBuilderSpec) {
	t.Helper()
	spec.Tag = s.Addr + "/builders/" + name + ":latest"
	spec.Stack = v1alpha1.StackRef{Name: s.Name}
	spec.Store = v1alpha1.StoreRef{Name: s.Name}
	if _, err := client.BuildsmithV1alpha1().Builders(ns).Create(context.Background(), &v1alpha1.Builder{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// tenantNamespace creates namespace ns and its default ServiceAccount
// (envtest runs no controller-manager, which would make it), whose
// secrets are the named ones.
func tenantNamespace(t *testing.T, ns string, secrets ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	for _, s := range secrets {
		sa.Secrets = append(sa.Secrets, corev1.ObjectReference{Name: s})
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pushMultiPlatformSamples pushes to f, for linux/amd64 and linux/arm64,
// what pushSamples pushes for one platform: the real lifecycle 0.21.0
// (built for both), the stack of stackID and the hello buildpackage, each
// an image index.
func pushMultiPlatformSamples(t *testing.T, f *registrytest.Registry, stackID string) {
	t.Helper()
	pushIndex := func(repo string, index v1.ImageIndex, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(f.Ref(repo), index); err != nil {
			t.Fatal(err)
		}
	}
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64"}
	lifecycle, err := sampleimages.LifecycleIndex(map[string]string{
		"linux/amd64": filepath.Join(env.Root, "bin", "lifecycle"),
		"linux/arm64": filepath.Join(env.Root, "bin", "lifecycle-linux-arm64"),
	}, "0.21.0")
	pushIndex("buildsmith/lifecycle:0.21.0", lifecycle, err)
	build, err := sampleimages.StackIndex(stackID, cnbUID, amd64, arm64)
	pushIndex("stack/build:1", build, err)
	run, err := sampleimages.StackIndex(stackID, 0, amd64, arm64)
	pushIndex("stack/run:1", run, err)
	hello, err := sampleimages.BuildpackageIndex([]v1.Platform{amd64, arm64}, helloBuildpack)
	pushIndex("buildpacks/hello:1", hello, err)
}

// builderWorkspace is a builder image unpacked (rootfs) beside the
// directories a platform gives the lifecycle, all usable by the build
// user, and an app holding hello.txt.
type builderWorkspace struct {
	rootfs, app, layers, platform string
}

func unpackBuilder(t *testing.T, img v1.Image) builderWorkspace {
	t.Helper()
	work := worldReadableTempDir(t)
	w := builderWorkspace{rootfs: filepath.Join(work, "rootfs"), app: filepath.Join(work, "app"),
		layers: filepath.Join(work, "layers"), platform: filepath.Join(work, "platform")}
	extract(t, img, w.rootfs)
	for _, dir := range []string{w.app, w.layers, w.platform} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, cnbUID, cnbUID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(w.app, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// args are the lifecycle arguments every phase takes: the directories,
// the builder's buildpacks, the group and plan files.
func (w builderWorkspace) args() []string {
	return []string{"-app", w.app, "-layers", w.layers, "-platform", w.platform,
		"-buildpacks", filepath.Join(w.rootfs, "cnb/buildpacks"),
		"-group", filepath.Join(w.layers, "group.toml"), "-plan", filepath.Join(w.layers, "plan.toml"), "-log-level", "debug"}
}

// readyBuilder waits up to timeout for the Builder ns/name to be Ready with
// an image, and returns it.
func readyBuilder(t *testing.T, ns, name string, timeout time.Duration) *v1alpha1.Builder {
	t.Helper()
	var builder *v1alpha1.Builder
	eventually(t, timeout, "Builder Ready", func() (bool, string) {
		b, err := client.BuildsmithV1alpha1().Builders(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		builder = b
		return b.Status.IsReady() && b.Status.LatestImage != "", fmt.Sprintf("%+v", b.Status.Conditions)
	})
	return builder
}

// pullImage reads the image at digestRef, a repository@digest reference.
func pullImage(t *testing.T, digestRef string) v1.Image {
	t.Helper()
	ref, err := name.NewDigest(digestRef)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
