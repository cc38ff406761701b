package kpack

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/corpus from the converter's output")

// corpusDir holds the corpus: inputs in the shapes kpack users' manifests
// take (kpack's samples, kubectl get and kp output, Lists, JSON streams,
// anchors and merge keys, Helm and ytt leftovers, CRLF and a byte order
// mark), NAME.yaml or NAME.json each, and their golden files:
// NAME.out.yaml (the output) and NAME.warnings.txt (one warning a line,
// "omitted: " first for one that left its object out), or NAME.error.txt
// when the input is refused.
const corpusDir = "testdata/corpus"

// corpusBugs are the inputs whose golden files say what the converter
// should do and does not yet: they are skipped, naming the bug, and -update
// leaves their golden files as they were written, by hand.
var corpusBugs = map[string]string{}

// TestCorpus converts each input of testdata/corpus and compares the output
// and the warnings (or the error) with its golden files, byte for byte.
// Every buildsmith object written must decode strictly and pass Validate,
// and every object of the input must be accounted for: in the output, or
// left out with an "omitted" warning. go test -run TestCorpus -update rewrites the
// golden files, except those of corpusBugs; check every change by hand.
func TestCorpus(t *testing.T) {
	inputs := corpusInputs(t)
	if len(inputs) == 0 {
		t.Fatalf("no inputs in %s", corpusDir)
	}
	for name := range corpusBugs {
		if _, ok := inputs[name]; !ok {
			t.Errorf("corpusBugs names %s, which is not an input of %s", name, corpusDir)
		}
	}
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(corpusDir, name)
			in, err := os.ReadFile(inputs[name])
			if err != nil {
				t.Fatal(err)
			}
			out, warnings, convErr := Convert(bytes.NewReader(in))
			var lines []string
			for _, w := range warnings {
				lines = append(lines, corpusLine(w))
			}
			gotWarnings := ""
			if len(lines) > 0 {
				gotWarnings = strings.Join(lines, "\n") + "\n"
			}

			reason, bug := corpusBugs[name]
			if *update && !bug {
				writeGolden(t, base, out, gotWarnings, convErr)
			}
			wantErr, errGolden := readGolden(t, base+".error.txt")
			wantOut, outGolden := readGolden(t, base+".out.yaml")
			wantWarnings, warningsGolden := readGolden(t, base+".warnings.txt")
			switch {
			case errGolden && (outGolden || warningsGolden):
				t.Fatalf("%s has both an error.txt and output golden files", name)
			case !errGolden && !(outGolden && warningsGolden):
				t.Fatalf("%s has no golden files: %s.out.yaml and %s.warnings.txt, or %s.error.txt (go test -run TestCorpus -update writes them)", name, name, name, name)
			}
			if bug {
				// What holds even with the bug is checked: no object
				// lost without a warning, every object written valid.
				if convErr == nil {
					checkValid(t, out)
					checkAccounted(t, in, out, warnings)
				}
				if !t.Failed() {
					t.Skip(reason)
				}
				return
			}

			if errGolden {
				switch {
				case convErr == nil:
					t.Errorf("converted, want the error of %s.error.txt:\n%s\noutput:\n%s", name, wantErr, out)
				case convErr.Error()+"\n" != wantErr:
					t.Errorf("error (-%s.error.txt +got):\n%s", name, cmp.Diff(wantErr, convErr.Error()+"\n"))
				}
				return
			}
			if convErr != nil {
				t.Fatalf("Convert: %v", convErr)
			}
			if diff := cmp.Diff(wantOut, string(out)); diff != "" {
				t.Errorf("output (-%s.out.yaml +got):\n%s", name, diff)
			}
			if diff := cmp.Diff(wantWarnings, gotWarnings); diff != "" {
				t.Errorf("warnings (-%s.warnings.txt +got):\n%s", name, diff)
			}
			for _, w := range warnings {
				if w.Message == "" || strings.ContainsAny(w.String(), "\r\n") {
					t.Errorf("a warning that is empty or not one line: %q", w.String())
				}
			}
			checkValid(t, out)
			checkAccounted(t, in, out, warnings)
		})
	}
}

// corpusInputs returns the inputs of the corpus, by name (the file name
// without .yaml or .json). A file that is neither an input nor the golden
// file of one is an error: a golden file left behind, say.
func corpusInputs(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]string{}
	var golden []string
	for _, e := range entries {
		file := e.Name()
		switch {
		case e.IsDir():
			t.Errorf("%s: a directory in %s", file, corpusDir)
		case strings.HasSuffix(file, ".out.yaml") || strings.HasSuffix(file, ".warnings.txt") || strings.HasSuffix(file, ".error.txt"):
			golden = append(golden, file)
		case strings.HasSuffix(file, ".yaml") || strings.HasSuffix(file, ".json"):
			name := strings.TrimSuffix(file, filepath.Ext(file))
			if earlier, dup := inputs[name]; dup {
				t.Fatalf("%s and %s would share golden files", earlier, file)
			}
			inputs[name] = filepath.Join(corpusDir, file)
		default:
			t.Errorf("%s: neither an input (.yaml, .json) nor a golden file (.out.yaml, .warnings.txt, .error.txt)", file)
		}
	}
	for _, file := range golden {
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(file, ".out.yaml"), ".warnings.txt"), ".error.txt")
		if _, ok := inputs[name]; !ok {
			t.Errorf("%s: the golden file of no input", file)
		}
	}
	return inputs
}

