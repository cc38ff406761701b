package v1alpha1

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func validBuilderSpec() BuilderSpec {
	return BuilderSpec{
		Tag:   "registry.example.com/builders/go:latest",
		Stack: StackRef{Kind: "ClusterStack", Name: "jammy"},
		Store: StoreRef{Kind: "ClusterStore", Name: "default"},
		Order: []OrderEntry{{Group: []BuildpackRef{{ID: "paketo-buildpacks/go", Version: "4.1.0"}}}},
	}
}

func builder(mutate func(*NamespacedBuilderSpec)) *Builder {
	b := &Builder{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"},
		Spec:       NamespacedBuilderSpec{BuilderSpec: validBuilderSpec(), ServiceAccountName: "default"},
	}
	if mutate != nil {
		mutate(&b.Spec)
	}
	return b
}

func clusterBuilder(mutate func(*ClusterBuilderSpec)) *ClusterBuilder {
	b := &ClusterBuilder{
		ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec:       ClusterBuilderSpec{BuilderSpec: validBuilderSpec()},
	}
	if mutate != nil {
		mutate(&b.Spec)
	}
	return b
}

func store(images ...string) *ClusterStore {
	s := &ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	for _, image := range images {
		s.Spec.Sources = append(s.Spec.Sources, ImageSource{Image: image})
	}
	return s
}

func stack(mutate func(*ClusterStackSpec)) *ClusterStack {
	s := &ClusterStack{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Spec: ClusterStackSpec{
			ID:         "io.buildpacks.stacks.jammy",
			BuildImage: ImageSource{Image: "registry.example.com/stack/build@" + digest},
			RunImage:   RunImageSource{Image: "registry.example.com/stack/run:1"},
		},
	}
	if mutate != nil {
		mutate(&s.Spec)
	}
	return s
}

