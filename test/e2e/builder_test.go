package e2e

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// The build user of the test stack; the lifecycle refuses to run as root.
const cnbUID = 1000

// TestBuilderRunsTheRealLifecycle is the conformance test nobody can fake:
// the controller builds and pushes a builder image; the test pulls it,
// unpacks its filesystem and runs the lifecycle binary found inside it —
// the real CNB lifecycle v0.21.0 — as the build user: the detector against
// the image's /cnb/order.toml and /cnb/buildpacks, then the builder, which
// runs the sample buildpack's bin/build.
func TestBuilderRunsTheRealLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	objects := storeStack{Addr: f.Addr, Name: "conformance",
		Buildpackages: []string{"buildpacks/hello:1.0.0", "buildpacks/never:1.0.0"}, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	never, err := sampleimages.Buildpackage(neverBuildpack)
	push(t, f, "buildpacks/never:1.0.0", never, err)

	const ns = "conformance"
	tenantNamespace(t, ns)
	startController(t)

	bs := client.BuildsmithV1alpha1()
	objects.create(t)
	objects.createBuilder(t, ns, "conformance", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
		// "never" fails detection: the lifecycle must fall through to the
		// second group.
		Order: []v1alpha1.OrderEntry{
			{Group: []v1alpha1.BuildpackRef{{ID: "example/never"}}},
			{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}}},
		},
		// bin/build of example/hello writes it into its marker.
		Env: []v1alpha1.BuildEnv{{Name: "HELLO_GREETING", Value: "from the builder's env", Suffix: "override"}},
	}})
	// No lifecycle image configured yet: the builder waits, and says so.
	eventually(t, 30*time.Second, "Builder waiting for the lifecycle", func() (bool, string) {
		b, err := bs.Builders(ns).Get(ctx, "conformance", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := b.Status.GetCondition(v1alpha1.ConditionReady)
		return c != nil && c.Reason == "LifecycleNotConfigured", fmt.Sprintf("%+v", b.Status.Conditions)
	})
	// Configuring it reconciles the builder at once (the poll interval is
	// a minute; the test allows 20 s).
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	builder := readyBuilder(t, ns, "conformance", 20*time.Second)
	// The controller's informers keep no managedFields (reconciler.TrimObject);
	// its status updates, sent without them, must not wipe the server's.
	statusManaged := false
	for _, m := range builder.ManagedFields {
		statusManaged = statusManaged || m.Subresource == "status"
	}
	if !statusManaged {
		t.Errorf("no managedFields entry for the status after the controller wrote it: %+v", builder.ManagedFields)
	}
	out, _ := env.Kubectl("get", "bsbldr", "-n", ns).CombinedOutput()
	t.Logf("kubectl get bsbldr:\n%s", out)
	if !strings.Contains(string(out), builder.Status.LatestImage) || !strings.Contains(string(out), "True") {
		t.Errorf("kubectl get bsbldr does not show Ready and LatestImage:\n%s", out)
	}

	// Pull the builder image and unpack it.
	img := pullImage(t, builder.Status.LatestImage)
	marker := buildApp(t, img, "example/hello")
	if strings.TrimSpace(marker) != "built hello.txt from the builder's env" {
		t.Errorf("bin/build did not run as expected: %q", marker)
	}

	// The labels other tools read.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Buildpacks []struct{ ID, Version string } `json:"buildpacks"`
		Lifecycle  struct{ Version string }       `json:"lifecycle"`
	}
	if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.builder.metadata"]), &meta); err != nil ||
		len(meta.Buildpacks) != 2 || meta.Lifecycle.Version != "0.21.0" {
		t.Errorf("io.buildpacks.builder.metadata: %+v, %v", meta, err)
	}
}

// push writes img to repo in f.
func push(t *testing.T, f *registrytest.Registry, repo string, img v1.Image, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	f.Write(repo, img)
}

