package e2e

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestFlattenedBuilder: two controller processes, one after the other,
// each with a scratch directory of its own, flatten the same builder spec
// (every buildpack but one) under two tags: the images are one digest.
// Beside the same builder unflattened, the image has the three buildpack
// layers replaced by one holding exactly their entries, which the layers
// label names for all three; the excepted buildpack keeps its layer. The
// real lifecycle detects and builds all four from it, so the flattened
// layer extracts into a usable /cnb/buildpacks. Each scratch directory was
// written in and is empty once its builder is Ready.
//
// The e2e suite has no shared controller (each test starts its own), so
// the two run in turn against one API server: controller A is killed
// before controller B starts, and builder Y is created only then, so B
// alone makes Y's flattened layer.
func TestFlattenedBuilder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 1000 to run the lifecycle (which refuses root) and must run as root")
	}
	ctx := context.Background()
	f := registrytest.New(t)
	markers := []string{"example/node", "example/php", "example/ruby"}
	objects := storeStack{Addr: f.Addr, Name: "flatten", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.test"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })
	for _, id := range markers {
		// One buildpackage each: each buildpack has a layer of its own
		// before flattening.
		repo := "buildpacks/" + strings.TrimPrefix(id, "example/") + ":1.0.0"
		bp, err := sampleimages.Buildpackage(markerBuildpack(id))
		push(t, f, repo, bp, err)
		objects.Buildpackages = append(objects.Buildpackages, repo)
	}
	const ns = "flatten"
	tenantNamespace(t, ns)
	useLifecycleImage(t, f.Addr+"/buildsmith/lifecycle:0.21.0")

	flattened := []string{"example/hello", "example/node", "example/php"}
	all := append(append([]string{}, flattened...), "example/ruby")
	var group []v1alpha1.BuildpackRef
	for _, id := range all {
		group = append(group, v1alpha1.BuildpackRef{ID: id})
	}
	spec := func(flatten *v1alpha1.Flatten) v1alpha1.NamespacedBuilderSpec {
		return v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
			Order: []v1alpha1.OrderEntry{{Group: group}}, Flatten: flatten}}
	}
	flatten := &v1alpha1.Flatten{All: true, Except: []string{"example/ruby"}}

	// Controller A: the unflattened builder and X.
	scratchA := flattenScratchDir(t)
	stopA := startControllerWith(t, env.Kubeconfig, systemNamespace, true, "--scratch-dir", scratchA)
	objects.create(t)
	objects.createBuilder(t, ns, "plain", spec(nil))
	objects.createBuilder(t, ns, "flat-a", spec(flatten))
	plain := readyBuilder(t, ns, "plain", time.Minute)
	x := readyBuilder(t, ns, "flat-a", time.Minute)
	checkScratchUsedAndEmpty(t, "controller A", scratchA)
	stopA()

	// Controller B, another process with another scratch directory: Y,
	// the same spec under another tag.
	scratchB := flattenScratchDir(t)
	startControllerWith(t, env.Kubeconfig, systemNamespace, true, "--scratch-dir", scratchB)
	objects.createBuilder(t, ns, "flat-b", spec(flatten))
	y := readyBuilder(t, ns, "flat-b", time.Minute)
	checkScratchUsedAndEmpty(t, "controller B", scratchB)

	// One digest for both, though each is under its own repository.
	if !strings.HasPrefix(x.Status.LatestImage, f.Addr+"/builders/flat-a@") || !strings.HasPrefix(y.Status.LatestImage, f.Addr+"/builders/flat-b@") {
		t.Fatalf("latestImage X %q, Y %q: want each under its own tag's repository", x.Status.LatestImage, y.Status.LatestImage)
	}
	dx, dy := digestOf(t, x.Status.LatestImage), digestOf(t, y.Status.LatestImage)
	if dx != dy {
		t.Errorf("the same flattened builder from two controllers: X (A) %s, Y (B) %s", dx, dy)
	}
	if len(x.Status.Platforms) != 1 || len(y.Status.Platforms) != 1 ||
		digestOf(t, x.Status.Platforms[0].Image) != digestOf(t, y.Status.Platforms[0].Image) {
		t.Errorf("status.platforms of X %+v and Y %+v: want one platform, one image digest", x.Status.Platforms, y.Status.Platforms)
	}
	// What the tags point at in the registry, not only what status says.
	headX, err := remote.Head(f.Ref("builders/flat-a:latest"))
	if err != nil {
		t.Fatal(err)
	}
	headY, err := remote.Head(f.Ref("builders/flat-b:latest"))
	if err != nil {
		t.Fatal(err)
	}
	if headX.Digest != headY.Digest || headY.Digest.String() != dy {
		t.Errorf("builders/flat-a:latest is %s, builders/flat-b:latest %s, Y's status %s: want one digest", headX.Digest, headY.Digest, dy)
	}
	if dp := digestOf(t, plain.Status.LatestImage); dp == dx {
		t.Errorf("the unflattened builder has the flattened one's digest %s", dp)
	}
	// B found X built: the restart pushed it no second time. (Manifests
	// PUT by digest are the registry client's probe, once per process.)
	if n := f.Count("PUT", "/builders/flat-a/manifests/latest"); n != 1 {
		t.Errorf("builders/flat-a's manifest was pushed %d times, want 1 (by A)", n)
	}
	if n := f.Count("PUT", "/builders/flat-b/manifests/latest"); n != 1 {
		t.Errorf("builders/flat-b's manifest was pushed %d times, want 1 (by B)", n)
	}
	if again, err := client.BuildsmithV1alpha1().Builders(ns).Get(ctx, "flat-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if again.Status.LatestImage != x.Status.LatestImage {
		t.Errorf("X's latestImage moved from %s to %s under controller B", x.Status.LatestImage, again.Status.LatestImage)
	}

	// The layers: the flattened image is the plain one with the three
	// buildpack layers replaced, where the first of them was, by one.
	plainImg, flatImg := pullImage(t, plain.Status.LatestImage), pullImage(t, y.Status.LatestImage)
	plainLabel, flatLabel := buildpackLayersLabel(t, plainImg), buildpackLayersLabel(t, flatImg)
	shared := flatLabel["example/hello"]["1.0.0"].LayerDiffID
	replaced := map[string]bool{}
	for _, id := range flattened {
		replaced[plainLabel[id]["1.0.0"].LayerDiffID] = true
		if got := flatLabel[id]["1.0.0"].LayerDiffID; got != shared {
			t.Errorf("%s: layerDiffID %s, want the flattened layer %s that example/hello names", id, got, shared)
		}
	}
	if len(replaced) != len(flattened) || replaced[""] || replaced[shared] {
		t.Fatalf("the unflattened builder's layers label %+v: want a layer of its own for each of %v, none the flattened %s", plainLabel, flattened, shared)
	}
	ruby := plainLabel["example/ruby"]["1.0.0"].LayerDiffID
	if got := flatLabel["example/ruby"]["1.0.0"].LayerDiffID; ruby == "" || got != ruby {
		t.Errorf("example/ruby (excepted): layerDiffID %q in the flattened builder, %q in the plain one: want its own layer kept", got, ruby)
	}
	plainIDs, flatIDs := diffIDsOf(t, plainImg), diffIDsOf(t, flatImg)
	var want []string
	placed := false
	for _, id := range plainIDs {
		switch {
		case !replaced[id]:
			want = append(want, id)
		case !placed:
			want, placed = append(want, shared), true
		}
	}
	if len(flatIDs) != len(plainIDs)-2 {
		t.Errorf("the flattened builder has %d layers, the unflattened %d: want 2 fewer (3 buildpack layers in 1)", len(flatIDs), len(plainIDs))
	}
	if diff := cmp.Diff(want, flatIDs); diff != "" {
		t.Errorf("the flattened builder's layers (-want +got):\n%s", diff)
	}
	t.Logf("layers: unflattened %d, flattened %d", len(plainIDs), len(flatIDs))

	// The flattened layer holds exactly the three layers' entries, each
	// path once (the directories every buildpack layer has included).
	wantEntries := map[string]string{}
	for id := range replaced {
		for p, e := range layerEntries(t, plainImg, id) {
			if had, ok := wantEntries[p]; ok && had != e {
				t.Fatalf("%s differs between the buildpack layers: %s, %s", p, had, e)
			}
			wantEntries[p] = e
		}
	}
	if diff := cmp.Diff(wantEntries, layerEntries(t, flatImg, shared)); diff != "" {
		t.Errorf("the flattened layer's entries, beside those of the layers it replaces (-want +got):\n%s", diff)
	}

	// The real lifecycle detects and builds the four from the image.
	w := unpackBuilder(t, flatImg)
	rootfs, layers, common := w.rootfs, w.layers, w.args()
	runLifecycle(t, rootfs, "detector", append(common,
		"-order", filepath.Join(rootfs, "cnb/order.toml"), "-run", filepath.Join(rootfs, "cnb/run.toml"))...)
	detected, err := os.ReadFile(filepath.Join(layers, "group.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		if !strings.Contains(string(detected), `"`+id+`"`) {
			t.Errorf("group.toml has no %s:\n%s", id, detected)
		}
	}
	runLifecycle(t, rootfs, "builder", common...)
	for _, marker := range []string{"example_hello/hello/marker", "example_node/node/marker", "example_php/php/marker", "example_ruby/ruby/marker"} {
		if _, err := os.Stat(filepath.Join(layers, marker)); err != nil {
			t.Errorf("%s: %v", marker, err)
		}
	}
}

