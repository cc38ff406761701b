package cnb

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

func sbp(id, version string, children ...v1alpha1.BuildpackRef) v1alpha1.StoreBuildpack {
	bp := v1alpha1.StoreBuildpack{ID: id, Version: version, API: "0.10", DiffID: "sha256:" + id + version}
	if len(children) > 0 {
		bp.Order = []v1alpha1.OrderEntry{{Group: children}}
	}
	return bp
}

func ref(id, version string) v1alpha1.BuildpackRef {
	return v1alpha1.BuildpackRef{ID: id, Version: version}
}

func group(refs ...v1alpha1.BuildpackRef) v1alpha1.OrderEntry {
	return v1alpha1.OrderEntry{Group: refs}
}

func TestResolveOrder(t *testing.T) {
	store := []v1alpha1.StoreBuildpack{
		sbp("go", "1.9.0"), sbp("go", "1.10.0"), sbp("go", "1.2.0"),
		sbp("procfile", "1.0.0"),
		sbp("meta", "1.0.0", ref("go", "1.2.0"), ref("inner", "1.0.0")),
		sbp("inner", "1.0.0", ref("procfile", "1.0.0")),
		sbp("weird", "latest"),
		sbp("loop-a", "1.0.0", ref("loop-b", "1.0.0")), sbp("loop-b", "1.0.0", ref("loop-a", "1.0.0")),
		sbp("orphan-parent", "1.0.0", ref("ghost", "1.0.0")),
	}
	tests := []struct {
		name       string
		order      []v1alpha1.OrderEntry
		wantOrder  []v1alpha1.OrderEntry
		wantUsed   []string
		wantReason string
		wantText   string
	}{{
		name:      "highest semver, not the highest string",
		order:     []v1alpha1.OrderEntry{group(ref("go", ""), v1alpha1.BuildpackRef{ID: "procfile", Optional: true})},
		wantOrder: []v1alpha1.OrderEntry{group(ref("go", "1.10.0"), v1alpha1.BuildpackRef{ID: "procfile", Version: "1.0.0", Optional: true})},
		wantUsed:  []string{"go@1.10.0", "procfile@1.0.0"},
	}, {
		name:      "an entry's execution environments kept",
		order:     []v1alpha1.OrderEntry{group(v1alpha1.BuildpackRef{ID: "go", ExecEnv: []string{"test"}})},
		wantOrder: []v1alpha1.OrderEntry{group(v1alpha1.BuildpackRef{ID: "go", Version: "1.10.0", ExecEnv: []string{"test"}})},
		wantUsed:  []string{"go@1.10.0"},
	}, {
		name:      "pinned version",
		order:     []v1alpha1.OrderEntry{group(ref("go", "1.9.0"))},
		wantOrder: []v1alpha1.OrderEntry{group(ref("go", "1.9.0"))},
		wantUsed:  []string{"go@1.9.0"},
	}, {
		name:      "meta-buildpack brings its children, recursively, once",
		order:     []v1alpha1.OrderEntry{group(ref("meta", "")), group(ref("procfile", ""))},
		wantOrder: []v1alpha1.OrderEntry{group(ref("meta", "1.0.0")), group(ref("procfile", "1.0.0"))},
		wantUsed:  []string{"go@1.2.0", "inner@1.0.0", "meta@1.0.0", "procfile@1.0.0"},
	}, {
		name: "missing buildpack", order: []v1alpha1.OrderEntry{group(ref("ruby", ""))},
		wantReason: ReasonBuildpackNotFound, wantText: "ruby",
	}, {
		name: "missing version", order: []v1alpha1.OrderEntry{group(ref("go", "2.0.0"))},
		wantReason: ReasonBuildpackNotFound, wantText: "1.10.0, 1.2.0, 1.9.0",
	}, {
		name: "non-semver without a pinned version", order: []v1alpha1.OrderEntry{group(ref("weird", ""))},
		wantReason: ReasonInvalidBuildpackVersion, wantText: `"latest"`,
	}, {
		name:      "non-semver pinned is fine",
		order:     []v1alpha1.OrderEntry{group(ref("weird", "latest"))},
		wantOrder: []v1alpha1.OrderEntry{group(ref("weird", "latest"))},
		wantUsed:  []string{"weird@latest"},
	}, {
		name: "child of a meta-buildpack missing", order: []v1alpha1.OrderEntry{group(ref("orphan-parent", ""))},
		wantReason: ReasonBuildpackNotFound, wantText: "in meta-buildpack orphan-parent@1.0.0: buildpack ghost is not in the store",
	}, {
		name: "cycle", order: []v1alpha1.OrderEntry{group(ref("loop-a", ""))},
		wantReason: ReasonBuildpackCycle, wantText: "loop-a@1.0.0 → loop-b@1.0.0 → loop-a@1.0.0",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveOrder(tc.order, nil, Pool{Buildpacks: store})
			if tc.wantReason != "" {
				f, ok := failure.As(err)
				if !ok || f.Class != failure.Permanent || f.Reason != tc.wantReason || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("error = %v (%+v), want Permanent %s mentioning %q", err, f, tc.wantReason, tc.wantText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantOrder, got.Order); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			var used []string
			for _, bp := range got.Buildpacks {
				used = append(used, bp.ID+"@"+bp.Version)
			}
			if diff := cmp.Diff(tc.wantUsed, used); diff != "" {
				t.Errorf("buildpacks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolveSystem: system buildpacks are resolved as order entries are,
// brought into the builder with their children, never optional, and kept
// by Without.
func TestResolveSystem(t *testing.T) {
	store := []v1alpha1.StoreBuildpack{
		sbp("go", "1.9.0"), sbp("go", "1.10.0"), sbp("procfile", "1.0.0"),
		sbp("ca-certs", "2.0.0"), sbp("ca-certs", "2.1.0"),
		sbp("meta-sbom", "1.0.0", ref("procfile", "1.0.0")),
	}
	sys := func(pre, post []v1alpha1.SystemBuildpackRef) *v1alpha1.SystemBuildpacks {
		return &v1alpha1.SystemBuildpacks{Pre: pre, Post: post}
	}
	tests := []struct {
		name       string
		system     *v1alpha1.SystemBuildpacks
		wantSystem *v1alpha1.SystemBuildpacks
		wantUsed   []string
		wantText   string // of a BuildpackNotFound error
	}{{
		name:     "none",
		wantUsed: []string{"go@1.10.0"},
	}, {
		name:     "empty lists are none",
		system:   sys(nil, nil),
		wantUsed: []string{"go@1.10.0"},
	}, {
		name:       "pre and post, versions resolved, a meta-buildpack's children brought in",
		system:     sys([]v1alpha1.SystemBuildpackRef{{ID: "ca-certs"}}, []v1alpha1.SystemBuildpackRef{{ID: "meta-sbom", Version: "1.0.0"}}),
		wantSystem: sys([]v1alpha1.SystemBuildpackRef{{ID: "ca-certs", Version: "2.1.0"}}, []v1alpha1.SystemBuildpackRef{{ID: "meta-sbom", Version: "1.0.0"}}),
		wantUsed:   []string{"ca-certs@2.1.0", "go@1.10.0", "meta-sbom@1.0.0", "procfile@1.0.0"},
	}, {
		name:     "a pre buildpack the store lacks",
		system:   sys([]v1alpha1.SystemBuildpackRef{{ID: "ghost"}}, nil),
		wantText: "system pre buildpacks: buildpack ghost is not in the store",
	}, {
		name:     "a post version the store lacks",
		system:   sys(nil, []v1alpha1.SystemBuildpackRef{{ID: "ca-certs", Version: "3.0.0"}}),
		wantText: "system post buildpacks: buildpack ca-certs@3.0.0 is not in the store, which has versions 2.0.0, 2.1.0",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveOrder([]v1alpha1.OrderEntry{group(ref("go", ""))}, tc.system, Pool{Buildpacks: store})
			if tc.wantText != "" {
				f, ok := failure.As(err)
				if !ok || f.Class != failure.Permanent || f.Reason != ReasonBuildpackNotFound || err.Error() != tc.wantText {
					t.Fatalf("error = %v (%+v), want Permanent %s: %q", err, f, ReasonBuildpackNotFound, tc.wantText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantSystem, got.System); diff != "" {
				t.Errorf("system (-want +got):\n%s", diff)
			}
			var used []string
			for _, bp := range got.Buildpacks {
				used = append(used, bp.ID+"@"+bp.Version)
				if got.Optional(bp) {
					t.Errorf("%s@%s is optional", bp.ID, bp.Version)
				}
			}
			if diff := cmp.Diff(tc.wantUsed, used); diff != "" {
				t.Errorf("buildpacks (-want +got):\n%s", diff)
			}
			if without := got.Without(func(v1alpha1.StoreBuildpack) bool { return false }); !cmp.Equal(without.System, got.System) {
				t.Errorf("Without dropped the system buildpacks: %+v", without.System)
			}
		})
	}
}

func TestCheckCompatibility(t *testing.T) {
	lifecycle := v1alpha1.APIVersions{Supported: []string{"0.10", "0.11", "0.12"}, Deprecated: []string{"0.7"}}
	stack := &Stack{ID: "io.buildpacks.stacks.jammy", Mixins: []string{"git", "build:make"}, OS: "linux", Arch: "amd64",
		DistroName: "ubuntu", DistroVersion: "22.04"}
	with := func(mutate func(*v1alpha1.StoreBuildpack)) []v1alpha1.StoreBuildpack {
		bp := v1alpha1.StoreBuildpack{ID: "example/go", Version: "1.0.0", API: "0.10"}
		mutate(&bp)
		return []v1alpha1.StoreBuildpack{bp}
	}
	tests := []struct {
		name       string
		buildpacks []v1alpha1.StoreBuildpack
		reason     string
	}{
		{"no stacks, no targets", with(func(*v1alpha1.StoreBuildpack) {}), ""},
		{"deprecated API", with(func(bp *v1alpha1.StoreBuildpack) { bp.API = "0.7" }), ""},
		{"unsupported API", with(func(bp *v1alpha1.StoreBuildpack) { bp.API = "0.13" }), ReasonBuildpackAPIUnsupported},
		{"API of a meta-buildpack's child", metaWithOldChild(t), ReasonBuildpackAPIUnsupported},
		{"any stack", with(func(bp *v1alpha1.StoreBuildpack) { bp.Stacks = []v1alpha1.BuildpackStack{{ID: "*"}} }), ""},
		{"other stack", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Stacks = []v1alpha1.BuildpackStack{{ID: "io.buildpacks.stacks.bionic"}}
		}), ReasonIncompatibleBuildpack},
		{"mixins present", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Stacks = []v1alpha1.BuildpackStack{{ID: "io.buildpacks.stacks.jammy", Mixins: []string{"git", "build:git", "build:make", "run:tzdata"}}}
		}), ""},
		{"mixin missing", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Stacks = []v1alpha1.BuildpackStack{{ID: "*", Mixins: []string{"build:curl"}}}
		}), ReasonIncompatibleBuildpack},
		{"target matches", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Targets = []v1alpha1.BuildpackTarget{{OS: "linux", Arch: "arm64"}, {OS: "linux", Arch: "amd64",
				Distros: []v1alpha1.Distro{{Name: "ubuntu", Version: "22.04"}}}}
		}), ""},
		{"target of another arch", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Targets = []v1alpha1.BuildpackTarget{{OS: "linux", Arch: "arm64"}}
		}), ReasonIncompatibleBuildpack},
		{"targets replace stacks, as in the lifecycle", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Stacks = []v1alpha1.BuildpackStack{{ID: "io.buildpacks.stacks.bionic"}}
			bp.Targets = []v1alpha1.BuildpackTarget{{OS: "linux"}}
		}), ""},
		{"target of another distro", with(func(bp *v1alpha1.StoreBuildpack) {
			bp.Targets = []v1alpha1.BuildpackTarget{{OS: "linux", Distros: []v1alpha1.Distro{{Name: "alpine"}}}}
		}), ReasonIncompatibleBuildpack},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCompatibility(tc.buildpacks, lifecycle, stack)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != tc.reason {
				t.Fatalf("error = %v, want Permanent %s", err, tc.reason)
			}
		})
	}

	// A stack without an id (RFC 0096): a buildpack naming stacks and no
	// targets runs on it only with "*"; targets decide as for any stack.
	idless := *stack
	idless.ID = ""
	for name, tc := range map[string]struct {
		stacks  []v1alpha1.BuildpackStack
		targets []v1alpha1.BuildpackTarget
		wantErr string
	}{
		"any stack": {stacks: []v1alpha1.BuildpackStack{{ID: "*"}}},
		"a named one": {stacks: []v1alpha1.BuildpackStack{{ID: "io.buildpacks.stacks.jammy"}},
			wantErr: `buildpack example/go@1.0.0 names stacks (io.buildpacks.stacks.jammy) and no targets, and the stack has no id: it runs only on stack "*"`},
		"a target": {stacks: []v1alpha1.BuildpackStack{{ID: "io.buildpacks.stacks.jammy"}}, targets: []v1alpha1.BuildpackTarget{{OS: "linux", Arch: "amd64"}}},
	} {
		err := CheckCompatibility(with(func(bp *v1alpha1.StoreBuildpack) { bp.Stacks, bp.Targets = tc.stacks, tc.targets }), lifecycle, &idless)
		if got := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
			t.Errorf("stack without an id, %s: error %v, want %q", name, err, tc.wantErr)
		}
	}
}

