package builder

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	builderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/builder"
	buildpackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/buildpack"
	clusterbuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterbuilder"
	clusterlifecycleinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterlifecycle"
	clusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack"
	clusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore"
	builderreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/builder"
	clusterbuilderreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/clusterbuilder"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Config is what the Builder and ClusterBuilder controllers are made of.
type Config struct {
	Registry *registry.Client
	Options  reconciler.Options
	// Lifecycle is shared by both controllers: one default lifecycle
	// image, read once per refresh, for every builder that names no
	// ClusterLifecycle.
	Lifecycle *LifecycleSource
	// Version is buildsmith's version, recorded in the builder metadata.
	Version string
	// Signing bounds the cost of tenants' signing keys: each key's scrypt
	// memory, the parsed keys kept and for how long; zero fields take the
	// defaults.
	Signing SigningLimits
	// MaxLayers is the most layers a builder image may have (0: the
	// default, cnb.DefaultMaxLayers).
	MaxLayers int
	// Flattening is where and how big flattened layers are made.
	Flattening Flattening
	// Attestations says which builders carry attestations (AttestNone,
	// AttestSigned, AttestAll; empty: none).
	Attestations string
}

// NewBuilderController returns a constructor of the Builder controller.
func NewBuilderController(cfg Config) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		impl, _ := newBuilderController(ctx, cmw, cfg)
		return impl
	}
}

func newBuilderController(ctx context.Context, cmw configmap.Watcher, cfg Config) (*controller.Impl, *BuilderReconciler) {
	r := &BuilderReconciler{}
	impl := builderreconciler.NewImpl(ctx, r)
	builders := buildsmithclient.Get(ctx).BuildsmithV1alpha1()
	informer := builderinformer.Get(ctx).Informer()
	r.Core = newCore(ctx, cmw, cfg, impl, informer, reconciler.Wiring[*v1alpha1.Builder]{
		Kind: "Builder",
		Get: func(ctx context.Context, namespace, name string) (*v1alpha1.Builder, error) {
			return builders.Builders(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		CopyStatus: func(dst, src *v1alpha1.Builder) { dst.Status = src.Status },
	})
	informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
	return impl, r
}

// NewClusterBuilderController returns a constructor of the ClusterBuilder
// controller.
func NewClusterBuilderController(cfg Config) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		r := &ClusterBuilderReconciler{}
		impl := clusterbuilderreconciler.NewImpl(ctx, r)
		informer := clusterbuilderinformer.Get(ctx).Informer()
		r.Core = newCore(ctx, cmw, cfg, impl, informer, reconciler.ClusterWiring("ClusterBuilder", cfg.Registry, cfg.Options, informer.GetStore(),
			buildsmithclient.Get(ctx).BuildsmithV1alpha1().ClusterBuilders().Get,
			func(dst, src *v1alpha1.ClusterBuilder) { dst.Status = src.Status }))
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}

// newCore wires the part both builder reconcilers share to impl, whose
// objects informer holds.
func newCore[T reconciler.Object](ctx context.Context, cmw configmap.Watcher, cfg Config, impl *controller.Impl,
	informer cache.SharedIndexInformer, w reconciler.Wiring[T]) *Core {
	w.Registry, w.Options, w.Objects = cfg.Registry, cfg.Options, informer.GetStore()
	stacks, stores := clusterstackinformer.Get(ctx), clusterstoreinformer.Get(ctx)
	buildpacks, lifecycles := buildpackinformer.Get(ctx), clusterlifecycleinformer.Get(ctx)
	// The builders' own cache and those of what they use: each keeps what
	// the controller reads.
	reconciler.TrimCaches(ctx, informer, stacks.Informer(), stores.Informer(), buildpacks.Informer(), lifecycles.Informer())
	core := &Core{
		Base:         reconciler.NewBase(ctx, impl, w),
		Stacks:       stacks.Lister(),
		Stores:       stores.Lister(),
		Buildpacks:   buildpacks.Lister(),
		Lifecycles:   lifecycles.Lister(),
		Tracker:      tracker.New(impl.EnqueueKey, controller.GetTrackerLease(ctx)),
		Lifecycle:    cfg.Lifecycle,
		Version:      cfg.Version,
		MaxLayers:    cfg.MaxLayers,
		Flattening:   cfg.Flattening,
		Attestations: cfg.Attestations,
	}
	core.keys.configure(cfg.Signing, core.Credentials.Keychains.Secrets)
	// Stacks, stores, Buildpacks and lifecycles: the builders that use them are
	// reconciled when they change in what builders read (a stack becoming
	// Ready wakes the builders waiting on it; its re-check failing and
	// passing, which leaves it Ready, wakes nobody).
	stacks.Informer().AddEventHandler(reconciler.OnUsableChange(
		controller.EnsureTypeMeta(core.Tracker.OnChanged, v1alpha1.SchemeGroupVersion.WithKind("ClusterStack"))))
	stores.Informer().AddEventHandler(reconciler.OnUsableChange(
		controller.EnsureTypeMeta(core.Tracker.OnChanged, v1alpha1.SchemeGroupVersion.WithKind("ClusterStore"))))
	buildpacks.Informer().AddEventHandler(reconciler.OnUsableChange(
		controller.EnsureTypeMeta(core.Tracker.OnChanged, v1alpha1.SchemeGroupVersion.WithKind("Buildpack"))))
	lifecycles.Informer().AddEventHandler(reconciler.OnUsableChange(
		controller.EnsureTypeMeta(core.Tracker.OnChanged, v1alpha1.SchemeGroupVersion.WithKind("ClusterLifecycle"))))
	// A new default lifecycle image changes the builders that name no
	// ClusterLifecycle, and only those.
	cfg.Lifecycle.Watch(ctx, cmw, func() { impl.FilteredGlobalResync(usesDefaultLifecycle, informer) })
	return core
}

// usesDefaultLifecycle reports whether obj is a builder that takes its
// lifecycle from the lifecycle-image ConfigMap.
func usesDefaultLifecycle(obj any) bool {
	switch b := obj.(type) {
	case *v1alpha1.Builder:
		return b.Spec.Lifecycle == nil
	case *v1alpha1.ClusterBuilder:
		return b.Spec.Lifecycle == nil
	}
	return false
}
