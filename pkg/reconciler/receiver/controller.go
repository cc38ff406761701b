package receiver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/system"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	buildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client"
	buildpackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/buildpack"
	clusterlifecycleinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterlifecycle"
	clusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack"
	clusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore"
	receiverinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/receiver"
	receiverreconciler "github.com/buildsmith/buildsmith/pkg/client/injection/reconciler/build/v1alpha1/receiver"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// NewController returns a constructor of the Receiver controller, which
// also serves the Receivers' webhooks on server.Port (on every replica:
// a notification may reach any).
func NewController(client *registry.Client, opts reconciler.Options, server ServerOptions) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{}
		impl := receiverreconciler.NewImpl(ctx, r)
		informer := receiverinformer.Get(ctx).Informer()
		r.Base = reconciler.NewBase(ctx, impl, reconciler.Wiring[*v1alpha1.Receiver]{
			Kind: "Receiver", Registry: client, Options: opts, Objects: informer.GetStore(),
			Get: func(ctx context.Context, namespace, name string) (*v1alpha1.Receiver, error) {
				return buildsmithclient.Get(ctx).BuildsmithV1alpha1().Receivers(namespace).Get(ctx, name, metav1.GetOptions{})
			},
			CopyStatus: func(dst, src *v1alpha1.Receiver) { dst.Status = src.Status },
		})
		reconciler.TrimCaches(ctx, informer)
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		if server.Port != 0 {
			serve(ctx, newServer(ctx, informer, r.Credentials.Keychains.Secrets, server))
		}
		return impl
	}
}

// newServer wires the webhooks' server to the caches of the Receivers and
// of the kinds they wake, indexing each by what it is looked up by.
func newServer(ctx context.Context, receivers cache.SharedIndexInformer, secrets registry.SecretReader, opts ServerOptions) *server {
	mustIndex(receivers, webhookIndex, webhookPathOf)
	client := buildsmithclient.Get(ctx).BuildsmithV1alpha1()
	merge, none := types.MergePatchType, metav1.PatchOptions{}
	stores, stacks := clusterstoreinformer.Get(ctx).Informer(), clusterstackinformer.Get(ctx).Informer()
	lifecycles, buildpacks := clusterlifecycleinformer.Get(ctx).Informer(), buildpackinformer.Get(ctx).Informer()
	kinds := []wakeable{
		{kind: "ClusterStore", indexer: stores.GetIndexer(), patch: func(ctx context.Context, _, name string, data []byte) error {
			_, err := client.ClusterStores().Patch(ctx, name, merge, data, none)
			return err
		}},
		{kind: "ClusterStack", indexer: stacks.GetIndexer(), patch: func(ctx context.Context, _, name string, data []byte) error {
			_, err := client.ClusterStacks().Patch(ctx, name, merge, data, none)
			return err
		}},
		{kind: "ClusterLifecycle", indexer: lifecycles.GetIndexer(), patch: func(ctx context.Context, _, name string, data []byte) error {
			_, err := client.ClusterLifecycles().Patch(ctx, name, merge, data, none)
			return err
		}},
		{kind: "Buildpack", namespaced: true, indexer: buildpacks.GetIndexer(), patch: func(ctx context.Context, namespace, name string, data []byte) error {
			_, err := client.Buildpacks(namespace).Patch(ctx, name, merge, data, none)
			return err
		}},
	}
	byKind := map[string]wakeable{}
	for _, informer := range []cache.SharedIndexInformer{stores, stacks, lifecycles, buildpacks} {
		mustIndex(informer, repositoryIndex, repositoriesOf)
	}
	for _, k := range kinds {
		byKind[k.kind] = k
	}
	s := &server{
		receivers: receivers.GetIndexer(), secrets: secrets, kinds: kinds, systemNamespace: system.Namespace(), opts: opts,
		waker: &waker{kinds: byKind, now: time.Now, woken: map[target]time.Time{}},
		synced: func() bool {
			return receivers.HasSynced() && stores.HasSynced() && stacks.HasSynced() && lifecycles.HasSynced() && buildpacks.HasSynced()
		},
		slots:    make(chan struct{}, max(opts.Concurrent, 1)),
		limiters: map[types.UID]*rate.Limiter{},
	}
	return s
}

// mustIndex adds an index to informer, which is not started yet; one of
// that name already there (another controller of the process added it) is
// kept.
func mustIndex(informer cache.SharedIndexInformer, name string, f cache.IndexFunc) {
	if _, ok := informer.GetIndexer().GetIndexers()[name]; ok {
		return
	}
	if err := informer.AddIndexers(cache.Indexers{name: f}); err != nil {
		panic(fmt.Sprintf("receiver: indexing the cache by %s: %v", name, err))
	}
}

// serve runs the server until ctx is done.
func serve(ctx context.Context, s *server) {
	logger := logging.FromContext(ctx)
	srv := &http.Server{
		Addr: fmt.Sprintf(":%d", s.opts.Port), Handler: s,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Fatalw("receiver server", "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
}