func longOrder(n int, id string) []OrderEntry {
	order := make([]OrderEntry, n)
	for i := range order {
		order[i] = OrderEntry{Group: []BuildpackRef{{ID: id}}}
	}
	return order
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		obj  apis.Validatable
		// want lists the "message: paths" lines of the error, in
		// knative's order; empty means valid.
		want []string
	}{
		{name: "valid builder", obj: builder(nil)},
		{name: "valid cluster builder", obj: clusterBuilder(nil)},
		{name: "valid store", obj: store("busybox", "registry.example.com/bp/go@"+digest)},
		{name: "valid stack", obj: stack(nil)},
		{name: "valid lifecycle", obj: &ClusterLifecycle{Spec: ClusterLifecycleSpec{ImageSource: ImageSource{Image: "buildpacksio/lifecycle:0.21.0"}}}},
		{
			name: "builder naming a valid ClusterLifecycle",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Lifecycle = &LifecycleRef{Kind: "ClusterLifecycle", Name: "lifecycle-0-21"}
			}),
		},
		{
			name: "builder with extensions",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.OrderExtensions = []OrderEntry{{Group: []BuildpackRef{{ID: "example/curl"}}}}
			}),
		},
		{
			name: "extension order with an empty group and an empty id",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.OrderExtensions = []OrderEntry{{}, {Group: []BuildpackRef{{ID: ""}}}}
			}),
			want: []string{"missing field(s): spec.orderExtensions[0].group, spec.orderExtensions[1].group[0].id"},
		},
		{
			name: "builder with several sources",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Sources = []SourceRef{{Kind: "ClusterStore", Name: "team"}, {Name: "extra"}}
			}),
		},
		{
			name: "sources of another kind, without a name, and named twice",
			obj: clusterBuilder(func(s *ClusterBuilderSpec) {
				s.Sources = []SourceRef{{Kind: "Store", Name: "team"}, {}, {Name: "team"}, {Name: s.Store.Name}, {Name: "team"}}
			}),
			want: []string{
				"duplicate source: ClusterStore default is store already: spec.sources[3].name",
				"duplicate source: ClusterStore team is sources[2] already: spec.sources[4].name",
				"invalid value: Store: spec.sources[0].kind",
				"missing field(s): spec.sources[1].name",
			},
		},
		{
			name: "builder drawing from a Buildpack of its namespace",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Sources = []SourceRef{{Kind: "Buildpack", Name: "default"}, {Kind: "Buildpack", Name: "team"}}
			}),
		},
		{
			name: "builder drawing from Buildpacks alone, without a store",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Store = StoreRef{}
				s.Sources = []SourceRef{{Kind: "Buildpack", Name: "team"}}
			}),
		},
		{
			name: "builder order entries for execution environments",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Order[0].Group[0].ExecEnv = []string{"production", "*", "dev-1"}
			}),
		},
		{
			name: "builder order entry for an execution environment of no name's shape",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Order[0].Group[0].ExecEnv = []string{"production", "Test"}
			}),
			want: []string{"invalid value: Test: spec.order[0].group[0].execEnv[1]"},
		},
		{
			name: "builder signing in a format of its own",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Signing = &Signing{Format: "cosign"} }),
			want: []string{"invalid value: cosign: spec.signing.format"},
		},
		{
			name: "builder without a store or sources",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Store = StoreRef{} }),
			want: []string{"a builder needs a store or sources: spec.sources, spec.store"},
		},
		{
			name: "cluster builder naming a Buildpack, and a Buildpack twice",
			obj: clusterBuilder(func(s *ClusterBuilderSpec) {
				s.Sources = []SourceRef{{Kind: "Buildpack", Name: "team"}}
			}),
			want: []string{"invalid value: Buildpack: spec.sources[0].kind"},
		},
		{
			name: "a Buildpack named twice",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Sources = []SourceRef{{Kind: "Buildpack", Name: "team"}, {Kind: "Buildpack", Name: "team"}}
			}),
			want: []string{"duplicate source: Buildpack team is sources[0] already: spec.sources[1].name"},
		},
		{name: "valid buildpack", obj: &Buildpack{Spec: BuildpackSpec{Image: "registry.example.com/bp/go:1"}}},
		{
			name: "sources that follow versions",
			obj: &ClusterStore{Spec: ClusterStoreSpec{Sources: []ImageSource{
				{Image: "registry.example.com/bp/go", Policy: &TagPolicy{Semver: SemverPolicy{Range: ">=4 <5"}}},
				{Image: "registry.example.com/bp/go:4.0.0"}, // a fixed tag beside is another source
				{Image: "registry.example.com/bp/node", Policy: &TagPolicy{
					Semver: SemverPolicy{Range: "*"}, FilterTags: &TagFilter{Pattern: `^(?P<v>.*)-jammy$`, Extract: "$v"}}},
			}}},
		},
		{
			name: "followed sources with a tag, twice, and bad policies",
			obj: &ClusterStore{Spec: ClusterStoreSpec{Sources: []ImageSource{
				{Image: "registry.example.com/bp/go:4", Policy: &TagPolicy{Semver: SemverPolicy{Range: "*"}}},
				{Image: "registry.example.com/bp/go@" + digest, Policy: &TagPolicy{Semver: SemverPolicy{Range: "*"}}},
				{Image: "registry.example.com/bp/node", Policy: &TagPolicy{Semver: SemverPolicy{Range: ">=one"}}},
				{Image: "registry.example.com/bp/ruby", Policy: &TagPolicy{Semver: SemverPolicy{Range: "*"}, FilterTags: &TagFilter{Pattern: "(", Extract: "$1"}}},
				{Image: "registry.example.com/bp/java", Policy: &TagPolicy{Semver: SemverPolicy{Range: "*"}}},
				{Image: "registry.example.com/bp/java", Policy: &TagPolicy{Semver: SemverPolicy{Range: "1.x"}}},
			}}},
			want: []string{
				"duplicate source: same image as sources[4]: spec.sources[5].image",
				`invalid value: >=one: spec.sources[2].policy.semver.range`,
				"invalid value: registry.example.com/bp/go:4: spec.sources[0].image",
				"invalid value: registry.example.com/bp/go@" + digest + ": spec.sources[1].image",
				"pattern \"(\": error parsing regexp: missing closing ): `(`: spec.sources[3].policy.filterTags",
			},
		},
		{
			name: "a followed run image's mirrors are repositories",
			obj: stack(func(s *ClusterStackSpec) {
				s.RunImage = RunImageSource{Image: "registry.example.com/stack/run", Policy: &TagPolicy{Semver: SemverPolicy{Range: "~1"}},
					Mirrors: []string{"mirror.example.com/stack/run", "mirror.example.com/stack/run:1"}}
			}),
			want: []string{"invalid value: mirror.example.com/stack/run:1: spec.runImage.mirrors[1]"},
		},
		{
			name: "a followed Buildpack and lifecycle",
			obj:  &Buildpack{Spec: BuildpackSpec{Image: "registry.example.com/bp/go", Policy: &TagPolicy{Semver: SemverPolicy{Range: "^4"}}}},
		},
		{
			name: "buildpack without an image, with a bad ServiceAccount",
			obj:  &Buildpack{Spec: BuildpackSpec{ServiceAccountName: "Not_A_Name"}},
			want: []string{"invalid value: Not_A_Name: spec.serviceAccountName", "missing field(s): spec.image"},
		},
		{
			name: "builder with system buildpacks",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.System = &SystemBuildpacks{Pre: []SystemBuildpackRef{{ID: "a"}}, Post: []SystemBuildpackRef{{ID: "b", Version: "1.0.0"}}}
			}),
		},
		{
			name: "system buildpacks without id, and one id twice",
			obj: clusterBuilder(func(s *ClusterBuilderSpec) {
				s.System = &SystemBuildpacks{Pre: []SystemBuildpackRef{{ID: "a"}, {Version: "1"}}, Post: []SystemBuildpackRef{{ID: "a"}}}
			}),
			want: []string{
				"duplicate system buildpack: same id as pre[0]: spec.system.post[0].id",
				"missing field(s): spec.system.pre[1].id",
			},
		},
		{
			name: "builder flattening groups and the rest",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Flatten = &Flatten{Groups: []FlattenGroup{{Buildpacks: []string{"a", "b@1.0.0"}}}, All: true, Except: []string{"c"}}
			}),
		},
		{
			name: "flatten naming a buildpack badly, twice, and except without all",
			obj: clusterBuilder(func(s *ClusterBuilderSpec) {
				s.Flatten = &Flatten{Groups: []FlattenGroup{{Buildpacks: []string{"a", "@1"}}, {Buildpacks: []string{"b@"}}}, Except: []string{"a"}}
			}),
			want: []string{
				"except leaves buildpacks out of all, which is not set: spec.flatten.except",
				"invalid value: @1: spec.flatten.groups[0].buildpacks[1]",
				"invalid value: b@: spec.flatten.groups[1].buildpacks[0]",
				"named twice: also at groups[0].buildpacks[0]: spec.flatten.except[0]",
			},
		},
		{
			name: "lifecycle without image, with a bad service account",
			obj: &ClusterLifecycle{Spec: ClusterLifecycleSpec{
				ServiceAccountRef: &ServiceAccountRef{Name: "reader"}}},
			want: []string{"missing field(s): spec.image, spec.serviceAccountRef.namespace"},
		},
		{
			name: "lifecycle image that does not parse",
			obj:  &ClusterLifecycle{Spec: ClusterLifecycleSpec{ImageSource: ImageSource{Image: "Life:Cycle:x"}}},
			want: []string{"invalid value: Life:Cycle:x: spec.image"},
		},
		{
			name: "empty builder spec",
			obj:  &Builder{},
			want: []string{
				"a builder needs a store or sources: spec.sources, spec.store",
				"missing field(s): spec.order, spec.stack.name, spec.tag",
			},
		},
		{
			name: "upper-case tag",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Tag = "UPPER/Case" }),
			want: []string{"invalid value: UPPER/Case: spec.tag"},
		},
		{
			name: "digest instead of tag",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Tag = "registry.example.com/b@" + digest }),
			want: []string{"invalid value: registry.example.com/b@" + digest + ": spec.tag"},
		},
		{
			name: "malformed digest in tag",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Tag = "registry.example.com/b@sha256:abc" }),
			want: []string{"invalid value: registry.example.com/b@sha256:abc: spec.tag"},
		},
		{
			name: "wrong kinds and bad names",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Stack = StackRef{Kind: "Stack", Name: "Bad_Name"}
				s.Store = StoreRef{Kind: "ClusterStack", Name: "ok"}
				s.Lifecycle = &LifecycleRef{Kind: "ClusterStack", Name: "Bad_Lifecycle"}
				s.ServiceAccountName = "no spaces allowed"
			}),
			want: []string{
				"invalid value: Bad_Lifecycle: spec.lifecycle.name",
				"invalid value: Bad_Name: spec.stack.name",
				"invalid value: ClusterStack: spec.lifecycle.kind",
				"invalid value: ClusterStack: spec.store.kind",
				"invalid value: Stack: spec.stack.kind",
				"invalid value: no spaces allowed: spec.serviceAccountName",
			},
		},
		{
			name: "empty group and empty id",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Order = []OrderEntry{{}, {Group: []BuildpackRef{{ID: "a"}, {ID: ""}}}}
			}),
			want: []string{"missing field(s): spec.order[0].group, spec.order[1].group[1].id"},
		},
		{
			name: "an id twice in one group, not across groups",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.Order = []OrderEntry{{Group: []BuildpackRef{{ID: "a"}, {ID: "b"}, {ID: "a", Version: "2"}}}, {Group: []BuildpackRef{{ID: "a"}}}}
			}),
			want: []string{"duplicate buildpack in a group: same id as group[0]: spec.order[0].group[2].id"},
		},
		{
			name: "10,000 valid order entries",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Order = longOrder(10000, "a") }),
		},
		{
			name: "10,000 invalid order entries report ten and count the rest",
			obj:  builder(func(s *NamespacedBuilderSpec) { s.Order = longOrder(10000, "") }),
			want: []string{
				"and 9990 more invalid entries: spec.order",
				"missing field(s): " + strings.Join(orderIDPaths(10), ", "),
			},
		},
		{
			name: "reserved and empty label keys",
			obj: builder(func(s *NamespacedBuilderSpec) {
				s.AdditionalLabels = map[string]string{"io.buildpacks.stack.id": "x", "": "y", "team": "z"}
			}),
			want: []string{
				"invalid key name \"\": spec.additionalLabels",
				"invalid key name \"io.buildpacks.stack.id\": spec.additionalLabels",
			},
		},
		{
			name: "cluster builder with half a service account ref",
			obj: clusterBuilder(func(s *ClusterBuilderSpec) {
				s.ServiceAccountRef = &ServiceAccountRef{Name: "builder"}
			}),
			want: []string{"missing field(s): spec.serviceAccountRef.namespace"},
		},
		{
			name: "store without sources",
			obj:  store(),
			want: []string{"missing field(s): spec.sources"},
		},
		{
			name: "store with empty, malformed and duplicate sources",
			obj: store("", "busybox@sha256:xyz", "busybox",
				"index.docker.io/library/busybox:latest", "docker.io/library/busybox"),
			want: []string{
				"duplicate source: same image as sources[2]: spec.sources[3].image, spec.sources[4].image",
				"invalid value: busybox@sha256:xyz: spec.sources[1].image",
				"missing field(s): spec.sources[0].image",
			},
		},
		{
			name: "stack without images",
			obj: stack(func(s *ClusterStackSpec) {
				s.BuildImage.Image = ""
				s.RunImage.Image = "Run:Image"
				s.RunImage.Mirrors = []string{"mirror.example.com/run:1", "Bad:Mirror"}
				s.AdditionalRunImages = []RunImageSource{{Image: "registry.example.com/stack/run-full:1"}, {Mirrors: []string{"Bad:Mirror"}}}
				s.ServiceAccountRef = &ServiceAccountRef{Name: "sa", Namespace: "Not_A_Namespace"}
			}),
			want: []string{
				"invalid value: Bad:Mirror: spec.additionalRunImages[1].mirrors[0], spec.runImage.mirrors[1]",
				"invalid value: Not_A_Namespace: spec.serviceAccountRef.namespace",
				"invalid value: Run:Image: spec.runImage.image",
				"missing field(s): spec.additionalRunImages[1].image, spec.buildImage.image",
			},
		},
		{
			name: "stack without an id (RFC 0096), with more run images",
			obj: stack(func(s *ClusterStackSpec) {
				s.ID = ""
				s.AdditionalRunImages = []RunImageSource{{Image: "registry.example.com/stack/run-full:1", Mirrors: []string{"mirror.example.com/run-full:1"}}}
			}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.obj.Validate(context.Background())
			if diff := cmp.Diff(tc.want, summarize(err)); diff != "" {
				t.Errorf("Validate() (-want +got):\n%s\nfull error: %v", diff, err)
			}
		})
	}
}

