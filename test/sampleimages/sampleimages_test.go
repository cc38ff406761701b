package sampleimages

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
)

var (
	linuxAmd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	linuxArm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
	linuxArmV7 = v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}

	hello = Buildpack{ID: "example/hello", Version: "1.0.0", Detect: "exit 0\n", Build: "echo hi\n"}
	never = Buildpack{ID: "example/never", Version: "1.0.0", Detect: "exit 100\n", Build: "exit 1\n"}
)

// repoRoot is the directory holding go.mod, above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// toolBinary is bin/NAME of the repository; it fails the test when missing.
func toolBinary(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "bin", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (run `make tools`): %v", path, err)
	}
	return path
}

// elfMachine is the machine of an ELF executable.
func elfMachine(t *testing.T, what string, r io.ReaderAt) elf.Machine {
	t.Helper()
	f, err := elf.NewFile(r)
	if err != nil {
		t.Fatalf("%s is not an ELF file: %v", what, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		t.Errorf("%s is %v %v, want a 64-bit executable", what, f.Class, f.Type)
	}
	return f.Machine
}

func TestLifecycleArm64BinaryIsAarch64(t *testing.T) {
	for _, tc := range []struct {
		binary string
		want   elf.Machine
	}{
		{"lifecycle", elf.EM_X86_64},
		{"lifecycle-linux-arm64", elf.EM_AARCH64},
	} {
		t.Run(tc.binary, func(t *testing.T) {
			f, err := os.Open(toolBinary(t, tc.binary))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := elfMachine(t, "bin/"+tc.binary, f); got != tc.want {
				t.Errorf("bin/%s is for %v, want %v", tc.binary, got, tc.want)
			}
		})
	}
}

func fakeLifecycle(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lifecycle")
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLinuxAmd64DigestsUnchanged pins the images the linux/amd64 functions
// made before the platform-aware ones existed (the digests were taken from
// that code; the stack images' since they carry an SBOM), and checks that
// Image is ImageFor linux/amd64. A change of go-containerregistry's config
// serialization would change them too.
func TestLinuxAmd64DigestsUnchanged(t *testing.T) {
	fake := fakeLifecycle(t, "#!/bin/sh\necho fake lifecycle\n")
	layer, err := Layer(File{Path: "a", Mode: 0o644, Content: []byte("a\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func() (v1.Image, error)
		want string
	}{
		{"Image", func() (v1.Image, error) { return Image(nil, map[string]string{"k": "v"}, "A=b") },
			"sha256:29d684563983ca7ff85f809639b26f91137c8f1d7d8c87824c86e48ff921c5fc"},
		{"Lifecycle", func() (v1.Image, error) { return Lifecycle(fake, "0.21.0") },
			"sha256:f3df6ac860ed3d58934c6e73111b6f949fd34069567b145db9ac282da33b4f3a"},
		{"Buildpackage", func() (v1.Image, error) { return Buildpackage(hello, never) },
			"sha256:fb0d27583b9ce7da0fe8ae04482a03fc9bcd8f20d14a8ec86d67922ce28a6a7d"},
		{"StackImage build", func() (v1.Image, error) { return StackImage("io.buildpacks.stacks.test", 1000) },
			"sha256:96fe0bf190b1915fc69db86a9ec449eb9688715ce7e2ee3ccd61bd1a8a3f5d25"},
		{"StackImage run", func() (v1.Image, error) { return StackImage("io.buildpacks.stacks.test", 0) },
			"sha256:e02b03edceeee493b85e766925f90df564ae2f02d0cbc97622028d07aff3d3a6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := tc.make()
			if err != nil {
				t.Fatal(err)
			}
			if got := digest(t, img); got != tc.want {
				t.Errorf("digest %s, want %s (as before the platform-aware functions)", got, tc.want)
			}
		})
	}

	t.Run("Image is ImageFor linux/amd64", func(t *testing.T) {
		labels, env := map[string]string{"io.buildpacks.stack.id": "s"}, []string{"A=b", "C=d"}
		img, err := Image([]v1.Layer{layer}, labels, env...)
		if err != nil {
			t.Fatal(err)
		}
		imgFor, err := ImageFor(linuxAmd64, []v1.Layer{layer}, labels, env...)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := digest(t, img), digest(t, imgFor); a != b {
			t.Errorf("Image is %s, ImageFor(linux/amd64) is %s", a, b)
		}
	})
}

func digest(t *testing.T, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// children returns the platforms of idx's manifests and their images, after
// checking the index and each descriptor.
func children(t *testing.T, idx v1.ImageIndex) ([]v1.Platform, []v1.Image) {
	t.Helper()
	mt, err := idx.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	if mt != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", mt, types.OCIImageIndex)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []v1.Platform
	var images []v1.Image
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: manifest media type %s", desc.Platform, desc.MediaType)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got := digest(t, img); got != desc.Digest.String() {
			t.Errorf("%s: image %s, descriptor %s", desc.Platform, got, desc.Digest)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != desc.Platform.OS || cf.Architecture != desc.Platform.Architecture || cf.Variant != desc.Platform.Variant {
			t.Errorf("%s: config says %s/%s/%s", desc.Platform, cf.OS, cf.Architecture, cf.Variant)
		}
		platforms = append(platforms, *desc.Platform)
		images = append(images, img)
	}
	return platforms, images
}

func platformNames(ps []v1.Platform) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.String())
	}
	return strings.Join(names, ",")
}

