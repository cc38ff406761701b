package cnb

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

func stackImage(os, arch string, labels map[string]string, env ...string) *v1.ConfigFile {
	return &v1.ConfigFile{OS: os, Architecture: arch, Config: v1.Config{Labels: labels, Env: env}}
}

func TestReadStack(t *testing.T) {
	const id = "io.buildpacks.stacks.jammy"
	ids := []string{"CNB_USER_ID=1000", "CNB_GROUP_ID=1001", "PATH=/usr/bin"}
	jammy := map[string]string{LabelStackID: id, LabelDistroName: "ubuntu", LabelDistroVersion: "22.04"}
	tests := []struct {
		name       string
		noID       bool // a stack without an id (RFC 0096)
		build, run *v1.ConfigFile
		want       *Stack
		reason     string
	}{{
		name:  "classic stack",
		build: stackImage("linux", "amd64", with(jammy, LabelStackMixins, `["git","build:make"]`), ids...),
		run:   stackImage("linux", "amd64", with(jammy, LabelStackMixins, `["git","run:tzdata"]`)),
		want: &Stack{ID: id, Mixins: []string{"git", "build:make"}, UserID: 1000, GroupID: 1001,
			OS: "linux", Arch: "amd64", DistroName: "ubuntu", DistroVersion: "22.04"},
	}, {
		name:  "stack-less images (platform API 0.12+)",
		build: stackImage("linux", "arm64", nil, ids...),
		run:   stackImage("linux", "arm64", nil),
		want:  &Stack{ID: id, UserID: 1000, GroupID: 1001, OS: "linux", Arch: "arm64"},
	}, {
		name:  "no id: the images' own",
		noID:  true,
		build: stackImage("linux", "amd64", jammy, ids...),
		run:   stackImage("linux", "amd64", map[string]string{LabelStackID: id, LabelDistroName: "ubuntu", LabelDistroVersion: "22.04"}),
		want:  &Stack{ID: id, UserID: 1000, GroupID: 1001, OS: "linux", Arch: "amd64", DistroName: "ubuntu", DistroVersion: "22.04"},
	}, {
		name:  "no id, images without one",
		noID:  true,
		build: stackImage("linux", "arm64", nil, ids...),
		run:   stackImage("linux", "arm64", nil),
		want:  &Stack{UserID: 1000, GroupID: 1001, OS: "linux", Arch: "arm64"},
	}, {
		name:  "no id, images of two stacks",
		noID:  true,
		build: stackImage("linux", "amd64", nil, ids...),
		run:   stackImage("linux", "amd64", map[string]string{LabelStackID: "other"}),
		want:  &Stack{ID: "other", UserID: 1000, GroupID: 1001, OS: "linux", Arch: "amd64"},
	}, {
		name:   "no id, build and run images of different stacks",
		noID:   true,
		build:  stackImage("linux", "amd64", map[string]string{LabelStackID: "one"}, ids...),
		run:    stackImage("linux", "amd64", map[string]string{LabelStackID: "other"}),
		reason: ReasonStackIDMismatch,
	}, {
		name:   "more mixins than a status may list",
		build:  stackImage("linux", "amd64", with(jammy, LabelStackMixins, manyMixins(MaxMixins+1)), ids...),
		run:    stackImage("linux", "amd64", jammy),
		reason: ReasonInvalidBuildImage,
	}, {
		name:   "a few mixins, but huge ones",
		build:  stackImage("linux", "amd64", with(jammy, LabelStackMixins, `["`+strings.Repeat("x", 70<<10)+`"]`), ids...),
		run:    stackImage("linux", "amd64", jammy),
		reason: ReasonInvalidBuildImage,
	}, {
		name:   "build image of another stack",
		build:  stackImage("linux", "amd64", map[string]string{LabelStackID: "other"}, ids...),
		run:    stackImage("linux", "amd64", nil),
		reason: ReasonStackIDMismatch,
	}, {
		name:   "run image of another stack",
		build:  stackImage("linux", "amd64", nil, ids...),
		run:    stackImage("linux", "amd64", map[string]string{LabelStackID: "other"}),
		reason: ReasonStackIDMismatch,
	}, {
		name:   "architectures differ",
		build:  stackImage("linux", "amd64", nil, ids...),
		run:    stackImage("linux", "arm64", nil),
		reason: ReasonPlatformMismatch,
	}, {
		name:   "distros differ",
		build:  stackImage("linux", "amd64", jammy, ids...),
		run:    stackImage("linux", "amd64", with(jammy, LabelDistroVersion, "24.04")),
		reason: ReasonPlatformMismatch,
	}, {
		name:   "no CNB_USER_ID",
		build:  stackImage("linux", "amd64", nil, "CNB_GROUP_ID=1000"),
		run:    stackImage("linux", "amd64", nil),
		reason: ReasonInvalidBuildImage,
	}, {
		name:   "root user",
		build:  stackImage("linux", "amd64", nil, "CNB_USER_ID=0", "CNB_GROUP_ID=1000"),
		run:    stackImage("linux", "amd64", nil),
		reason: ReasonInvalidBuildImage,
	}, {
		name:   "group id not a number",
		build:  stackImage("linux", "amd64", nil, "CNB_USER_ID=1000", "CNB_GROUP_ID=cnb"),
		run:    stackImage("linux", "amd64", nil),
		reason: ReasonInvalidBuildImage,
	}, {
		name:   "mixins label not JSON",
		build:  stackImage("linux", "amd64", map[string]string{LabelStackMixins: "git,curl"}, ids...),
		run:    stackImage("linux", "amd64", nil),
		reason: ReasonInvalidBuildImage,
	}, {
		name:   "run: mixin on the build image",
		build:  stackImage("linux", "amd64", map[string]string{LabelStackMixins: `["run:tzdata"]`}, ids...),
		run:    stackImage("linux", "amd64", nil),
		reason: ReasonMixinsMismatch,
	}, {
		name:   "build: mixin on the run image",
		build:  stackImage("linux", "amd64", nil, ids...),
		run:    stackImage("linux", "amd64", map[string]string{LabelStackMixins: `["build:make"]`}),
		reason: ReasonMixinsMismatch,
	}, {
		name:   "build mixin missing from the run image",
		build:  stackImage("linux", "amd64", map[string]string{LabelStackMixins: `["git","curl"]`}, ids...),
		run:    stackImage("linux", "amd64", map[string]string{LabelStackMixins: `["git"]`}),
		reason: ReasonMixinsMismatch,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stackID := id
			if tc.noID {
				stackID = ""
			}
			got, err := ReadStack(stackID, tc.build, tc.run)
			if tc.reason != "" {
				f, ok := failure.As(err)
				if !ok || f.Class != failure.Permanent || f.Reason != tc.reason {
					t.Fatalf("ReadStack() error = %v (%+v), want Permanent %s", err, f, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadStack() (-want +got):\n%s", diff)
			}
		})
	}
}

func with(labels map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// manyMixins is a mixins label listing n mixins.
func manyMixins(n int) string {
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprintf("package-%d", i)
	}
	b, _ := json.Marshal(list)
	return string(b)
}

// TestBaseSBOMLayer: the label names the SBOM's layer only when it is the
// diffID of one of the image's layers.
func TestBaseSBOMLayer(t *testing.T) {
	layer := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 64)}
	other := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("b", 64)}
	config := func(label string) *v1.ConfigFile {
		c := &v1.ConfigFile{RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{other, layer}}}
		if label != "" {
			c.Config.Labels = map[string]string{LabelBaseSBOM: label}
		}
		return c
	}
	for _, tc := range []struct {
		name, label string
		want        string
	}{
		{"a layer of the image", layer.String(), layer.String()},
		{"no label", "", ""},
		{"not a layer of the image", "sha256:" + strings.Repeat("c", 64), ""},
		{"not a digest", "bom.cdx.json", ""},
		{"short", "sha256:abc", ""},
		{"another algorithm", "sha512:" + strings.Repeat("a", 128), ""},
		{"upper case", "sha256:" + strings.Repeat("A", 64), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := BaseSBOMLayer(config(tc.label))
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("BaseSBOMLayer = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
	if _, ok := BaseSBOMLayer(nil); ok {
		t.Error("a missing config names an SBOM")
	}
}