func orderIDPaths(n int) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("spec.order[%d].group[0].id", i)
	}
	// knative sorts merged paths as strings.
	sort.Strings(paths)
	return paths
}

// summarize renders a FieldError as "message: paths" lines without the
// details, which come from ggcr and Kubernetes and may change wording.
func summarize(err *apis.FieldError) []string {
	var lines []string
	for _, e := range err.WrappedErrors() {
		lines = append(lines, e.Message+": "+strings.Join(e.Paths, ", "))
	}
	return lines
}

func TestSetDefaults(t *testing.T) {
	b := &Builder{Spec: NamespacedBuilderSpec{BuilderSpec: BuilderSpec{
		Stack: StackRef{Name: "s"}, Store: StoreRef{Name: "s"},
	}}}
	b.SetDefaults(context.Background())
	want := NamespacedBuilderSpec{
		BuilderSpec: BuilderSpec{
			Stack: StackRef{Kind: "ClusterStack", Name: "s"},
			Store: StoreRef{Kind: "ClusterStore", Name: "s"},
		},
		ServiceAccountName: "default",
	}
	if diff := cmp.Diff(want, b.Spec); diff != "" {
		t.Errorf("Builder defaults (-want +got):\n%s", diff)
	}

	cb := &ClusterBuilder{Spec: ClusterBuilderSpec{BuilderSpec: BuilderSpec{Lifecycle: &LifecycleRef{Name: "l"}}}}
	cb.SetDefaults(context.Background())
	// No store: none is made up (the sources alone).
	if cb.Spec.Stack.Kind != "ClusterStack" || cb.Spec.Store != (StoreRef{}) || cb.Spec.ServiceAccountRef != nil ||
		*cb.Spec.Lifecycle != (LifecycleRef{Kind: "ClusterLifecycle", Name: "l"}) {
		t.Errorf("ClusterBuilder defaults: got %+v", cb.Spec)
	}

	// Defaults never overwrite what the user wrote, and are idempotent.
	set := builder(func(s *NamespacedBuilderSpec) { s.ServiceAccountName = "pusher" })
	before := set.DeepCopy()
	set.SetDefaults(context.Background())
	set.SetDefaults(context.Background())
	if diff := cmp.Diff(before, set); diff != "" {
		t.Errorf("defaults changed a complete Builder (-before +after):\n%s", diff)
	}

	// A defaulted object with a valid spec validates.
	if err := b.Validate(context.Background()); err == nil {
		t.Error("Builder without tag and order validated after defaulting")
	}
}
