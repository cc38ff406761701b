package kpack

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// The inputs have the shapes of kpack's samples and docs: experimental
// (kpack 0.0.x) and kpack.io/v1alpha2 (kpack 0.17).

const experimentalStore = `apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: Store
metadata:
  name: sample-store
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/java
  - image: gcr.io/paketo-buildpacks/gradle
`

const experimentalStack = `apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: Stack
metadata:
  name: bionic-stack
spec:
  id: "io.buildpacks.stacks.bionic"
  buildImage:
    image: "gcr.io/paketo-buildpacks/build:base-cnb"
  runImage:
    image: "gcr.io/paketo-buildpacks/run:base-cnb"
`

const experimentalBuilder = `apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: CustomBuilder
metadata:
  name: my-custom-builder
  namespace: default
spec:
  serviceAccount: default
  tag: sample/custom-builder
  stack: bionic-stack
  store: sample-store
  order:
  - group:
    - id: paketo-buildpacks/java
    - id: paketo-buildpacks/gradle
      optional: true
`

const experimentalClusterBuilder = `apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: CustomClusterBuilder
metadata:
  name: my-cluster-builder
spec:
  tag: buildingbuilder/custom-builder
  stack: bionic-stack
  store: sample-store
  serviceAccountRef:
    name: default
    namespace: default
  order:
  - group:
    - id: paketo-buildpacks/java
`

const clusterStore = `apiVersion: kpack.io/v1alpha2
kind: ClusterStore
metadata:
  name: sample-cluster-store
spec:
  serviceAccountRef:
    name: sample-sa
    namespace: sample-namespace
  sources:
  - image: gcr.io/cf-build-service-public/node-engine-buildpackage
  - image: index.docker.io/paketobuildpacks/builder-jammy-base
`

const clusterStack = `apiVersion: kpack.io/v1alpha2
kind: ClusterStack
metadata:
  name: base
spec:
  id: "io.buildpacks.stacks.jammy"
  buildImage:
    image: "paketobuildpacks/build-jammy-base"
  runImage:
    image: "paketobuildpacks/run-jammy-base"
  serviceAccountRef:
    name: private
    namespace: private
`

// javaBuildpack is a Buildpack as kubectl get -o yaml shows it: its status
// lists a meta-buildpack and its child.
const javaBuildpack = `apiVersion: kpack.io/v1alpha2
kind: Buildpack
metadata:
  name: java
  namespace: apps
  uid: 0b5e0c5e-1d7c-4c8e-9f1a-2a3b4c5d6e7f
  resourceVersion: "4711"
spec:
  serviceAccountName: default
  image: gcr.io/paketo-buildpacks/java:8.9.0
status:
  buildpacks:
  - id: paketo-buildpacks/java
    version: 8.9.0
    order:
    - group:
      - id: paketo-buildpacks/jvm
  - id: paketo-buildpacks/jvm
    version: 1.0.0
`

const nodeClusterBuildpack = `apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata:
  name: nodejs
spec:
  image: gcr.io/paketo-buildpacks/nodejs:1.2.3
`

// defaultStoreNode2 is a ClusterStore whose status lists nodejs 2.0.0.
const defaultStoreNode2 = `apiVersion: kpack.io/v1alpha2
kind: ClusterStore
metadata: {name: default}
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/nodejs:2.0.0
status:
  buildpacks:
  - {id: paketo-buildpacks/nodejs, version: 2.0.0}
`

// nodeClusterBuildpack1 is a ClusterBuildpack whose status lists nodejs
// 1.0.0, the root, and two versions of a child.
const nodeClusterBuildpack1 = `apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata: {name: nodejs-1}
spec:
  image: gcr.io/paketo-buildpacks/nodejs:1.0.0
status:
  buildpacks:
  - id: paketo-buildpacks/nodejs
    version: 1.0.0
    order:
    - group:
      - {id: paketo-buildpacks/node-engine}
  - {id: paketo-buildpacks/node-engine, version: 1.9.0}
  - {id: paketo-buildpacks/node-engine, version: 1.10.0}
`

// nodeBuildpack is a Buildpack whose status lists nodejs of a version.
func nodeBuildpack(name, namespace, version string) string {
	return fmt.Sprintf(`apiVersion: kpack.io/v1alpha2
kind: Buildpack
metadata: {name: %s, namespace: %s}
spec:
  image: gcr.io/paketo-buildpacks/nodejs:%s
status:
  buildpacks:
  - {id: paketo-buildpacks/nodejs, version: %s}
`, name, namespace, version, version)
}

// want* are the buildsmith objects of the inputs above.

const wantExperimentalStore = `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: sample-store}
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/java
  - image: gcr.io/paketo-buildpacks/gradle
`

const wantExperimentalStack = `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStack
metadata: {name: bionic-stack}
spec:
  id: io.buildpacks.stacks.bionic
  buildImage: {image: "gcr.io/paketo-buildpacks/build:base-cnb"}
  runImage: {image: "gcr.io/paketo-buildpacks/run:base-cnb"}
`

const wantClusterStore = `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: sample-cluster-store}
spec:
  serviceAccountRef: {name: sample-sa, namespace: sample-namespace}
  sources:
  - image: gcr.io/cf-build-service-public/node-engine-buildpackage
  - image: index.docker.io/paketobuildpacks/builder-jammy-base
`

// wantJavaBuildpack is javaBuildpack converted: the same namespace, name,
// image and ServiceAccount; no server-set metadata, no status.
const wantJavaBuildpack = `apiVersion: buildsmith.dev/v1alpha1
kind: Buildpack
metadata: {name: java, namespace: apps}
spec:
  image: gcr.io/paketo-buildpacks/java:8.9.0
  serviceAccountName: default
`

// wantNodeStore is nodeClusterBuildpack converted: a ClusterStore of its
// one image.
const wantNodeStore = `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: nodejs-clusterbuildpack}
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/nodejs:1.2.3
`

const wantDefaultStoreNode2 = `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: default}
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/nodejs:2.0.0
`

const wantNodeStore1 = `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: nodejs-1-clusterbuildpack}
spec:
  sources:
  - image: gcr.io/paketo-buildpacks/nodejs:1.0.0
`

func wantNodeBuildpack(name, namespace, version string) string {
	return fmt.Sprintf(`apiVersion: buildsmith.dev/v1alpha1
kind: Buildpack
metadata: {name: %s, namespace: %s}
spec:
  image: gcr.io/paketo-buildpacks/nodejs:%s
`, name, namespace, version)
}

