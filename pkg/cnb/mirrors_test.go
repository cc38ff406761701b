package cnb

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Mirrors of the run image go where each reader looks for them, as pack
// writes them: run.toml (platform API 0.12+), stack.toml (older platforms)
// and both places of the builder metadata label.
func TestAssembleBuilderRunImageMirrors(t *testing.T) {
	const run = "registry.example.com/run:jammy"
	for _, tt := range []struct {
		name      string
		mirrors   []string
		runTOML   string
		stackTOML string
		label     runImageMetadata
	}{{
		name:      "no mirrors",
		runTOML:   "[[images]]\n  image = \"" + run + "\"\n",
		stackTOML: "[run-image]\n  image = \"" + run + "\"\n",
		label:     runImageMetadata{Image: run},
	}, {
		name:      "an empty list is no mirrors",
		mirrors:   []string{},
		runTOML:   "[[images]]\n  image = \"" + run + "\"\n",
		stackTOML: "[run-image]\n  image = \"" + run + "\"\n",
		label:     runImageMetadata{Image: run},
	}, {
		name:      "one mirror",
		mirrors:   []string{"mirror.example.com/run:jammy"},
		runTOML:   "[[images]]\n  image = \"" + run + "\"\n  mirrors = [\"mirror.example.com/run:jammy\"]\n",
		stackTOML: "[run-image]\n  image = \"" + run + "\"\n  mirrors = [\"mirror.example.com/run:jammy\"]\n",
		label:     runImageMetadata{Image: run, Mirrors: []string{"mirror.example.com/run:jammy"}},
	}, {
		name:      "mirrors keep their order",
		mirrors:   []string{"zz.example.com/run", "aa.example.com/run"},
		runTOML:   "[[images]]\n  image = \"" + run + "\"\n  mirrors = [\"zz.example.com/run\", \"aa.example.com/run\"]\n",
		stackTOML: "[run-image]\n  image = \"" + run + "\"\n  mirrors = [\"zz.example.com/run\", \"aa.example.com/run\"]\n",
		label:     runImageMetadata{Image: run, Mirrors: []string{"zz.example.com/run", "aa.example.com/run"}},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			spec := builderSpec(t)
			spec.RunImage, spec.RunImageMirrors = run, tt.mirrors
			_, files := readLayer(t, configLayer(t, spec))
			if diff := cmp.Diff(tt.runTOML, files["cnb/run.toml"]); diff != "" {
				t.Errorf("run.toml (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.stackTOML, files["cnb/stack.toml"]); diff != "" {
				t.Errorf("stack.toml (-want +got):\n%s", diff)
			}

			img, err := AssembleBuilder(spec)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			var meta struct {
				Images []runImageMetadata `json:"images"`
				Stack  struct {
					RunImage runImageMetadata `json:"runImage"`
				} `json:"stack"`
			}
			if err := json.Unmarshal([]byte(cf.Config.Labels[LabelBuilderMetadata]), &meta); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]runImageMetadata{tt.label}, meta.Images); diff != "" {
				t.Errorf("metadata images (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.label, meta.Stack.RunImage); diff != "" {
				t.Errorf("metadata stack.runImage (-want +got):\n%s", diff)
			}
		})
	}
}
