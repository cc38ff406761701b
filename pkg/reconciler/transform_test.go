package reconciler

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// bulk is what a tenant may pile on any object: managedFields, a
// last-applied-configuration and a large annotation, labels.
func bulk() metav1.ObjectMeta {
	return metav1.ObjectMeta{
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}},
		Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":{}}`,
			"tenant.example/blob": strings.Repeat("x", 1<<10)},
		Labels: map[string]string{"tenant.example/label": "v"},
	}
}

// TestTrimObject: buildsmith's kinds lose their managedFields and keep
// what the controller reads or writes back (spec, status, finalizers,
// ownerReferences, annotations — last-applied-configuration too, see
// TrimObject); anything else passes through untouched.
func TestTrimObject(t *testing.T) {
	full := func() *v1alpha1.Builder {
		b := &v1alpha1.Builder{ObjectMeta: bulk(), Spec: v1alpha1.NamespacedBuilderSpec{
			BuilderSpec: v1alpha1.BuilderSpec{Tag: "registry.example/builder"}, ServiceAccountName: "builder"}}
		b.Namespace, b.Name, b.UID, b.ResourceVersion, b.Generation = "team", "b", "uid-1", "7", 3
		b.Annotations[v1alpha1.ReconcileRequestedAtAnnotation] = "2026-01-01T00:00:00Z"
		b.Finalizers = []string{"example.com/keep"}
		b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "uid-0"}}
		b.Status.LatestImage = "registry.example/builder@sha256:1"
		b.Status.ObservedGeneration = 3
		return b
	}
	want := full()
	want.ManagedFields = nil
	tombstone := cache.DeletedFinalStateUnknown{Key: "team/b", Obj: full()}

	for _, tc := range []struct {
		name    string
		in, out any
	}{
		{"a Builder", full(), want},
		{"nothing to drop", &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
			&v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "s"}}},
		// A tombstone's object was trimmed when it was stored: it passes.
		{"a tombstone", tombstone, cache.DeletedFinalStateUnknown{Key: "team/b", Obj: full()}},
		{"not an object", "text", "text"},
		{"nil", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TrimObject(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.out, got); diff != "" {
				t.Errorf("TrimObject (-want +got):\n%s", diff)
			}
			// Idempotent: client-go may hand an object over again.
			again, _ := TrimObject(got)
			if diff := cmp.Diff(tc.out, again); diff != "" {
				t.Errorf("TrimObject twice (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrimServiceAccount: a ServiceAccount keeps its identity and the names
// of its secrets and imagePullSecrets (in order, repeats included, as
// registry.Keychains counts and reads them) and nothing else; of one naming
// far more than any may, the first 1024 of each list and how many it names.
func TestTrimServiceAccount(t *testing.T) {
	automount := true
	sa := &corev1.ServiceAccount{ObjectMeta: bulk(), AutomountServiceAccountToken: &automount,
		Secrets: []corev1.ObjectReference{
			{Kind: "Secret", Namespace: "team", Name: "registry", UID: "uid-s", ResourceVersion: "3", FieldPath: strings.Repeat("f", 1000)},
			{Name: "cosign"}, {Name: "registry"}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}}
	sa.Namespace, sa.Name, sa.UID, sa.ResourceVersion, sa.Generation = "team", "builder", "uid-1", "7", 2
	sa.Finalizers = []string{"example.com/keep"}
	sa.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "uid-0"}}
	want := &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Namespace: "team", Name: "builder", UID: "uid-1", ResourceVersion: "7", Generation: 2},
		Secrets:          []corev1.ObjectReference{{Name: "registry"}, {Name: "cosign"}, {Name: "registry"}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}}
	bare := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "default"}}
	many := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "many"}}
	manyKept := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "many",
		Annotations: map[string]string{registry.AnnotationSecretReferences: "100000"}}}
	for i := range 50_000 {
		ref := corev1.LocalObjectReference{Name: fmt.Sprintf("s-%d", i)}
		many.ImagePullSecrets = append(many.ImagePullSecrets, ref)
		many.Secrets = append(many.Secrets, corev1.ObjectReference{Name: ref.Name, Kind: "Secret"})
		if i < maxKeptSecretReferences {
			manyKept.ImagePullSecrets = append(manyKept.ImagePullSecrets, ref)
			manyKept.Secrets = append(manyKept.Secrets, corev1.ObjectReference{Name: ref.Name})
		}
	}
	notAnAccount := &corev1.Secret{ObjectMeta: bulk()}
	tombstone := cache.DeletedFinalStateUnknown{Key: "team/builder", Obj: want}

	for _, tc := range []struct {
		name    string
		in, out any
	}{
		{"a ServiceAccount", sa, want},
		{"one naming no Secrets", bare, bare},
		{"one naming 100,000 Secrets", many, manyKept},
		{"a tombstone", tombstone, tombstone},
		{"another kind", notAnAccount, &corev1.Secret{ObjectMeta: bulk()}},
		{"nil", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TrimServiceAccount(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.out, got); diff != "" {
				t.Errorf("TrimServiceAccount (-want +got):\n%s", diff)
			}
			again, _ := TrimServiceAccount(got)
			if diff := cmp.Diff(tc.out, again); diff != "" {
				t.Errorf("TrimServiceAccount twice (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrimSecret: a watched Secret keeps its identity, type, data and
// annotations (kpack.io/cosign.* are read), less labels, managedFields and
// last-applied-configuration; one whose data and annotations exceed the
// size limit is kept without them, marked with their size — annotations
// alone can exceed it; a kubectl-applied copy of the data does not count.
func TestTrimSecret(t *testing.T) {
	limits := SecretLimits{Size: 1000}
	withMeta := func(data, annotation int) *corev1.Secret {
		s := secret("team", "key", strings.Repeat("d", data))
		s.ObjectMeta = bulk()
		s.Namespace, s.Name, s.UID, s.ResourceVersion = "team", "key", "uid-1", "7"
		s.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: strings.Repeat("a", 2000),
			"kpack.io/cosign.repository": "registry.example/sigs", "tenant.example/note": strings.Repeat("n", annotation)}
		return s
	}
	kept := func(data, annotation int) *corev1.Secret {
		s := secret("team", "key", strings.Repeat("d", data))
		s.UID, s.ResourceVersion = "uid-1", "7"
		s.Annotations = map[string]string{"kpack.io/cosign.repository": "registry.example/sigs",
			"tenant.example/note": strings.Repeat("n", annotation)}
		return s
	}
	dropped := func(size int) *corev1.Secret {
		s := secret("team", "key", "")
		s.UID, s.ResourceVersion, s.Data = "uid-1", "7", nil
		s.Annotations = map[string]string{droppedAnnotation: strconv.Itoa(size)}
		return s
	}
	// The size of data d and a note of n bytes: keys and values.
	size := func(d, n int) int {
		return len(corev1.DockerConfigJsonKey) + d + len("kpack.io/cosign.repository") + len("registry.example/sigs") +
			len("tenant.example/note") + n
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "team/key", Obj: withMeta(1, 1)}

	for _, tc := range []struct {
		name    string
		in, out any
	}{
		{"small, applied with kubectl", withMeta(100, 100), kept(100, 100)},
		{"data too large", withMeta(2000, 0), dropped(size(2000, 0))},
		{"annotations too large", withMeta(1, 2000), dropped(size(1, 2000))},
		{"a tombstone", tombstone, cache.DeletedFinalStateUnknown{Key: "team/key", Obj: withMeta(1, 1)}},
		{"another kind", &corev1.ServiceAccount{ObjectMeta: bulk()}, &corev1.ServiceAccount{ObjectMeta: bulk()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limits.trimSecret(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.out, got); diff != "" {
				t.Errorf("trimSecret (-want +got):\n%s", diff)
			}
		})
	}
}
