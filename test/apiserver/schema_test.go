package apiserver

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// TestSchemaRejects checks that the generated CRD schemas make the API server
// refuse malformed objects, naming the offending field.
func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		// want are substrings of the API server's error message.
		want []string
	}{{
		name: "store sources is a string",
		manifest: `
kind: ClusterStore
spec: {sources: registry.example.com/bp:1}`,
		want: []string{"spec.sources", "must be of type array"},
	}, {
		name:     "store without sources",
		manifest: `{kind: ClusterStore, spec: {}}`,
		want:     []string{"spec.sources", "Required value"},
	}, {
		name:     "store with no sources",
		manifest: `{kind: ClusterStore, spec: {sources: []}}`,
		want:     []string{"spec.sources", "at least 1 items"},
	}, {
		name:     "store source without image",
		manifest: `{kind: ClusterStore, spec: {sources: [{}]}}`,
		want:     []string{"spec.sources[0].image", "Required value"},
	}, {
		name:     "store without spec",
		manifest: `{kind: ClusterStore}`,
		want:     []string{"spec", "Required value"},
	}, {
		name:     "stack without a run image",
		manifest: `{kind: ClusterStack, spec: {buildImage: {image: a}}}`,
		want:     []string{"spec.runImage", "Required value"},
	}, {
		name:     "stack with a numeric image",
		manifest: `{kind: ClusterStack, spec: {id: "", buildImage: {image: 5}, runImage: {image: b}}}`,
		want:     []string{"spec.buildImage.image", "must be of type string"},
	}, {
		name:     "stack with an additional run image without image, and too many",
		manifest: `{kind: ClusterStack, spec: {buildImage: {image: a}, runImage: {image: b}, additionalRunImages: [{mirrors: [m]}, {image: c}, {image: c}, {image: c}, {image: c}, {image: c}, {image: c}, {image: c}, {image: c}]}}`,
		want:     []string{"spec.additionalRunImages[0].image", "Required value", "spec.additionalRunImages", "must have at most 8 items"},
	}, {
		name:     "stack service account ref without namespace",
		manifest: `{kind: ClusterStack, spec: {id: s, buildImage: {image: a}, runImage: {image: b}, serviceAccountRef: {name: x}}}`,
		want:     []string{"spec.serviceAccountRef.namespace", "Required value"},
	}, {
		name:     "builder without a store or sources",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, order: [{group: [{id: a}]}]}}`,
		want:     []string{"a builder needs a store or sources"},
	}, {
		name:     "cluster builder without a store, with no sources",
		manifest: `{kind: ClusterBuilder, spec: {tag: t, stack: {name: s}, sources: [], order: [{group: [{id: a}]}]}}`,
		want:     []string{"a builder needs a store or sources"},
	}, {
		name:     "builder with an unknown signing format",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, signing: {format: cosign}, order: [{group: [{id: a}]}]}}`,
		want:     []string{"spec.signing.format", "Unsupported value"},
	}, {
		name:     "builder without tag",
		manifest: `{kind: Builder, spec: {stack: {name: s}, store: {name: s}, order: [{group: [{id: a}]}]}}`,
		want:     []string{"spec.tag", "Required value"},
	}, {
		name:     "builder with empty order",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: []}}`,
		want:     []string{"spec.order", "at least 1 items"},
	}, {
		name:     "builder with empty group",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: []}]}}`,
		want:     []string{"spec.order[0].group", "at least 1 items"},
	}, {
		name:     "builder order entry without id",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: [{version: "1"}]}]}}`,
		want:     []string{"spec.order[0].group[0].id", "Required value"},
	}, {
		name:     "builder optional is a string",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: [{id: a, optional: "yes"}]}]}}`,
		want:     []string{"spec.order[0].group[0].optional", "must be of type boolean"},
	}, {
		name:     "builder stack of the wrong kind",
		manifest: `{kind: Builder, spec: {tag: t, stack: {kind: Stack, name: s}, store: {name: s}, order: [{group: [{id: a}]}]}}`,
		want:     []string{"spec.stack.kind", "Unsupported value", "ClusterStack"},
	}, {
		name:     "builder store without name",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {kind: ClusterStore}, order: [{group: [{id: a}]}]}}`,
		want:     []string{"spec.store.name", "Required value"},
	}, {
		name:     "builder reserved label",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: [{id: a}]}], additionalLabels: {io.buildpacks.stack.id: x}}}`,
		want:     []string{"spec.additionalLabels", "may not set io.buildpacks.* labels"},
	}, {
		name:     "cluster builder drawing from a Buildpack",
		manifest: `{kind: ClusterBuilder, spec: {tag: t, stack: {name: s}, store: {name: s}, sources: [{name: t}, {kind: Buildpack, name: b}], order: [{group: [{id: a}]}]}}`,
		want:     []string{"a ClusterBuilder draws from ClusterStores only"},
	}, {
		name:     "builder source of another kind",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, sources: [{kind: Store, name: b}], order: [{group: [{id: a}]}]}}`,
		want:     []string{"spec.sources[0].kind", "Unsupported value"},
	}, {
		name:     "buildpack without image",
		manifest: `{kind: Buildpack, spec: {serviceAccountName: x}}`,
		want:     []string{"spec.image", "Required value"},
	}, {
		name:     "builder label value is a number",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: [{id: a}]}], additionalLabels: {team: 1}}}`,
		want:     []string{"spec.additionalLabels.team", "must be of type string"},
	}, {
		name:     "builder env of the platform",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: [{id: a}]}], env: [{name: CNB_TARGET_OS, value: x}]}}`,
		want:     []string{"spec.env[0].name", "CNB_* variables belong to the lifecycle and the platform"},
	}, {
		name:     "builder env name with a dot and an unknown suffix",
		manifest: `{kind: Builder, spec: {tag: t, stack: {name: s}, store: {name: s}, order: [{group: [{id: a}]}], env: [{name: A.B, suffix: later}]}}`,
		want:     []string{"spec.env[0].name", "should match", "spec.env[0].suffix", "Unsupported value"},
	}, {
		name:     "stack run image mirrors is a string",
		manifest: `{kind: ClusterStack, spec: {id: s, buildImage: {image: a}, runImage: {image: b, mirrors: c}}}`,
		want:     []string{"spec.runImage.mirrors", "must be of type array"},
	}, {
		name:     "cluster builder store of the wrong kind",
		manifest: `{kind: ClusterBuilder, spec: {tag: t, stack: {name: s}, store: {kind: ClusterStack, name: s}, order: [{group: [{id: a}]}]}}`,
		want:     []string{"spec.store.kind", "Unsupported value"},
	}}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(tc.manifest), &u.Object); err != nil {
				t.Fatalf("bad test manifest: %v", err)
			}
			u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
			u.SetName("rejected-" + strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")))
			resource := v1alpha1.SchemeGroupVersion.WithResource(strings.ToLower(u.GetKind()) + "s")
			var err error
			if u.GetKind() == "Builder" || u.GetKind() == "Buildpack" {
				u.SetNamespace("default")
				_, err = dynamicClient.Resource(resource).Namespace("default").Create(context.Background(), u, metav1.CreateOptions{})
			} else {
				_, err = dynamicClient.Resource(resource).Create(context.Background(), u, metav1.CreateOptions{})
			}
			if err == nil {
				t.Fatalf("case %d: the API server accepted %s", i, tc.manifest)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is not Invalid: %v", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestSchemaAcceptsStorelessBuilder: a Builder drawing from its namespace's
// Buildpacks alone needs no store, and the API server sets none.
func TestSchemaAcceptsStorelessBuilder(t *testing.T) {
	u := &unstructured.Unstructured{}
	manifest := `{kind: Builder, spec: {tag: t, stack: {name: s}, sources: [{kind: Buildpack, name: php}], order: [{group: [{id: a}]}]}}`
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetName("storeless")
	u.SetNamespace("default")
	got, err := dynamicClient.Resource(v1alpha1.SchemeGroupVersion.WithResource("builders")).Namespace("default").Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refused a Builder drawing from a Buildpack alone: %v", err)
	}
	if store, found, _ := unstructured.NestedMap(got.Object, "spec", "store"); found {
		t.Errorf("spec.store %v was set", store)
	}
}