func TestConvert(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		// warnings are Warning.String(), "omitted: " first when Omitted.
		warnings []string
	}{{
		name: "experimental kinds",
		in:   docs(experimentalStore, experimentalStack, experimentalBuilder, experimentalClusterBuilder),
		want: docs(wantExperimentalStore, wantExperimentalStack, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: my-custom-builder, namespace: default}
spec:
  tag: sample/custom-builder
  serviceAccountName: default
  stack: {kind: ClusterStack, name: bionic-stack}
  store: {kind: ClusterStore, name: sample-store}
  order:
  - group:
    - id: paketo-buildpacks/java
    - {id: paketo-buildpacks/gradle, optional: true}
`, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: my-cluster-builder}
spec:
  tag: buildingbuilder/custom-builder
  serviceAccountRef: {name: default, namespace: default}
  stack: {kind: ClusterStack, name: bionic-stack}
  store: {kind: ClusterStore, name: sample-store}
  order:
  - group:
    - id: paketo-buildpacks/java
`),
	}, {
		name: "kpack.io/v1alpha2 store and stack",
		in:   docs(clusterStore, clusterStack),
		want: docs(wantClusterStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStack
metadata: {name: base}
spec:
  id: io.buildpacks.stacks.jammy
  buildImage: {image: paketobuildpacks/build-jammy-base}
  runImage: {image: paketobuildpacks/run-jammy-base}
  serviceAccountRef: {name: private, namespace: private}
`),
	}, {
		name: "kpack.io/v1alpha1 builder with serviceAccount",
		in: `apiVersion: kpack.io/v1alpha1
kind: Builder
metadata:
  name: old
  namespace: apps
spec:
  tag: registry.example.com/builders/old
  serviceAccount: pusher
  stack: {name: base, kind: ClusterStack}
  store: {name: sample-cluster-store, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
      version: 1.2.3
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: old, namespace: apps}
spec:
  tag: registry.example.com/builders/old
  serviceAccountName: pusher
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: sample-cluster-store}
  order:
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.2.3}
`,
	}, {
		name: "order entries naming a Buildpack and a ClusterBuildpack, store in the input",
		in: docs(clusterStore, javaBuildpack, nodeClusterBuildpack, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata:
  name: my-builder
  namespace: apps
spec:
  tag: gcr.io/sample/builder
  serviceAccountName: builder-sa
  stack: {name: base, kind: ClusterStack}
  store: {name: sample-cluster-store, kind: ClusterStore}
  additionalLabels:
    custom-label: custom-value
  order:
  - group:
    - id: kpack/my-custom-buildpack
      version: 1.2.3
    - id: kpack/my-optional-custom-buildpack
      optional: true
  - group:
    - name: java
      kind: Buildpack
    - name: nodejs
      kind: ClusterBuildpack
      id: paketo-buildpacks/nodejs
      version: 1.2.3
      optional: true
`),
		want: docs(wantClusterStore, wantJavaBuildpack, wantNodeStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: my-builder, namespace: apps}
spec:
  tag: gcr.io/sample/builder
  serviceAccountName: builder-sa
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: sample-cluster-store}
  sources:
  - {kind: Buildpack, name: java}
  - {kind: ClusterStore, name: nodejs-clusterbuildpack}
  additionalLabels: {custom-label: custom-value}
  order:
  - group:
    - {id: kpack/my-custom-buildpack, version: 1.2.3}
    - {id: kpack/my-optional-custom-buildpack, optional: true}
  - group:
    - {id: paketo-buildpacks/java, version: 8.9.0}
    - {id: paketo-buildpacks/nodejs, version: 1.2.3, optional: true}
`),
		warnings: []string{
			"Builder/apps/my-builder: spec.order[1].group[0]: Buildpack/apps/java replaced by buildpack id paketo-buildpacks/java, version 8.9.0 (both from its status), " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack java",
			"Builder/apps/my-builder: spec.order[1].group[1]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
		},
	}, {
		name: "a builder without a store draws from what its order names: a ClusterBuildpack's ClusterStore, and a Buildpack kpack would find an id in",
		in: docs(javaBuildpack, nodeClusterBuildpack, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: storeless, namespace: apps}
spec:
  tag: gcr.io/sample/storeless
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - {name: nodejs, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
  - group:
    - id: paketo-buildpacks/jvm
    - id: paketo-buildpacks/procfile
`),
		want: docs(wantJavaBuildpack, wantNodeStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: storeless, namespace: apps}
spec:
  tag: gcr.io/sample/storeless
  stack: {kind: ClusterStack, name: base}
  sources:
  - {kind: ClusterStore, name: nodejs-clusterbuildpack}
  - {kind: Buildpack, name: java}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
  - group:
    - id: paketo-buildpacks/jvm
    - id: paketo-buildpacks/procfile
`),
		warnings: []string{
			"Builder/apps/storeless: spec.order[0].group[0]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
			floating("Builder/apps/storeless: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/nodejs listing its buildpacks",
				"paketo-buildpacks/nodejs", "ClusterBuildpack/nodejs"),
			"Builder/apps/storeless: spec.order[1].group[0]: buildpack paketo-buildpacks/jvm: kpack finds it in Buildpack/apps/java; spec.sources names Buildpack java",
			"Builder/apps/storeless: spec.order[1].group[1]: buildpack paketo-buildpacks/procfile is in no Buildpack or ClusterBuildpack of the input, " +
				"where kpack looks for it when a builder has no store; name a source that holds it in spec.sources",
		},
	}, {
		name: "a ClusterBuilder without a store, using a ClusterBuildpack",
		in: docs(nodeClusterBuildpack, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: node}
spec:
  tag: gcr.io/sample/node
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - {name: nodejs, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
`),
		want: docs(wantNodeStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: node}
spec:
  tag: gcr.io/sample/node
  stack: {kind: ClusterStack, name: base}
  sources:
  - {kind: ClusterStore, name: nodejs-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"ClusterBuilder/node: spec.order[0].group[0]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
		},
	}, {
		name: "an explicit version the status of the object named does not list is warned of",
		in: docs(javaBuildpack, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: pinned, namespace: apps}
spec:
  tag: gcr.io/sample/pinned
  stack: {name: base, kind: ClusterStack}
  store: {name: default, kind: ClusterStore}
  order:
  - group:
    - {name: java, kind: Buildpack, id: paketo-buildpacks/java, version: 9.9.9}
    - {name: java, kind: Buildpack, id: paketo-buildpacks/jvm, version: 1.0.0}
`),
		want: docs(wantJavaBuildpack, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: pinned, namespace: apps}
spec:
  tag: gcr.io/sample/pinned
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default}
  sources:
  - {kind: Buildpack, name: java}
  order:
  - group:
    - {id: paketo-buildpacks/java, version: 9.9.9}
    - {id: paketo-buildpacks/jvm, version: 1.0.0}
`),
		warnings: []string{
			"Builder/apps/pinned: spec.order[0].group[0]: version 9.9.9 of paketo-buildpacks/java is not one the status of Buildpack/apps/java lists (8.9.0): " +
				"kpack would not find it there; buildsmith takes it from whichever of spec.store and spec.sources holds it, and the builder stalls (BuildpackNotFound) if none does",
			"Builder/apps/pinned: spec.order[0].group[0]: Buildpack/apps/java replaced by buildpack id paketo-buildpacks/java, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack java",
			"Builder/apps/pinned: spec.order[0].group[1]: Buildpack/apps/java replaced by buildpack id paketo-buildpacks/jvm, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack java",
		},
	}, {
		name: "a builder without a store whose order draws from no object is left out",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: lonely}