// metaWithOldChild resolves an order naming only a meta-buildpack whose
// child implements an API the lifecycle lacks: the child must be among the
// buildpacks checked.
func metaWithOldChild(t *testing.T) []v1alpha1.StoreBuildpack {
	t.Helper()
	store := []v1alpha1.StoreBuildpack{
		{ID: "meta", Version: "1", API: "0.10", Order: []v1alpha1.OrderEntry{group(ref("child", "1"))}},
		{ID: "child", Version: "1", API: "0.2"},
	}
	resolved, err := ResolveOrder([]v1alpha1.OrderEntry{group(ref("meta", "1"))}, nil, Pool{Buildpacks: store})
	if err != nil {
		t.Fatal(err)
	}
	return resolved.Buildpacks
}

func TestOptionalAndWithout(t *testing.T) {
	bp := func(id string) v1alpha1.StoreBuildpack { return v1alpha1.StoreBuildpack{ID: id, Version: "1.0.0"} }
	ref := func(id string, optional bool) v1alpha1.BuildpackRef {
		return v1alpha1.BuildpackRef{ID: id, Version: "1.0.0", Optional: optional}
	}
	o := &ResolvedOrder{
		Order: []v1alpha1.OrderEntry{
			{Group: []v1alpha1.BuildpackRef{ref("go", false), ref("x86", true)}},
			{Group: []v1alpha1.BuildpackRef{ref("x86", true)}},
			{Group: []v1alpha1.BuildpackRef{ref("node", true)}},
			{Group: []v1alpha1.BuildpackRef{ref("node", false)}},
		},
		Buildpacks: []v1alpha1.StoreBuildpack{bp("go"), bp("node"), bp("x86")},
	}
	for id, want := range map[string]bool{"go": false, "x86": true, "node": false, "child": false} {
		if got := o.Optional(bp(id)); got != want {
			t.Errorf("Optional(%s) = %v, want %v", id, got, want)
		}
	}
	// A meta-buildpack that needs x86 makes it required.
	withMeta := &ResolvedOrder{Order: o.Order, Buildpacks: append([]v1alpha1.StoreBuildpack{{ID: "meta", Version: "1.0.0",
		Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "x86"}}}}}}, o.Buildpacks...)}
	if withMeta.Optional(bp("x86")) {
		t.Error("Optional(x86) with a meta-buildpack requiring it = true")
	}
	got := o.Without(func(b v1alpha1.StoreBuildpack) bool { return b.ID == "x86" })
	want := &ResolvedOrder{
		Order: []v1alpha1.OrderEntry{
			{Group: []v1alpha1.BuildpackRef{ref("go", false)}},
			{Group: []v1alpha1.BuildpackRef{ref("node", true)}},
			{Group: []v1alpha1.BuildpackRef{ref("node", false)}},
		},
		Buildpacks: []v1alpha1.StoreBuildpack{bp("go"), bp("node")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Without(x86) (-want +got):\n%s", diff)
	}
}

