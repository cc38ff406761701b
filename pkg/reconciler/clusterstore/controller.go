package clusterstore

import (
	"context"

	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	clusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore"
	clusterstorereconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/clusterstore"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// NewController returns a constructor of the ClusterStore controller.
func NewController(client *registry.Client, opts reconciler.Options) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{}
		impl := clusterstorereconciler.NewImpl(ctx, r)
		informer := clusterstoreinformer.Get(ctx).Informer()
		reconciler.TrimCaches(ctx, informer)
		r.Base = reconciler.NewBase(ctx, impl, reconciler.ClusterWiring("ClusterStore", client, opts, informer.GetStore(),
			buildsmithclient.Get(ctx).BuildsmithV1alpha1().ClusterStores().Get,
			func(dst, src *v1alpha1.ClusterStore) { dst.Status = src.Status }))
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}
