package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"golang.org/x/net/netutil"
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
// also serves the Receivers' webhooks on webhooks.Port (on every replica:
// a notification may reach any) and wakes, on every replica, what their
// notifications name (see dispatcher).
func NewController(client *registry.Client, opts reconciler.Options, webhooks ServerOptions) func(context.Context, configmap.Watcher) *controller.Impl {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		r := &Reconciler{systemNamespace: system.Namespace()}
		impl := receiverreconciler.NewImpl(ctx, r)
		receivers := buildsmithclient.Get(ctx).BuildsmithV1alpha1().Receivers
		informer := receiverinformer.Get(ctx).Informer()
		r.Base = reconciler.NewBase(ctx, impl, reconciler.Wiring[*v1alpha1.Receiver]{
			Kind: "Receiver", Registry: client, Options: opts, Objects: informer.GetStore(),
			Get: func(ctx context.Context, namespace, name string) (*v1alpha1.Receiver, error) {
				return receivers(namespace).Get(ctx, name, metav1.GetOptions{})
			},
			CopyStatus: func(dst, src *v1alpha1.Receiver) { dst.Status = src.Status },
		})
		reconciler.TrimCaches(ctx, informer)
		informer.AddEventHandler(reconciler.EnqueueOnChange(impl.Enqueue))
		kinds, synced := wakeables(ctx)
		d := &dispatcher{kinds: kinds, systemNamespace: r.systemNamespace, dispatched: map[types.UID]metav1.MicroTime{},
			enqueue: reconciler.EnqueuersFrom(ctx).Enqueue}
		informer.AddEventHandler(d.handler())
		if webhooks.Port == 0 {
			return impl
		}
		mustIndex(informer, webhookIndex, webhookPathOf)
		serve(ctx, &server{
			receivers: informer.GetIndexer(), secrets: r.Credentials.Keychains.Secrets, kinds: kinds,
			systemNamespace: r.systemNamespace, opts: webhooks, now: time.Now,
			synced: func() bool { return informer.HasSynced() && synced() },
			record: func(ctx context.Context, rc *v1alpha1.Receiver, n v1alpha1.ReceiverNotification) error {
				patch, err := json.Marshal(map[string]any{"status": map[string]any{"lastNotification": n}})
				if err == nil {
					_, err = receivers(rc.Namespace).Patch(ctx, rc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
				}
				return err
			},
			slots: newSlots(webhooks.Concurrent, webhooks.NamespaceConcurrent), rates: newNamespaceRates(webhooks.EventsPerSecond, webhooks.Burst),
			recent: map[types.UID]recorded{},
		})
		return impl
	}
}

// wakeables are the kinds Receivers wake, their caches indexed by the
// repositories their objects read, and whether those have synced.
func wakeables(ctx context.Context) ([]wakeable, func() bool) {
	stores, stacks := clusterstoreinformer.Get(ctx).Informer(), clusterstackinformer.Get(ctx).Informer()
	lifecycles, buildpacks := clusterlifecycleinformer.Get(ctx).Informer(), buildpackinformer.Get(ctx).Informer()
	informers := []cache.SharedIndexInformer{stores, stacks, lifecycles, buildpacks}
	for _, informer := range informers {
		mustIndex(informer, repositoryIndex, repositoriesOf)
	}
	kinds := []wakeable{
		{kind: "ClusterStore", indexer: stores.GetIndexer()},
		{kind: "ClusterStack", indexer: stacks.GetIndexer()},
		{kind: "ClusterLifecycle", indexer: lifecycles.GetIndexer()},
		{kind: "Buildpack", namespaced: true, indexer: buildpacks.GetIndexer()},
	}
	return kinds, func() bool {
		return !slices.ContainsFunc(informers, func(i cache.SharedIndexInformer) bool { return !i.HasSynced() })
	}
}

// handler is the dispatcher's handler of Receivers' events: those of the
// informer's initial list are recorded as woken already (a replica that
// starts does not wake again what another woke before).
func (d *dispatcher) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if rc, ok := obj.(*v1alpha1.Receiver); ok && initial {
				d.seen(rc)
			} else if ok {
				d.dispatch(rc)
			}
		},
		UpdateFunc: func(_, obj any) {
			if rc, ok := obj.(*v1alpha1.Receiver); ok {
				d.dispatch(rc)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if rc, ok := obj.(*v1alpha1.Receiver); ok {
				d.forget(rc.UID)
			}
		},
	}
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

// maxConnections bounds the connections the server holds open: each a
// goroutine and buffers, whoever opens them.
const maxConnections = 256

// serve runs s until ctx is done.
func serve(ctx context.Context, s *server) {
	logger := logging.FromContext(ctx)
	listener, err := net.Listen("tcp", fmt.Sprintf(":%d", s.opts.Port))
	if err != nil {
		logger.Fatalw("receiver server", "error", err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go func() {
		if err := srv.Serve(netutil.LimitListener(listener, maxConnections)); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
