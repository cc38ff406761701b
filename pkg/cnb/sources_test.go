package cnb

import (
	"slices"
	"strings"
	"testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

func TestMerge(t *testing.T) {
	module := func(id, version, digest string) v1alpha1.StoreBuildpack {
		return v1alpha1.StoreBuildpack{ID: id, Version: version, Digest: digest}
	}
	paketo := Source{Name: "ClusterStore/paketo",
		Buildpacks: []v1alpha1.StoreBuildpack{module("go", "1.0.0", "a"), module("node", "2.0.0", "a")},
		Extensions: []v1alpha1.StoreBuildpack{module("apt", "0.1.0", "a")}}
	team := Source{Name: "ClusterStore/team",
		Buildpacks: []v1alpha1.StoreBuildpack{module("go", "1.0.0", "b"), module("go", "1.1.0", "b"), module("ruby", "3.0.0", "b")},
		// An extension of a buildpack's id and version is another module.
		Extensions: []v1alpha1.StoreBuildpack{module("apt", "0.1.0", "b"), module("go", "1.0.0", "b")}}

	tests := []struct {
		name            string
		sources         []Source
		wantBuildpacks  []string // id@version/digest, in pool order
		wantExtensions  []string
		wantSource      map[string]string // id@version → source
		wantWhereInText string
	}{
		{name: "one source", sources: []Source{paketo},
			wantBuildpacks: []string{"go@1.0.0/a", "node@2.0.0/a"}, wantExtensions: []string{"apt@0.1.0/a"},
			wantSource:      map[string]string{"go@1.0.0": "ClusterStore/paketo", "ruby@3.0.0": ""},
			wantWhereInText: "buildpack php is not in the store"},
		{name: "the first source has what both offer", sources: []Source{paketo, team},
			wantBuildpacks: []string{"go@1.0.0/a", "node@2.0.0/a", "go@1.1.0/b", "ruby@3.0.0/b"},
			wantExtensions: []string{"apt@0.1.0/a", "go@1.0.0/b"},
			wantSource: map[string]string{"go@1.0.0": "ClusterStore/paketo", "go@1.1.0": "ClusterStore/team",
				"ruby@3.0.0": "ClusterStore/team", "node@2.0.0": "ClusterStore/paketo"},
			wantWhereInText: "buildpack php is not in any of ClusterStore/paketo, ClusterStore/team"},
		{name: "in the other order", sources: []Source{team, paketo},
			wantBuildpacks:  []string{"go@1.0.0/b", "go@1.1.0/b", "ruby@3.0.0/b", "node@2.0.0/a"},
			wantExtensions:  []string{"apt@0.1.0/b", "go@1.0.0/b"},
			wantSource:      map[string]string{"go@1.0.0": "ClusterStore/team", "node@2.0.0": "ClusterStore/paketo"},
			wantWhereInText: "buildpack php is not in any of ClusterStore/team, ClusterStore/paketo"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := Merge(tc.sources...)
			if got := keys(pool.Buildpacks); !slices.Equal(got, tc.wantBuildpacks) {
				t.Errorf("buildpacks %v, want %v", got, tc.wantBuildpacks)
			}
			if got := keys(pool.Extensions); !slices.Equal(got, tc.wantExtensions) {
				t.Errorf("extensions %v, want %v", got, tc.wantExtensions)
			}
			for key, want := range tc.wantSource {
				id, version, _ := strings.Cut(key, "@")
				if got := pool.SourceOf(v1alpha1.StoreBuildpack{ID: id, Version: version}); got != want {
					t.Errorf("SourceOf(%s) = %q, want %q", key, got, want)
				}
			}
			_, err := ResolveOrder([]v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "php"}}}}, nil, pool)
			if got, ok := failure.As(err); !ok || got.Reason != ReasonBuildpackNotFound || err.Error() != tc.wantWhereInText {
				t.Errorf("resolving a missing buildpack: %v, want %s: %q", err, ReasonBuildpackNotFound, tc.wantWhereInText)
			}
		})
	}
}

func keys(modules []v1alpha1.StoreBuildpack) []string {
	var out []string
	for _, m := range modules {
		out = append(out, m.ID+"@"+m.Version+"/"+m.Digest)
	}
	return out
}
