package buildpack

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	buildpackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/buildpack"
	buildpackreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/buildpack"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// NewController returns a constructor of the Buildpack controller.
func NewController(client *registry.Client, opts reconciler.Options) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{}
		impl := buildpackreconciler.NewImpl(ctx, r)
		buildpacks := buildsmithclient.Get(ctx).BuildsmithV1alpha1()
		informer := buildpackinformer.Get(ctx).Informer()
		reconciler.TrimCaches(ctx, informer)
		r.Base = reconciler.NewBase(ctx, impl, reconciler.Wiring[*v1alpha1.Buildpack]{
			Kind: "Buildpack", Registry: client, Options: opts, Objects: informer.GetStore(),
			Get: func(ctx context.Context, namespace, name string) (*v1alpha1.Buildpack, error) {
				return buildpacks.Buildpacks(namespace).Get(ctx, name, metav1.GetOptions{})
			},
			CopyStatus: func(dst, src *v1alpha1.Buildpack) { dst.Status = src.Status },
		})
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		return impl
	}
}
