package sampleimages

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"testing"
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