spec:
  tag: gcr.io/sample/lonely
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
		warnings: []string{
			"omitted: ClusterBuilder/lonely: spec.store: not converted: it has no store, and its order draws from no Buildpack or ClusterBuildpack of the input; give it a store",
		},
	}, {
		name: "a builder naming a store and a stack of the input that are not in the output says so",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterStore
metadata: {name: s}
spec:
  sources: []
---
apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: ClusterStack
metadata: {name: base}
spec: {id: io.buildpacks.stacks.jammy}
---
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/go
`,
		want: `apiVersion: experimental.kpack.pivotal.io/v1alpha1
kind: ClusterStack
metadata: {name: base}
spec: {id: io.buildpacks.stacks.jammy}
---
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  order:
  - group:
    - id: paketo-buildpacks/go
`,
		warnings: []string{
			"omitted: ClusterStore/s: not converted: not a valid ClusterStore: missing field(s): spec.sources",
			"ClusterStack/base: experimental.kpack.pivotal.io/v1alpha1 ClusterStack is not converted; passed through unchanged",
			"ClusterBuilder/b: spec.store: ClusterStore/s of the input is not in the output (see its warning): this builder waits for a ClusterStore of that name applied otherwise",
			"ClusterBuilder/b: spec.stack: ClusterStack/base of the input is not in the output (see its warning): this builder waits for a ClusterStack of that name applied otherwise",
		},
	}, {
		name: "every problem of a builder left out is reported",
		in: `apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - {kind: Buildpack, name: ruby}
    - {id: x, optional: "no"}
  - group:
    - {version: "1.0"}
`,
		warnings: []string{
			"omitted: Builder/apps/b: spec.order[0].group[0]: not converted: the entry has no id and Buildpack/apps/ruby is not in the input, " +
				"so its buildpack cannot be known offline; give the entry an id, or add the Buildpack with its status (kubectl get -o yaml) to the input",
			`omitted: Builder/apps/b: spec.order[0].group[1].optional: not converted: expected true or false, found "no"`,
			"omitted: Builder/apps/b: spec.order[1].group[0]: not converted: the entry has neither an id nor a Buildpack or ClusterBuildpack name",
			"omitted: Builder/apps/b: not converted: not a valid Builder: invalid value: " +
				"gcr.io/sample/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef: spec.tag; must be a tag, not a digest",
		},
	}, {
		name: "a warning of several errors is one line",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {id: a}
    - {id: a}
  - group: []
`,
		warnings: []string{
			"omitted: ClusterBuilder/b: not converted: not a valid ClusterBuilder: duplicate buildpack in a group: same id as group[0]: " +
				"spec.order[0].group[1].id; missing field(s): spec.order[1].group",
		},
	}, {
		name: "a non-boolean optional leaves the builder out, every such problem reported",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {id: paketo-buildpacks/go, optional: "yes"}
    - {id: paketo-buildpacks/java, optional: 3}
`,
		warnings: []string{
			`omitted: ClusterBuilder/b: spec.order[0].group[0].optional: not converted: expected true or false, found "yes"`,
			`omitted: ClusterBuilder/b: spec.order[0].group[1].optional: not converted: expected true or false, found "3"`,
		},
	}, {
		name: "an entry naming a Buildpack that is not in the input, without an id, cannot be converted",
		in: docs(clusterStore, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: sample-cluster-store, kind: ClusterStore}
  order:
  - group:
    - {name: ruby, kind: Buildpack}
`),
		want: wantClusterStore,
		warnings: []string{
			"omitted: Builder/apps/b: spec.order[0].group[0]: not converted: the entry has no id and Buildpack/apps/ruby is not in the input, so its buildpack cannot be known offline; give the entry an id, or add the Buildpack with its status (kubectl get -o yaml) to the input",
		},
	}, {
		name: "nor one naming a Buildpack whose status does not say",
		in: docs(clusterStore, `
apiVersion: kpack.io/v1alpha2
kind: Buildpack
metadata: {name: ruby, namespace: apps}
spec:
  image: gcr.io/paketo-buildpacks/ruby
`, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: sample-cluster-store, kind: ClusterStore}
  order:
  - group:
    - {name: ruby, kind: Buildpack}
`),
		want: docs(wantClusterStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: Buildpack
metadata: {name: ruby, namespace: apps}
spec:
  image: gcr.io/paketo-buildpacks/ruby
`),
		warnings: []string{
			"omitted: Builder/apps/b: spec.order[0].group[0]: not converted: the entry has no id and the status of Buildpack/apps/ruby lists no buildpacks, so its buildpack cannot be known offline; give the entry an id, or add the Buildpack with its status (kubectl get -o yaml) to the input",
		},
	}, {
		name: "nor one naming a ClusterBuildpack with several root buildpacks; one with a bad image is left out, and a builder using it says so",
		in: docs(`
apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata: {name: builder-image}
spec:
  image: index.docker.io/paketobuildpacks/builder-jammy-base
status:
  buildpacks:
  - {id: paketo-buildpacks/go, version: 4.1.0}
  - {id: paketo-buildpacks/java, version: 8.9.0}
`, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata: {name: broken}
spec:
  image: "gcr.io/UPPER/case"
`, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: several}
spec:
  tag: gcr.io/sample/several
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - {name: builder-image, kind: ClusterBuildpack}
`, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: uses-broken}
spec:
  tag: gcr.io/sample/uses-broken
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - {name: broken, kind: ClusterBuildpack, id: example/broken}
`),
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: builder-image-clusterbuildpack}
spec:
  sources:
  - image: index.docker.io/paketobuildpacks/builder-jammy-base
---
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: uses-broken}
spec:
  tag: gcr.io/sample/uses-broken
  stack: {kind: ClusterStack, name: base}
  sources:
  - {kind: ClusterStore, name: broken-clusterbuildpack}
  order:
  - group:
    - id: example/broken
`,
		warnings: []string{
			"omitted: ClusterBuildpack/broken: spec.image: not converted: could not parse reference: gcr.io/UPPER/case",
			"omitted: ClusterBuilder/several: spec.order[0].group[0]: not converted: the entry has no id and the status of ClusterBuildpack/builder-image lists several root buildpacks (paketo-buildpacks/go, paketo-buildpacks/java), so its buildpack cannot be known offline; give the entry an id, or add the ClusterBuildpack with its status (kubectl get -o yaml) to the input",
			"ClusterBuilder/uses-broken: spec.order[0].group[0]: ClusterBuildpack/broken replaced by buildpack id example/broken, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore broken-clusterbuildpack",
			"ClusterBuilder/uses-broken: spec.sources[0]: ClusterBuildpack/broken of the input, which becomes ClusterStore/broken-clusterbuildpack, is not in the output (see its warning): " +
				"this builder waits for a ClusterStore of that name applied otherwise",
		},
	}, {
		name: "a Builder without a store that draws from Buildpacks only gets no ClusterStore: its Buildpacks are its sources",
		in: docs(javaBuildpack, strings.Replace(javaBuildpack, "name: java\n", "name: java-too\n", 1), `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: jvm, namespace: apps}
spec:
  tag: gcr.io/sample/jvm
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - {name: java, kind: Buildpack}
    - {name: java-too, kind: Buildpack, id: paketo-buildpacks/jvm}
`),
		want: docs(wantJavaBuildpack, strings.Replace(wantJavaBuildpack, "name: java,", "name: java-too,", 1), `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: jvm, namespace: apps}
spec:
  tag: gcr.io/sample/jvm
  stack: {kind: ClusterStack, name: base}
  sources:
  - {kind: Buildpack, name: java}
  - {kind: Buildpack, name: java-too}
  order:
  - group:
    - {id: paketo-buildpacks/java, version: 8.9.0}
    - {id: paketo-buildpacks/jvm, version: 1.0.0}
`),
		warnings: []string{
			"Builder/apps/jvm: spec.order[0].group[0]: Buildpack/apps/java replaced by buildpack id paketo-buildpacks/java, version 8.9.0 (both from its status), " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack java",
			"Builder/apps/jvm: spec.order[0].group[1]: Buildpack/apps/java-too replaced by buildpack id paketo-buildpacks/jvm, version 1.0.0 (the version from its status), " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack java-too",
		},
	}, {

		name: "an entry with an id naming a Buildpack that is not in the input, store not in the input either",
		in: `apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: elsewhere, kind: ClusterStore}
  order:
  - group:
    - {name: ruby, kind: Buildpack, id: paketo-buildpacks/ruby}
    - {name: java, kind: ClusterBuildpack, id: paketo-buildpacks/java}
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: elsewhere}
  sources:
  - {kind: Buildpack, name: ruby}
  - {kind: ClusterStore, name: java-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/ruby
    - id: paketo-buildpacks/java
`,
		warnings: []string{
			"Builder/apps/b: spec.order[0].group[0]: Buildpack/apps/ruby is not in the input: replaced by buildpack id paketo-buildpacks/ruby, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack ruby: convert it too, or the builder waits for it",
			floating("Builder/apps/b: spec.order[0].group[0]", "Buildpack/apps/ruby is not in the input", "paketo-buildpacks/ruby", "Buildpack/apps/ruby"),
			"Builder/apps/b: spec.order[0].group[1]: ClusterBuildpack/java is not in the input: replaced by buildpack id paketo-buildpacks/java, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore java-clusterbuildpack, the ClusterStore it becomes: convert it too, or the builder waits for it",
			floating("Builder/apps/b: spec.order[0].group[1]", "ClusterBuildpack/java is not in the input", "paketo-buildpacks/java", "ClusterBuildpack/java"),
		},
	}, {
		name: "a ClusterBuildpack in the input whose builder's store is not",
		in: docs(nodeClusterBuildpack, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: elsewhere, kind: ClusterStore}
  order:
  - group:
    - {name: nodejs, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
`),
		want: docs(wantNodeStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: elsewhere}
  sources:
  - {kind: ClusterStore, name: nodejs-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"Builder/apps/b: spec.order[0].group[0]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
			floating("Builder/apps/b: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/nodejs listing its buildpacks", "paketo-buildpacks/nodejs", "ClusterBuildpack/nodejs"),
		},
	}, {
		name: "a ClusterBuilder with a store using a ClusterBuildpack, read with its ServiceAccount",
		in: docs(`
apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata:
  name: go
  labels: {team: platform}
spec:
  image: gcr.io/paketo-buildpacks/go:4.13.2
  serviceAccountRef: {name: reader, namespace: kpack}
`, experimentalStore, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: go}
spec:
  tag: gcr.io/sample/go
  stack: {name: base, kind: ClusterStack}
  store: {name: sample-store, kind: ClusterStore}
  order:
  - group:
    - {name: go, kind: ClusterBuildpack, id: paketo-buildpacks/go, version: 4.13.2}
`),
		want: docs(`
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata:
  name: go-clusterbuildpack
  labels: {team: platform}
spec:
  serviceAccountRef: {name: reader, namespace: kpack}
  sources:
  - image: gcr.io/paketo-buildpacks/go:4.13.2
`, wantExperimentalStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: go}
spec:
  tag: gcr.io/sample/go
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: sample-store}
  sources:
  - {kind: ClusterStore, name: go-clusterbuildpack}
  order:
  - group:
    - {id: paketo-buildpacks/go, version: 4.13.2}
