package cnb

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

const storeImage = "registry.example.com/bp/go@sha256:0000000000000000000000000000000000000000000000000000000000000000"

func hash(c string) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(c, 64)}
}

// buildpackage returns the config and manifest of an image with two layers
// (diffIDs aaa…, bbb…; digests ccc…, ddd…) and the given layers label.
func buildpackage(label string) (*v1.ConfigFile, *v1.Manifest) {
	config := &v1.ConfigFile{RootFS: v1.RootFS{DiffIDs: []v1.Hash{hash("a"), hash("b")}}}
	if label != "" {
		config.Config.Labels = map[string]string{LabelBuildpackLayers: label}
	}
	manifest := &v1.Manifest{Layers: []v1.Descriptor{{Digest: hash("c"), Size: 10}, {Digest: hash("d"), Size: 20}}}
	return config, manifest
}

func TestBuildpackage(t *testing.T) {
	a, b := hash("a").String(), hash("b").String()
	tests := []struct {
		name   string
		label  string
		want   []v1alpha1.StoreBuildpack
		reason string
	}{{
		name: "meta-buildpack and two children, one layer each",
		label: `{
		  "example/go": {"1.0.0": {"api": "0.10", "order": [{"group": [{"id": "example/go-dist", "version": "2.0.0"},
		      {"id": "example/procfile", "version": "1.1.0", "optional": true}]}], "layerDiffID": "` + a + `",
		      "homepage": "https://example.com/go"}},
		  "example/go-dist": {"2.0.0": {"api": "0.10", "stacks": [{"id": "*"}], "layerDiffID": "` + b + `", "future": 1}},
		  "example/procfile": {"1.1.0": {"api": "0.11", "targets": [{"os": "linux", "arch": "amd64"}], "layerDiffID": "` + b + `"}}
		}`,
		want: []v1alpha1.StoreBuildpack{{
			ID: "example/go", Version: "1.0.0", API: "0.10", Homepage: "https://example.com/go",
			DiffID: a, Digest: hash("c").String(), Size: 10, StoreImage: v1alpha1.ImageSource{Image: storeImage},
			Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go-dist", Version: "2.0.0"},
				{ID: "example/procfile", Version: "1.1.0", Optional: true}}}},
		}, {
			ID: "example/go-dist", Version: "2.0.0", API: "0.10", DiffID: b, Digest: hash("d").String(), Size: 20,
			StoreImage: v1alpha1.ImageSource{Image: storeImage}, Stacks: []v1alpha1.BuildpackStack{{ID: "*"}},
		}, {
			ID: "example/procfile", Version: "1.1.0", API: "0.11", DiffID: b, Digest: hash("d").String(), Size: 20,
			StoreImage: v1alpha1.ImageSource{Image: storeImage}, Targets: []v1alpha1.BuildpackTarget{{OS: "linux", Arch: "amd64"}},
		}},
	}, {
		name: "no label", reason: ReasonInvalidBuildpackage,
	}, {
		name: "not JSON", label: `{"example/go": `, reason: ReasonInvalidBuildpackage,
	}, {
		name: "trailing data", label: `{} {}`, reason: ReasonInvalidBuildpackage,
	}, {
		name: "wrong shape", label: `{"example/go": ["1.0.0"]}`, reason: ReasonInvalidBuildpackage,
	}, {
		name: "layer the image lacks", label: `{"example/go": {"1.0.0": {"api": "0.10", "layerDiffID": "sha256:ffff"}}}`,
		reason: ReasonInvalidBuildpackage,
	}, {
		name: "no api", label: `{"example/go": {"1.0.0": {"layerDiffID": "` + a + `"}}}`, reason: ReasonInvalidBuildpackage,
	}, {
		name: "empty version", label: `{"example/go": {"": {"api": "0.10", "layerDiffID": "` + a + `"}}}`,
		reason: ReasonInvalidBuildpackage,
	}, {
		name: "oversized label", label: `{"x": "` + strings.Repeat("x", maxLabelSize) + `"}`, reason: ReasonInvalidBuildpackage,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			config, manifest := buildpackage(tc.label)
			got, err := Buildpackage(storeImage, config, manifest)
			if tc.reason != "" {
				if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != tc.reason {
					t.Fatalf("error = %v, want Permanent %s", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Buildpackage() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeBuildpacks(t *testing.T) {
	bp := func(id, version, diffID, image string) v1alpha1.StoreBuildpack {
		return v1alpha1.StoreBuildpack{ID: id, Version: version, DiffID: diffID, StoreImage: v1alpha1.ImageSource{Image: image}}
	}
	first := []v1alpha1.StoreBuildpack{bp("b", "1", "x", "one"), bp("a", "2", "y", "one")}
	second := []v1alpha1.StoreBuildpack{bp("a", "2", "y", "two"), bp("a", "10", "z", "two")}
	got, err := MergeBuildpacks(first, second)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.StoreBuildpack{bp("a", "10", "z", "two"), bp("a", "2", "y", "one"), bp("b", "1", "x", "one")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MergeBuildpacks() (-want +got):\n%s", diff)
	}

	// The same layer, its licenses named by the second source's labels
	// alone (a builder's): the first copy, with them.
	licensed := withLicenses(bp("a", "2", "y", "two"), "MIT", "")
	if got, err := MergeBuildpacks(first, []v1alpha1.StoreBuildpack{licensed}); err != nil || got[0].StoreImage.Image != "one" ||
		!slices.Equal(got[0].Licenses, licensed.Licenses) {
		t.Errorf("MergeBuildpacks of a licensed copy: %+v, %v", got, err)
	}

	_, err = MergeBuildpacks(first, []v1alpha1.StoreBuildpack{bp("b", "1", "other", "two")})
	if f, ok := failure.As(err); !ok || f.Reason != ReasonDuplicateBuildpack || !strings.Contains(err.Error(), "b@1") {
		t.Errorf("same id@version, different layers: %v", err)
	}

	// As many as a store may list, and one more: a permanent error rather
	// than a status the API server would refuse.
	var many []v1alpha1.StoreBuildpack
	for i := range MaxStoreBuildpacks {
		many = append(many, bp(fmt.Sprintf("bp-%d", i), "1", fmt.Sprint(i), "big"))
	}
	if got, err := MergeBuildpacks(many); err != nil || len(got) != MaxStoreBuildpacks {
		t.Errorf("%d buildpacks: %d, %v", MaxStoreBuildpacks, len(got), err)
	}
	_, err = MergeBuildpacks(many, []v1alpha1.StoreBuildpack{bp("one-more", "1", "x", "other")})
	if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonTooManyBuildpacks {
		t.Errorf("%d buildpacks: %v, want a permanent %s", MaxStoreBuildpacks+1, err, ReasonTooManyBuildpacks)
	}
	// Few buildpacks whose labels made their entries huge.
	huge := bp("huge", "1", "h", "big")
	huge.Stacks = []v1alpha1.BuildpackStack{{ID: "io.example", Mixins: []string{strings.Repeat("m", MaxStoreStatusBytes)}}}
	_, err = MergeBuildpacks([]v1alpha1.StoreBuildpack{huge})
	if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonTooManyBuildpacks {
		t.Errorf("one buildpack of %d KiB: %v, want a permanent %s", MaxStoreStatusBytes>>10, err, ReasonTooManyBuildpacks)
	}
}

func TestIndexBuildpacks(t *testing.T) {
	amd64, arm64 := Platform{OS: "linux", Arch: "amd64"}, Platform{OS: "linux", Arch: "arm64"}
	bp := func(id, diffID string, targets ...v1alpha1.BuildpackTarget) v1alpha1.StoreBuildpack {
		return v1alpha1.StoreBuildpack{ID: id, Version: "1.0.0", DiffID: diffID, Targets: targets}
	}
	linux := v1alpha1.BuildpackTarget{OS: "linux"}
	for _, tc := range []struct {
		name   string
		images []PlatformBuildpacks
		want   []v1alpha1.StoreBuildpack
	}{{
		name:   "one platform",
		images: []PlatformBuildpacks{{Platform: amd64, Buildpacks: []v1alpha1.StoreBuildpack{bp("a", "sha256:1")}}},
		want:   []v1alpha1.StoreBuildpack{{ID: "a", Version: "1.0.0", DiffID: "sha256:1", Platforms: []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}}},
	}, {
		name: "each buildpack once, described by the first platform's layer, with every platform and target",
		images: []PlatformBuildpacks{
			{Platform: amd64, Buildpacks: []v1alpha1.StoreBuildpack{bp("a", "sha256:1", v1alpha1.BuildpackTarget{OS: "linux", Arch: "amd64"})}},
			{Platform: arm64, Buildpacks: []v1alpha1.StoreBuildpack{
				bp("a", "sha256:2", v1alpha1.BuildpackTarget{OS: "linux", Arch: "arm64"}), bp("b", "sha256:3", linux)}},
		},
		want: []v1alpha1.StoreBuildpack{{
			ID: "a", Version: "1.0.0", DiffID: "sha256:1",
			Platforms: []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}},
			Targets:   []v1alpha1.BuildpackTarget{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}},
		}, {
			ID: "b", Version: "1.0.0", DiffID: "sha256:3", Platforms: []v1alpha1.Platform{{OS: "linux", Arch: "arm64"}}, Targets: []v1alpha1.BuildpackTarget{linux},
		}},
	}, {
		name: "a target both platforms name is listed once",
		images: []PlatformBuildpacks{
			{Platform: amd64, Buildpacks: []v1alpha1.StoreBuildpack{bp("a", "sha256:1", linux)}},
			{Platform: arm64, Buildpacks: []v1alpha1.StoreBuildpack{bp("a", "sha256:2", linux)}},
		},
		want: []v1alpha1.StoreBuildpack{{ID: "a", Version: "1.0.0", DiffID: "sha256:1",
			Platforms: []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}, Targets: []v1alpha1.BuildpackTarget{linux}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, IndexBuildpacks(tc.images)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildpackDiffID(t *testing.T) {
	a, b := hash("a").String(), hash("b").String()
	label := `{"example/go": {"1.0.0": {"api": "0.10", "layerDiffID": "` + a + `"}, "1.1.0": {"api": "0.10", "layerDiffID": "` + b + `"}}}`
	for _, tc := range []struct {
		name, label, id, version string
		want                     v1.Hash
		found                    bool
		reason                   string
	}{
		{name: "the version asked for", label: label, id: "example/go", version: "1.1.0", want: hash("b"), found: true},
		{name: "another version only", label: label, id: "example/go", version: "2.0.0"},
		{name: "another buildpack only", label: label, id: "example/node", version: "1.0.0"},
		{name: "not a buildpackage", id: "example/go", version: "1.0.0", reason: ReasonInvalidBuildpackage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config, manifest := buildpackage(tc.label)
			got, found, err := BuildpackDiffID(storeImage, config, manifest, tc.id, tc.version, false)
			if tc.reason != "" {
				if f, ok := failure.As(err); !ok || f.Reason != tc.reason {
					t.Fatalf("error = %v, want %s", err, tc.reason)
				}
				return
			}
			if err != nil || found != tc.found || got != tc.want {
				t.Errorf("BuildpackDiffID = %v, %v, %v; want %v, %v", got, found, err, tc.want, tc.found)
			}
		})
	}
}

// TestReadPackage: a store source may be a buildpackage, an extension
// package, or both; neither label is an error naming both; a broken
// extension label names the extension.
func TestReadPackage(t *testing.T) {
	a, b := hash("a").String(), hash("b").String()
	bps := `{"example/go": {"1.0.0": {"api": "0.10", "layerDiffID": "` + a + `"}}}`
	exts := `{"example/curl": {"1.0.0": {"api": "0.10", "targets": [{"os": "linux"}], "layerDiffID": "` + b + `"}}}`
	goBP := v1alpha1.StoreBuildpack{ID: "example/go", Version: "1.0.0", API: "0.10", DiffID: a, Digest: hash("c").String(), Size: 10,
		StoreImage: v1alpha1.ImageSource{Image: storeImage}}
	curl := v1alpha1.StoreBuildpack{ID: "example/curl", Version: "1.0.0", API: "0.10", DiffID: b, Digest: hash("d").String(), Size: 20,
		StoreImage: v1alpha1.ImageSource{Image: storeImage}, Targets: []v1alpha1.BuildpackTarget{{OS: "linux"}}}
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		want    Package
		wantErr string
	}{
		{name: "a buildpackage", labels: map[string]string{LabelBuildpackLayers: bps}, want: Package{Buildpacks: []v1alpha1.StoreBuildpack{goBP}}},
		{name: "an extension package", labels: map[string]string{LabelExtensionLayers: exts}, want: Package{Extensions: []v1alpha1.StoreBuildpack{curl}}},
		{name: "both", labels: map[string]string{LabelBuildpackLayers: bps, LabelExtensionLayers: exts},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{goBP}, Extensions: []v1alpha1.StoreBuildpack{curl}}},
		{name: "neither", labels: map[string]string{"other": "x"},
			wantErr: storeImage + " has neither a io.buildpacks.buildpack.layers nor a io.buildpacks.extension.layers label: not a buildpackage or extension package"},
		{name: "an extension without api", labels: map[string]string{LabelExtensionLayers: `{"example/curl": {"1.0.0": {"layerDiffID": "` + b + `"}}}`},
			wantErr: storeImage + ": extension example/curl@1.0.0 has no api"},
		// Licenses, as pack copies them from buildpack.toml into labels.
		{name: "a package's own licenses", labels: map[string]string{LabelBuildpackLayers: bps,
			LabelBuildpackageMetadata: `{"id": "example/go", "version": "1.0.0", "homepage": "h", "stacks": [{"id": "*"}],
				"licenses": [{"type": "Apache-2.0"}, {"uri": "https://example.com/l"}]}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{withLicenses(goBP, "Apache-2.0", "https://example.com/l")}}},
		{name: "an extension package's own licenses", labels: map[string]string{LabelExtensionLayers: exts,
			LabelBuildpackageMetadata: `{"id": "example/curl", "version": "1.0.0", "licenses": [{"type": "MIT"}]}`},
			want: Package{Extensions: []v1alpha1.StoreBuildpack{withLicenses(curl, "MIT", "")}}},
		{name: "a package's licenses of another module", labels: map[string]string{LabelBuildpackLayers: bps,
			LabelBuildpackageMetadata: `{"id": "example/meta", "version": "1.0.0", "licenses": [{"type": "MIT"}]}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{goBP}}},
		{name: "a builder's licenses of each module", labels: map[string]string{LabelBuildpackLayers: bps, LabelExtensionLayers: exts,
			LabelBuilderMetadata: `{"description": "d", "buildpacks": [{"id": "example/go", "version": "1.0.0", "licenses": [{"type": "BSD-3-Clause"}]},
				{"id": "example/go", "version": "2.0.0", "licenses": [{"type": "MIT"}]}],
				"extensions": [{"id": "example/curl", "version": "1.0.0", "licenses": [{"type": "curl"}]}], "stack": {"runImage": {"image": "r"}}}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{withLicenses(goBP, "BSD-3-Clause", "")},
				Extensions: []v1alpha1.StoreBuildpack{withLicenses(curl, "curl", "")}}},
		// Licenses are optional: a label that does not parse, or
		// licenses past the bounds, leave them unasserted, never failing
		// the package.
		{name: "licenses of no shape", labels: map[string]string{LabelBuildpackLayers: bps,
			LabelBuildpackageMetadata: `{"id": "example/go", "version": "1.0.0", "licenses": "MIT"}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{goBP}}},
		{name: "too many licenses", labels: map[string]string{LabelBuildpackLayers: bps,
			LabelBuildpackageMetadata: `{"id": "example/go", "version": "1.0.0", "licenses": [` + strings.Repeat(`{"type": "MIT"},`, MaxModuleLicenses) + `{"type": "MIT"}]}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{goBP}}},
		{name: "a license too long", labels: map[string]string{LabelBuildpackLayers: bps,
			LabelBuilderMetadata: `{"buildpacks": [{"id": "example/go", "version": "1.0.0", "licenses": [{"uri": "` + strings.Repeat("x", 1025) + `"}]}]}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{goBP}}},
		// A meta-buildpack's order is kept as status takes it.
		{name: "an order's entries without what status does not keep", labels: map[string]string{LabelBuildpackLayers: `{"example/meta": {"1.0.0": {"layerDiffID": "` + a +
			`", "order": [{"group": [{"id": "example/go", "version": "1.0.0", "optional": true, "execEnv": ["Not a name"], "exec-env": ["x"]}]}]}}}`},
			want: Package{Buildpacks: []v1alpha1.StoreBuildpack{{ID: "example/meta", Version: "1.0.0", DiffID: a, Digest: hash("c").String(), Size: 10,
				StoreImage: v1alpha1.ImageSource{Image: storeImage},
				Order:      []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go", Version: "1.0.0", Optional: true}}}}}}}},
		{name: "an order's group without buildpacks", labels: map[string]string{LabelBuildpackLayers: `{"example/meta": {"1.0.0": {"layerDiffID": "` + a +
			`", "order": [{"group": []}]}}}`},
			wantErr: storeImage + ": buildpack example/meta@1.0.0: order: group 0 is empty"},
		{name: "an order's entry without an id", labels: map[string]string{LabelBuildpackLayers: `{"example/meta": {"1.0.0": {"layerDiffID": "` + a +
			`", "order": [{"group": [{"version": "1"}]}]}}}`},
			wantErr: storeImage + ": buildpack example/meta@1.0.0: order: group 0, entry 0 has no id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config, manifest := buildpackage("")
			config.Config.Labels = tc.labels
			got, err := ReadPackage(storeImage, config, manifest)
			if tc.wantErr != "" {
				if f, ok := failure.As(err); !ok || f.Reason != ReasonInvalidBuildpackage || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %s %q", err, ReasonInvalidBuildpackage, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadPackage (-want +got):\n%s", diff)
			}
			if _, found, err := BuildpackDiffID(storeImage, config, manifest, "example/curl", "1.0.0", true); found != (len(tc.want.Extensions) > 0) ||
				(err != nil) != (len(tc.want.Extensions) == 0) {
				t.Errorf("BuildpackDiffID of the extension: found %v, %v", found, err)
			}
		})
	}
	if _, err := MergeExtensions([]v1alpha1.StoreBuildpack{curl}, []v1alpha1.StoreBuildpack{{ID: "example/curl", Version: "1.0.0", DiffID: a,
		StoreImage: v1alpha1.ImageSource{Image: "elsewhere"}}}); err == nil || !strings.HasPrefix(err.Error(), "extension example/curl@1.0.0 is in") {
		t.Errorf("MergeExtensions of two different example/curl@1.0.0: %v", err)
	}
}

// withLicenses is bp with a license of typ and uri.
func withLicenses(bp v1alpha1.StoreBuildpack, typ, uri string) v1alpha1.StoreBuildpack {
	if typ != "" {
		bp.Licenses = append(bp.Licenses, v1alpha1.BuildpackLicense{Type: typ})
	}
	if uri != "" {
		bp.Licenses = append(bp.Licenses, v1alpha1.BuildpackLicense{URI: uri})
	}
	return bp
}

func TestCheckStoreSize(t *testing.T) {
	half := make([]v1alpha1.StoreBuildpack, MaxStoreBuildpacks/2+1)
	for i := range half {
		half[i] = v1alpha1.StoreBuildpack{ID: fmt.Sprintf("bp-%d", i), Version: "1"}
	}
	if err := CheckStoreSize(half, nil); err != nil {
		t.Errorf("buildpacks alone: %v", err)
	}
	if err := CheckStoreSize(half, half); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d buildpacks and extensions", 2*len(half))) {
		t.Errorf("too many together: %v", err)
	}
	big := []v1alpha1.StoreBuildpack{{ID: "big", Version: "1", Homepage: strings.Repeat("x", MaxStoreStatusBytes/2+1)}}
	if err := CheckStoreSize(big, big); err == nil || !strings.Contains(err.Error(), "KiB in status") {
		t.Errorf("too large together: %v", err)
	}
}
