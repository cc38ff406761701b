package clusterstack

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		stacks := buildsmithclient.Get(ctx).BuildsmithV1alpha1().ClusterStacks()
		r.Base = reconciler.NewBase(ctx, impl, reconciler.Wiring[*v1alpha1.ClusterStack]{
			Kind: "ClusterStack", Registry: client, Options: opts,
			Get: func(ctx context.Context, _, name string) (*v1alpha1.ClusterStack, error) {
				return stacks.Get(ctx, name, metav1.GetOptions{})
			},
			CopyStatus: func(dst, src *v1alpha1.ClusterStack) { dst.Status = src.Status },
		})
		clusterstackinformer.Get(ctx).Informer().AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}