func TestCheckPlatformAPI(t *testing.T) {
	lifecycle := func(supported ...string) Lifecycle {
		return Lifecycle{Version: "0.x", APIs: v1alpha1.LifecycleAPIs{Platform: v1alpha1.APIVersions{Supported: supported}}}
	}
	for _, tc := range []struct {
		lifecycle Lifecycle
		wantErr   string
	}{
		{lifecycle: lifecycle("0.7", "0.15")},
		{lifecycle: lifecycle("0.16")},
		{lifecycle: lifecycle("1.0")},
		{lifecycle: lifecycle("0.7", "0.13", "0.14"), wantErr: "system buildpacks need platform API 0.15 or later; lifecycle 0.x supports 0.7, 0.13, 0.14"},
		{lifecycle: lifecycle("0.9", "0.10"), wantErr: "system buildpacks need platform API 0.15 or later; lifecycle 0.x supports 0.9, 0.10"},
	} {
		err := CheckPlatformAPI(tc.lifecycle, SystemPlatformAPI, "system buildpacks")
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.lifecycle.APIs.Platform.Supported, err)
			}
			continue
		}
		f, ok := failure.As(err)
		if !ok || f.Class != failure.Permanent || f.Reason != ReasonPlatformAPIUnsupported || err.Error() != tc.wantErr {
			t.Errorf("%v: error %v (%+v), want Permanent %s %q", tc.lifecycle.APIs.Platform.Supported, err, f, ReasonPlatformAPIUnsupported, tc.wantErr)
		}
	}
}