func TestIndexes(t *testing.T) {
	fakes := map[string]string{
		"linux/amd64":  fakeLifecycle(t, "amd64 lifecycle"),
		"linux/arm64":  fakeLifecycle(t, "arm64 lifecycle"),
		"linux/arm/v7": fakeLifecycle(t, "arm lifecycle"),
	}
	for _, tc := range []struct {
		name  string
		index func() (v1.ImageIndex, error)
		want  []v1.Platform
		// single makes the image the index holds for a platform.
		single func(v1.Platform) (v1.Image, error)
	}{
		{
			name: "LifecycleIndex amd64 arm64",
			index: func() (v1.ImageIndex, error) {
				return LifecycleIndex(subset(fakes, "linux/arm64", "linux/amd64"), "0.21.0")
			},
			want: []v1.Platform{linuxAmd64, linuxArm64},
			single: func(p v1.Platform) (v1.Image, error) {
				return lifecycleFor(p, fakes[p.String()], "0.21.0")
			},
		},
		{
			name:  "LifecycleIndex three, sorted by name",
			index: func() (v1.ImageIndex, error) { return LifecycleIndex(fakes, "0.21.0") },
			want:  []v1.Platform{linuxAmd64, linuxArmV7, linuxArm64},
			single: func(p v1.Platform) (v1.Image, error) {
				return lifecycleFor(p, fakes[p.String()], "0.21.0")
			},
		},
		{
			name:   "LifecycleIndex arm64 only",
			index:  func() (v1.ImageIndex, error) { return LifecycleIndex(subset(fakes, "linux/arm64"), "0.21.0") },
			want:   []v1.Platform{linuxArm64},
			single: func(p v1.Platform) (v1.Image, error) { return lifecycleFor(p, fakes[p.String()], "0.21.0") },
		},
		{
			name:   "StackIndex build",
			index:  func() (v1.ImageIndex, error) { return StackIndex("s", 1000, linuxArm64, linuxAmd64) },
			want:   []v1.Platform{linuxArm64, linuxAmd64},
			single: func(p v1.Platform) (v1.Image, error) { return stackImageFor(p, "s", 1000, "") },
		},
		{
			name:   "StackIndex run with a variant",
			index:  func() (v1.ImageIndex, error) { return StackIndex("s", 0, linuxAmd64, linuxArm64, linuxArmV7) },
			want:   []v1.Platform{linuxAmd64, linuxArm64, linuxArmV7},
			single: func(p v1.Platform) (v1.Image, error) { return stackImageFor(p, "s", 0, "") },
		},
		{
			name: "BuildpackageIndex",
			index: func() (v1.ImageIndex, error) {
				return BuildpackageIndex([]v1.Platform{linuxAmd64, linuxArm64}, hello, never)
			},
			want:   []v1.Platform{linuxAmd64, linuxArm64},
			single: func(p v1.Platform) (v1.Image, error) { return BuildpackageFor(p, hello, never) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx, err := tc.index()
			if err != nil {
				t.Fatal(err)
			}
			platforms, images := children(t, idx)
			if got, want := platformNames(platforms), platformNames(tc.want); got != want {
				t.Fatalf("index lists %s, want %s", got, want)
			}
			for i, p := range platforms {
				if !p.Equals(tc.want[i]) {
					t.Errorf("descriptor platform %+v, want %+v", p, tc.want[i])
				}
				want, err := tc.single(p)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := digest(t, images[i]), digest(t, want); got != want {
					t.Errorf("%s: child %s, the single image is %s", p, got, want)
				}
			}

			again, err := tc.index()
			if err != nil {
				t.Fatal(err)
			}
			if a, b := digest(t, idx), digest(t, again); a != b {
				t.Errorf("the same inputs made %s, then %s", a, b)
			}
		})
	}
}

