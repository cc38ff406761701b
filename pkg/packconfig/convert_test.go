package packconfig

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

func TestLocate(t *testing.T) {
	local := func(p string) bool { return p == "my-buildpack" || p == "example/local" }
	tests := []struct {
		uri       string
		wantImage string
		wantWhy   string // a substring; "" when an image
	}{
		{uri: "docker://docker.io/paketobuildpacks/java:22.1.0", wantImage: "docker.io/paketobuildpacks/java:22.1.0"},
		{uri: "docker:/docker.io/paketobuildpacks/java:22.1.0", wantImage: "docker.io/paketobuildpacks/java:22.1.0"},
		{uri: "docker://heroku/buildpack-go@sha256:3f30c252f9c6708763ed3f8206220ad1e29b88342e7d12e32cd96f33c880140e",
			wantImage: "heroku/buildpack-go@sha256:3f30c252f9c6708763ed3f8206220ad1e29b88342e7d12e32cd96f33c880140e"},
		{uri: "gcr.io/paketo-buildpacks/go:4.11.0", wantImage: "gcr.io/paketo-buildpacks/go:4.11.0"},
		{uri: "paketobuildpacks/go:4.11.0", wantImage: "paketobuildpacks/go:4.11.0"},
		{uri: "busybox", wantImage: "busybox"},
		{uri: "docker://Not/An:Image:Ref", wantWhy: "is not an image reference"},
		{uri: "urn:cnb:registry:paketo-buildpacks/go@4.11.0", wantWhy: "is a buildpack registry id"},
		{uri: "urn:cnb:builder:paketo-buildpacks/go", wantWhy: "names a buildpack of the builder"},
		{uri: "from=builder", wantWhy: "names a buildpack of the builder"},
		{uri: "from=builder:paketo-buildpacks/go", wantWhy: "names a buildpack of the builder"},
		{uri: "https://example.com/go.tgz", wantWhy: "is an archive to download (https)"},
		{uri: "HTTP://example.com/go.tgz", wantWhy: "is an archive to download (http)"},
		{uri: "file:///home/me/go.cnb", wantWhy: "is a file on the machine that runs pack"},
		{uri: "s3://bucket/go.tgz", wantWhy: "is a s3 URI"},
		{uri: "./buildpacks/go", wantWhy: "is a path"},
		{uri: "../go", wantWhy: "is a path"},
		{uri: "/abs/go", wantWhy: "is a path"},
		{uri: "~/go", wantWhy: "is a path"},
		{uri: "go.cnb", wantWhy: "is a path"},
		{uri: "dist/go.tar.gz", wantWhy: "is a path"},
		{uri: `C:\buildpacks\go`, wantWhy: "is a path"},
		{uri: "my-buildpack", wantWhy: "is a path"},  // exists: pack takes the path first
		{uri: "example/local", wantWhy: "is a path"}, // and before a registry id
		{uri: "paketo-buildpacks/go", wantWhy: "is read by pack as a buildpack registry id"},
		{uri: "paketo-buildpacks/go@4.11.0", wantWhy: "is read by pack as a buildpack registry id"},
		{uri: "localhost:5000/go", wantWhy: "is read by pack as a buildpack registry id"},
		{uri: "Upper Case", wantWhy: "is neither an image reference"},
	}
	for _, tt := range tests {
		image, why := locate(tt.uri, local)
		if image != tt.wantImage || (tt.wantWhy == "") != (why == "") || !strings.Contains(why, tt.wantWhy) {
			t.Errorf("locate(%q) = %q, %q; want %q and a reason containing %q", tt.uri, image, why, tt.wantImage, tt.wantWhy)
		}
		if strings.Contains(why, "\n") {
			t.Errorf("locate(%q): reason on several lines: %q", tt.uri, why)
		}
	}
}

