package cnb

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// fixedLayer is a layer with one file, the same bytes every time.
func fixedLayer(t *testing.T, path, content string) v1.Layer {
	t.Helper()
	l, err := tarLayer([]tarEntry{{path: path, mode: 0o755, content: []byte(content)}}, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func diffID(t *testing.T, l v1.Layer) string {
	t.Helper()
	h, err := l.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// builderSpec returns the inputs of a small builder: a meta-buildpack and
// two children, of which one shares the meta-buildpack's layer (a flattened
// buildpackage).
func builderSpec(t *testing.T) BuilderSpec {
	t.Helper()
	base, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), fixedLayer(t, "etc/os-release", "ID=ubuntu"))
	if err != nil {
		t.Fatal(err)
	}
	base, err = mutate.Config(base, v1.Config{
		Env:    []string{"CNB_USER_ID=1000", "CNB_GROUP_ID=1001", "PATH=/usr/bin"},
		User:   "1000:1001",
		Labels: map[string]string{LabelStackID: "io.buildpacks.stacks.jammy", "maintainer": "stack team"},
	})
	if err != nil {
		t.Fatal(err)
	}
	flattened := fixedLayer(t, "cnb/buildpacks/example_go/1.0.0/buildpack.toml", "api = \"0.10\"")
	procfile := fixedLayer(t, "cnb/buildpacks/example_procfile/2.0.0/buildpack.toml", "api = \"0.11\"")
	return BuilderSpec{
		BuildImage: base,
		Stack:      &Stack{ID: "io.buildpacks.stacks.jammy", UserID: 1000, GroupID: 1001, OS: "linux", Arch: "amd64"},
		RunImage:   "registry.example.com/run@sha256:" + strings.Repeat("a", 64),
		Lifecycle: Lifecycle{
			Layer:   fixedLayer(t, "cnb/lifecycle/lifecycle", "ELF"),
			Version: "0.21.0",
			APIs: v1alpha1.LifecycleAPIs{
				Buildpack: v1alpha1.APIVersions{Supported: []string{"0.7", "0.8", "0.9", "0.10", "0.11", "0.12"}},
				Platform:  v1alpha1.APIVersions{Supported: []string{"0.7", "0.13", "0.15"}},
			},
		},
		Buildpacks: []BuildpackLayer{
			{Buildpack: v1alpha1.StoreBuildpack{ID: "example/procfile", Version: "2.0.0", API: "0.11", DiffID: diffID(t, procfile)}, Layer: procfile},
			{Buildpack: v1alpha1.StoreBuildpack{ID: "example/go", Version: "1.0.0", API: "0.10", DiffID: diffID(t, flattened),
				Homepage: "https://example.com/go", Stacks: []v1alpha1.BuildpackStack{{ID: "*"}}}, Layer: flattened},
			{Buildpack: v1alpha1.StoreBuildpack{ID: "example/go-dist", Version: "1.2.0", API: "0.10", DiffID: diffID(t, flattened)}, Layer: flattened},
		},
		Order: []v1alpha1.OrderEntry{
			{Group: []v1alpha1.BuildpackRef{{ID: "example/go", Version: "1.0.0"}, {ID: "example/procfile", Version: "2.0.0", Optional: true}}},
			{Group: []v1alpha1.BuildpackRef{{ID: "example/procfile", Version: "2.0.0"}}},
		},
		AdditionalLabels: map[string]string{"team": "platform"},
		CreatedBy:        "0.1.0",
	}
}

func TestAssembleBuilderLayers(t *testing.T) {
	spec := builderSpec(t)
	img, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	// base, dirs, lifecycle, go+go-dist (one layer), procfile, files
	if len(layers) != 6 {
		t.Fatalf("%d layers, want 6", len(layers))
	}
	wantLifecycle, _ := spec.Lifecycle.Layer.Digest()
	if got, _ := layers[2].Digest(); got != wantLifecycle {
		t.Errorf("layer 2 is %s, want the lifecycle layer %s as is", got, wantLifecycle)
	}
	if got := diffID(t, layers[3]); got != spec.Buildpacks[1].Buildpack.DiffID {
		t.Errorf("layer 3 diffID %s, want the flattened go layer", got)
	}
	if got := diffID(t, layers[4]); got != spec.Buildpacks[0].Buildpack.DiffID {
		t.Errorf("layer 4 diffID %s, want the procfile layer", got)
	}

	type header struct {
		Name     string
		Mode     int64
		UID, GID int
		Dir      bool
		Modified string
	}
	read := func(l v1.Layer) ([]header, map[string]string) {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		var hs []header
		files := map[string]string{}
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return hs, files
			}
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, header{h.Name, h.Mode, h.Uid, h.Gid, h.Typeflag == tar.TypeDir, h.ModTime.UTC().Format("2006-01-02T15:04:05Z")})
			if h.Typeflag == tar.TypeReg {
				b, _ := io.ReadAll(tr)
				files[h.Name] = string(b)
			}
		}
	}
	const at = "1980-01-01T00:00:01Z"
	dirs, _ := read(layers[1])
	wantDirs := []header{
		{"cnb/", 0o755, 0, 0, true, at}, {"cnb/build-config/", 0o755, 0, 0, true, at}, {"cnb/build-config/env/", 0o755, 0, 0, true, at},
		{"cnb/buildpacks/", 0o755, 0, 0, true, at}, {"cnb/extensions/", 0o755, 0, 0, true, at},
		{"layers/", 0o755, 1000, 1001, true, at}, {"platform/", 0o755, 0, 0, true, at}, {"platform/env/", 0o755, 0, 0, true, at},
		{"workspace/", 0o755, 1000, 1001, true, at},
	}
	if diff := cmp.Diff(wantDirs, dirs); diff != "" {
		t.Errorf("directories layer (-want +got):\n%s", diff)
	}

	headers, files := read(layers[5])
	wantHeaders := []header{{"cnb/", 0o755, 0, 0, true, at}, {"cnb/order.toml", 0o644, 0, 0, false, at},
		{"cnb/run.toml", 0o644, 0, 0, false, at}, {"cnb/stack.toml", 0o644, 0, 0, false, at}}
	if diff := cmp.Diff(wantHeaders, headers); diff != "" {
		t.Errorf("files layer (-want +got):\n%s", diff)
	}
	wantFiles := map[string]string{
		"cnb/order.toml": `[[order]]

  [[order.group]]
    id = "example/go"
    version = "1.0.0"

  [[order.group]]
    id = "example/procfile"
    version = "2.0.0"
    optional = true

[[order]]

  [[order.group]]
    id = "example/procfile"
    version = "2.0.0"
`,
		"cnb/run.toml": `[[images]]
  image = "` + spec.RunImage + `"
`,
		"cnb/stack.toml": `[run-image]
  image = "` + spec.RunImage + `"
`,
	}
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestAssembleBuilderConfig(t *testing.T) {
	spec := builderSpec(t)
	img, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.WorkingDir != "/layers" || cf.Config.User != "1000:1001" ||
		!cmp.Equal(cf.Config.Env, []string{"CNB_USER_ID=1000", "CNB_GROUP_ID=1001", "PATH=/usr/bin"}) {
		t.Errorf("config: workdir %q, user %q, env %q", cf.Config.WorkingDir, cf.Config.User, cf.Config.Env)
	}
	labels := cf.Config.Labels
	for k, want := range map[string]string{
		"maintainer": "stack team", "team": "platform", LabelStackID: "io.buildpacks.stacks.jammy", LabelLifecycleVer: "0.21.0",
		LabelBuildpackOrder: `[{"group":[{"id":"example/go","version":"1.0.0"},{"id":"example/procfile","version":"2.0.0","optional":true}]},` +
			`{"group":[{"id":"example/procfile","version":"2.0.0"}]}]`,
		LabelLifecycleAPIs: `{"buildpack":{"deprecated":[],"supported":["0.7","0.8","0.9","0.10","0.11","0.12"]},` +
			`"platform":{"deprecated":[],"supported":["0.7","0.13","0.15"]}}`,
	} {
		if labels[k] != want {
			t.Errorf("label %s = %s\nwant %s", k, labels[k], want)
		}
	}
	goDiffID := spec.Buildpacks[1].Buildpack.DiffID
	wantLayers := `{"example/go":{"1.0.0":{"api":"0.10","stacks":[{"id":"*"}],"layerDiffID":"` + goDiffID + `","homepage":"https://example.com/go"}},` +
		`"example/go-dist":{"1.2.0":{"api":"0.10","layerDiffID":"` + goDiffID + `"}},` +
		`"example/procfile":{"2.0.0":{"api":"0.11","layerDiffID":"` + spec.Buildpacks[0].Buildpack.DiffID + `"}}}`
	if labels[LabelBuildpackLayers] != wantLayers {
		t.Errorf("layers label = %s\nwant %s", labels[LabelBuildpackLayers], wantLayers)
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(labels[LabelBuilderMetadata]), &meta); err != nil {
		t.Fatal(err)
	}
	wantMeta := map[string]any{
		"description": "",
		"buildpacks": []any{
			map[string]any{"id": "example/go", "version": "1.0.0", "homepage": "https://example.com/go"},
			map[string]any{"id": "example/go-dist", "version": "1.2.0"},
			map[string]any{"id": "example/procfile", "version": "2.0.0"},
		},
		"stack":     map[string]any{"runImage": map[string]any{"image": spec.RunImage}},
		"images":    []any{map[string]any{"image": spec.RunImage}},
		"createdBy": map[string]any{"name": "buildsmith", "version": "0.1.0"},
		"lifecycle": map[string]any{
			"version": "0.21.0",
			"api":     map[string]any{"buildpack": "0.7", "platform": "0.7"},
			"apis": map[string]any{
				"buildpack": map[string]any{"deprecated": []any{}, "supported": []any{"0.7", "0.8", "0.9", "0.10", "0.11", "0.12"}},
				"platform":  map[string]any{"deprecated": []any{}, "supported": []any{"0.7", "0.13", "0.15"}},
			},
		},
	}
	if diff := cmp.Diff(wantMeta, meta); diff != "" {
		t.Errorf("builder metadata (-want +got):\n%s", diff)
	}
}

