package apiserver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	serviceaccountinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/serviceaccount"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/injection"
	logtesting "knative.dev/pkg/logging/testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	builderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/builder"
	buildpackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/buildpack"
	clusterbuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterbuilder"
	clusterlifecycleinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterlifecycle"
	clusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack"
	clusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/pkg/reconciler/buildpack"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstack"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstore"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// startControllers builds the six controllers as cmd/controller does, over
// knative's injection on the real API server, and starts their informers
// (not their workers: nothing is reconciled). It returns the context the
// informers are in.
func startControllers(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(logtesting.TestContextWithLogger(t))
	t.Cleanup(cancel)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1
	ctx, startInformers := injection.EnableInjectionOrDie(ctx, cfg)
	ctx = reconciler.WithSecretWatches(ctx)
	client := registry.New(ctx, registry.Options{})
	opts := reconciler.DefaultOptions()
	builders := builder.Config{Registry: client, Options: opts, Lifecycle: builder.NewLifecycleSource(opts.ResyncInterval)}
	cmw := &configmap.ManualWatcher{}
	for _, ctor := range []injection.ControllerConstructor{
		clusterstore.NewController(client, opts), buildpack.NewController(client, opts),
		clusterstack.NewController(client, opts), clusterlifecycle.NewController(client, opts),
		builder.NewBuilderController(builders), builder.NewClusterBuilderController(builders),
	} {
		ctor(ctx, cmw)
	}
	startInformers() // and waits for their first list
	return ctx
}

// bloated is the metadata a tenant piles on an object: 200 KiB of
// last-applied-configuration (the API server allows 256 KiB of annotations
// in all), a label, and the managedFields the API server adds (the objects
// are created as kubectl apply creates them, as its manager).
func bloated(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"tenant": "hostile"},
		Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: strings.Repeat("x", 200<<10),
			v1alpha1.ReconcileRequestedAtAnnotation: "2026-01-01T00:00:00Z"}}
}

// cached polls get until it finds the object in a lister.
func cached[T any](t *testing.T, ctx context.Context, what string, get func() (T, error)) T {
	t.Helper()
	var obj T
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		obj, err = get()
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s never reached the controller's cache: %v", what, err)
	}
	return obj
}