// corpusLine is a warning as the golden files hold it, and as
// convert_test.go writes them: "omitted: " first for one that left its
// object out.
func corpusLine(w Warning) string {
	if w.Omitted {
		return "omitted: " + w.String()
	}
	return w.String()
}

// readGolden returns a golden file's content, and whether it exists.
func readGolden(t *testing.T, path string) (string, bool) {
	t.Helper()
	content, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(content), true
}

// writeGolden writes an input's golden files and removes those that no
// longer apply.
func writeGolden(t *testing.T, base string, out []byte, warnings string, convErr error) {
	t.Helper()
	write := map[string]string{base + ".out.yaml": string(out), base + ".warnings.txt": warnings}
	remove := []string{base + ".error.txt"}
	if convErr != nil {
		write = map[string]string{base + ".error.txt": convErr.Error() + "\n"}
		remove = []string{base + ".out.yaml", base + ".warnings.txt"}
	}
	for path, content := range write {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range remove {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// checkAccounted checks that nothing of the input is lost without a word:
// each input object is in the output (as the kind it converts to, or as
// it was; a ClusterBuildpack as a ClusterStore of its name, or of the name
// a warning on it gives), or an "omitted" warning names it; and each
// buildsmith object of the output comes from the input, or is a store
// generated for a builder, with a warning saying so.
func checkAccounted(t *testing.T, in, out []byte, warnings []Warning) {
	t.Helper()
	inDocs, err := readDocuments(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	outDocs, err := readDocuments(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("the output does not read back: %v", err)
	}
	type key struct{ apiVersion, kind, namespace, name string }
	keyOf := func(obj map[string]any) key {
		k := key{}
		k.apiVersion, _ = obj["apiVersion"].(string)
		k.kind, _ = obj["kind"].(string)
		meta := mapAt(obj, "metadata")
		k.namespace, _ = meta["namespace"].(string)
		k.name, _ = meta["name"].(string)
		return k
	}
	inOutput := map[key]int{}
	for _, d := range outDocs {
		inOutput[keyOf(d.obj)]++
	}
	// renamed is the name of a ClusterBuildpack's ClusterStore, as a
	// warning on it gives it; <name>-clusterbuildpack when none does.
	renamed := func(k key) string {
		const becomes = ": becomes ClusterStore "
		for _, w := range warnings {
			if w.Kind == k.kind && w.Namespace == k.namespace && w.Name == k.name && w.Field == "metadata.name" && strings.Contains(w.Message, becomes) {
				return w.Message[strings.LastIndex(w.Message, becomes)+len(becomes):]
			}
		}
		return k.name + clusterBuildpackSuffix
	}
	omitted := func(k key) bool {
		for _, w := range warnings {
			if w.Omitted && w.Kind == k.kind && w.Namespace == k.namespace && w.Name == k.name {
				return true
			}
		}
		return false
	}
	for _, d := range inDocs {
		k := keyOf(d.obj)
		want := k
		want.apiVersion = v1alpha1.SchemeGroupVersion.String()
		switch roleOf(k.apiVersion, k.kind) {
		case toBuildpack:
			want.kind = "Buildpack"
		case toClusterBuildpack:
			want.kind, want.namespace, want.name = "ClusterStore", "", renamed(k)
		case toClusterStore:
			want.kind, want.namespace = "ClusterStore", ""
		case toClusterStack:
			want.kind, want.namespace = "ClusterStack", ""
		case toClusterLifecycle:
			want.kind, want.namespace = "ClusterLifecycle", ""
		case toClusterBuilder:
			want.kind, want.namespace = "ClusterBuilder", ""
		case toBuilder:
			want.kind = "Builder"
		case passThrough:
			want = k
		}
		switch {
		case inOutput[want] > 0:
			inOutput[want]--
		case omitted(k):
		default:
			t.Errorf("%s %s: neither in the output (as %s %s) nor left out with a warning",
				k.apiVersion, objectID{k.kind, k.namespace, k.name}.path(), want.apiVersion, want.kind)
		}
	}
	for k, n := range inOutput {
		if n == 0 {
			continue
		}
		{
			t.Errorf("%s %s: in the output %d time(s), from no input object", k.apiVersion, objectID{k.kind, k.namespace, k.name}.path(), n)
		}
	}
}
