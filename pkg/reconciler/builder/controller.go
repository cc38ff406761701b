package builder

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/system"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	builderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/builder"
	clusterbuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterbuilder"
	clusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack"
	clusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore"
	builderreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/builder"
	clusterbuilderreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/clusterbuilder"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Controllers builds the Builder and the ClusterBuilder controllers. They
// share the lifecycle image, read once from the lifecycle-image ConfigMap.
type Controllers struct {
	Registry *registry.Client
	Options  reconciler.Options
	Version  string

	once      sync.Once
	lifecycle *LifecycleSource
	resyncs   []func() // one per controller: reconcile all on a lifecycle change
	mu        sync.Mutex
}

func (c *Controllers) lifecycleSource(cmw configmap.Watcher, logger interface{ Infof(string, ...any) }) *LifecycleSource {
	c.once.Do(func() {
		c.lifecycle = &LifecycleSource{Registry: c.Registry, Refresh: max(c.Options.ResyncInterval, time.Minute)}
		observe := func(cm *corev1.ConfigMap) {
			c.lifecycle.Update(cm)
			logger.Infof("lifecycle image: %q", cm.Data[LifecycleImageKey])
			c.mu.Lock()
			resyncs := append([]func(){}, c.resyncs...)
			c.mu.Unlock()
			for _, resync := range resyncs {
				resync()
			}
		}
		empty := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: LifecycleConfigMap, Namespace: system.Namespace()}}
		if dw, ok := cmw.(configmap.DefaultingWatcher); ok {
			// A missing ConfigMap is a waiting condition on builders,
			// not a reason for the controller not to start.
			dw.WatchWithDefault(empty, observe)
		} else {
			cmw.Watch(LifecycleConfigMap, observe)
		}
	})
	return c.lifecycle
}

// core returns the part of a builder reconciler both kinds share; enqueue
// puts a key on impl's queue.
func (c *Controllers) core(ctx context.Context, cmw configmap.Watcher, kind string, impl *controller.Impl,
	enqueue func(types.NamespacedName)) *Core {
	core := &Core{
		Registry:  c.Registry,
		Policy:    reconciler.NewPolicy(kind, c.Options, c.Registry.Circuits()),
		Stacks:    clusterstackinformer.Get(ctx).Lister(),
		Stores:    clusterstoreinformer.Get(ctx).Lister(),
		Tracker:   tracker.New(enqueue, controller.GetTrackerLease(ctx)),
		Lifecycle: c.lifecycleSource(cmw, logging.FromContext(ctx)),
		Version:   c.Version,
	}
	core.Policy.SetEnqueue(enqueue)
	impl.Reconciler = core.Policy.StatusWrites(impl.Reconciler)
	core.Credentials = reconciler.NewCredentials(ctx, enqueue, c.Options)
	// Stacks and stores: the builders that use them are reconciled when they
	// change (a stack becoming Ready wakes the builders waiting on it).
	clusterstackinformer.Get(ctx).Informer().AddEventHandler(controller.HandleAll(
		controller.EnsureTypeMeta(core.Tracker.OnChanged, v1alpha1.SchemeGroupVersion.WithKind("ClusterStack"))))
	clusterstoreinformer.Get(ctx).Informer().AddEventHandler(controller.HandleAll(
		controller.EnsureTypeMeta(core.Tracker.OnChanged, v1alpha1.SchemeGroupVersion.WithKind("ClusterStore"))))
	return core
}

// NewBuilderController returns a constructor of the Builder controller.
func (c *Controllers) NewBuilderController() func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		r := BuilderReconciler{}
		impl := builderreconciler.NewImpl(ctx, &r)
		// Every enqueue the controller makes is noted in the shares, so
		// that a namespace with builders queued keeps a worker free of
		// another's. (Delayed requeues are not seen until they run.)
		r.Shares = reconciler.NewShares(impl.Concurrency)
		enqueue := func(key types.NamespacedName) {
			r.Shares.Queue(key)
			impl.EnqueueKey(key)
		}
		r.Core = c.core(ctx, cmw, "Builder", impl, enqueue)
		builders := buildsmithclient.Get(ctx).BuildsmithV1alpha1()
		r.Policy.SetRefresh(reconciler.RefreshStatus(
			func(ctx context.Context, namespace, name string) (*v1alpha1.Builder, error) {
				return builders.Builders(namespace).Get(ctx, name, metav1.GetOptions{})
			},
			func(dst, src *v1alpha1.Builder) { dst.Status = src.Status }))
		informer := builderinformer.Get(ctx).Informer()
		informer.AddEventHandler(reconciler.EnqueueOnChange(func(obj any) {
			if b, err := kmeta.DeletionHandlingAccessor(obj); err == nil {
				enqueue(types.NamespacedName{Namespace: b.GetNamespace(), Name: b.GetName()})
			}
		}))
		c.addResync(func() { impl.GlobalResync(informer) })
		return impl
	}
}

// NewClusterBuilderController returns a constructor of the ClusterBuilder
// controller.
func (c *Controllers) NewClusterBuilderController() func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		r := ClusterBuilderReconciler{}
		impl := clusterbuilderreconciler.NewImpl(ctx, &r)
		r.Core = c.core(ctx, cmw, "ClusterBuilder", impl, impl.EnqueueKey)
		builders := buildsmithclient.Get(ctx).BuildsmithV1alpha1()
		r.Policy.SetRefresh(reconciler.RefreshStatus(
			func(ctx context.Context, _, name string) (*v1alpha1.ClusterBuilder, error) {
				return builders.ClusterBuilders().Get(ctx, name, metav1.GetOptions{})
			},
			func(dst, src *v1alpha1.ClusterBuilder) { dst.Status = src.Status }))
		informer := clusterbuilderinformer.Get(ctx).Informer()
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		c.addResync(func() { impl.GlobalResync(informer) })
		return impl
	}
}

func (c *Controllers) addResync(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resyncs = append(c.resyncs, f)
}