func TestAssembleBuilderIsDeterministic(t *testing.T) {
	digests := map[v1.Hash]int{}
	for range 20 {
		img, err := AssembleBuilder(builderSpec(t)) // inputs made anew each time
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[d]++
	}
	if len(digests) != 1 {
		t.Errorf("20 builds gave %d digests: %v", len(digests), digests)
	}
	// Input order does not matter either.
	spec := builderSpec(t)
	spec.Buildpacks[0], spec.Buildpacks[2] = spec.Buildpacks[2], spec.Buildpacks[0]
	img, _ := AssembleBuilder(spec)
	if d, _ := img.Digest(); digests[d] != 20 {
		t.Errorf("buildpacks in another order gave another digest %s", d)
	}
}

// TestAssembleBuilderDescription: the description is the builder metadata
// label's, where pack writes builder.toml's and `pack builder inspect`
// reads it; no description keeps the "" of builders made before.
func TestAssembleBuilderDescription(t *testing.T) {
	for _, description := range []string{"", "Ubuntu 24.04 Noble Numbat base image with buildpacks for Java, Node.js, \"quoted\" <and> & more"} {
		spec := builderSpec(t)
		spec.Description = description
		img, err := AssembleBuilder(spec)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Description *string `json:"description"`
		}
		if err := json.Unmarshal([]byte(cf.Config.Labels[LabelBuilderMetadata]), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Description == nil || *meta.Description != description {
			t.Errorf("builder metadata label %s: description %v, want %q", cf.Config.Labels[LabelBuilderMetadata], meta.Description, description)
		}
	}
	// A description is an input: another one gives another image.
	a, _ := AssembleBuilder(builderSpec(t))
	spec := builderSpec(t)
	spec.Description = "another"
	b, _ := AssembleBuilder(spec)
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da == db {
		t.Errorf("the same digest %s with and without a description", da)
	}
}

