package clusterlifecycle

import (
	"context"

	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	clusterlifecycleinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterlifecycle"
	clusterlifecyclereconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// NewController returns a constructor of the ClusterLifecycle controller.
func NewController(client *registry.Client, opts reconciler.Options) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{}
		impl := clusterlifecyclereconciler.NewImpl(ctx, r)
		informer := clusterlifecycleinformer.Get(ctx).Informer()
		reconciler.TrimCaches(ctx, informer)
		r.Base = reconciler.NewBase(ctx, impl, reconciler.ClusterWiring("ClusterLifecycle", client, opts, informer.GetStore(),
			buildsmithclient.Get(ctx).BuildsmithV1alpha1().ClusterLifecycles().Get,
			func(dst, src *v1alpha1.ClusterLifecycle) { dst.Status = src.Status }))
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}