// helloBuildpack passes detection when the app has hello.txt, and writes a
// launch layer whose marker file lists the app's files. Its license is in
// its package's labels, as pack writes them.
var helloBuildpack = sampleimages.Buildpack{ID: "example/hello", Version: "1.0.0", Licenses: []string{"Apache-2.0"},
	Detect: "[ -f hello.txt ] && exit 0\nexit 100\n",
	Build: `layer="$CNB_LAYERS_DIR/hello"
mkdir -p "$layer"
echo "built $(ls)${HELLO_GREETING:+ $HELLO_GREETING}" > "$layer/marker"
printf '[types]\nlaunch = true\n' > "$CNB_LAYERS_DIR/hello.toml"
`}

// neverBuildpack never passes detection.
var neverBuildpack = sampleimages.Buildpack{ID: "example/never", Version: "1.0.0", Detect: "exit 100\n", Build: "exit 1\n"}

// worldReadableTempDir returns a directory that uid 1000 can enter
// (t.TempDir's parents are private to root).
func worldReadableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "buildsmith-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// extract unpacks img's layers into dir, in order, keeping modes, owners
// and symlinks (the builder image's filesystem as a container would see it).
func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, layer := range layers {
		rc, err := layer.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(dir, filepath.Clean("/"+h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(target, os.FileMode(h.Mode)&os.ModePerm); err != nil {
					t.Fatal(err)
				}
				_ = os.Chmod(target, os.FileMode(h.Mode)&os.ModePerm)
			case tar.TypeReg:
				if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
					t.Fatal(err)
				}
				out, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, os.FileMode(h.Mode)&os.ModePerm)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(out, tr); err != nil {
					t.Fatal(err)
				}
				_ = out.Close()
			case tar.TypeSymlink:
				_ = os.Remove(target)
				if err := os.Symlink(h.Linkname, target); err != nil {
					t.Fatal(err)
				}
			default:
				continue
			}
			_ = os.Lchown(target, h.Uid, h.Gid)
		}
		_ = rc.Close()
	}
}

// runLifecycle runs a lifecycle phase from the unpacked builder as the
// build user, with platform API 0.13.
func runLifecycle(t *testing.T, rootfs, phase string, args ...string) {
	t.Helper()
	runLifecycleAt(t, "0.13", rootfs, phase, args...)
}

// runLifecycleAt runs a lifecycle phase from the unpacked builder as the
// build user, with platformAPI.
func runLifecycleAt(t *testing.T, platformAPI, rootfs, phase string, args ...string) {
	t.Helper()
	uid := fmt.Sprint(cnbUID)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + uid, "--regid=" + uid, "--clear-groups",
		filepath.Join(rootfs, "cnb/lifecycle", phase)}, args...)...)
	cmd.Env = []string{"CNB_PLATFORM_API=" + platformAPI, "PATH=/usr/bin:/bin", "HOME=/tmp"}
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", phase, out)
	if err != nil {
		t.Fatalf("%s: %v", phase, err)
	}
}

// buildApp unpacks a builder image and runs its lifecycle's detector and
// builder (as uid 1000, as a platform would) on an app holding hello.txt;
// detection must pick the group of wantGroup. It returns the marker file
// example/hello's bin/build writes.
func buildApp(t *testing.T, img v1.Image, wantGroup string) string {
	t.Helper()
	w := unpackBuilder(t, img)
	rootfs, layers, common := w.rootfs, w.layers, w.args()
	runLifecycle(t, rootfs, "detector", append(common,
		"-order", filepath.Join(rootfs, "cnb/order.toml"),
		"-run", filepath.Join(rootfs, "cnb/run.toml"),
		"-build-config", filepath.Join(rootfs, "cnb/build-config"))...)
	group, err := os.ReadFile(filepath.Join(layers, "group.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(group), `id = "`+wantGroup+`"`) || strings.Contains(string(group), "example/never") {
		t.Errorf("group.toml:\n%s", group)
	}
	runLifecycle(t, rootfs, "builder", append(common, "-build-config", filepath.Join(rootfs, "cnb/build-config"))...)
	if _, err := os.Stat(filepath.Join(layers, "config", "metadata.toml")); err != nil {
		t.Errorf("the builder wrote no metadata.toml: %v", err)
	}
	marker, err := os.ReadFile(filepath.Join(layers, "example_hello", "hello", "marker"))
	if err != nil {
		t.Errorf("bin/build of example/hello wrote no marker: %v", err)
	}
	return string(marker)
}
