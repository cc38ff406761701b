package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestRunImagesPinnedAcceptedByTheRealLifecycle: a ClusterStack without
// spec.id, over two run images (runImage with a mirror in another
// registry, and one additionalRunImages entry), takes its id from the
// images' label and resolves every run image by digest; a Builder with
// pinRunImage lists them by digest in /cnb/run.toml, in order. The real
// lifecycle 0.21.0 (platform API 0.13, which reads run.toml) then accepts
// that run.toml: its analyzer picks the first run image by digest (or the
// pinned mirror when the app goes to the mirror's registry, or the second
// when the platform passes -run-image), and its creator builds and
// exports apps onto the first and onto the second run image, in the e2e
// registry, labelled with the pinned references.
func TestRunImagesPinnedAcceptedByTheRealLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	// The mirror is in a registry of its own: the lifecycle chooses a
	// mirror by the registry the app is pushed to.
	mirrorRegistry := registrytest.New(t)
	// An id no other test uses: status.id can only have come from the
	// images' io.buildpacks.stack.id label.
	const stackID = "io.buildpacks.stacks.runimages"
	objects := storeStack{Addr: f.Addr, Name: "runimages", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: stackID}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	base, err := sampleimages.StackImage(stackID, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The second run image is the first plus a layer: another digest, the
	// same stack (label, os, arch), as a "full" run image is to a "base" one.
	extra, err := sampleimages.Layer(sampleimages.File{Path: "etc/", Mode: 0o755},
		sampleimages.File{Path: "etc/run-flavour", Mode: 0o644, Content: []byte("full\n")})
	if err != nil {
		t.Fatal(err)
	}
	full, err := mutate.AppendLayers(base, extra)
	push(t, f, "stack/run-full:1", full, err)
	mirrorRegistry.Write("mirror/run:1", base)
	baseDigest, fullDigest := imageDigest(t, base), imageDigest(t, full)
	if baseDigest == fullDigest {
		t.Fatal("the two run images have one digest")
	}
	if cf, err := base.ConfigFile(); err != nil || cf.Config.Labels["io.buildpacks.stack.id"] != stackID {
		t.Fatalf("the e2e run image's labels: %v %v", cf, err)
	}
	// Different repositories: lifecycle 0.21 tells run.toml's entries
	// apart by repository alone once a digest is given (internal/name
	// ParseMaybe trims it), so two pinned run images of one repository
	// would look like one to its exporter.
	pinnedBase := f.Addr + "/stack/run@" + baseDigest
	pinnedMirror := mirrorRegistry.Addr + "/mirror/run@" + baseDigest
	pinnedFull := f.Addr + "/stack/run-full@" + fullDigest

	const ns = "runimages"
	tenantNamespace(t, ns)
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)
	bs := client.BuildsmithV1alpha1()
	if _, err := bs.ClusterStores().Create(ctx, &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: objects.Name},
		Spec: v1alpha1.ClusterStoreSpec{Sources: []v1alpha1.ImageSource{{Image: f.Addr + "/buildpacks/hello:1.0.0"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No spec.id (RFC 0096).
	if _, err := bs.ClusterStacks().Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: objects.Name},
		Spec: v1alpha1.ClusterStackSpec{
			BuildImage:          v1alpha1.ImageSource{Image: f.Addr + "/stack/build:1"},
			RunImage:            v1alpha1.RunImageSource{Image: f.Addr + "/stack/run:1", Mirrors: []string{mirrorRegistry.Addr + "/mirror/run:1"}},
			AdditionalRunImages: []v1alpha1.RunImageSource{{Image: f.Addr + "/stack/run-full:1"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var stack *v1alpha1.ClusterStack
	eventually(t, 30*time.Second, "ClusterStack Ready", func() (bool, string) {
		s, err := bs.ClusterStacks().Get(ctx, objects.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		stack = s
		return s.Status.IsReady(), fmt.Sprintf("%+v", s.Status.Conditions)
	})
	if stack.Spec.ID != "" || stack.Status.ID != stackID {
		t.Errorf("stack spec.id %q status.id %q, want no spec.id and the images' label %q", stack.Spec.ID, stack.Status.ID, stackID)
	}
	// The sample run images carry their SBOM, each in its one layer.
	sbomOf := func(image string) cmp.Option {
		return cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".SBOMs" }, cmp.Comparer(func(a, b []v1alpha1.BaseSBOM) bool {
			got := append(a, b...) // one side is the test's nil
			return len(got) == 1 && got[0].Image == image && strings.HasPrefix(got[0].DiffID, "sha256:")
		}))
	}
	wantRun := v1alpha1.ResolvedRunImage{Image: f.Addr + "/stack/run:1", LatestImage: pinnedBase,
		Mirrors: []string{mirrorRegistry.Addr + "/mirror/run:1"}}
	if diff := cmp.Diff(wantRun, stack.Status.RunImage, sbomOf(pinnedBase)); diff != "" {
		t.Errorf("stack status.runImage (-want +got):\n%s", diff)
	}
	wantMore := []v1alpha1.ResolvedRunImage{{Image: f.Addr + "/stack/run-full:1", LatestImage: pinnedFull}}
	if diff := cmp.Diff(wantMore, stack.Status.AdditionalRunImages, sbomOf(pinnedFull)); diff != "" {
		t.Errorf("stack status.additionalRunImages (-want +got):\n%s", diff)
	}

	objects.createBuilder(t, ns, "pinned", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
		Order: helloOrder(), PinRunImage: true}})
	builder := readyBuilder(t, ns, "pinned", 30*time.Second)
	if builder.Status.Stack.RunImage != pinnedBase || builder.Status.Stack.ID != stackID {
		t.Errorf("builder status.stack %+v, want run image %s and id %s", builder.Status.Stack, pinnedBase, stackID)
	}
	w := unpackBuilder(t, pullImage(t, builder.Status.LatestImage))
	runTOMLPath := filepath.Join(w.rootfs, "cnb/run.toml")
	var runTOML struct {
		Images []runImageEntry `toml:"images"`
	}
	if _, err := toml.DecodeFile(runTOMLPath, &runTOML); err != nil {
		t.Fatal(err)
	}
	wantRunTOML := []runImageEntry{{Image: pinnedBase, Mirrors: []string{pinnedMirror}}, {Image: pinnedFull}}
	if diff := cmp.Diff(wantRunTOML, runTOML.Images, cmpopts.EquateEmpty()); diff != "" {
		raw, _ := os.ReadFile(runTOMLPath)
		t.Fatalf("/cnb/run.toml images (-want +got):\n%s\n%s", diff, raw)
	}

	// The lifecycle reaches both registries over plain HTTP: at platform
	// API 0.13 and later it is told so by -insecure-registry (or
	// CNB_INSECURE_REGISTRIES, which runLifecycle does not pass on). No
	// credentials: the e2e registries are anonymous.
	registryArgs := []string{"-insecure-registry", f.Addr, "-insecure-registry", mirrorRegistry.Addr,
		"-uid", fmt.Sprint(cnbUID), "-gid", fmt.Sprint(cnbUID), "-log-level", "debug"}
	work := filepath.Dir(w.rootfs)

	// The analyzer as a platform runs it: no -run-image, so it takes the
	// first [[images]] entry of run.toml.
	analyzed := analyze(t, w.rootfs, buildUserDir(t, work, "analyze-run-toml"),
		append(registryArgs, "-run", runTOMLPath, f.Addr+"/apps/runimages:analyzed")...)
	if analyzed.Image != pinnedBase || analyzed.Reference != pinnedBase || analyzed.Target.OS != "linux" {
		t.Errorf("analyzed.toml [run-image] %+v, want image and reference %s on linux", analyzed, pinnedBase)
	}
	// An app pushed to the mirror's registry gets the pinned mirror.
	analyzed = analyze(t, w.rootfs, buildUserDir(t, work, "analyze-mirror"),
		append(registryArgs, "-run", runTOMLPath, mirrorRegistry.Addr+"/apps/runimages:analyzed")...)
	if analyzed.Image != pinnedMirror || analyzed.Reference != pinnedMirror {
		t.Errorf("analyzed.toml [run-image] for an app in the mirror's registry %+v, want %s", analyzed, pinnedMirror)
	}
	// -run-image (pack build --run-image) chooses another run image: at
	// 0.21 the analyzer then does not read run.toml (the exporter still
	// does, to label the app with the entry holding that image).
	analyzed = analyze(t, w.rootfs, buildUserDir(t, work, "analyze-second"),
		append(registryArgs, "-run", runTOMLPath, "-run-image", pinnedFull, f.Addr+"/apps/runimages:analyzed")...)
	if analyzed.Image != pinnedFull || analyzed.Reference != pinnedFull {
		t.Errorf("analyzed.toml [run-image] with -run-image %+v, want %s", analyzed, pinnedFull)
	}

	// The creator: analyze, detect, restore, build and export in one
	// process, onto the run image run.toml names first, then onto the
	// second.
	create := func(dir, tag string, extra ...string) string {
		t.Helper()
		layers := buildUserDir(t, work, dir)
		runLifecycle(t, w.rootfs, "creator", append(append(append([]string{},
			registryArgs...), extra...),
			"-app", w.app, "-layers", layers, "-platform", w.platform,
			"-buildpacks", filepath.Join(w.rootfs, "cnb/buildpacks"),
			"-order", filepath.Join(w.rootfs, "cnb/order.toml"),
			"-run", runTOMLPath,
			"-build-config", filepath.Join(w.rootfs, "cnb/build-config"),
			// The sample lifecycle image has no launcher binary (a real
			// one has /cnb/lifecycle/launcher); the exporter only copies
			// the file into the app's launcher layer, and the app is not
			// run here, so the lifecycle binary stands in for it.
			"-launcher", filepath.Join(w.rootfs, "cnb/lifecycle/lifecycle"),
			tag)...)
		var report struct {
			Image struct {
				Digest string `toml:"digest"`
			} `toml:"image"`
		}
		if _, err := toml.DecodeFile(filepath.Join(layers, "report.toml"), &report); err != nil || report.Image.Digest == "" {
			t.Fatalf("the creator's report.toml: %+v %v", report, err)
		}
		// The app as exported: by the digest the creator reported.
		return f.Addr + "/apps/runimages@" + report.Image.Digest
	}
	app := create("create-first", f.Addr+"/apps/runimages:first")
	checkAppOnRunImage(t, app, base, pinnedBase, []string{pinnedMirror})
	app = create("create-second", f.Addr+"/apps/runimages:second", "-run-image", pinnedFull)
	checkAppOnRunImage(t, app, full, pinnedFull, nil)
}

// runImageEntry is an [[images]] entry of run.toml, and the runImage of
// the io.buildpacks.lifecycle.metadata label.
type runImageEntry struct {
	Image   string   `toml:"image" json:"image"`
	Mirrors []string `toml:"mirrors" json:"mirrors"`
}

// analyzedRunImage is the [run-image] table of analyzed.toml.
type analyzedRunImage struct {
	Reference string `toml:"reference"`
	Image     string `toml:"image"`
	Target    struct {
		OS   string `toml:"os"`
		Arch string `toml:"arch"`
	} `toml:"target"`
}

// analyze runs the analyzer with args, analyzed.toml going into layers,
// and returns the run image it chose.
func analyze(t *testing.T, rootfs, layers string, args ...string) analyzedRunImage {
	t.Helper()
	path := filepath.Join(layers, "analyzed.toml")
	runLifecycle(t, rootfs, "analyzer", append([]string{"-layers", layers, "-analyzed", path}, args...)...)
	var analyzed struct {
		RunImage analyzedRunImage `toml:"run-image"`
	}
	if _, err := toml.DecodeFile(path, &analyzed); err != nil {
		t.Fatal(err)
	}
	return analyzed.RunImage
}

// checkAppOnRunImage checks that the app image at digestRef, which the
// lifecycle exported, is built on run: its first layers are run's, and its
// io.buildpacks.lifecycle.metadata label names the run image as pinned
// (the reference a rebase starts from) with its mirrors.
func checkAppOnRunImage(t *testing.T, digestRef string, run v1.Image, pinned string, mirrors []string) {
	t.Helper()
	app := pullImage(t, digestRef)
	runLayers, err := run.Layers()
	if err != nil {
		t.Fatal(err)
	}
	appLayers, err := app.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(appLayers) <= len(runLayers) {
		t.Fatalf("%s has %d layers, its run image %d: nothing was built on it", digestRef, len(appLayers), len(runLayers))
	}
	for i, l := range runLayers {
		want, err1 := l.Digest()
		got, err2 := appLayers[i].Digest()
		if err1 != nil || err2 != nil || got != want {
			t.Errorf("%s layer %d is %s, the run image's %s (%v %v)", digestRef, i, got, want, err1, err2)
		}
	}
	cf, err := app.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		RunImage struct {
			TopLayer  string `json:"topLayer"`
			Reference string `json:"reference"`
			runImageEntry
		} `json:"runImage"`
		Buildpacks []struct {
			Key string `json:"key"`
		} `json:"buildpacks"`
	}
	if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.lifecycle.metadata"]), &meta); err != nil {
		t.Fatalf("%s io.buildpacks.lifecycle.metadata: %v", digestRef, err)
	}
	runIDs, err := run.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	topLayer := runIDs.RootFS.DiffIDs[len(runIDs.RootFS.DiffIDs)-1].String()
	if r := meta.RunImage; r.Image != pinned || r.Reference != pinned || r.TopLayer != topLayer ||
		!cmp.Equal(r.Mirrors, mirrors, cmpopts.EquateEmpty()) {
		t.Errorf("%s io.buildpacks.lifecycle.metadata runImage %+v, want image and reference %s, mirrors %v, top layer %s",
			digestRef, r, pinned, mirrors, topLayer)
	}
	if len(meta.Buildpacks) != 1 || meta.Buildpacks[0].Key != "example/hello" {
		t.Errorf("%s io.buildpacks.lifecycle.metadata buildpacks %+v, want example/hello", digestRef, meta.Buildpacks)
	}
}

// imageDigest is img's manifest digest, sha256:….
func imageDigest(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// buildUserDir makes the directory base in parent, owned by the build
// user, as a platform makes the layers directory of each build.
func buildUserDir(t *testing.T, parent, base string) string {
	t.Helper()
	dir := filepath.Join(parent, base)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, cnbUID, cnbUID); err != nil {
		t.Fatal(err)
	}
	return dir
}
