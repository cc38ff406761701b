package packconfig

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ from the converter's output")

// goldenOptions are the options each testdata/*.toml is converted with.
var goldenOptions = map[string]Options{
	"paketo-builder-jammy-base":   {Tag: "registry.example.com/paketo/builder-jammy-base:latest"},
	"paketo-ubuntu-noble-builder": {Tag: "registry.example.com/paketo/ubuntu-noble-builder:latest"},
	"heroku-builder-24":           {Tag: "registry.example.com/heroku/builder:24", Name: "heroku-24", ServiceAccount: "build-system/pusher"},
	"everything-not-carried": {Tag: "registry.example.com/team-a/builders/everything:1", Namespace: "team-a",
		ServiceAccount: "builder", StackID: "io.buildpacks.stacks.jammy"},
}

// TestGolden converts each builder.toml of testdata/ (Paketo's and
// Heroku's real ones, and one of every shape not carried) and compares
// the output and the warnings with NAME.yaml and NAME.warnings, field for
// field; every object written must decode strictly into its type and pass
// Validate. go test -run TestGolden -update rewrites the golden files.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(goldenOptions) {
		t.Fatalf("testdata has %d builder.toml files, goldenOptions %d", len(files), len(goldenOptions))
	}
	for _, file := range files {
		base := strings.TrimSuffix(file, ".toml")
		name := filepath.Base(base)
		t.Run(name, func(t *testing.T) {
			opts, ok := goldenOptions[name]
			if !ok {
				t.Fatalf("no options for %s", file)
			}
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			opts.Source = "builder.toml"
			out, warnings, err := Convert(bytes.NewReader(in), opts)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, w := range warnings {
				lines = append(lines, warningLine(w))
			}
			gotWarnings := strings.Join(lines, "\n")
			if len(lines) > 0 {
				gotWarnings += "\n"
			}
			if *update {
				for path, content := range map[string][]byte{base + ".yaml": out, base + ".warnings": []byte(gotWarnings)} {
					if err := os.WriteFile(path, content, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			wantOut, err := os.ReadFile(base + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			wantWarnings, err := os.ReadFile(base + ".warnings")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(wantOut), string(out)); diff != "" {
				t.Errorf("output (-%s.yaml +got):\n%s", name, diff)
			}
			if diff := cmp.Diff(string(wantWarnings), gotWarnings); diff != "" {
				t.Errorf("warnings (-%s.warnings +got):\n%s", name, diff)
			}
			checkValid(t, out)
		})
	}
}

// warningLine is a warning as the golden files and the tables hold it:
// as the plugin prints it, "omitted: " for one that left an object out.
func warningLine(w Warning) string {
	if w.Omitted {
		return "omitted: " + w.String()
	}
	return "warning: " + w.String()
}

// checkValid decodes each document of out, strictly, into its type and
// runs its Validate, as the API server and the controller would; and
// checks what the CRDs bound that Validate does not.
func checkValid(t *testing.T, out []byte) []any {
	t.Helper()
	var objects []any
	for i, doc := range strings.Split(string(out), "---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("output document %d: %v", i+1, err)
		}
		if head.APIVersion != v1alpha1.SchemeGroupVersion.String() {
			t.Fatalf("output document %d: apiVersion %q", i+1, head.APIVersion)
		}
		var obj interface {
			Validate(context.Context) *apis.FieldError
		}
		switch head.Kind {
		case "ClusterStore":
			obj = &v1alpha1.ClusterStore{}
		case "ClusterStack":
			obj = &v1alpha1.ClusterStack{}
		case "ClusterLifecycle":
			obj = &v1alpha1.ClusterLifecycle{}
		case "Builder":
			obj = &v1alpha1.Builder{}
		case "ClusterBuilder":
			obj = &v1alpha1.ClusterBuilder{}
		default:
			t.Fatalf("output document %d: unknown kind %s", i+1, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("output document %d (%s) does not decode: %v", i+1, head.Kind, err)
			continue
		}
		if err := obj.Validate(context.Background()); err != nil {
			t.Errorf("output document %d (%s) is not valid: %v", i+1, head.Kind, err)
		}
		var spec *v1alpha1.BuilderSpec
		switch b := obj.(type) {
		case *v1alpha1.Builder:
			spec = &b.Spec.BuilderSpec
		case *v1alpha1.ClusterBuilder:
			spec = &b.Spec.BuilderSpec
		}
		if spec != nil {
			for j, p := range spec.Targets {
				if p.OS == "" || p.Arch == "" {
					t.Errorf("output document %d: targets[%d] lacks os or arch (the CRD requires both): %+v", i+1, j, p)
				}
			}
			if len(spec.Targets) > maxTargets || len(spec.Env) > maxEnv || len(spec.OrderExtensions) > maxExtensions {
				t.Errorf("output document %d: over a CRD limit: %d targets, %d env, %d order extensions", i+1, len(spec.Targets), len(spec.Env), len(spec.OrderExtensions))
			}
		}
		objects = append(objects, obj)
	}
	return objects
}
