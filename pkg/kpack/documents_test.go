package kpack

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// cm is a ConfigMap as compact JSON, the shape `jq -c` prints.
func cm(name string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"}}`
}

// prettyCM is a ConfigMap as indented JSON, the shape `jq '.items[]'` prints.
func prettyCM(name string) string {
	return "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"ConfigMap\",\n  \"metadata\": {\n    \"name\": \"" + name + "\"\n  }\n}"
}

// TestReadDocumentsStreams reads every object of a stream of JSON objects
// or YAML documents: want lists each object read, with where it says it
// starts, so that an object dropped (issue 28: all but the first of a JSON
// stream were) fails the test.
func TestReadDocumentsStreams(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // "<where>: <kind>/<name>"
	}{{
		name: "one JSON object",
		in:   cm("a"),
		want: []string{"document 1 (starting at line 1): ConfigMap/a"},
	}, {
		name: "two JSON objects, nothing between them",
		in:   cm("a") + cm("b"),
		want: []string{
			"document 1 (starting at line 1): ConfigMap/a",
			"document 2 (starting at line 1, column 63): ConfigMap/b",
		},
	}, {
		name: "two JSON objects, a newline between them",
		in:   cm("a") + "\n" + cm("b") + "\n",
		want: []string{
			"document 1 (starting at line 1): ConfigMap/a",
			"document 2 (starting at line 2): ConfigMap/b",
		},
	}, {
		name: "three indented JSON objects, as jq prints them",
		in:   prettyCM("a") + "\n" + prettyCM("b") + "\n" + prettyCM("c") + "\n",
		want: []string{
			"document 1 (starting at line 1): ConfigMap/a",
			"document 2 (starting at line 8): ConfigMap/b",
			"document 3 (starting at line 15): ConfigMap/c",
		},
	}, {
		name: "three JSON objects, spaces, tabs, blank lines and comments between them",
		in:   "# from jq\n\n  " + cm("a") + " \t " + cm("b") + "\r\n\n\t# between\n\n" + cm("c") + "  # last\n\n",
		want: []string{
			"document 1 (starting at line 3, column 3): ConfigMap/a",
			"document 2 (starting at line 3, column 68): ConfigMap/b",
			"document 3 (starting at line 7): ConfigMap/c",
		},
	}, {
		name: "JSON objects separated by ---",
		in:   cm("a") + "\n---\n" + prettyCM("b") + "\n---\n" + cm("c") + cm("d") + "\n",
		want: []string{
			"document 1 (starting at line 1): ConfigMap/a",
			"document 2 (starting at line 3): ConfigMap/b",
			"document 3 (starting at line 11): ConfigMap/c",
			"document 4 (starting at line 11, column 63): ConfigMap/d",
		},
	}, {
		name: "YAML and JSON documents",
		in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n" + cm("b") + "\n" + cm("c") + "\n---\n{kind: ConfigMap, metadata: {name: d}}\n",
		want: []string{
			"document 1 (starting at line 1): ConfigMap/a",
			"document 2 (starting at line 5): ConfigMap/b",
			"document 3 (starting at line 6): ConfigMap/c",
			"document 4 (starting at line 8): ConfigMap/d",
		},
	}, {
		name: "nulls in a JSON stream are skipped, as null documents are",
		in:   cm("a") + "\nnull\n" + cm("b"),
		want: []string{
			"document 1 (starting at line 1): ConfigMap/a",
			"document 2 (starting at line 3): ConfigMap/b",
		},
	}, {
		name: "a v1 List in JSON, as kubectl get -o json prints it, then an object",
		in:   `{"apiVersion":"v1","kind":"List","items":[` + cm("a") + "," + prettyCM("b") + `],"metadata":{"resourceVersion":""}}` + "\n" + cm("c"),
		want: []string{
			"document 1 (starting at line 1), item 1: ConfigMap/a",
			"document 1 (starting at line 1), item 2: ConfigMap/b",
			"document 2 (starting at line 8): ConfigMap/c",
		},
	}, {
		name: "a typed List from the API, whose items have no apiVersion and kind",
		in: `{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterStoreList","metadata":{},"items":[` +
			`{"metadata":{"name":"a"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}}]}`,
		want: []string{
			"document 1 (starting at line 1), item 1: kpack.io/v1alpha2 ClusterStore/a",
			"document 1 (starting at line 1), item 2: ConfigMap/b",
		},
	}, {
		name: "a List in a List, in YAML",
		in:   "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: [{kind: ConfigMap, metadata: {name: a}}]}\n- {kind: ConfigMap, metadata: {name: b}}\n",
		want: []string{
			"document 1 (starting at line 1), item 1, item 1: ConfigMap/a",
			"document 1 (starting at line 1), item 2: ConfigMap/b",
		},
	}, {
		name: "an object with items whose kind is not a List is an object",
		in:   "kind: ConfigMap\nmetadata: {name: a}\nitems: [1, 2]\n",
		want: []string{"document 1 (starting at line 1): ConfigMap/a"},
	}, {
		name: "YAML in flow style, starting as JSON does",
		in:   "{kind: ConfigMap, metadata: {name: a}}\n",
		want: []string{"document 1 (starting at line 1): ConfigMap/a"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := readDocuments(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				kind, _ := d.obj["kind"].(string)
				if apiVersion, _ := d.obj["apiVersion"].(string); apiVersion != "v1" && apiVersion != "" {
					kind = apiVersion + " " + kind
				}
				name, _ := mapAt(d.obj, "metadata")["name"].(string)
				got = append(got, d.where+": "+kind+"/"+name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("objects read (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadDocumentsStreamErrors: what follows an object and is not one is
// an error naming where it is, never dropped.
func TestReadDocumentsStreamErrors(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{{
		name:    "a broken trailing JSON object",
		in:      cm("a") + "\n" + cm("b") + "\n{\"apiVersion\": \"v1\", \"kind\": \n",
		wantErr: "document 3 (starting at line 3): an unfinished JSON value: the document ends before it does",
	}, {
		name:    "a broken JSON object between two",
		in:      cm("a") + "\n{\"kind\": ConfigMap}\n" + cm("c"),
		wantErr: "document 2 (starting at line 2): at line 2, column 10: after a JSON object, text that is not another JSON value: invalid character 'C'",
	}, {
		name:    "a stray brace after a JSON object",
		in:      cm("a") + "}",
		wantErr: "document 2 (starting at line 1, column 63): at line 1, column 63: after a JSON object, text that is not another JSON value: invalid character '}'",
	}, {
		name:    "YAML after a JSON object",
		in:      cm("a") + "\nkind: ConfigMap\n",
		wantErr: "document 2 (starting at line 2): at line 2, column 1: after a JSON object, text that is not another JSON value: invalid character 'k'",
	}, {
		name:    "a JSON object cut by ---",
		in:      "{\"kind\":\n---\n\"ConfigMap\"}\n",
		wantErr: "document 1 (starting at line 1): ",
	}, {
		name:    "a JSON value that is not an object",
		in:      cm("a") + "\n[" + cm("b") + "]\n",
		wantErr: "document 2 (starting at line 2): not a Kubernetes object (a YAML mapping)",
	}, {
		name:    "two YAML values in flow style in one document",
		in:      "kind: Secret\n---\n{kind: ConfigMap, metadata: {name: a}}\n{kind: ConfigMap, metadata: {name: b}}\n",
		wantErr: "document 2 (starting at line 3): more than one YAML value, of which only the first would be read: separate documents with ---",
	}, {
		name:    "a YAML mapping after a flow one",
		in:      "{kind: ConfigMap, metadata: {name: a}}\nkind: Secret\n",
		wantErr: "document 1 (starting at line 1): more than one YAML value",
	}, {
		name:    "YAML after null",
		in:      "null\n{kind: Secret}\n",
		wantErr: "document 1 (starting at line 1): ",
	}, {
		name:    "a typed List whose items are not a list",
		in:      `{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterStoreList","items":{"a":1}}`,
		wantErr: "document 1 (starting at line 1): items of a List must be a list",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := readDocuments(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("read %d objects, want an error starting %q", len(docs), tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("error %q, want one starting %q", err, tt.wantErr)
			}
		})
	}
}

// TestConvertJSONStream converts kpack objects given as a stream of JSON
// objects (jq '.items[]'), concatenated, or as a JSON List: the same output
// as from the YAML documents, every object of it.
func TestConvertJSONStream(t *testing.T) {
	inputs := []string{experimentalStore, experimentalStack, experimentalBuilder, experimentalClusterBuilder}
	var objects []string
	for _, in := range inputs {
		j, err := yaml.YAMLToJSON([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, string(j))
	}
	wantOut, wantWarnings, err := Convert(strings.NewReader(docs(inputs...)))
	if err != nil {
		t.Fatal(err)
	}
	want := decodeAll(t, string(wantOut))
	if len(want) != len(inputs) {
		t.Fatalf("from YAML: %d objects, want %d:\n%s", len(want), len(inputs), wantOut)
	}
	for name, in := range map[string]string{
		"one per line":          strings.Join(objects, "\n"),
		"concatenated":          strings.Join(objects, ""),
		"separated by ---":      strings.Join(objects, "\n---\n"),
		"separated by spaces":   strings.Join(objects, "  \n\t\n "),
		"a List":                `{"apiVersion":"v1","kind":"List","items":[` + strings.Join(objects, ",") + "]}",
		"a List and two more":   `{"apiVersion":"v1","kind":"List","items":[` + strings.Join(objects[:2], ",") + "]}\n" + strings.Join(objects[2:], "\n"),
		"last two concatenated": strings.Join(objects[:2], "\n") + "\n" + strings.Join(objects[2:], ""),
	} {
		t.Run(name, func(t *testing.T) {
			out, warnings, err := Convert(strings.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, decodeAll(t, string(out))); diff != "" {
				t.Errorf("output (-from YAML +from JSON):\n%s", diff)
			}
			if len(warnings) != len(wantWarnings) {
				t.Errorf("warnings %v, want %v", warnings, wantWarnings)
			}
		})
	}
}

// TestJSONStreamPassThrough: objects of a JSON stream that are passed
// through are written as they were, each its own document, comments kept.
func TestJSONStreamPassThrough(t *testing.T) {
	in := "# first\n" + cm("a") + cm("b") + " # after b\n" + prettyCM("c") + "\n# the end\n"
	out, warnings, err := Convert(strings.NewReader(in))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Convert: %v, warnings %v", err, warnings)
	}
	want := "# first\n" + cm("a") + "\n---\n" + cm("b") + "\n---\n# after b\n" + prettyCM("c") + "\n# the end\n"
	if string(out) != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

// TestConvertTypedList converts the items of a typed List, as the API
// returns them: without their own apiVersion and kind.
func TestConvertTypedList(t *testing.T) {
	in := `{"apiVersion": "kpack.io/v1alpha2", "kind": "ClusterStoreList", "metadata": {"resourceVersion": "7"}, "items": [
  {"metadata": {"name": "a", "uid": "1"}, "spec": {"sources": [{"image": "gcr.io/paketo-buildpacks/java"}]}},
  {"metadata": {"name": "b", "uid": "2"}, "spec": {"sources": [{"image": "gcr.io/paketo-buildpacks/go"}]}}
]}`
	out, warnings, err := Convert(strings.NewReader(in))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Convert: %v, warnings %v", err, warnings)
	}
	want := docs(`
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: a}
spec:
  sources: [{image: gcr.io/paketo-buildpacks/java}]
`, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: b}
spec:
  sources: [{image: gcr.io/paketo-buildpacks/go}]
`)
	if diff := cmp.Diff(decodeAll(t, want), decodeAll(t, string(out))); diff != "" {
		t.Errorf("output (-want +got):\n%s\noutput:\n%s", diff, out)
	}
	checkValid(t, out)
}

// TestLongLine: an input of one line longer than any line buffer would
// allow (an 18 MiB compact JSON List, as kubectl get -o json | jq -c
// writes) converts: the caller bounds the input's size, not its lines.
func TestLongLine(t *testing.T) {
	note := strings.Repeat("x", 18<<20)
	in := `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterStore",` +
		`"metadata":{"name":"big","annotations":{"note":"` + note + `"}},` +
		`"spec":{"sources":[{"image":"registry.example.com/buildpacks/bp:1"}]}}]}`
	out, _, err := Convert(strings.NewReader(in))
	if err != nil {
		t.Fatalf("Convert of an 18 MiB line: %v", err)
	}
	if !strings.Contains(string(out), "kind: ClusterStore\n") {
		t.Errorf("no ClusterStore in the output (%d bytes)", len(out))
	}
}

// TestJSONAndYAMLAsKubectlReadsThem: what kubectl accepts converts —
// JSON's escaped slash, a YAML merge key whose mapping overrides what it
// merges — and what it would take silently is refused: a key twice in a
// mapping, in YAML or in JSON.
func TestJSONAndYAMLAsKubectlReadsThem(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // in the output; "" for an error
	}{{
		name: "escaped slashes in JSON",
		in: `{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterStore","metadata":{"name":"s"},` +
			`"spec":{"sources":[{"image":"registry.example.com\/buildpacks\/bp:1"}]}}`,
		want: "image: registry.example.com/buildpacks/bp:1",
	}, {
		name: "a merge key with overrides",
		in: "apiVersion: kpack.io/v1alpha2\nkind: ClusterStore\nmetadata:\n  name: s\n" +
			"spec:\n  sources:\n  - &bp {image: registry.example.com/buildpacks/bp:1}\n  - {<<: *bp, image: registry.example.com/buildpacks/other:2}\n",
		want: "image: registry.example.com/buildpacks/other:2",
	}, {
		name: "a key twice in YAML",
		in:   "apiVersion: kpack.io/v1alpha2\nkind: ClusterStore\nkind: ClusterStack\nmetadata:\n  name: s\n",
	}, {
		name: "a key twice in JSON",
		in:   `{"apiVersion":"kpack.io/v1alpha2","kind":"ClusterStore","kind":"ClusterStack","metadata":{"name":"s"}}`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := Convert(strings.NewReader(tc.in))
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("converted, want an error:\n%s", out)
			case tc.want != "" && (err != nil || !strings.Contains(string(out), tc.want)):
				t.Errorf("%v; want %q in the output:\n%s", err, tc.want, out)
			}
		})
	}
}

// TestNoObjects: input with no object in it is an error, not an empty
// output and exit 0.
func TestNoObjects(t *testing.T) {
	for _, in := range []string{"", "\n\n", "# only a comment\n", "---\n---\n", `{"apiVersion":"v1","kind":"List","items":[]}`,
		"apiVersion: v1\nkind: List\nitems: []\n"} {
		if out, _, err := Convert(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "no objects") {
			t.Errorf("Convert(%q) = %q, %v; want an error saying there are no objects", in, out, err)
		}
	}
}