`),
		warnings: []string{
			"ClusterBuilder/go: spec.order[0].group[0]: ClusterBuildpack/go replaced by buildpack id paketo-buildpacks/go, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore go-clusterbuildpack",
		},
	}, {
		name: "a ClusterBuilder naming a Buildpack is left out; one whose id kpack would find in a Buildpack does not draw from it",
		in: docs(javaBuildpack, strings.Replace(javaBuildpack, "  namespace: apps\n", "", 1), `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: tenant}
spec:
  tag: gcr.io/sample/tenant
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {name: java, kind: Buildpack, id: paketo-buildpacks/java}
`, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: by-id}
spec:
  tag: gcr.io/sample/by-id
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {id: paketo-buildpacks/jvm}
`),
		want: docs(wantJavaBuildpack, strings.Replace(wantJavaBuildpack, ", namespace: apps", "", 1), `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: by-id}
spec:
  tag: gcr.io/sample/by-id
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  order:
  - group:
    - id: paketo-buildpacks/jvm
`),
		warnings: []string{
			"omitted: ClusterBuilder/tenant: spec.order[0].group[0]: not converted: it names Buildpack java, and a ClusterBuilder may not draw from a Buildpack, " +
				"which belongs to one namespace; make it a Builder in that namespace, or put the buildpackage into a ClusterStore (a ClusterBuildpack becomes one)",
		},
	}, {
		name: "two builders sharing a ClusterBuildpack: one ClusterStore, named by both",
		in: docs(nodeClusterBuildpack, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: a, namespace: team-a}
spec:
  tag: gcr.io/sample/a
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {name: nodejs, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
  - group:
    - {name: nodejs, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs, version: 1.2.3}
`, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {name: nodejs, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
`),
		want: docs(wantNodeStore, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: a, namespace: team-a}
spec:
  tag: gcr.io/sample/a
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  sources:
  - {kind: ClusterStore, name: nodejs-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.2.3}
`, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  sources:
  - {kind: ClusterStore, name: nodejs-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"Builder/team-a/a: spec.order[0].group[0]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
			floating("Builder/team-a/a: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/nodejs listing its buildpacks", "paketo-buildpacks/nodejs", "ClusterBuildpack/nodejs"),
			"Builder/team-a/a: spec.order[1].group[0]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
			"ClusterBuilder/b: spec.order[0].group[0]: ClusterBuildpack/nodejs replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-clusterbuildpack",
			floating("ClusterBuilder/b: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/nodejs listing its buildpacks", "paketo-buildpacks/nodejs", "ClusterBuildpack/nodejs"),
		},
	}, {
		name: "Buildpacks and ClusterBuildpacks no builder uses are converted all the same",
		in: docs(`
apiVersion: kpack.io/v1alpha2
kind: Buildpack
metadata:
  name: certs
  namespace: team-b
  labels: {app.kubernetes.io/part-of: certs}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{}'
    owner: team-b
  uid: 7e6d5c4b-3a29-4817-a6f5-e4d3c2b1a098
spec:
  image: registry.example.com/team-b/certs:1.0.0
  serviceAccountName: reader
  cache: {size: 1Gi}
status:
  buildpacks:
  - {id: example/certs, version: 1.0.0}
`, nodeClusterBuildpack),
		want: docs(`
apiVersion: buildsmith.dev/v1alpha1
kind: Buildpack
metadata:
  name: certs
  namespace: team-b
  labels: {app.kubernetes.io/part-of: certs}
  annotations: {owner: team-b}
spec:
  image: registry.example.com/team-b/certs:1.0.0
  serviceAccountName: reader
`, wantNodeStore),
		warnings: []string{
			"Buildpack/team-b/certs: spec.cache: buildsmith has no such field; dropped",
		},
	}, {
		name: "a Buildpack without a usable image is left out, and a builder naming it says so",
		in: `apiVersion: kpack.io/v1alpha2
kind: Buildpack
metadata: {name: nothing, namespace: apps}
spec:
  serviceAccountName: reader
---
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {name: nothing, kind: Buildpack, id: example/nothing}
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  sources:
  - {kind: Buildpack, name: nothing}
  order:
  - group:
    - id: example/nothing
`,
		warnings: []string{
			"omitted: Buildpack/apps/nothing: spec.image: not converted: missing",
			"Builder/apps/b: spec.order[0].group[0]: Buildpack/apps/nothing replaced by buildpack id example/nothing, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names Buildpack nothing",
			floating("Builder/apps/b: spec.order[0].group[0]", "the input holds no status of Buildpack/apps/nothing listing its buildpacks",
				"example/nothing", "Buildpack/apps/nothing"),
			"Builder/apps/b: spec.sources[0]: Buildpack/apps/nothing of the input is not in the output (see its warning): " +
				"this builder waits for a Buildpack of that name applied otherwise",
		},
	}, {
		name: "a ClusterBuildpack and a ClusterStore of one name are two ClusterStores",
		in: docs(clusterStore, strings.Replace(nodeClusterBuildpack, "name: nodejs", "name: sample-cluster-store", 1), `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: sample-cluster-store, kind: ClusterStore}
  order:
  - group:
    - {name: sample-cluster-store, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
`),
		want: docs(wantClusterStore, strings.Replace(wantNodeStore, "name: nodejs-", "name: sample-cluster-store-", 1), `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: b}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: sample-cluster-store}
  sources:
  - {kind: ClusterStore, name: sample-cluster-store-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"ClusterBuilder/b: spec.order[0].group[0]: ClusterBuildpack/sample-cluster-store replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore sample-cluster-store-clusterbuildpack",
			floating("ClusterBuilder/b: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/sample-cluster-store listing its buildpacks",
				"paketo-buildpacks/nodejs", "ClusterBuildpack/sample-cluster-store"),
		},
	}, {
		// Converted alone, nodejs would become a ClusterStore of another
		// name than the one a ClusterStore of a separate batch has.
		name: "a ClusterBuildpack converted apart from the ClusterStores gets the same name",
		in:   nodeClusterBuildpack,
		want: wantNodeStore,
	}, {
		name: "a ClusterBuildpack whose ClusterStore's name a store a builder names has is renamed, past the names of other ClusterStores",
		in: docs(strings.Replace(nodeClusterBuildpack, "name: nodejs", "name: default", 1),
			strings.Replace(clusterStore, "name: sample-cluster-store", "name: default-clusterbuildpack-2", 1), `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: default-clusterbuildpack, kind: ClusterStore}
  order:
  - group:
    - {name: default, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
`),
		want: docs(strings.Replace(wantNodeStore, "name: nodejs-clusterbuildpack", "name: default-clusterbuildpack-3", 1),
			strings.Replace(wantClusterStore, "name: sample-cluster-store", "name: default-clusterbuildpack-2", 1), `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default-clusterbuildpack}
  sources:
  - {kind: ClusterStore, name: default-clusterbuildpack-3}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"ClusterBuildpack/default: metadata.name: a ClusterStore of the input, or a store a builder of the input names, has the name default-clusterbuildpack: " +
				"becomes ClusterStore default-clusterbuildpack-3",
			"Builder/apps/b: spec.order[0].group[0]: ClusterBuildpack/default replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore default-clusterbuildpack-3",
			floating("Builder/apps/b: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/default listing its buildpacks",
				"paketo-buildpacks/nodejs", "ClusterBuildpack/default"),
		},
	}, {
		name: "an entry naming a ClusterBuildpack without a version is pinned to the version its status lists, not the store's higher one",
		in: docs(defaultStoreNode2, nodeClusterBuildpack1, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {name: base, kind: ClusterStack}
  store: {name: default, kind: ClusterStore}
  order:
  - group:
    - {name: nodejs-1, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
  - group:
    - {name: nodejs-1, kind: ClusterBuildpack}
  - group:
    - {name: nodejs-1, kind: ClusterBuildpack, id: paketo-buildpacks/node-engine}
`),
		want: docs(wantDefaultStoreNode2, wantNodeStore1, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default}
  sources:
  - {kind: ClusterStore, name: nodejs-1-clusterbuildpack}
  order:
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.0.0}
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.0.0}
  - group:
    - {id: paketo-buildpacks/node-engine, version: 1.10.0}
