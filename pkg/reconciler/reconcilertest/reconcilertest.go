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
	"k8s.io/client-go/tools/record"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	fakeserviceaccountinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/serviceaccount/fake"
	"knative.dev/pkg/controller"
	pkgtesting "knative.dev/pkg/reconciler/testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	fakeclient "github.com/buildsmith/buildsmith/pkg/client/clientset/versioned/fake"
	fakebuildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client/fake"
	fakebuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/builder/fake"
	fakeclusterbuilderinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterbuilder/fake"
	fakeclusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack/fake"
	fakeclusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore/fake"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
)

// Clients are the fakes a reconciler under test talks to.
type Clients struct {
	Buildsmith *fakeclient.Clientset
	Recorder   *record.FakeRecorder
}

// Setup returns a context with fake clients and informers that hold objects.
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
		case *v1alpha1.Builder:
			ours = append(ours, o)
			err = fakebuilderinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.ClusterBuilder:
			ours = append(ours, o)
			err = fakeclusterbuilderinformer.Get(ctx).Informer().GetIndexer().Add(o)
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

// Requeue kinds of an Outcome.
const (
	Resync    = "resync"
	Retry     = "retry"
	Poll      = "poll"
	NoRequeue = "permanent"
	// Circuit is a wait on the circuit of the place that failed, with the
	// safety-net requeue after MinDelay..MaxDelay.
	Circuit = "circuit"
)

// Outcome is what a reconcile must end in.
type Outcome struct {
	Ready       corev1.ConditionStatus
	Reason      string // of Ready
	Reconciling bool
	Stalled     bool
	// Requeue is Resync, Retry or Poll (a requeue after a delay within
	// [MinDelay, MaxDelay]) or NoRequeue (a permanent error).
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
	if ready != nil && want.MessageContains != "" && !strings.Contains(ready.Message, want.MessageContains) {
		t.Errorf("Ready message %q lacks %q", ready.Message, want.MessageContains)
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
	if want.Requeue == NoRequeue {
		if !controller.IsPermanentError(err) {
			t.Errorf("Reconcile = %v, want a permanent error", err)
		}
	} else {
		ok, delay := controller.IsRequeueKey(err)
		if !ok || delay < want.MinDelay || delay > want.MaxDelay {
			t.Errorf("Reconcile = %v (requeue %v after %v), want a requeue in [%v, %v]", err, ok, delay, want.MinDelay, want.MaxDelay)
		}
		prefix := "retrying in "
		if want.Requeue == Circuit {
			prefix = "retrying when "
		}
		if c := status.GetCondition(v1alpha1.ConditionReconciling); want.Reconciling && (c == nil || !strings.HasPrefix(c.Message, prefix)) {
			t.Errorf("Reconciling message = %+v, want %q…", c, prefix)
		}
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

// TableFactory returns a factory for knative's TableTest: fake clients and
// informers holding the row's objects, and the reconciler newReconciler
// makes of them (already promoted to leader).
func TableFactory(newReconciler func(ctx context.Context, clients *Clients) controller.Reconciler) pkgtesting.Factory {
	return func(t *testing.T, row *pkgtesting.TableRow) (controller.Reconciler, pkgtesting.ActionRecorderList, pkgtesting.EventList) {
		ctx, clients := Setup(t, row.Objects...)
		return newReconciler(ctx, clients), pkgtesting.ActionRecorderList{clients.Buildsmith}, pkgtesting.EventList{Recorder: clients.Recorder}
	}
}
