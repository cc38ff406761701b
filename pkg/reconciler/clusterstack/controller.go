package clusterstack

import (
	"context"

	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	clusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack"
	clusterstackreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/clusterstack"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// NewController returns a constructor of the ClusterStack controller.
func NewController(client *registry.Client, opts reconciler.Options) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{}
		impl := clusterstackreconciler.NewImpl(ctx, r)
		informer := clusterstackinformer.Get(ctx).Informer()
		reconciler.TrimCaches(ctx, informer)
		r.Base = reconciler.NewBase(ctx, impl, reconciler.ClusterWiring("ClusterStack", client, opts, informer.GetStore(),
			buildsmithclient.Get(ctx).BuildsmithV1alpha1().ClusterStacks().Get,
			func(dst, src *v1alpha1.ClusterStack) { dst.Status = src.Status }))
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}
