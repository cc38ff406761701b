package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/packconfig"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// paketoShapedTOML is a builder.toml laid out as Paketo's are
// (builder-jammy-base, ubuntu-noble-builder: buildpacks by docker:// uri
// and version, a [lifecycle] version, [[order]] groups, [build] and
// [[run.images]] beside a [stack] id, [[targets]] with distributions), with what Heroku's
// builder-24 adds (an optional buildpack in a group) and [[build.env]],
// over the images of the e2e registry %[1]s. The first group never passes
// detection and example/never is optional in the second: the real
// lifecycle only gets past both if the order and its optional flag came
// through. Every field is carried: the converter warns of nothing.
const paketoShapedTOML = `description = "Hello and Procfile on the e2e stack, in the shape of a Paketo builder"

[[buildpacks]]
  uri = "docker://%[1]s/buildpacks/hello:1.0.0"
  version = "1.0.0"

[[buildpacks]]
  uri = "docker://%[1]s/buildpacks/never:1.0.0"
  version = "1.0.0"

[[buildpacks]]
  uri = "docker://%[1]s/buildpacks/procfile:1.0.0"
  version = "1.0.0"

[lifecycle]
  version = "0.21.0"

[[order]]

  [[order.group]]
    id = "example/never"
    version = "1.0.0"

[[order]]

  [[order.group]]
    id = "example/hello"
    version = "1.0.0"

  [[order.group]]
    id = "example/never"
    optional = true

  [[order.group]]
    id = "example/procfile"
    version = "1.0.0"

[build]
  image = "%[1]s/stack/build:1"

  [[build.env]]
    name = "HELLO_GREETING"
    value = "from builder.toml"
    suffix = "default"

[run]

  [[run.images]]
    image = "%[1]s/stack/run:1"
    mirrors = ["%[1]s/mirror/stack/run:1"]

[stack]
  id = "io.buildpacks.stacks.test"

[[targets]]
  arch = "amd64"
  os = "linux"

  [[targets.distributions]]
    name = "ubuntu"
    versions = ["22.04"]
`

// orderGroup is a group of /cnb/order.toml and of the
// io.buildpacks.buildpack.order label.
type orderGroup struct {
	Group []groupEntry `json:"group" toml:"group"`
}

type groupEntry struct {
	ID       string `json:"id" toml:"id"`
	Version  string `json:"version" toml:"version"`
	Optional bool   `json:"optional,omitempty" toml:"optional"`
}