`),
		warnings: []string{
			"Builder/apps/web: spec.order[0].group[0]: ClusterBuildpack/nodejs-1 replaced by buildpack id paketo-buildpacks/nodejs, version 1.0.0 " +
				"(the version from its status), which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-1-clusterbuildpack",
			"Builder/apps/web: spec.order[1].group[0]: ClusterBuildpack/nodejs-1 replaced by buildpack id paketo-buildpacks/nodejs, version 1.0.0 " +
				"(both from its status), which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-1-clusterbuildpack",
			// The highest of the versions the status lists, as semantic
			// versions: 1.10.0 over 1.9.0.
			"Builder/apps/web: spec.order[2].group[0]: ClusterBuildpack/nodejs-1 replaced by buildpack id paketo-buildpacks/node-engine, version 1.10.0 " +
				"(the version from its status), which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-1-clusterbuildpack",
		},
	}, {
		name: "an entry naming a ClusterBuildpack whose status does not tell its version keeps the id alone, and says the version floats",
		in: docs(defaultStoreNode2, strings.Replace(nodeClusterBuildpack, "name: nodejs", "name: nodejs-1", 1), `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuildpack
metadata: {name: other}
spec:
  image: gcr.io/example/other:1.0.0
status:
  buildpacks:
  - {id: example/other, version: 1.0.0}
`, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {name: base, kind: ClusterStack}
  store: {name: default, kind: ClusterStore}
  order:
  - group:
    - {name: nodejs-1, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
  - group:
    - {name: other, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs}
`),
		want: docs(wantDefaultStoreNode2, strings.Replace(wantNodeStore, "name: nodejs", "name: nodejs-1", 1), `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: other-clusterbuildpack}
spec:
  sources:
  - image: gcr.io/example/other:1.0.0
`, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default}
  sources:
  - {kind: ClusterStore, name: nodejs-1-clusterbuildpack}
  - {kind: ClusterStore, name: other-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"Builder/apps/web: spec.order[0].group[0]: ClusterBuildpack/nodejs-1 replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-1-clusterbuildpack",
			floating("Builder/apps/web: spec.order[0].group[0]", "the input holds no status of ClusterBuildpack/nodejs-1 listing its buildpacks",
				"paketo-buildpacks/nodejs", "ClusterBuildpack/nodejs-1"),
			"Builder/apps/web: spec.order[1].group[0]: ClusterBuildpack/other replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore other-clusterbuildpack",
			floating("Builder/apps/web: spec.order[1].group[0]", "the status of ClusterBuildpack/other does not list paketo-buildpacks/nodejs (kpack would not find it there)",
				"paketo-buildpacks/nodejs", "ClusterBuildpack/other"),
		},
	}, {
		name: "an entry naming a buildpack by id alone draws from every Buildpack of the namespace and ClusterBuildpack whose status lists it",
		in: docs(defaultStoreNode2, nodeBuildpack("node", "apps", "1.0.0"), nodeBuildpack("node-too", "apps", "1.0.0"),
			nodeBuildpack("node", "team-b", "3.0.0"), strings.Replace(strings.Replace(nodeClusterBuildpack1, "1.0.0", "2.0.0", -1), "name: nodejs-1", "name: nodejs-2", 1), `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {name: base, kind: ClusterStack}
  store: {name: default, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.0.0}
`, `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: storeless, namespace: apps}
spec:
  tag: gcr.io/sample/storeless
  stack: {name: base, kind: ClusterStack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`, `
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: base}
spec:
  tag: gcr.io/sample/base
  stack: {name: base, kind: ClusterStack}
  store: {name: default, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		want: docs(wantDefaultStoreNode2, wantNodeBuildpack("node", "apps", "1.0.0"), wantNodeBuildpack("node-too", "apps", "1.0.0"),
			wantNodeBuildpack("node", "team-b", "3.0.0"), strings.Replace(strings.Replace(wantNodeStore1, "1.0.0", "2.0.0", 1), "name: nodejs-1", "name: nodejs-2", 1), `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default}
  sources:
  - {kind: Buildpack, name: node}
  - {kind: Buildpack, name: node-too}
  - {kind: ClusterStore, name: nodejs-2-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.0.0}
`, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: storeless, namespace: apps}
spec:
  tag: gcr.io/sample/storeless
  stack: {kind: ClusterStack, name: base}
  sources:
  - {kind: Buildpack, name: node}
  - {kind: Buildpack, name: node-too}
  - {kind: ClusterStore, name: nodejs-2-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`, `
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: base}
spec:
  tag: gcr.io/sample/base
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default}
  sources:
  - {kind: ClusterStore, name: nodejs-2-clusterbuildpack}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`),
		warnings: []string{
			"Builder/apps/web: spec.order[0].group[0]: buildpack paketo-buildpacks/nodejs: kpack finds it in " +
				"Buildpack/apps/node (1.0.0), Buildpack/apps/node-too (1.0.0), ClusterBuildpack/nodejs-2 (2.0.0), " +
				"and takes the highest version, as buildsmith does from spec.store and spec.sources; " +
				"spec.sources names Buildpack node, Buildpack node-too, ClusterStore nodejs-2-clusterbuildpack",
			// A version: only the objects holding it.
			"Builder/apps/web: spec.order[1].group[0]: buildpack paketo-buildpacks/nodejs 1.0.0: kpack finds it in Buildpack/apps/node, Buildpack/apps/node-too; " +
				"spec.sources names Buildpack node, Buildpack node-too",
			"Builder/apps/storeless: spec.order[0].group[0]: buildpack paketo-buildpacks/nodejs: kpack finds it in " +
				"Buildpack/apps/node (1.0.0), Buildpack/apps/node-too (1.0.0), ClusterBuildpack/nodejs-2 (2.0.0), " +
				"and takes the highest version, as buildsmith does from spec.store and spec.sources; " +
				"spec.sources names Buildpack node, Buildpack node-too, ClusterStore nodejs-2-clusterbuildpack",
			// No Buildpack for a ClusterBuilder.
			"ClusterBuilder/base: spec.order[0].group[0]: buildpack paketo-buildpacks/nodejs: kpack finds it in ClusterBuildpack/nodejs-2; " +
				"spec.sources names ClusterStore nodejs-2-clusterbuildpack",
		},
	}, {
		name: "an entry naming a ClusterBuildpack with a version keeps it, though the status lists a higher one",
		in: docs(defaultStoreNode2, strings.Replace(nodeClusterBuildpack1, "  - {id: paketo-buildpacks/node-engine, version: 1.9.0}\n",
			"  - {id: paketo-buildpacks/nodejs, version: 1.1.0}\n", 1), `
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {name: base, kind: ClusterStack}
  store: {name: default, kind: ClusterStore}
  order:
  - group:
    - {name: nodejs-1, kind: ClusterBuildpack, id: paketo-buildpacks/nodejs, version: 1.0.0}
`),
		want: docs(wantDefaultStoreNode2, wantNodeStore1, `
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: web, namespace: apps}
spec:
  tag: gcr.io/sample/web
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: default}
  sources:
  - {kind: ClusterStore, name: nodejs-1-clusterbuildpack}
  order:
  - group:
    - {id: paketo-buildpacks/nodejs, version: 1.0.0}
`),
		warnings: []string{
			"Builder/apps/web: spec.order[0].group[0]: ClusterBuildpack/nodejs-1 replaced by buildpack id paketo-buildpacks/nodejs, " +
				"which buildsmith looks up in spec.store and spec.sources; spec.sources names ClusterStore nodejs-1-clusterbuildpack",
		},
	}, {
		name: "bad order entries",
		in: `apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - {name: ruby, kind: Image}
---
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: c, namespace: apps}
spec:
  tag: gcr.io/sample/c
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - image: gcr.io/paketo-buildpacks/ruby
`,
		warnings: []string{
			`omitted: Builder/apps/b: spec.order[0].group[0].kind: not converted: "Image": expected Buildpack or ClusterBuildpack`,
			"omitted: Builder/apps/c: spec.order[0].group[0]: not converted: the entry has neither an id nor a Buildpack or ClusterBuildpack name",
		},
	}, {
		name: "lifecycle: the ClusterLifecycle converted, and named by the builder",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterLifecycle
metadata: {name: lifecycle-0-21}
spec:
  image: buildpacksio/lifecycle:0.21.0
  serviceAccountRef: {name: reader, namespace: kpack}
---
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: cb}
spec:
  tag: gcr.io/sample/cb
  lifecycle: {name: lifecycle-0-21, kind: ClusterLifecycle}
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  serviceAccountRef: {name: default, namespace: default}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterLifecycle
metadata: {name: lifecycle-0-21}
spec:
  image: buildpacksio/lifecycle:0.21.0
  serviceAccountRef: {name: reader, namespace: kpack}