func subset(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

func TestLifecycleIndexAmd64IsLifecycle(t *testing.T) {
	amd, arm := fakeLifecycle(t, "amd64 lifecycle"), fakeLifecycle(t, "arm64 lifecycle")
	idx, err := LifecycleIndex(map[string]string{"linux/amd64": amd, "linux/arm64": arm}, "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	_, images := children(t, idx)
	single, err := Lifecycle(amd, "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digest(t, images[0]), digest(t, single); a != b {
		t.Errorf("the linux/amd64 child is %s, Lifecycle makes %s", a, b)
	}
	files, err := Files(images[1])
	if err != nil {
		t.Fatal(err)
	}
	if files["cnb/lifecycle/lifecycle"] != "arm64 lifecycle" {
		t.Errorf("the linux/arm64 child holds %q", files["cnb/lifecycle/lifecycle"])
	}
}

// TestLifecycleIndexOfRealBinaries builds the index of bin/lifecycle and
// bin/lifecycle-linux-arm64 and reads each child's /cnb/lifecycle/lifecycle
// out of its layer.
func TestLifecycleIndexOfRealBinaries(t *testing.T) {
	idx, err := LifecycleIndex(map[string]string{
		"linux/amd64": toolBinary(t, "lifecycle"),
		"linux/arm64": toolBinary(t, "lifecycle-linux-arm64"),
	}, "0.21.0")
	if err != nil {
		t.Fatal(err)
	}
	platforms, images := children(t, idx)
	want := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}
	if got := platformNames(platforms); got != "linux/amd64,linux/arm64" {
		t.Fatalf("index lists %s", got)
	}
	for i, p := range platforms {
		t.Run(p.String(), func(t *testing.T) {
			layers, err := images[i].Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != 1 {
				t.Fatalf("%d layers, want 1", len(layers))
			}
			binary := fileOfLayer(t, layers[0], "cnb/lifecycle/lifecycle")
			if got := elfMachine(t, "/cnb/lifecycle/lifecycle", bytes.NewReader(binary)); got != want[p.String()] {
				t.Errorf("/cnb/lifecycle/lifecycle is for %v, want %v", got, want[p.String()])
			}
		})
	}
}

// fileOfLayer reads the regular file name out of layer's tar.
func fileOfLayer(t *testing.T, layer v1.Layer, name string) []byte {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("no %s in the layer", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == name && h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func TestBuildpackageTargets(t *testing.T) {
	const descriptorHead = "api = \"0.10\"\n\n[buildpack]\n  id = \"example/hello\"\n  version = \"1.0.0\"\n\n"
	anyArch, err := Buildpackage(hello)
	if err != nil {
		t.Fatal(err)
	}
	amd, err := BuildpackageFor(linuxAmd64, hello)
	if err != nil {
		t.Fatal(err)
	}
	arm, err := BuildpackageFor(linuxArm64, hello)
	if err != nil {
		t.Fatal(err)
	}
	armV7, err := BuildpackageFor(linuxArmV7, hello)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		img        v1.Image
		descriptor string
		targets    string
	}{
		{"Buildpackage", anyArch, "[[targets]]\n  os = \"linux\"\n", `[{"os":"linux"}]`},
		{"BuildpackageFor amd64", amd, "[[targets]]\n  os = \"linux\"\n  arch = \"amd64\"\n", `[{"arch":"amd64","os":"linux"}]`},
		{"BuildpackageFor arm64", arm, "[[targets]]\n  os = \"linux\"\n  arch = \"arm64\"\n", `[{"arch":"arm64","os":"linux"}]`},
		{"BuildpackageFor arm/v7", armV7, "[[targets]]\n  os = \"linux\"\n  arch = \"arm\"\n  arch-variant = \"v7\"\n",
			`[{"arch":"arm","arch-variant":"v7","os":"linux"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Files(tc.img)
			if err != nil {
				t.Fatal(err)
			}
			if got := files["cnb/buildpacks/example_hello/1.0.0/buildpack.toml"]; got != descriptorHead+tc.descriptor {
				t.Errorf("buildpack.toml:\n%s\nwant:\n%s", got, descriptorHead+tc.descriptor)
			}
			cf, err := tc.img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			var label map[string]map[string]struct {
				Targets     json.RawMessage `json:"targets"`
				LayerDiffID string          `json:"layerDiffID"`
			}
			if err := json.Unmarshal([]byte(cf.Config.Labels["io.buildpacks.buildpack.layers"]), &label); err != nil {
				t.Fatal(err)
			}
			entry := label["example/hello"]["1.0.0"]
			if string(entry.Targets) != tc.targets {
				t.Errorf("label targets %s, want %s", entry.Targets, tc.targets)
			}
			if want := cf.RootFS.DiffIDs[0].String(); entry.LayerDiffID != want {
				t.Errorf("label layerDiffID %s, the layer is %s", entry.LayerDiffID, want)
			}
		})
	}

	diffIDs := map[string]string{}
	for name, img := range map[string]v1.Image{"Buildpackage": anyArch, "amd64": amd, "arm64": arm, "arm/v7": armV7} {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		id := cf.RootFS.DiffIDs[0].String()
		if other, ok := diffIDs[id]; ok {
			t.Errorf("the %s and %s layers are the same", name, other)
		}
		diffIDs[id] = name
	}
}

// TestBuildpackageLicenses: a buildpack's licenses are in its
// buildpack.toml and, as pack copies them, in the package's metadata
// label, which a store reads them from.
func TestBuildpackageLicenses(t *testing.T) {
	licensed := hello
	licensed.Licenses = []string{"Apache-2.0", "MIT"}
	img, err := Buildpackage(licensed)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(img)
	if err != nil {
		t.Fatal(err)
	}
	if got := files["cnb/buildpacks/example_hello/1.0.0/buildpack.toml"]; !strings.Contains(got,
		"[[buildpack.licenses]]\n  type = \"Apache-2.0\"\n\n[[buildpack.licenses]]\n  type = \"MIT\"\n") {
		t.Errorf("buildpack.toml:\n%s", got)
	}
	cf, _ := img.ConfigFile()
	m, _ := img.Manifest()
	digest, _ := img.Digest()
	pkg, err := cnb.ReadPackage("r/bp@"+digest.String(), cf, m)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.BuildpackLicense{{Type: "Apache-2.0"}, {Type: "MIT"}}
	if len(pkg.Buildpacks) != 1 || !slices.Equal(pkg.Buildpacks[0].Licenses, want) {
		t.Errorf("a store reads %+v, want the licenses %v", pkg.Buildpacks, want)
	}
}

func TestIndexErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index func() (v1.ImageIndex, error)
		want  string
	}{
		{"no platforms", func() (v1.ImageIndex, error) { return StackIndex("s", 0) }, "at least one platform"},
		{"no binaries", func() (v1.ImageIndex, error) { return LifecycleIndex(nil, "0.21.0") }, "at least one platform"},
		{"a platform twice", func() (v1.ImageIndex, error) {
			return BuildpackageIndex([]v1.Platform{linuxArm64, linuxAmd64, linuxArm64}, hello)
		}, "linux/arm64 given twice"},
		{"a missing binary", func() (v1.ImageIndex, error) {
			return LifecycleIndex(map[string]string{"linux/arm64": filepath.Join(t.TempDir(), "none")}, "0.21.0")
		}, "the linux/arm64 image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.index()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
