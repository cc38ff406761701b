package clusterstack

import (
	"context"

	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	clusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack"
	clusterstackreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/clusterstack"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// NewController returns a constructor of the ClusterStack controller.
func NewController(client *registry.Client, opts reconciler.Options) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{Registry: client, Policy: reconciler.NewPolicy("ClusterStack", opts, client.Health())}
		impl := clusterstackreconciler.NewImpl(ctx, r)
		r.Policy.SetEnqueue(impl.EnqueueKey)
		r.Credentials = reconciler.NewCredentials(ctx, impl.EnqueueKey)
		clusterstackinformer.Get(ctx).Informer().AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}