func TestResolveExtensions(t *testing.T) {
	store := []v1alpha1.StoreBuildpack{sbp("curl", "1.0.0"), sbp("curl", "1.2.0"), sbp("apt", "0.1.0")}
	got, err := ResolveExtensions([]v1alpha1.OrderEntry{group(ref("curl", "")), group(ref("apt", "0.1.0"), ref("curl", "1.0.0"))}, Pool{Extensions: store})
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.OrderEntry{group(ref("curl", "1.2.0")), group(ref("apt", "0.1.0"), ref("curl", "1.0.0"))}
	if diff := cmp.Diff(want, got.Order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	var used []string
	for _, ext := range got.Buildpacks {
		used = append(used, ext.ID+"@"+ext.Version)
	}
	if diff := cmp.Diff([]string{"apt@0.1.0", "curl@1.0.0", "curl@1.2.0"}, used); diff != "" {
		t.Errorf("extensions (-want +got):\n%s", diff)
	}
	_, err = ResolveExtensions([]v1alpha1.OrderEntry{group(ref("ghost", ""))}, Pool{Extensions: store})
	if f, ok := failure.As(err); !ok || f.Reason != ReasonBuildpackNotFound || err.Error() != "orderExtensions: extension ghost is not in the store" {
		t.Errorf("missing extension: %v", err)
	}
}