// TestBuilderTOMLBecomesReady: a Paketo-shaped builder.toml goes through
// `kubectl buildsmith convert --builder-toml` (the built plugin) with only
// the warnings expected, into `kubectl apply`; the ClusterBuilder turns
// Ready with the ClusterLifecycle of the file's lifecycle version, and its
// image holds the file's order, description, env and run image, which the
// real lifecycle then detects and builds with.
func TestBuilderTOMLBecomesReady(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	const lifecycleVersion = "0.21.0"
	lifecycleTag := packconfig.LifecycleRepository + ":" + lifecycleVersion
	objects := storeStack{Addr: f.Addr, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) {
		// The stack says its distro, as Paketo's images do: the file's
		// [[targets.distributions]] are checked against it.
		if err == nil && strings.HasPrefix(repo, "stack/") {
			img, err = withDistro(img, "ubuntu", "22.04")
		}
		push(t, f, repo, img, err)
		// The e2e reaches no Docker Hub: the lifecycle is mirrored under
		// the repository the converter names, as an air-gapped cluster has it.
		if repo == "buildsmith/lifecycle:"+lifecycleVersion {
			push(t, f, lifecycleTag, img, err)
		}
	})
	never, err := sampleimages.Buildpackage(neverBuildpack)
	push(t, f, "buildpacks/never:1.0.0", never, err)
	procfile, err := sampleimages.Buildpackage(markerBuildpack("example/procfile"))
	push(t, f, "buildpacks/procfile:1.0.0", procfile, err)
	// No lifecycle-image ConfigMap: the builder can only become Ready with
	// the ClusterLifecycle the converter made of [lifecycle] version.
	startController(t)

	dir := t.TempDir()
	plugin := filepath.Join(dir, "kubectl-buildsmith")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-buildsmith")
	build.Dir = env.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-buildsmith: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "builder.toml")
	if err := os.WriteFile(file, fmt.Appendf(nil, paketoShapedTOML, f.Addr), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "buildertoml"
	tag := f.Addr + "/builders/" + name + ":latest"

	var converted, warnings bytes.Buffer
	convert := exec.Command(plugin, "convert", "--builder-toml", file, "--tag", tag)
	convert.Stdout, convert.Stderr = &converted, &warnings
	if err := convert.Run(); err != nil {
		t.Fatalf("kubectl buildsmith convert --builder-toml: %v\n%s", err, warnings.String())
	}
	t.Logf("convert said:\n%s", warnings.String())
	// Each warning line must be one of these, and each of these printed
	// once: nothing else of the file may go missing unannounced.
	var expected []struct{ prefix, contains string }
	seen := make([]int, len(expected))
	for _, line := range strings.Split(strings.TrimSuffix(warnings.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		i := slices.IndexFunc(expected, func(e struct{ prefix, contains string }) bool {
			return strings.HasPrefix(line, e.prefix) && strings.Contains(line, e.contains)
		})
		if i < 0 {
			t.Errorf("convert printed an unexpected line: %q", line)
			continue
		}
		seen[i]++
	}
	for i, e := range expected {
		if seen[i] != 1 {
			t.Errorf("convert printed %d warning(s) %q…%q, want 1", seen[i], e.prefix, e.contains)
		}
	}
	// The file's lifecycle version is the ClusterLifecycle of Docker Hub's
	// lifecycle image; it is pointed at the mirror, the one edit made.
	manifests := converted.String()
	if n := strings.Count(manifests, "image: "+lifecycleTag+"\n"); n != 1 {
		t.Fatalf("the output names %s %d times, want once (the ClusterLifecycle):\n%s", lifecycleTag, n, manifests)
	}
	manifests = strings.Replace(manifests, "image: "+lifecycleTag+"\n", "image: "+f.Addr+"/"+lifecycleTag+"\n", 1)

	apply := env.Kubectl("apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifests)
	out, err := apply.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s\nof:\n%s", err, out, manifests)
	}
	t.Cleanup(func() {
		del := env.Kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-")
		del.Stdin = strings.NewReader(manifests)
		_ = del.Run()
	})
	lifecycleName := "lifecycle-" + lifecycleVersion
	for _, want := range []string{"clusterstore.buildsmith.dev/" + name + " created", "clusterstack.buildsmith.dev/" + name + " created",
		"clusterlifecycle.buildsmith.dev/" + lifecycleName + " created", "clusterbuilder.buildsmith.dev/" + name + " created"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl apply did not say %q:\n%s", want, out)
		}
	}

	reconcile := exec.Command(plugin, "reconcile", "clusterbuilder/"+name, "--wait", "--timeout", "60s", "--kubeconfig", env.Kubeconfig)
	if out, err := reconcile.CombinedOutput(); err != nil {
		t.Fatalf("kubectl buildsmith reconcile --wait: %v\n%s", err, out)
	}
	bs := client.BuildsmithV1alpha1()
	cb, err := bs.ClusterBuilders().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !cb.Status.IsReady() || !strings.HasPrefix(cb.Status.LatestImage, f.Addr+"/builders/"+name+"@sha256:") {
		t.Fatalf("ClusterBuilder not Ready with an image: %+v", cb.Status)
	}
	if n := f.Count("PUT", "/builders/"+name+"/manifests/latest"); n != 1 {
		t.Errorf("the builder was pushed %d times, want 1", n)
	}
	lc, err := bs.ClusterLifecycles().Get(ctx, lifecycleName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: lifecycleName}); cb.Spec.Lifecycle == nil || *cb.Spec.Lifecycle != want {
		t.Errorf("spec.lifecycle %+v, want %+v", cb.Spec.Lifecycle, want)
	}
	if lc.Status.Version != lifecycleVersion || lc.Status.Image.LatestImage == "" || cb.Status.Lifecycle.Image != lc.Status.Image.LatestImage {
		t.Errorf("the builder's lifecycle %+v is not the ClusterLifecycle's %+v", cb.Status.Lifecycle, lc.Status)
	}
	// [[targets]]: linux/amd64 alone.
	wantTargets := []v1alpha1.Target{{Platform: v1alpha1.Platform{OS: "linux", Arch: "amd64"},
		Distributions: []v1alpha1.TargetDistribution{{Name: "ubuntu", Versions: []string{"22.04"}}}}}
	if !reflect.DeepEqual(cb.Spec.Targets, wantTargets) {
		t.Errorf("spec.targets %+v, want %+v", cb.Spec.Targets, wantTargets)
	}
	if len(cb.Status.Platforms) != 1 || cb.Status.Platforms[0].Platform != (v1alpha1.Platform{OS: "linux", Arch: "amd64"}) {
		t.Errorf("status.platforms %+v, want linux/amd64 alone", cb.Status.Platforms)
	}

	// The file's order; the optional example/never, named without a
	// version, has the one version the store holds, as pack would give it.
	wantOrder := []orderGroup{
		{Group: []groupEntry{{ID: "example/never", Version: "1.0.0"}}},
		{Group: []groupEntry{{ID: "example/hello", Version: "1.0.0"}, {ID: "example/never", Version: "1.0.0", Optional: true},
			{ID: "example/procfile", Version: "1.0.0"}}},
	}
	img := pullImage(t, cb.Status.LatestImage)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var labelOrder []orderGroup
	if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.buildpack.order"]), &labelOrder); err != nil {
		t.Errorf("io.buildpacks.buildpack.order: %v", err)
	}
	if diff := cmp.Diff(wantOrder, labelOrder); diff != "" {
		t.Errorf("io.buildpacks.buildpack.order (-want +got):\n%s", diff)
	}
	var meta struct {
		Description string `json:"description"`
		Buildpacks  []struct {
			ID      string `json:"id"`
			Version string `json:"version"`
		} `json:"buildpacks"`
		Stack struct {
			RunImage struct {
				Image   string   `json:"image"`
				Mirrors []string `json:"mirrors"`
			} `json:"runImage"`
		} `json:"stack"`
		Lifecycle struct {
			Version string `json:"version"`
		} `json:"lifecycle"`
	}
	if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.builder.metadata"]), &meta); err != nil {
		t.Fatalf("io.buildpacks.builder.metadata: %v", err)
	}
	if want := "Hello and Procfile on the e2e stack, in the shape of a Paketo builder"; meta.Description != want {
		t.Errorf("io.buildpacks.builder.metadata description %q, want %q", meta.Description, want)
	}
	var bps []string
	for _, bp := range meta.Buildpacks {
		bps = append(bps, bp.ID+"@"+bp.Version)
	}
	slices.Sort(bps)
	if want := []string{"example/hello@1.0.0", "example/never@1.0.0", "example/procfile@1.0.0"}; !slices.Equal(bps, want) {
		t.Errorf("io.buildpacks.builder.metadata buildpacks %v, want %v", bps, want)
	}
	runImage, runMirror := f.Addr+"/stack/run:1", f.Addr+"/mirror/stack/run:1"
	if r := meta.Stack.RunImage; r.Image != runImage || !slices.Equal(r.Mirrors, []string{runMirror}) {
		t.Errorf("io.buildpacks.builder.metadata stack.runImage %+v, want %s with mirror %s", r, runImage, runMirror)
	}
	if meta.Lifecycle.Version != lifecycleVersion {
		t.Errorf("io.buildpacks.builder.metadata lifecycle.version %q, want %q", meta.Lifecycle.Version, lifecycleVersion)
	}

	w := unpackBuilder(t, img)
	rootfs, layers, common := w.rootfs, w.layers, w.args()
	var orderTOML struct {
		Order []orderGroup `toml:"order"`
	}
	if _, err := toml.DecodeFile(filepath.Join(rootfs, "cnb/order.toml"), &orderTOML); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantOrder, orderTOML.Order); diff != "" {
		t.Errorf("/cnb/order.toml (-want +got):\n%s", diff)
	}
	var runTOML struct {
		Images []struct {
			Image   string   `toml:"image"`
			Mirrors []string `toml:"mirrors"`
		} `toml:"images"`
	}
	if _, err := toml.DecodeFile(filepath.Join(rootfs, "cnb/run.toml"), &runTOML); err != nil {
		t.Fatal(err)
	}
	if len(runTOML.Images) != 1 || runTOML.Images[0].Image != runImage || !slices.Equal(runTOML.Images[0].Mirrors, []string{runMirror}) {
		t.Errorf("/cnb/run.toml images %+v, want %s with mirror %s", runTOML.Images, runImage, runMirror)
	}
	// [[build.env]] keeps its suffix: the file's name carries it.
	if value, err := os.ReadFile(filepath.Join(rootfs, "cnb/build-config/env/HELLO_GREETING.default")); err != nil || string(value) != "from builder.toml" {
		t.Errorf("/cnb/build-config/env/HELLO_GREETING.default: %q, %v", value, err)
	}

	// The real lifecycle: group 1 fails (example/never), group 2 passes
	// without its optional example/never.
	buildConfig := filepath.Join(rootfs, "cnb/build-config")
	runLifecycle(t, rootfs, "detector", append(common, "-order", filepath.Join(rootfs, "cnb/order.toml"),
		"-run", filepath.Join(rootfs, "cnb/run.toml"), "-build-config", buildConfig)...)
	var group struct {
		Group []struct {
			ID      string `toml:"id"`
			Version string `toml:"version"`
		} `toml:"group"`
	}
	if _, err := toml.DecodeFile(filepath.Join(layers, "group.toml"), &group); err != nil {
		t.Fatal(err)
	}
	var detected []string
	for _, bp := range group.Group {
		detected = append(detected, bp.ID+"@"+bp.Version)
	}
	if want := []string{"example/hello@1.0.0", "example/procfile@1.0.0"}; !slices.Equal(detected, want) {
		t.Errorf("the detector chose %v, want %v", detected, want)
	}
	runLifecycle(t, rootfs, "builder", append(common, "-build-config", buildConfig)...)
	if marker, err := os.ReadFile(filepath.Join(layers, "example_hello/hello/marker")); err != nil || strings.TrimSpace(string(marker)) != "built hello.txt from builder.toml" {
		t.Errorf("example/hello's marker (bin/build with the [[build.env]]): %q, %v", marker, err)
	}
	if _, err := os.Stat(filepath.Join(layers, "example_procfile/procfile/marker")); err != nil {
		t.Errorf("example/procfile did not build: %v", err)
	}
}

// withDistro labels img as of distro name and version, as stack images say
// it (io.buildpacks.base.distro.*).
func withDistro(img v1.Image, name, version string) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config.DeepCopy()
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	cfg.Labels["io.buildpacks.base.distro.name"], cfg.Labels["io.buildpacks.base.distro.version"] = name, version
	return mutate.Config(img, *cfg)
}