// TestControllerCachesKeepWhatIsRead: the controllers, built as the binary
// builds them, trim what their informers keep (reconciler.TrimCaches): a
// ServiceAccount keeps the names of its Secrets and nothing a tenant adds,
// every buildsmith kind loses its managedFields and keeps the rest. A
// status write from the trimmed copy, as the generated reconcilers make it,
// leaves the managedFields and annotations stored on the API server as
// they were (it would not if the cache lacked last-applied-configuration:
// the API server would take it out of kubectl's managedFields entry).
func TestControllerCachesKeepWhatIsRead(t *testing.T) {
	t.Setenv("SYSTEM_NAMESPACE", "buildsmith")
	ctx := startControllers(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "cache-trim"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	sa := &corev1.ServiceAccount{ObjectMeta: bloated(ns, "builder"),
		Secrets:          []corev1.ObjectReference{{Name: "registry", Kind: "Secret", FieldPath: strings.Repeat("f", 10000)}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := cached(t, ctx, "the ServiceAccount", func() (*corev1.ServiceAccount, error) {
		return serviceaccountinformer.Get(ctx).Lister().ServiceAccounts(ns).Get("builder")
	})
	want := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "builder", UID: got.UID,
		ResourceVersion: got.ResourceVersion}, Secrets: []corev1.ObjectReference{{Name: "registry"}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}}
	if got.UID == "" || got.ResourceVersion == "" {
		t.Errorf("the cached ServiceAccount lost its identity: %+v", got.ObjectMeta)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the cached ServiceAccount keeps more than is read (-want +got):\n%.2000s", diff)
	}

	for _, k := range ownKinds(ctx, ns) {
		t.Run(k.kind, func(t *testing.T) {
			if err := k.create(ctx); err != nil {
				t.Fatal(err)
			}
			checkTrimmed(t, cached(t, ctx, k.kind, k.cached))
		})
	}
	t.Run("status write", func(t *testing.T) { statusWriteKeepsMetadata(t, ctx, ns) })
}

// checkTrimmed fails unless obj, a cached buildsmith object, lacks its
// managedFields and keeps its annotations and labels.
func checkTrimmed(t *testing.T, obj metav1.Object) {
	t.Helper()
	if len(obj.GetManagedFields()) != 0 {
		t.Errorf("cached with %d managedFields entries", len(obj.GetManagedFields()))
	}
	annotations := obj.GetAnnotations()
	if annotations[v1alpha1.ReconcileRequestedAtAnnotation] == "" || annotations[corev1.LastAppliedConfigAnnotation] == "" ||
		obj.GetLabels()["tenant"] != "hostile" {
		t.Errorf("cached without its annotations or labels: %d annotations, labels %v", len(annotations), obj.GetLabels())
	}
}

// ownKind creates a bloated object of one of buildsmith's kinds and reads
// it from the controller's cache.
type ownKind struct {
	kind   string
	create func(context.Context) error
	cached func() (metav1.Object, error)
}

// kindOf is the ownKind that creates obj with c and reads it with get.
func kindOf[T metav1.Object](kind string, c interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}, obj T, get func(string) (T, error)) ownKind {
	create := func(ctx context.Context) error {
		_, err := c.Create(ctx, obj, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
		return err
	}
	return ownKind{kind: kind, create: create, cached: func() (metav1.Object, error) { return get(obj.GetName()) }}
}

func ownKinds(ctx context.Context, ns string) []ownKind {
	bs := client.BuildsmithV1alpha1()
	image := v1alpha1.ImageSource{Image: "registry.example.com/x:1"}
	const name = "cache-trim"
	return []ownKind{
		kindOf("ClusterStore", bs.ClusterStores(), &v1alpha1.ClusterStore{ObjectMeta: bloated("", name),
			Spec: v1alpha1.ClusterStoreSpec{Sources: []v1alpha1.ImageSource{image}}},
			clusterstoreinformer.Get(ctx).Lister().Get),
		kindOf("Buildpack", bs.Buildpacks(ns), &v1alpha1.Buildpack{ObjectMeta: bloated(ns, name),
			Spec: v1alpha1.BuildpackSpec{Image: image.Image}},
			buildpackinformer.Get(ctx).Lister().Buildpacks(ns).Get),
		kindOf("ClusterStack", bs.ClusterStacks(), &v1alpha1.ClusterStack{ObjectMeta: bloated("", name),
			Spec: v1alpha1.ClusterStackSpec{BuildImage: image, RunImage: v1alpha1.RunImageSource{Image: image.Image}}},
			clusterstackinformer.Get(ctx).Lister().Get),
		kindOf("ClusterLifecycle", bs.ClusterLifecycles(), &v1alpha1.ClusterLifecycle{ObjectMeta: bloated("", name),
			Spec: v1alpha1.ClusterLifecycleSpec{ImageSource: image}},
			clusterlifecycleinformer.Get(ctx).Lister().Get),
		kindOf("Builder", bs.Builders(ns), &v1alpha1.Builder{ObjectMeta: bloated(ns, name),
			Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: builderSpec()}},
			builderinformer.Get(ctx).Lister().Builders(ns).Get),
		kindOf("ClusterBuilder", bs.ClusterBuilders(), &v1alpha1.ClusterBuilder{ObjectMeta: bloated("", name),
			Spec: v1alpha1.ClusterBuilderSpec{BuilderSpec: builderSpec()}},
			clusterbuilderinformer.Get(ctx).Lister().Get),
	}
}

// statusWriteKeepsMetadata writes a status as the generated reconciler
// does (the cached copy, its status changed, through the status
// subresource) and checks that the API server kept the managedFields the
// cached copy lacks, and the annotations, and that the cache trimmed the
// update too.
func statusWriteKeepsMetadata(t *testing.T, ctx context.Context, ns string) {
	builders := client.BuildsmithV1alpha1().Builders(ns)
	lister := builderinformer.Get(ctx).Lister().Builders(ns)
	stored, err := builders.Get(ctx, "cache-trim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fromCache, err := lister.Get("cache-trim")
	if err != nil {
		t.Fatal(err)
	}
	update := fromCache.DeepCopy()
	builderStatus(&update.Status)
	update.Status.ObservedGeneration = update.Generation
	written, err := builders.UpdateStatus(ctx, update, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if written.Annotations[corev1.LastAppliedConfigAnnotation] != stored.Annotations[corev1.LastAppliedConfigAnnotation] {
		t.Error("the status write removed the last-applied-configuration stored")
	}
	for _, entry := range stored.ManagedFields {
		if !slices.ContainsFunc(written.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
			return e.Manager == entry.Manager && e.Operation == entry.Operation && e.Subresource == entry.Subresource &&
				cmp.Equal(e.FieldsV1, entry.FieldsV1)
		}) {
			t.Errorf("the status write removed the managedFields entry of %s (%s): %+v", entry.Manager, entry.Operation, written.ManagedFields)
		}
	}
	checkTrimmed(t, cached(t, ctx, "the written Builder", func() (*v1alpha1.Builder, error) {
		b, err := lister.Get("cache-trim")
		if err == nil && b.ResourceVersion != written.ResourceVersion {
			err = errors.New("not yet")
		}
		return b, err
	}))
}