func TestAssembleBuilderRefusesReservedLabels(t *testing.T) {
	spec := builderSpec(t)
	spec.AdditionalLabels = map[string]string{LabelBuildpackOrder: "[]"}
	if _, err := AssembleBuilder(spec); err == nil {
		t.Error("an additional label overrode io.buildpacks.buildpack.order")
	}
}

// TestAssembleBuilderSystemBuildpacks: system buildpacks become
// /cnb/system.toml and the label pack writes; without them, neither is
// there.
func TestAssembleBuilderSystemBuildpacks(t *testing.T) {
	files := func(img v1.Image) map[string]string {
		t.Helper()
		rc := mutate.Extract(img)
		defer rc.Close()
		out := map[string]string{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			out[h.Name] = string(b)
		}
	}
	for _, tc := range []struct {
		name      string
		system    *v1alpha1.SystemBuildpacks
		wantTOML  string // "" for no file
		wantLabel string // "" for no label
	}{{
		name: "none",
	}, {
		name:   "empty lists",
		system: &v1alpha1.SystemBuildpacks{},
	}, {
		name: "pre and post",
		system: &v1alpha1.SystemBuildpacks{
			Pre:  []v1alpha1.SystemBuildpackRef{{ID: "example/procfile", Version: "2.0.0"}},
			Post: []v1alpha1.SystemBuildpackRef{{ID: "example/go-dist", Version: "1.2.0"}, {ID: "example/go", Version: "1.0.0"}},
		},
		wantTOML: "[system]\n  [system.pre]\n\n    [[system.pre.buildpacks]]\n      id = \"example/procfile\"\n      version = \"2.0.0\"\n" +
			"  [system.post]\n\n    [[system.post.buildpacks]]\n      id = \"example/go-dist\"\n      version = \"1.2.0\"\n\n" +
			"    [[system.post.buildpacks]]\n      id = \"example/go\"\n      version = \"1.0.0\"\n",
		wantLabel: `{"pre":{"buildpacks":[{"id":"example/procfile","version":"2.0.0"}]},` +
			`"post":{"buildpacks":[{"id":"example/go-dist","version":"1.2.0"},{"id":"example/go","version":"1.0.0"}]}}`,
	}, {
		name:      "post only",
		system:    &v1alpha1.SystemBuildpacks{Post: []v1alpha1.SystemBuildpackRef{{ID: "example/go", Version: "1.0.0"}}},
		wantTOML:  "[system]\n  [system.post]\n\n    [[system.post.buildpacks]]\n      id = \"example/go\"\n      version = \"1.0.0\"\n",
		wantLabel: `{"post":{"buildpacks":[{"id":"example/go","version":"1.0.0"}]}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			spec := builderSpec(t)
			spec.System = tc.system
			img, err := AssembleBuilder(spec)
			if err != nil {
				t.Fatal(err)
			}
			got, found := files(img)["cnb/system.toml"]
			if tc.wantTOML == "" && found {
				t.Errorf("cnb/system.toml written:\n%s", got)
			} else if got != tc.wantTOML {
				t.Errorf("cnb/system.toml:\n%s\nwant:\n%s", got, tc.wantTOML)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if label, found := cf.Config.Labels[LabelBuildpackSystem]; label != tc.wantLabel || found != (tc.wantLabel != "") {
				t.Errorf("label %s = %q (set: %v), want %q", LabelBuildpackSystem, label, found, tc.wantLabel)
			}
		})
	}
}

// TestAssembleBuilderExtensions: extensions' layers come after the
// buildpacks', order.toml gains [[order-extensions]], and the labels pack
// writes for them are there; without extensions none of it is.
func TestAssembleBuilderExtensions(t *testing.T) {
	curl := fixedLayer(t, "cnb/extensions/example_curl/1.0.0/extension.toml", "api = \"0.10\"")
	spec := builderSpec(t)
	plain, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Extensions = []BuildpackLayer{{Buildpack: v1alpha1.StoreBuildpack{ID: "example/curl", Version: "1.0.0", API: "0.10",
		DiffID: diffID(t, curl), Targets: []v1alpha1.BuildpackTarget{{OS: "linux"}}}, Layer: curl}}
	spec.OrderExtensions = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/curl", Version: "1.0.0"}}}}
	img, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		img       v1.Image
		layers    int
		orderTail string
		labels    map[string]string // "" for absent
		extMeta   string
	}{
		"without": {img: plain, layers: 6, labels: map[string]string{LabelExtensionLayers: "", LabelOrderExtensions: ""}},
		"with": {img: img, layers: 7,
			orderTail: "\n[[order-extensions]]\n\n  [[order-extensions.group]]\n    id = \"example/curl\"\n    version = \"1.0.0\"\n",
			labels: map[string]string{
				LabelExtensionLayers: `{"example/curl":{"1.0.0":{"api":"0.10","targets":[{"os":"linux"}],"layerDiffID":"` + diffID(t, curl) + `"}}}`,
				LabelOrderExtensions: `[{"group":[{"id":"example/curl","version":"1.0.0"}]}]`,
			},
			extMeta: `"extensions":[{"id":"example/curl","version":"1.0.0"}]`},
	} {
		t.Run(name, func(t *testing.T) {
			layers, _ := tc.img.Layers()
			if len(layers) != tc.layers {
				t.Errorf("%d layers, want %d", len(layers), tc.layers)
			}
			if tc.extMeta != "" && diffID(t, layers[5]) != diffID(t, curl) {
				t.Errorf("layer 5 is not the extension's")
			}
			rc := mutate.Extract(tc.img)
			defer rc.Close()
			tr := tar.NewReader(rc)
			order := ""
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				if h.Name == "cnb/order.toml" {
					b, _ := io.ReadAll(tr)
					order = string(b)
				}
			}
			if strings.Contains(order, "order-extensions") != (tc.orderTail != "") || !strings.HasSuffix(order, tc.orderTail) {
				t.Errorf("order.toml:\n%s\nwant it to end with:\n%s", order, tc.orderTail)
			}
			cf, _ := tc.img.ConfigFile()
			for key, want := range tc.labels {
				if got, found := cf.Config.Labels[key]; got != want || found != (want != "") {
					t.Errorf("label %s = %q (set: %v), want %q", key, got, found, want)
				}
			}
			if meta := cf.Config.Labels[LabelBuilderMetadata]; strings.Contains(meta, `"extensions"`) != (tc.extMeta != "") || !strings.Contains(meta, tc.extMeta) {
				t.Errorf("builder metadata %s, want %s", meta, tc.extMeta)
			}
		})
	}
}

// TestAssembleBuilderLayerBudget: a builder of more layers than allowed is
// refused before it exists, permanently, naming the count and the limit; at
// the limit it is built.
func TestAssembleBuilderLayerBudget(t *testing.T) {
	spec := builderSpec(t)
	img, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	n := len(layers)
	for _, tc := range []struct {
		max     int
		refused bool
	}{{0, false}, {n, false}, {n - 1, true}, {1, true}} {
		spec.MaxLayers = tc.max
		_, err := AssembleBuilder(spec)
		e, classified := failure.As(err)
		switch {
		case !tc.refused && err != nil:
			t.Errorf("max %d: %v, want the builder (%d layers)", tc.max, err, n)
		case tc.refused && (!classified || e.Class != failure.Permanent || e.Reason != ReasonTooManyLayers):
			t.Errorf("max %d: %v, want a permanent %s", tc.max, err, ReasonTooManyLayers)
		case tc.refused && !strings.Contains(err.Error(), fmt.Sprintf("would have %d layers, more than %d", n, tc.max)):
			t.Errorf("max %d: message %q names neither the count nor the limit", tc.max, err)
		}
	}
}

// TestAssembleExecEnv: an order entry's execution environments are written
// as pack writes them, under exec-env, into /cnb/order.toml and the order
// label; entries without them are written as before.
func TestAssembleExecEnv(t *testing.T) {
	spec := builderSpec(t)
	spec.Order[0].Group[0].ExecEnv = []string{"production", "*"}
	img, err := AssembleBuilder(spec)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if want := `[{"group":[{"id":"example/go","version":"1.0.0","exec-env":["production","*"]},{"id":"example/procfile","version":"2.0.0","optional":true}]},` +
		`{"group":[{"id":"example/procfile","version":"2.0.0"}]}]`; cf.Config.Labels[LabelBuildpackOrder] != want {
		t.Errorf("order label %s\nwant %s", cf.Config.Labels[LabelBuildpackOrder], want)
	}
	layers, _ := img.Layers()
	var order string
	for _, l := range layers {
		rc, _ := l.Uncompressed()
		tr := tar.NewReader(rc)
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			if h.Name == "cnb/order.toml" {
				b, _ := io.ReadAll(tr)
				order = string(b)
			}
		}
		rc.Close()
	}
	if !strings.Contains(order, "  [[order.group]]\n    id = \"example/go\"\n    version = \"1.0.0\"\n    exec-env = [\"production\", \"*\"]\n") {
		t.Errorf("order.toml:\n%s", order)
	}
}
