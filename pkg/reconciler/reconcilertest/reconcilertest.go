// Package reconcilertest sets up reconciler tests: knative's fake clients and
// informers holding given objects, an event recorder to read, and a check of
// how a reconcile ended.
package reconcilertest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	fakeserviceaccountinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/serviceaccount/fake"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"
	pkgtesting "knative.dev/pkg/reconciler/testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	fakeclient "github.com/buildsmith/buildsmith/pkg/client/clientset/versioned/fake"
	fakebuildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client/fake"
	fakebuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/builder/fake"
	fakebuildpackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/buildpack/fake"
	fakeclusterbuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterbuilder/fake"
	fakeclusterlifecycleinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterlifecycle/fake"
	fakeclusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack/fake"
	fakeclusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore/fake"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/turns"
)

// Clients are the fakes a reconciler under test talks to.
type Clients struct {
	Buildsmith *fakeclient.Clientset
	Recorder   *record.FakeRecorder
}

// Setup returns a context with fake clients and informers that hold objects,
// and the Secret watches its controllers share.
func Setup(t *testing.T, objects ...runtime.Object) (context.Context, *Clients) {
	t.Helper()
	ctx, _ := pkgtesting.SetupFakeContext(t)
	var ours, kube []runtime.Object
	for _, o := range objects {
		var err error
		switch o := o.(type) {
		case *v1alpha1.ClusterStack:
			ours = append(ours, o)
			err = fakeclusterstackinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.ClusterStore:
			ours = append(ours, o)
			err = fakeclusterstoreinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.ClusterLifecycle:
			ours = append(ours, o)
			err = fakeclusterlifecycleinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.Builder:
			ours = append(ours, o)
			err = fakebuilderinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.ClusterBuilder:
			ours = append(ours, o)
			err = fakeclusterbuilderinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.Buildpack:
			ours = append(ours, o)
			err = fakebuildpackinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *corev1.ServiceAccount:
			kube = append(kube, o)
			err = fakeserviceaccountinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *corev1.Secret:
			kube = append(kube, o) // read through the client (reconciler.SecretWatches)
		default:
			t.Fatalf("reconcilertest: unsupported object %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, client := fakebuildsmithclient.With(ctx, ours...)
	ctx, _ = fakekubeclient.With(ctx, kube...)
	// The controllers made of ctx share their Secret watches, as in the
	// process.
	ctx = reconciler.WithSecretWatches(ctx)
	recorder := controller.GetEventRecorder(ctx).(*record.FakeRecorder)
	return ctx, &Clients{Buildsmith: client, Recorder: recorder}
}

// Events drains and returns the recorded events ("Type Reason message").
func (c *Clients) Events() []string {
	var out []string
	for {
		select {
		case e := <-c.Recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Requeue kinds of an Outcome: the Policy's (reconciler.Outcome.Requeue).
const (
	// Resync: Ready, looked at again after the resync interval.
	Resync = reconciler.RequeueResync
	// Retry: a transient failure, retried after the object's backoff.
	Retry = reconciler.RequeueRetry
	// Poll: waiting for something, looked at again after the poll interval
	// or when a dependency changes.
	Poll = reconciler.RequeuePoll
	// Circuit: a wait on the circuit of the place that failed, with the
	// safety-net requeue after MinDelay..MaxDelay.
	Circuit = reconciler.RequeueCircuit
	// NoRequeue: a permanent failure (Stalled).
	NoRequeue = reconciler.RequeueNone
)

// requeueOf is the requeue the Policy decided for the reconcile that
// returned err: a success without a resync returns nothing.
func requeueOf(err error) string {
	if o := reconciler.OutcomeOf(err); o != nil {
		return o.Requeue
	}
	if err == nil {
		return Resync
	}
	return "none from the Policy (" + err.Error() + ")"
}

// Outcome is what a reconcile must end in.
type Outcome struct {
	Ready       corev1.ConditionStatus
	Reason      string // of Ready
	Reconciling bool
	Stalled     bool
	// Stale is the reason of a Ready object's failed re-check, which only
	// UpToDate=False shows; "": UpToDate is True when Ready is, else False
	// with Ready's reason.
	Stale string
	// Requeue is Resync, Retry, Poll or Circuit (a requeue after a delay
	// within [MinDelay, MaxDelay]) or NoRequeue (a permanent error).
	Requeue            string
	MinDelay, MaxDelay time.Duration
	EventReasons       []string
	MessageContains    string
}

// Check checks obj's conditions, the reconcile's returned error and the
// events against want.
func Check(t *testing.T, obj reconciler.Object, err error, events []string, want Outcome) {
	t.Helper()
	status := obj.Conditions()
	ready := status.GetCondition(v1alpha1.ConditionReady)
	if ready == nil || ready.Status != want.Ready || ready.Reason != want.Reason {
		t.Errorf("Ready = %+v, want %s %s", ready, want.Ready, want.Reason)
	}
	upToDate := status.GetCondition(v1alpha1.ConditionUpToDate)
	switch {
	case want.Stale != "":
		if upToDate == nil || !upToDate.IsFalse() || upToDate.Reason != want.Stale {
			t.Errorf("UpToDate = %+v, want False %s", upToDate, want.Stale)
		}
	case want.Ready == corev1.ConditionTrue:
		if upToDate == nil || !upToDate.IsTrue() {
			t.Errorf("UpToDate = %+v, want True", upToDate)
		}
	case upToDate == nil || !upToDate.IsFalse() || upToDate.Reason != want.Reason:
		t.Errorf("UpToDate = %+v, want False %s", upToDate, want.Reason)
	}
	if want.MessageContains != "" {
		message := ""
		if ready != nil {
			message = ready.Message
		}
		if want.Stale != "" && upToDate != nil {
			message = upToDate.Message
		}
		if !strings.Contains(message, want.MessageContains) {
			t.Errorf("message %q lacks %q", message, want.MessageContains)
		}
	}
	if c := status.GetCondition(v1alpha1.ConditionReconciling); (c != nil && c.IsTrue()) != want.Reconciling {
		t.Errorf("Reconciling = %+v, want %v", c, want.Reconciling)
	}
	if c := status.GetCondition(v1alpha1.ConditionStalled); (c != nil && c.IsTrue()) != want.Stalled {
		t.Errorf("Stalled = %+v, want %v", c, want.Stalled)
	}
	if status.ObservedGeneration != obj.GetGeneration() {
		t.Errorf("observedGeneration %d, generation %d", status.ObservedGeneration, obj.GetGeneration())
	}
	if got := requeueOf(err); got != want.Requeue {
		t.Errorf("the Policy decided a requeue %q (Reconciling %+v), want %q", got, status.GetCondition(v1alpha1.ConditionReconciling), want.Requeue)
	}
	if want.Requeue == NoRequeue {
		if !controller.IsPermanentError(err) {
			t.Errorf("Reconcile = %v, want a permanent error", err)
		}
	} else if ok, delay := controller.IsRequeueKey(err); !ok || delay < want.MinDelay || delay > want.MaxDelay {
		t.Errorf("Reconcile = %v (requeue %v after %v), want a requeue in [%v, %v]", err, ok, delay, want.MinDelay, want.MaxDelay)
	}
	if len(events) != len(want.EventReasons) {
		t.Errorf("events = %q, want reasons %q", events, want.EventReasons)
	}
	for i, reason := range want.EventReasons {
		if i < len(events) && !strings.Contains(events[i], " "+reason+" ") {
			t.Errorf("event %q, want reason %s", events[i], reason)
		}
	}
}

// Controller builds a controller with its production constructor over the
// fake clients and informers of ctx (see Setup), configMaps being what its
// ConfigMap watcher holds, and makes it the leader of every key. Sync runs
// its reconciles.
func Controller(ctx context.Context, newController func(context.Context, configmap.Watcher) *controller.Impl,
	configMaps ...*corev1.ConfigMap) *controller.Impl {
	impl := newController(ctx, configmap.NewStaticWatcher(configMaps...))
	// Without promotion the generated reconciler skips every key.
	_ = impl.Reconciler.(pkgreconciler.LeaderAware).Promote(pkgreconciler.UniversalBucket(), func(pkgreconciler.Bucket, types.NamespacedName) {})
	return impl
}

// Sync is impl's reconciler run on the caller's goroutine: what runs in the
// controller, without the turns (turns.Turns), so that a test sees how
// each reconcile ended.
func Sync(impl *controller.Impl) controller.Reconciler {
	return impl.Reconciler.(*turns.Turns).Unwrap()
}

// Woken returns the next key put on impl's queue within d (a wake-up by a
// tracker or a circuit), or false.
func Woken(impl *controller.Impl, d time.Duration) (types.NamespacedName, bool) {
	queue := impl.WorkQueue()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if queue.Len() > 0 {
			item, _ := queue.Get()
			queue.Done(item)
			key, ok := item.(types.NamespacedName)
			return key, ok
		}
	}
	return types.NamespacedName{}, false
}

// TableFactory returns a factory for knative's TableTest: fake clients and
// informers holding the row's objects, and the reconciler of the controller
// newController builds of them (see Controller).
func TableFactory(newController func(context.Context, configmap.Watcher) *controller.Impl, configMaps ...*corev1.ConfigMap) pkgtesting.Factory {
	return func(t *testing.T, row *pkgtesting.TableRow) (controller.Reconciler, pkgtesting.ActionRecorderList, pkgtesting.EventList) {
		ctx, clients := Setup(t, row.Objects...)
		return Sync(Controller(ctx, newController, configMaps...)), pkgtesting.ActionRecorderList{clients.Buildsmith}, pkgtesting.EventList{Recorder: clients.Recorder}
	}
}
