package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// The objects of a `jq '.items[]'` stream: indented JSON, one after another.
const (
	jsonStore = `{
  "apiVersion": "kpack.io/v1alpha2",
  "kind": "ClusterStore",
  "metadata": {"name": "default"},
  "spec": {"sources": [{"image": "gcr.io/paketo-buildpacks/java"}]}
}`
	jsonStack = `{
  "apiVersion": "kpack.io/v1alpha2",
  "kind": "ClusterStack",
  "metadata": {"name": "base"},
  "spec": {
    "id": "io.buildpacks.stacks.jammy",
    "buildImage": {"image": "paketobuildpacks/build-jammy-base"},
    "runImage": {"image": "paketobuildpacks/run-jammy-base"}
  }
}`
	jsonBuilder = `{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterBuilder","metadata":{"name":"java"},` +
		`"spec":{"tag":"registry.example.com/builders/java","stack":{"kind":"ClusterStack","name":"base"},` +
		`"store":{"kind":"ClusterStore","name":"default"},"order":[{"group":[{"id":"paketo-buildpacks/java"}]}]}}`
)

// TestConvertJSONStream converts a stream of JSON objects on stdin: every
// object of it (issue 28: only the first was, with exit status 0).
func TestConvertJSONStream(t *testing.T) {
	tests := []struct {
		name, stdin string
		wantKinds   []string // of the output, in order; nil for an error
		wantStderr  string
	}{{
		name:      "one per line",
		stdin:     jsonStore + "\n" + jsonStack + "\n" + jsonBuilder + "\n",
		wantKinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
	}, {
		name:      "concatenated",
		stdin:     jsonStore + jsonStack + jsonBuilder,
		wantKinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
	}, {
		name:      "separated by ---",
		stdin:     jsonStore + "\n---\n" + jsonStack + jsonBuilder,
		wantKinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
	}, {
		name:      "a List",
		stdin:     `{"apiVersion": "v1", "kind": "List", "items": [` + jsonStore + "," + jsonStack + "," + jsonBuilder + "]}",
		wantKinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
	}, {
		name:       "a broken trailing object",
		stdin:      jsonStore + "\n" + jsonStack + "\n" + jsonBuilder[:40] + "\n",
		wantStderr: "kubectl-buildsmith convert: document 3 (starting at line 17): an unfinished JSON value",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			status := run([]string{"convert", "-f", "-"}, strings.NewReader(tt.stdin), &stdout, &stderr)
			if tt.wantKinds == nil {
				if status != 1 || stdout.Len() > 0 || !strings.Contains(stderr.String(), tt.wantStderr) {
					t.Errorf("status %d, stdout:\n%s\nstderr:\n%s\nwant status 1, no output, and an error containing %q", status, stdout.String(), stderr.String(), tt.wantStderr)
				}
				return
			}
			if status != 0 || stderr.Len() > 0 {
				t.Fatalf("status %d, stderr:\n%s", status, stderr.String())
			}
			var kinds []string
			for _, line := range strings.Split(stdout.String(), "\n") {
				if kind, ok := strings.CutPrefix(line, "kind: "); ok {
					kinds = append(kinds, kind)
				}
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tt.wantKinds) {
				t.Errorf("output kinds %v, want %v; output:\n%s", kinds, tt.wantKinds, stdout.String())
			}
		})
	}
}

func TestConvertMaxInputBytes(t *testing.T) {
	input := jsonStore + "\n"
	file := filepath.Join(t.TempDir(), "store.json")
	if err := os.WriteFile(file, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	size := len(input)
	tests := []struct {
		name       string
		args       []string
		wantStatus int
		wantStderr string // a substring; "" for empty
	}{{
		name: "the default",
		args: []string{"-f", "-"},
	}, {
		name: "stdin of the limit",
		args: []string{"-f", "-", "--max-input-bytes", fmt.Sprint(size)},
	}, {
		name:       "stdin over the limit",
		args:       []string{"-f", "-", "--max-input-bytes", fmt.Sprint(size - 1)},
		wantStatus: 1,
		wantStderr: fmt.Sprintf("kubectl-buildsmith convert: reading the input: the input is larger than --max-input-bytes=%d; give a larger limit", size-1),
	}, {
		name:       "a file over the limit",
		args:       []string{"-f", file, "--max-input-bytes=10"},
		wantStatus: 1,
		wantStderr: "larger than --max-input-bytes=10;",
	}, {
		name:       "a limit of 0",
		args:       []string{"-f", file, "--max-input-bytes", "0"},
		wantStatus: 1,
		wantStderr: "--max-input-bytes must be positive, not 0",
	}, {
		name:       "a directory",
		args:       []string{"-f", t.TempDir()},
		wantStatus: 1,
		wantStderr: "is a directory",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			status := run(append([]string{"convert"}, tt.args...), strings.NewReader(input), &stdout, &stderr)
			if status != tt.wantStatus {
				t.Errorf("status %d, want %d; stderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			if tt.wantStderr == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr:\n%s\nwant it to contain %q", stderr.String(), tt.wantStderr)
			}
			if tt.wantStatus == 0 && !strings.Contains(stdout.String(), "kind: ClusterStore") {
				t.Errorf("stdout:\n%s\nwant the ClusterStore", stdout.String())
			}
		})
	}
}

// TestLimitedInput reads exactly the limit, whatever the reads' sizes, and
// fails one byte over it.
func TestLimitedInput(t *testing.T) {
	const mib = 1 << 20
	data := strings.Repeat("x", mib)
	for _, wrap := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r },
		iotest.OneByteReader,
		iotest.HalfReader,
		iotest.DataErrReader,
	} {
		got, err := io.ReadAll(&limitedInput{r: wrap(strings.NewReader(data)), left: mib, max: mib})
		if err != nil || len(got) != mib {
			t.Errorf("at the limit: read %d bytes, %v; want %d, no error", len(got), err, mib)
		}
		_, err = io.ReadAll(&limitedInput{r: wrap(strings.NewReader(data + "y")), left: mib, max: mib})
		if want := "the input is larger than --max-input-bytes=1048576 (1 MiB); give a larger limit to convert it"; err == nil || err.Error() != want {
			t.Errorf("over the limit: %v, want %s", err, want)
		}
	}
}
