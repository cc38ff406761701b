package reconciler

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/pkg/turns"
)

// Base is what every buildsmith reconciler embeds: the registry client, the
// credentials its objects name, and the Policy that turns how a reconcile
// ended into status, an event and a requeue.
type Base struct {
	Registry    *registry.Client
	Credentials Credentials
	Policy      *Policy
}

// Wiring is what NewBase needs besides the controller's impl.
type Wiring[T Object] struct {
	Kind     string // the kind reconciled: keys its objects' circuit waits
	Registry *registry.Client
	Options  Options
	// Get reads an object from the API server, and CopyStatus puts one's
	// status on another: what a failed reconcile needs to keep the newest
	// status (see RefreshStatus).
	Get        func(ctx context.Context, namespace, name string) (T, error)
	CopyStatus func(dst, src T)
	// Objects is the controller's cache of the kind, from which its
	// objects' states are reported (buildsmith_object_info).
	Objects cache.Store
}

// ClusterWiring is the Wiring of a cluster-scoped kind: get is its typed
// client's Get.
func ClusterWiring[T Object](kind string, client *registry.Client, opts Options, objects cache.Store,
	get func(context.Context, string, metav1.GetOptions) (T, error), copyStatus func(dst, src T)) Wiring[T] {
	return Wiring[T]{Kind: kind, Registry: client, Options: opts, Objects: objects, CopyStatus: copyStatus,
		Get: func(ctx context.Context, _, name string) (T, error) { return get(ctx, name, metav1.GetOptions{}) }}
}

// NewBase wires a reconciler's Base to impl, the controller made of it (so
// it is called after NewImpl, as knative's sample controller assigns
// impl.Tracker): the Policy wakes objects through impl's queue, impl's
// status writes are retried on the Policy's terms (StatusWrites), its
// objects' states are reported as metrics (reportStates), and its
// reconciles run in turns by namespace on impl's workers (turns.Turns).
func NewBase[T Object](ctx context.Context, impl *controller.Impl, w Wiring[T]) Base {
	policy := NewPolicy(w.Kind, w.Options, w.Registry.Circuits(), impl.EnqueueKey, RefreshStatus(w.Get, w.CopyStatus))
	// The generated reconciler knows the buckets this replica leads.
	leads := impl.Reconciler.(interface {
		IsLeaderFor(types.NamespacedName) bool
	}).IsLeaderFor
	policy.states = reportStates(ctx, w.Kind, w.Objects, leads, w.Options)
	if e := EnqueuersFrom(ctx); e != nil {
		e.add(w.Kind, impl.EnqueueKey)
	}
	impl.Reconciler = turns.New(ctx, w.Kind, policy.StatusWrites(impl.Reconciler), impl.Concurrency, impl.EnqueueKeyAfter)
	return Base{
		Registry:    w.Registry,
		Credentials: NewCredentials(ctx, impl.EnqueueKey, w.Options),
		Policy:      policy,
	}
}

// ObserveDeletion drops the deleted object's backoff and circuit waits.
func (b *Base) ObserveDeletion(_ context.Context, key types.NamespacedName) error {
	b.Policy.Forget(key)
	return nil
}

// Validate returns obj's validation error, if any, as the permanent
// InvalidSpec error every kind reports it with.
func Validate(ctx context.Context, obj interface {
	Validate(context.Context) *apis.FieldError
}) error {
	if err := obj.Validate(ctx); err != nil {
		return failure.Permanentf(ReasonInvalidSpec, "%v", err)
	}
	return nil
}
