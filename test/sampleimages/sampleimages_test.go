package sampleimages

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var (
	linuxAmd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

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
// that code), and checks that Image is ImageFor linux/amd64. A change of
// go-containerregistry's config serialization would change them too.
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
			"sha256:33e95249f98a661fcc5e54baa9dae5a2f91f9ff7726ab912d6dea15897204234"},
		{"StackImage run", func() (v1.Image, error) { return StackImage("io.buildpacks.stacks.test", 0) },
			"sha256:ec00fe98b1b8cbe030d6886fc818e4fa6b11b39d27c4aadaf2f89843172dfa5c"},
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