// A small builder.toml, completed by each test.
const (
	stackless = `
[build]
image = "registry.example.com/build:1"
[[run.images]]
image = "registry.example.com/run:1"
`
	withStack = `
[stack]
id = "io.buildpacks.stacks.jammy"
build-image = "registry.example.com/build:1"
run-image = "registry.example.com/run:1"
`
	oneBuildpack = `
[[buildpacks]]
uri = "docker://registry.example.com/bp/go:1"
[[order]]
[[order.group]]
id = "example/go"
`
	lifecycleVersion = `
[lifecycle]
version = "0.21.0"
`
)

func TestConvert(t *testing.T) {
	cluster := Options{Tag: "registry.example.com/builders/base:1"}
	tests := []struct {
		name     string
		in       string
		opts     Options
		kinds    []string // of the output, in order
		warnings []string
		check    func(t *testing.T, objects []any)
	}{{
		name:  "a stack in [stack] only, with mirrors (before RFC 0096)",
		in:    withStack + "run-image-mirrors = [\"mirror.example.com/run:1\"]\n" + oneBuildpack + lifecycleVersion,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		check: func(t *testing.T, objects []any) {
			stack := objects[1].(*v1alpha1.ClusterStack)
			want := v1alpha1.ClusterStackSpec{ID: "io.buildpacks.stacks.jammy", BuildImage: v1alpha1.ImageSource{Image: "registry.example.com/build:1"},
				RunImage: v1alpha1.RunImageSource{Image: "registry.example.com/run:1", Mirrors: []string{"mirror.example.com/run:1"}}}
			if diff := cmp.Diff(want, stack.Spec); diff != "" {
				t.Errorf("stack (-want +got):\n%s", diff)
			}
			b := objects[3].(*v1alpha1.ClusterBuilder)
			if b.Name != "base" || b.Spec.Stack.Name != "base" || b.Spec.Store.Name != "base" || b.Spec.Lifecycle.Name != "lifecycle-0.21.0" ||
				b.Spec.ServiceAccountRef != nil || b.Spec.Tag != cluster.Tag {
				t.Errorf("builder: %+v", b)
			}
		},
	}, {
		name: "an order entry's exec-env (RFC 0134), what the API would refuse left out",
		in: withStack + `
[[buildpacks]]
uri = "docker://registry.example.com/bp/go:1"
[[order]]
[[order.group]]
id = "example/go"
exec-env = ["production", "Test", "production", "*"]
` + lifecycleVersion,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{
			`warning: builder.toml: order[0].group[0].exec-env[1]: "Test" is not an execution environment's name (lower-case letters, digits and dashes, or *); dropped`,
			"warning: builder.toml: order[0].group[0].exec-env[2]: production is listed already; dropped",
		},
		check: func(t *testing.T, objects []any) {
			b := objects[3].(*v1alpha1.ClusterBuilder)
			if got := b.Spec.Order[0].Group[0].ExecEnv; !slices.Equal(got, []string{"production", "*"}) {
				t.Errorf("exec-env %q", got)
			}
		},
	}, {
		name:  "pack's --flatten groups, and a flatten key pack would refuse",
		in:    "flatten = [\"example/go\"]\n" + withStack + oneBuildpack + lifecycleVersion,
		opts:  Options{Tag: cluster.Tag, Flatten: []string{"example/go@1.0.0, example/node@2.0.0", "example/procfile@3.0.0"}},
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{"warning: builder.toml: flatten: pack has no flatten key in builder.toml (it refuses a file with one): " +
			"give its groups as pack's --flatten instead; dropped"},
		check: func(t *testing.T, objects []any) {
			want := &v1alpha1.Flatten{Groups: []v1alpha1.FlattenGroup{{Buildpacks: []string{"example/go@1.0.0", "example/node@2.0.0"}},
				{Buildpacks: []string{"example/procfile@3.0.0"}}}}
			if diff := cmp.Diff(want, objects[3].(*v1alpha1.ClusterBuilder).Spec.Flatten); diff != "" {
				t.Errorf("flatten (-want +got):\n%s", diff)
			}
		},
	}, {
		name:  "no stack id (RFC 0096): a ClusterStack without one",
		in:    stackless + oneBuildpack + lifecycleVersion,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		check: func(t *testing.T, objects []any) {
			if id := objects[1].(*v1alpha1.ClusterStack).Spec.ID; id != "" {
				t.Errorf("stack id %q, want none", id)
			}
		},
	}, {
		name:  "no stack id, one given",
		in:    stackless + oneBuildpack + lifecycleVersion,
		opts:  Options{Tag: cluster.Tag, StackID: "io.buildpacks.stacks.noble"},
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		check: func(t *testing.T, objects []any) {
			if id := objects[1].(*v1alpha1.ClusterStack).Spec.ID; id != "io.buildpacks.stacks.noble" {
				t.Errorf("stack id %q", id)
			}
		},
	}, {
		name:     "a stack id, another given",
		in:       withStack + oneBuildpack + lifecycleVersion,
		opts:     Options{Tag: cluster.Tag, StackID: "io.buildpacks.stacks.noble"},
		kinds:    []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: stack.id: "io.buildpacks.stacks.jammy" is taken; the stack id "io.buildpacks.stacks.noble" given is for a builder.toml without one`},
	}, {
		name:     "no build image, no run image",
		in:       "[stack]\nid = \"x\"\n" + oneBuildpack + lifecycleVersion,
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{"omitted: builder.toml: build.image: missing, and no stack.build-image: ClusterStack base not written (pack refuses the file too)"},
	}, {
		name:     "no run image",
		in:       "[stack]\nid = \"x\"\n[build]\nimage = \"build:1\"\n" + oneBuildpack + lifecycleVersion,
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{"omitted: builder.toml: run.images: missing, and no stack.run-image: ClusterStack base not written (pack refuses the file too)"},
	}, {
		name:  "an image that does not parse: the ClusterStack is refused",
		in:    "[stack]\nid = \"x\"\n[build]\nimage = \"Build:1\"\n[[run.images]]\nimage = \"run:1\"\n" + oneBuildpack + lifecycleVersion,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{"omitted: builder.toml: ClusterStack base not written: buildsmith would refuse it: " +
			"invalid value: Build:1: spec.buildImage.image; could not parse reference: Build:1"},
	}, {
		name: "run images beyond the first",
		in: withStack + "[[run.images]]\nimage = \"registry.example.com/run:1\"\n[[run.images]]\nimage = \"registry.example.com/run-full:1\"\nmirrors = [\"m/run-full:1\"]\n" +
			oneBuildpack + lifecycleVersion,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		check: func(t *testing.T, objects []any) {
			want := []v1alpha1.RunImageSource{{Image: "registry.example.com/run-full:1", Mirrors: []string{"m/run-full:1"}}}
			if diff := cmp.Diff(want, objects[1].(*v1alpha1.ClusterStack).Spec.AdditionalRunImages); diff != "" {
				t.Errorf("additionalRunImages (-want +got):\n%s", diff)
			}
		},
	}, {
		name:  "no [lifecycle]: buildsmith's default",
		in:    withStack + oneBuildpack,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
		warnings: []string{"warning: builder.toml: lifecycle: none: pack puts in the lifecycle its own release defaults to; the builder gets buildsmith's default lifecycle, " +
			"the image the lifecycle-image ConfigMap in the controller's namespace names"},
		check: func(t *testing.T, objects []any) {
			if l := objects[2].(*v1alpha1.ClusterBuilder).Spec.Lifecycle; l != nil {
				t.Errorf("lifecycle %+v", l)
			}
		},
	}, {
		name:  "a lifecycle version as pack reads it",
		in:    withStack + oneBuildpack + "[lifecycle]\nversion = \"v0.20\"\n",
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		check: func(t *testing.T, objects []any) {
			l := objects[2].(*v1alpha1.ClusterLifecycle)
			if l.Name != "lifecycle-0.20.0" || l.Spec.Image != "buildpacksio/lifecycle:0.20.0" {
				t.Errorf("lifecycle %s: %s", l.Name, l.Spec.Image)
			}
		},
	}, {
		name:     "a prerelease with build metadata",
		in:       withStack + oneBuildpack + "[lifecycle]\nversion = \"0.22.0-rc.1+build.5\"\n",
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: lifecycle.version: "0.22.0-rc.1+build.5": build metadata +build.5 dropped: an image tag cannot hold a +`},
		check: func(t *testing.T, objects []any) {
			l := objects[2].(*v1alpha1.ClusterLifecycle)
			if l.Name != "lifecycle-0.22.0-rc.1" || l.Spec.Image != "buildpacksio/lifecycle:0.22.0-rc.1" {
				t.Errorf("lifecycle %s: %s", l.Name, l.Spec.Image)
			}
		},
	}, {
		name:  "a lifecycle version that is not one",
		in:    withStack + oneBuildpack + "[lifecycle]\nversion = \"latest\"\n",
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: lifecycle.version: "latest" is not a semantic version (invalid semantic version): dropped, ` +
			`so the builder gets buildsmith's default lifecycle, the image the lifecycle-image ConfigMap in the controller's namespace names`},
	}, {
		name:     "a lifecycle version and uri",
		in:       withStack + oneBuildpack + "[lifecycle]\nversion = \"0.21.0\"\nuri = \"lifecycle.tgz\"\n",
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: lifecycle.uri: "lifecycle.tgz": pack refuses both a version and a uri; the version is taken; dropped`},
	}, {
		name:  "a lifecycle archive",
		in:    withStack + oneBuildpack + "[lifecycle]\nuri = \"file:///home/me/lifecycle.tgz\"\n",
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: lifecycle.uri: "file:///home/me/lifecycle.tgz": a lifecycle archive; buildsmith takes the lifecycle from an image ` +
			`(buildpacksio/lifecycle:VERSION, or one made of that archive): dropped, so the builder gets buildsmith's default lifecycle, ` +
			`the image the lifecycle-image ConfigMap in the controller's namespace names`},
	}, {
		name:  "no buildpack is an image: no ClusterStore",
		in:    withStack + lifecycleVersion + "[[buildpacks]]\nuri = \"https://example.com/go.tgz\"\n[[order]]\n[[order.group]]\nid = \"example/go\"\n",
		opts:  cluster,
		kinds: []string{"ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{
			`warning: builder.toml: buildpacks[0].uri: "https://example.com/go.tgz" is an archive to download (https), not an image: ` + howToPublish,
			"omitted: builder.toml: buildpacks: no buildpack or extension is an image: ClusterStore base not written; make it of your buildpackages' images",
		},
	}, {
		name:     "no order: no builder",
		in:       withStack + lifecycleVersion + "[[buildpacks]]\nuri = \"docker://registry.example.com/bp/go:1\"\n",
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterStack", "ClusterLifecycle"},
		warnings: []string{"omitted: builder.toml: order: no group: ClusterBuilder base not written (a builder needs an order)"},
	}, {
		name: "inline tables, and versions as pack infers them",
		in: `
buildpacks = [{id = "example/go", version = "1.0.0", uri = "docker://registry.example.com/bp/go:1"},
              {id = "example/node", version = "2.0.0", uri = "docker://registry.example.com/bp/node:2"},
              {id = "example/node", version = "3.0.0", uri = "docker://registry.example.com/bp/node:3"}]
order = [{group = [{id = "example/go"}, {id = "example/node", optional = true}]}]
` + withStack + lifecycleVersion,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{
			"warning: builder.toml: order[0].group[1]: no version, and the buildpackages are of several versions of example/node (2.0.0, 3.0.0), " +
				"which pack refuses: the builder takes the highest the ClusterStore has",
			"warning: builder.toml: buildpacks[1]: pack checks that registry.example.com/bp/node:2 holds example/node@2.0.0; " +
				"a ClusterStore takes whatever its images hold, and as no order entry names example/node@2.0.0, nothing checks it; dropped",
			"warning: builder.toml: buildpacks[2]: pack checks that registry.example.com/bp/node:3 holds example/node@3.0.0; " +
				"a ClusterStore takes whatever its images hold, and as no order entry names example/node@3.0.0, nothing checks it; dropped",
		},
		check: func(t *testing.T, objects []any) {
			want := []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/go", Version: "1.0.0"}, {ID: "example/node", Optional: true}}}}
			if diff := cmp.Diff(want, objects[3].(*v1alpha1.ClusterBuilder).Spec.Order); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			if n := len(objects[0].(*v1alpha1.ClusterStore).Spec.Sources); n != 3 {
				t.Errorf("%d sources", n)
			}
		},
	}, {
		name:  "a Builder in a namespace, with its ServiceAccount",
		in:    withStack + oneBuildpack + lifecycleVersion,
		opts:  Options{Tag: "registry.example.com/team-a/my_builder:1", Namespace: "team-a", ServiceAccount: "pusher"},
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "Builder"},
		check: func(t *testing.T, objects []any) {
			b := objects[3].(*v1alpha1.Builder)
			if b.Name != "my-builder" || b.Namespace != "team-a" || b.Spec.ServiceAccountName != "pusher" ||
				b.Spec.Store.Name != "team-a-my-builder" || b.Spec.Stack.Name != "team-a-my-builder" {
				t.Errorf("builder %s/%s: %+v", b.Namespace, b.Name, b.Spec)
			}
			if s := objects[0].(*v1alpha1.ClusterStore); s.Name != "team-a-my-builder" || s.Namespace != "" {
				t.Errorf("store %s/%s", s.Namespace, s.Name)
			}
		},
	}, {
		name:  "a ClusterBuilder with a ServiceAccount, named",
		in:    withStack + oneBuildpack + lifecycleVersion,
		opts:  Options{Tag: cluster.Tag, Name: "jammy", ServiceAccount: "build-system/pusher"},
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		check: func(t *testing.T, objects []any) {
			b := objects[3].(*v1alpha1.ClusterBuilder)
			if b.Name != "jammy" || b.Spec.ServiceAccountRef == nil || *b.Spec.ServiceAccountRef != (v1alpha1.ServiceAccountRef{Name: "pusher", Namespace: "build-system"}) {
				t.Errorf("builder %s: %+v", b.Name, b.Spec.ServiceAccountRef)
			}
		},
	}, {
		name: "env: as pack writes it, and what the lifecycle would misread",
		in: withStack + oneBuildpack + lifecycleVersion + `
[[build.env]]
name = "JAVA_TOOL_OPTIONS"
value = "-Xss1m"
suffix = "prepend"
delim = " "
[[build.env]]
name = "JAVA_TOOL_OPTIONS"
value = "-Xss2m"
suffix = "prepend"
[[build.env]]
name = "A.B"
value = "x"
[[build.env]]
name = "SUFFIXED"
suffix = "sometimes"
`,
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{
			`warning: builder.toml: build.env[1]: env JAVA_TOOL_OPTIONS with suffix "prepend" is given twice; dropped`,
			`warning: builder.toml: build.env[2]: env name "A.B" contains a dot, which the lifecycle would read as a suffix; dropped`,
			`warning: builder.toml: build.env[3]: env SUFFIXED has suffix "sometimes"; it must be one of default, override, append, prepend or empty; dropped`,
		},
		check: func(t *testing.T, objects []any) {
			want := []v1alpha1.BuildEnv{{Name: "JAVA_TOOL_OPTIONS", Value: "-Xss1m", Suffix: "prepend", Delim: " "}}
			if diff := cmp.Diff(want, objects[3].(*v1alpha1.ClusterBuilder).Spec.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "targets: the same twice",
		in: withStack + oneBuildpack + lifecycleVersion +
			"[[targets]]\nos = \"linux\"\narch = \"arm\"\nvariant = \"v7\"\n[[targets.distributions]]\nname = \"ubuntu\"\nversions = [\"22.04\"]\n" +
			"[[targets]]\nos = \"linux\"\narch = \"arm\"\nvariant = \"v7\"\n",
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{"warning: builder.toml: targets[1]: the same platform as an earlier target; dropped"},
		check: func(t *testing.T, objects []any) {
			want := []v1alpha1.Target{{Platform: v1alpha1.Platform{OS: "linux", Arch: "arm", Variant: "v7"},
				Distributions: []v1alpha1.TargetDistribution{{Name: "ubuntu", Versions: []string{"22.04"}}}}}
			if diff := cmp.Diff(want, objects[3].(*v1alpha1.ClusterBuilder).Spec.Targets); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		},
	}, {
		name:  "a naked path that exists",
		in:    withStack + lifecycleVersion + "[[buildpacks]]\nuri = \"my-buildpack\"\n[[buildpacks]]\nuri = \"docker://registry.example.com/bp/go:1\"\n[[order]]\n[[order.group]]\nid = \"example/go\"\n",
		opts:  Options{Tag: cluster.Tag, IsLocalPath: func(p string) bool { return p == "my-buildpack" }},
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: buildpacks[0].uri: "my-buildpack" is a path on the machine that runs pack ` +
			`(a directory, an archive or a .cnb file), not an image: ` + howToPublish},
	}, {
		name:     "warnings stay on one line",
		in:       "description = \"two\\nlines\"\n" + withStack + oneBuildpack + lifecycleVersion + "[[buildpacks]]\nuri = \"https://example.com/a\\nb.tgz\"\n",
		opts:     cluster,
		kinds:    []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{`warning: builder.toml: buildpacks[1].uri: "https://example.com/a\nb.tgz" is an archive to download (https), not an image: ` + howToPublish},
		check: func(t *testing.T, objects []any) {
			if d := objects[3].(*v1alpha1.ClusterBuilder).Spec.Description; d != "two\nlines" {
				t.Errorf("description %q", d)
			}
		},
	}, {
		name:  "keys pack does not know",
		in:    withStack + oneBuildpack + lifecycleVersion + "[stack.mixins]\nx = 1\n[[order.group]]\nid = \"example/node\"\nname = \"Node\"\n",
		opts:  cluster,
		kinds: []string{"ClusterStore", "ClusterStack", "ClusterLifecycle", "ClusterBuilder"},
		warnings: []string{
			"warning: builder.toml: order[0].group[1].name: buildsmith has no such field; dropped",
			"warning: builder.toml: stack.mixins: buildsmith has no such field; dropped",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, warnings, err := Convert(strings.NewReader(tt.in), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range warnings {
				got = append(got, warningLine(w))
				if strings.Contains(w.String(), "\n") {
					t.Errorf("a warning on several lines: %q", w.String())
				}
			}
			if diff := cmp.Diff(tt.warnings, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			objects := checkValid(t, out)
			var kinds []string
			for _, obj := range objects {
				switch obj.(type) {
				case *v1alpha1.ClusterStore:
					kinds = append(kinds, "ClusterStore")
				case *v1alpha1.ClusterStack:
					kinds = append(kinds, "ClusterStack")
				case *v1alpha1.ClusterLifecycle:
					kinds = append(kinds, "ClusterLifecycle")
				case *v1alpha1.Builder:
					kinds = append(kinds, "Builder")
				case *v1alpha1.ClusterBuilder:
					kinds = append(kinds, "ClusterBuilder")
				}
			}
			if diff := cmp.Diff(tt.kinds, kinds); diff != "" {
				t.Fatalf("kinds (-want +got):\n%s\noutput:\n%s", diff, out)
			}
			if tt.check != nil {
				tt.check(t, objects)
			}
		})
	}
}

func TestConvertErrors(t *testing.T) {
	valid := withStack + oneBuildpack + lifecycleVersion
	tests := []struct {
		name, in string
		opts     Options
		wantErr  string
	}{{
		name:    "not TOML",
		in:      "[stack\nid = 1\n",
		opts:    Options{Tag: "registry.example.com/b:1"},
		wantErr: "builder.toml: not a builder.toml: toml: line 2: ",
	}, {
		name:    "a --flatten entry without a version, as pack refuses it",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", Flatten: []string{"example/go@1.0.0,example/node"}},
		wantErr: `--flatten "example/go@1.0.0,example/node": "example/node" is not <buildpack-id>@<buildpack-version>`,
	}, {
		name:    "a buildpack in two --flatten groups",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", Flatten: []string{"example/go@1.0.0", "example/node@2.0.0,example/go@1.0.0"}},
		wantErr: `--flatten "example/node@2.0.0,example/go@1.0.0": example/go@1.0.0 is in --flatten "example/go@1.0.0" already`,
	}, {
		name:    "more --flatten groups than the API takes",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", Flatten: strings.Split(strings.Repeat("a@1;", 65)[:4*65-1], ";")},
		wantErr: "--flatten: 65 groups, more than buildsmith's 64",
	}, {
		name:    "a string for a boolean",
		in:      withStack + lifecycleVersion + oneBuildpack + "optional = \"yes\"\n",
		opts:    Options{Tag: "registry.example.com/b:1", Source: "my/builder.toml"},
		wantErr: `my/builder.toml: order[0].group[0].optional: expected true or false, found the string "yes" (pack refuses the file too)`,
	}, {
		name: "every value of the wrong type",
		in:   "description = 1\n[stack]\nid = true\nrun-image-mirrors = \"m\"\n[[buildpacks]]\nuri = [\"a\"]\n[[targets]]\nos = \"linux\"\ndistributions = \"ubuntu\"\n",
		opts: Options{Tag: "registry.example.com/b:1"},
		wantErr: "builder.toml: description: expected a string, found 1 (pack refuses the file too); " +
			"buildpacks[0].uri: expected a string, found a list (pack refuses the file too); " +
			"stack.id: expected a string, found true (pack refuses the file too); " +
			`stack.run-image-mirrors: expected a list of strings, found the string "m" (pack refuses the file too); ` +
			`targets[0].distributions: expected an array of tables, found the string "ubuntu" (pack refuses the file too)`,
	}, {
		name:    "no tag",
		in:      valid,
		wantErr: "no tag: give the image the builder is pushed to",
	}, {
		name:    "a digest for a tag",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b@sha256:" + strings.Repeat("a", 64)},
		wantErr: `tag "registry.example.com/b@sha256:`,
	}, {
		name:    "a name that is not one",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", Name: "My Builder"},
		wantErr: `name "My Builder": `,
	}, {
		name:    "a namespace that is not one",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", Namespace: "team.a"},
		wantErr: `namespace "team.a": `,
	}, {
		name:    "a ClusterBuilder's ServiceAccount without a namespace",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", ServiceAccount: "pusher"},
		wantErr: `service account "pusher": a ClusterBuilder's is NAMESPACE/NAME`,
	}, {
		name:    "a Builder's ServiceAccount with a namespace",
		in:      valid,
		opts:    Options{Tag: "registry.example.com/b:1", Namespace: "apps", ServiceAccount: "build/pusher"},
		wantErr: `service account "build/pusher": a Builder's is a name in its namespace`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, warnings, err := Convert(strings.NewReader(tt.in), tt.opts)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || out != nil || warnings != nil {
				t.Errorf("Convert: %v, %d bytes, %d warnings; want an error starting %q and nothing else", err, len(out), len(warnings), tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error on several lines: %q", err)
			}
		})
	}
}

func TestDNSName(t *testing.T) {
	for in, want := range map[string]string{
		"builder-jammy-base":       "builder-jammy-base",
		"My_Builder":               "my-builder",
		"-x-":                      "x",
		"lifecycle-0.21.0+build.5": "lifecycle-0.21.0-build.5",
		strings.Repeat("a", 300):   strings.Repeat("a", 253),
	} {
		if got := dnsName(in); got != want {
			t.Errorf("dnsName(%q) = %q, want %q", in, got, want)
		}
	}
}