---
apiVersion: buildsmith.dev/v1alpha1
kind: ClusterBuilder
metadata: {name: cb}
spec:
  tag: gcr.io/sample/cb
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  lifecycle: {kind: ClusterLifecycle, name: lifecycle-0-21}
  serviceAccountRef: {name: default, namespace: default}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
	}, {
		name: "lifecycle: a builder naming none gets kpack's default when the input converts it",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterLifecycle
metadata: {name: default-lifecycle}
spec:
  image: buildpacksio/lifecycle:0.21.0
---
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterLifecycle
metadata: {name: default-lifecycle}
spec:
  image: buildpacksio/lifecycle:0.21.0
---
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: b, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  lifecycle: {kind: ClusterLifecycle, name: default-lifecycle}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
	}, {
		name: "lifecycle: kpack's default dropped unless converted; another kept, with a warning",
		in: `apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: default-one, namespace: apps}
spec:
  tag: gcr.io/sample/a
  lifecycle: {name: default-lifecycle, kind: ClusterLifecycle}
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
---
apiVersion: kpack.io/v1alpha2
kind: Builder
metadata: {name: pinned, namespace: apps}
spec:
  tag: gcr.io/sample/b
  lifecycle: {name: lifecycle-next}
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: default-one, namespace: apps}
spec:
  tag: gcr.io/sample/a
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
---
apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata: {name: pinned, namespace: apps}
spec:
  tag: gcr.io/sample/b
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  lifecycle: {kind: ClusterLifecycle, name: lifecycle-next}
  order:
  - group:
    - id: paketo-buildpacks/nodejs
`,
		warnings: []string{
			"Builder/apps/default-one: spec.lifecycle: kpack's default ClusterLifecycle default-lifecycle is not in the input: dropped, so the builder uses buildsmith's default, the image named in the ConfigMap lifecycle-image (key image) in the controller's namespace",
			"Builder/apps/pinned: spec.lifecycle: ClusterLifecycle lifecycle-next is not in the input: convert it too, or the builder waits for it",
		},
	}, {
		name: "fields without an equivalent, and server-set metadata",
		in: `apiVersion: kpack.io/v1alpha2
kind: Builder
metadata:
  name: b
  namespace: apps
  uid: 0b5e0c5e-1d7c-4c8e-9f1a-2a3b4c5d6e7f
  resourceVersion: "12"
  generation: 3
  creationTimestamp: "2024-01-02T03:04:05Z"
  labels: {team: web}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"apiVersion":"kpack.io/v1alpha2"}'
    note: kept
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: 1234}
spec:
  tag: gcr.io/sample/b
  serviceAccountName: pusher
  serviceAccount: legacy
  stack: {name: base, kind: ClusterStack, apiVersion: kpack.io/v1alpha2}
  store: {name: s, kind: ClusterStore}
  cosign: {}
  order:
  - group:
    - {id: paketo-buildpacks/go}
status:
  latestImage: gcr.io/sample/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: Builder
metadata:
  name: b
  namespace: apps
  labels: {team: web}
  annotations: {note: kept}
spec:
  tag: gcr.io/sample/b
  serviceAccountName: pusher
  stack: {kind: ClusterStack, name: base}
  store: {kind: ClusterStore, name: s}
  order:
  - group:
    - id: paketo-buildpacks/go
`,
		warnings: []string{
			"Builder/apps/b: spec.serviceAccount: legacy: serviceAccountName pusher wins, as in kpack; dropped",
			"Builder/apps/b: metadata.ownerReferences: buildsmith has no such field; dropped",
			"Builder/apps/b: spec.cosign: buildsmith has no such field; dropped",
			"Builder/apps/b: spec.stack.apiVersion: buildsmith has no such field; dropped",
		},
	}, {
		name: "cluster-scoped objects lose a namespace; duplicate sources and half service account refs are dropped",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterStore
metadata: {name: s, namespace: default}
spec:
  serviceAccountRef: {name: reader}
  sources:
  - image: busybox
  - image: index.docker.io/library/busybox:latest
  - "gcr.io/not/a/mapping"
`,
		want: `apiVersion: buildsmith.dev/v1alpha1
kind: ClusterStore
metadata: {name: s}
spec:
  sources:
  - image: busybox
`,
		warnings: []string{
			"ClusterStore/default/s: metadata.namespace: ClusterStore is cluster-scoped; dropped",
			"ClusterStore/default/s: spec.serviceAccountRef: buildsmith needs both name and namespace; dropped, so the images are read anonymously",
			"ClusterStore/default/s: spec.sources[2]: expected a mapping, found gcr.io/not/a/mapping; dropped",
			"ClusterStore/default/s: spec.sources[1]: same image as an earlier source; dropped",
		},
	}, {
		name: "objects buildsmith would not accept are left out",
		in: `apiVersion: kpack.io/v1alpha2
kind: ClusterStack
metadata: {name: no-run-image}
spec:
  id: io.buildpacks.stacks.jammy
  buildImage: {image: paketobuildpacks/build-jammy-base}
---
apiVersion: kpack.io/v1alpha2
kind: ClusterBuilder
metadata: {name: bad-tag}
spec:
  tag: gcr.io/sample/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  stack: {name: base, kind: ClusterStack}
  store: {name: s, kind: ClusterStore}
  order:
  - group:
    - id: paketo-buildpacks/go
---
apiVersion: kpack.io/v1alpha2
kind: ClusterStore
metadata: {name: empty}
spec: {}
`,
		warnings: []string{
			"omitted: ClusterStack/no-run-image: not converted: not a valid ClusterStack: missing field(s): spec.runImage.image",
			"omitted: ClusterBuilder/bad-tag: not converted: not a valid ClusterBuilder: invalid value: gcr.io/sample/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef: spec.tag; must be a tag, not a digest",
			"omitted: ClusterStore/empty: not converted: not a valid ClusterStore: missing field(s): spec.sources",
		},
	}, {
		name: "other documents pass through unchanged; kpack's with a warning",
		in: `# the app's namespace
apiVersion: v1
kind: Namespace
metadata:
  name: apps   # kept as written
---
apiVersion: kpack.io/v1alpha2
kind: Image
metadata: {name: app, namespace: apps}
spec:
  tag: gcr.io/sample/app
  builder: {name: my-builder, kind: Builder}
`,
		want: `apiVersion: v1
kind: Namespace
metadata:
  name: apps
---
apiVersion: kpack.io/v1alpha2
kind: Image
metadata: {name: app, namespace: apps}
spec:
  tag: gcr.io/sample/app
  builder: {name: my-builder, kind: Builder}
`,
		warnings: []string{
			"Image/apps/app: kpack.io/v1alpha2 Image is not converted; passed through unchanged",
		},
	}, {
		name: "the items of a List, as kubectl get -o yaml prints them",
		in: `apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- ` + indent(experimentalStack) + `
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: lifecycle-image, namespace: buildsmith}
  data: {image: "buildpacksio/lifecycle:0.21.0"}
`,
		want: docs(wantExperimentalStack, `