// flattenScratchDir is a --scratch-dir whose modification time is set far
// back, so that any entry made (or removed) in it shows.
func flattenScratchDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkScratchUsedAndEmpty fails unless the controller made something in
// dir (else an empty dir would prove nothing: the flag might be ignored)
// and left nothing there.
func checkScratchUsedAndEmpty(t *testing.T, who, dir string) {
	t.Helper()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.ModTime().Year() <= 2000 {
		t.Errorf("%s never wrote in its --scratch-dir %s", who, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s left %v in its --scratch-dir once the builder was Ready", who, names)
	}
}

func digestOf(t *testing.T, ref string) string {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	return d.DigestStr()
}

// buildpackLayersLabel is the io.buildpacks.buildpack.layers label of img:
// id → version → its layer.
func buildpackLayersLabel(t *testing.T, img v1.Image) map[string]map[string]struct {
	LayerDiffID string `json:"layerDiffID"`
} {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var label map[string]map[string]struct {
		LayerDiffID string `json:"layerDiffID"`
	}
	if err := json.Unmarshal([]byte(cf.Config.Labels[cnb.LabelBuildpackLayers]), &label); err != nil {
		t.Fatalf("%s: %v", cnb.LabelBuildpackLayers, err)
	}
	return label
}

func diffIDsOf(t *testing.T, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(cf.RootFS.DiffIDs))
	for i, id := range cf.RootFS.DiffIDs {
		ids[i] = id.String()
	}
	return ids
}

// layerEntries are the entries of img's layer diffID, by path: type, mode,
// owner, link target and a digest of the content. A path twice fails.
func layerEntries(t *testing.T, img v1.Image, diffID string) map[string]string {
	t.Helper()
	h, err := v1.NewHash(diffID)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := img.LayerByDiffID(h)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.New()
		if _, err := io.Copy(sum, tr); err != nil {
			t.Fatal(err)
		}
		p := path.Clean("/" + hdr.Name)
		if _, dup := entries[p]; dup {
			t.Errorf("layer %s has %s twice", diffID, p)
		}
		entries[p] = fmt.Sprintf("type %c mode %o uid %d gid %d link %q sha256 %s",
			hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Linkname, hex.EncodeToString(sum.Sum(nil)))
	}
}