apiVersion: v1
kind: ConfigMap
metadata: {name: lifecycle-image, namespace: buildsmith}
data: {image: "buildpacksio/lifecycle:0.21.0"}
`),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, warnings, err := Convert(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			if diff := cmp.Diff(decodeAll(t, tt.want), decodeAll(t, string(out))); diff != "" {
				t.Errorf("output (-want +got):\n%s\noutput:\n%s", diff, out)
			}
			var got []string
			for _, w := range warnings {
				s := w.String()
				if w.Omitted {
					s = "omitted: " + s
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tt.warnings, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			checkValid(t, out)
		})
	}
}

// floating is the warning at entry (Kind/name: field) that names object
// named without a version that its status (why) does not let the converter
// pin to the one kpack takes from it.
func floating(entry, why, id, named string) string {
	return entry + ": no version, and " + why + ": buildsmith takes the highest version of " + id +
		" in spec.store and all of spec.sources, not necessarily kpack's, the highest in " + named + "; give the entry a version"
}

// checkValid decodes each buildsmith document of out, strictly, into its
// type, and runs its Validate, as the API server and the controller would.
func checkValid(t *testing.T, out []byte) {
	t.Helper()
	chunks, err := splitDocuments(strings.NewReader(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	for i, chunk := range chunks {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(chunk.text, &head); err != nil {
			t.Fatalf("output document %d: %v", i+1, err)
		}
		if head.APIVersion != v1alpha1.SchemeGroupVersion.String() {
			continue
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
		case "Buildpack":
			obj = &v1alpha1.Buildpack{}
		default:
			t.Fatalf("output document %d: unknown kind %s", i+1, head.Kind)
		}
		if err := yaml.UnmarshalStrict(chunk.text, obj); err != nil {
			t.Errorf("output document %d (%s) does not decode: %v", i+1, head.Kind, err)
			continue
		}
		if err := obj.Validate(context.Background()); err != nil {
			t.Errorf("output document %d (%s) is not valid: %v", i+1, head.Kind, err)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{{
		name:    "malformed YAML names the document",
		in:      experimentalStore + "---\n# second\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: [}\n",
		wantErr: "document 2 (starting at line 10): ",
	}, {
		name:    "duplicate keys",
		in:      "apiVersion: v1\nkind: ConfigMap\nkind: Secret\n",
		wantErr: "document 1 (starting at line 1): ",
	}, {
		name:    "not a mapping",
		in:      "---\n# nothing\n---\n- a\n- b\n",
		wantErr: "document 1 (starting at line 4): not a Kubernetes object (a YAML mapping)",
	}, {
		name:    "a List item that is not a mapping",
		in:      "apiVersion: v1\nkind: List\nitems:\n- just a string\n",
		wantErr: "document 1 (starting at line 1), item 1: not a Kubernetes object (a YAML mapping)",
	}, {
		name: "two documents that become one object",
		in:   docs(experimentalStore, strings.Replace(clusterStore, "sample-cluster-store", "sample-store", 1)),
		wantErr: "document 1 (starting at line 1) (Store/sample-store) and document 2 (starting at line 10) (ClusterStore/sample-store) " +
			"both become buildsmith.dev/v1alpha1 ClusterStore/sample-store",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := Convert(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("Convert succeeded, want an error starting %q; output:\n%s", tt.wantErr, out)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("error %q, want one starting %q", err, tt.wantErr)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	in := "\ufeff# leading comment only\n" +
		"--- # first\r\n" +
		"a: 1\r\n" +
		"---\n" +
		"---\n" +
		"b: |\n" +
		"  ---not a marker\n" +
		"  --- nor this\n" +
		"...\n" +
		"--- {c: 3}\n" +
		"----\n" + // not a marker: a plain scalar line
		"d: 4" // no final newline
	chunks, err := splitDocuments(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range chunks {
		got = append(got, fmt.Sprintf("%d:%s", c.line, c.text))
	}
	want := []string{
		"1:# leading comment only\n",
		"3:a: 1\n",
		"6:b: |\n  ---not a marker\n  --- nor this\n",
		"10:{c: 3}\n----\nd: 4\n",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
}

func TestPassThroughIsVerbatim(t *testing.T) {
	const configMap = "# comment kept\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x  # and this\ndata: {k: 'v'}\n"
	out, warnings, err := Convert(strings.NewReader("---\n" + configMap + "---\n" + experimentalStack))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Convert: %v, warnings %v", err, warnings)
	}
	if !strings.HasPrefix(string(out), configMap+"---\napiVersion: buildsmith.dev/v1alpha1\n") {
		t.Errorf("output:\n%s\nwant it to start with the ConfigMap as written, then a separator", out)
	}
}

// docs joins YAML documents into a stream.
func docs(documents ...string) string {
	for i, d := range documents {
		documents[i] = strings.TrimPrefix(d, "\n")
	}
	return strings.Join(documents, "---\n")
}

// indent makes a document an item of a YAML list, after "- ".
func indent(document string) string {
	return strings.ReplaceAll(strings.TrimSuffix(document, "\n"), "\n", "\n  ")
}

// decodeAll decodes a YAML stream, so that streams compare by content.
func decodeAll(t *testing.T, stream string) []map[string]any {
	t.Helper()
	documents, err := readDocuments(strings.NewReader(stream))
	if err != nil {
		t.Fatalf("decoding %q: %v", stream, err)
	}
	var result []map[string]any
	for _, d := range documents {
		result = append(result, d.obj)
	}
	return result
}

func TestTooManyLabels(t *testing.T) {
	labels := ""
	for i := range maxAdditionalLabels + 1 {
		labels += fmt.Sprintf("    label-%d: x\n", i)
	}
	in := experimentalBuilder + "  additionalLabels:\n" + labels
	out, warnings, err := Convert(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := "CustomBuilder/default/my-custom-builder: spec.additionalLabels: not converted: 257 labels, more than buildsmith's 256"
	if len(out) != 0 || len(warnings) != 1 || !warnings[0].Omitted || warnings[0].String() != want {
		t.Errorf("output %q, warnings %v; want none and one omission: %s", out, warnings, want)
	}
}

// TestSourcesLimit: a builder draws from at most 16 further sources, as
// the CRDs allow: one whose order names more Buildpacks and
// ClusterBuildpacks is left out.
func TestSourcesLimit(t *testing.T) {
	for _, n := range []int{maxSources, maxSources + 1} {
		var in strings.Builder
		for i := range n {
			kind := "Buildpack"
			if i%2 == 1 {
				kind = "ClusterBuildpack"
			}
			fmt.Fprintf(&in, "apiVersion: kpack.io/v1alpha2\nkind: %s\nmetadata: {name: bp-%d, namespace: apps}\n"+
				"spec: {image: registry.example.com/bp-%d}\n---\n", kind, i, i)
		}
		in.WriteString("apiVersion: kpack.io/v1alpha2\nkind: Builder\nmetadata: {name: b, namespace: apps}\n" +
			"spec:\n  tag: gcr.io/sample/b\n  stack: {name: base}\n  store: {name: s}\n  order:\n  - group:\n")
		for i := range n {
			kind := "Buildpack"
			if i%2 == 1 {
				kind = "ClusterBuildpack"
			}
			fmt.Fprintf(&in, "    - {name: bp-%d, kind: %s, id: example/bp-%d}\n", i, kind, i)
		}
		out, warnings, err := Convert(strings.NewReader(in.String()))
		if err != nil {
			t.Fatal(err)
		}
		checkValid(t, out)
		var omitted []string
		for _, w := range warnings {
			if w.Omitted {
				omitted = append(omitted, w.String())
			}
		}
		builders := strings.Count(string(out), "kind: Builder\n")
		switch n {
		case maxSources:
			if builders != 1 || len(omitted) > 0 || strings.Count(string(out), "\n  - kind: ") != n {
				t.Errorf("%d sources: %d builders, omitted %q; want the builder, with %d sources:\n%s", n, builders, omitted, n, out)
			}
		default:
			want := "Builder/apps/b: spec.order: not converted: it draws from 17 Buildpacks and ClusterBuildpacks besides its store, " +
				"more than buildsmith's 16 further sources (spec.sources)"
			if builders != 0 || len(omitted) != 1 || omitted[0] != want {
				t.Errorf("%d sources: %d builders, omitted %q; want none, omitted %q", n, builders, omitted, want)
			}
		}
	}
}
