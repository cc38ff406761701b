package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

func newStack() *v1alpha1.ClusterStack {
	s := &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 4}}
	s.Status.ObservedGeneration = 4
	return s
}

func TestBackoffGrowsAndResets(t *testing.T) {
	p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil)
	p.jitter = func() float64 { return 0.5 } // no spread
	ctx := context.Background()
	transient := failure.Transientf(registry.ReasonRegistryUnavailable, "connection refused")
	delay := func(err error) time.Duration {
		t.Helper()
		ok, d := controller.IsRequeueKey(p.Finish(ctx, newStack(), err))
		if !ok {
			t.Fatalf("no requeue for %v", err)
		}
		return d
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if got := delay(transient); got != want {
			t.Errorf("retry %d: %v, want %v", i+1, got, want)
		}
	}
	if got := delay(nil); got != 10*time.Minute {
		t.Errorf("resync after success: %v", got)
	}
	if got := delay(transient); got != time.Second {
		t.Errorf("first retry after a success: %v, want 1s (backoff reset)", got)
	}
	// The server's Retry-After is a floor.
	limited := &failure.Error{Class: failure.Transient, Reason: registry.ReasonRateLimited, RetryAfter: 45 * time.Second, Err: errors.New("429")}
	if got := delay(limited); got != 45*time.Second {
		t.Errorf("with Retry-After 45s: %v", got)
	}
	// The cap.
	for range 20 {
		delay(transient)
	}
	if got := delay(transient); got != 5*time.Minute {
		t.Errorf("capped delay %v, want 5m", got)
	}
}

func TestJitterSpreads(t *testing.T) {
	p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil)
	lo, hi := time.Hour, time.Duration(0)
	for range 200 {
		d := p.jittered(10 * time.Second)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 8*time.Second || hi > 12*time.Second || hi-lo < 2*time.Second {
		t.Errorf("jittered 10s spans [%v, %v], want within [8s, 12s] and spread", lo, hi)
	}
}

func TestClassifyAPIErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "buildsmith.dev", Resource: "builders"}
	tests := []struct {
		err    error
		class  failure.Class
		reason string
	}{
		{apierrors.NewConflict(gr, "b", errors.New("modified")), failure.Transient, "APIServerUnavailable"},
		{apierrors.NewServerTimeout(gr, "update", 2), failure.Transient, "APIServerUnavailable"},
		{apierrors.NewServiceUnavailable("etcd leader changed"), failure.Transient, "APIServerUnavailable"},
		{apierrors.NewInternalError(errors.New("boom")), failure.Transient, "APIServerUnavailable"},
		{apierrors.NewTooManyRequests("slow down", 7), failure.Transient, "APIServerThrottled"},
		{apierrors.NewForbidden(gr, "b", errors.New("rbac")), failure.Waiting, "Forbidden"},
		{fmt.Errorf("store: %w", failure.Permanentf("DuplicateBuildpack", "x")), failure.Permanent, "DuplicateBuildpack"},
		{errors.New("unexpected"), failure.Transient, "InternalError"},
	}
	for _, tc := range tests {
		got := Classify(tc.err)
		if got.Class != tc.class || got.Reason != tc.reason {
			t.Errorf("Classify(%v) = %v %s, want %v %s", tc.err, got.Class, got.Reason, tc.class, tc.reason)
		}
	}
	if d := Classify(apierrors.NewTooManyRequests("slow down", 7)).RetryAfter; d != 7*time.Second {
		t.Errorf("throttle Retry-After %v, want 7s", d)
	}
}

// TestKstatus: the outcomes read as kstatus says Flux and Argo CD will show
// them; a Ready object whose re-check failed for a passing reason stays
// Current (issue 26: a blip must not flip health checks).
func TestKstatus(t *testing.T) {
	tests := []struct {
		err    error
		usable bool
		want   status.Status
	}{
		{nil, false, status.CurrentStatus},
		{failure.Transientf(registry.ReasonRegistryUnavailable, "refused"), false, status.InProgressStatus},
		{failure.Transientf(registry.ReasonRegistryUnavailable, "refused"), true, status.CurrentStatus},
		{failure.Waitingf(registry.ReasonImageNotFound, "no such tag"), false, status.InProgressStatus},
		{failure.Permanentf(ReasonInvalidSpec, "bad tag"), false, status.FailedStatus},
	}
	for _, tc := range tests {
		s := newStack()
		if tc.usable {
			s.Status.MarkReady()
		}
		NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil).Finish(context.Background(), s, tc.err)
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
		if err != nil {
			t.Fatal(err)
		}
		res, err := status.Compute(&unstructured.Unstructured{Object: u})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.want {
			t.Errorf("%v: kstatus %s (%s), want %s", tc.err, res.Status, res.Message, tc.want)
		}
	}
}

// TestPermanentEventOnlyOnTransition: the same permanent failure again (a
// tracked Secret changed, a restart) records no second event.
func TestPermanentEventOnlyOnTransition(t *testing.T) {
	recorder := record.NewFakeRecorder(10)
	ctx := controller.WithEventRecorder(context.Background(), recorder)
	p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil)
	s := newStack()
	bad := failure.Permanentf(ReasonInvalidSpec, "bad tag")

	first := p.Finish(ctx, s, bad)
	second := p.Finish(ctx, s, bad)
	for i, err := range []error{first, second} {
		if !controller.IsPermanentError(err) {
			t.Errorf("reconcile %d: %v is not permanent", i+1, err)
		}
	}
	var event *pkgreconciler.ReconcilerEvent
	if !pkgreconciler.EventAs(first, &event) || event.Reason != ReasonInvalidSpec {
		t.Errorf("first failure carries no %s event: %v", ReasonInvalidSpec, first)
	}
	if pkgreconciler.EventAs(second, &event) || !controller.IsSkipKey(second) {
		t.Errorf("repeated failure = %v, want a skip key without event", second)
	}
}

func TestDelayNeverExceedsTheCap(t *testing.T) {
	opts := DefaultOptions()
	p := NewPolicy("ClusterStack", opts, nil, nil, nil)
	p.jitter = func() float64 { return 0.999 } // +20 %
	for range 30 {
		_, d := controller.IsRequeueKey(p.Finish(context.Background(), newStack(), failure.Transientf("RegistryUnavailable", "x")))
		if d > opts.RetryMaxDelay {
			t.Fatalf("delay %v above the cap %v", d, opts.RetryMaxDelay)
		}
	}
}

func TestEnqueueOnChange(t *testing.T) {
	var enqueued int
	h := EnqueueOnChange(func(any) { enqueued++ })
	old := newStack()
	statusOnly := old.DeepCopy()
	statusOnly.Status.MarkReady()
	statusOnly.ResourceVersion = "2"
	h.OnUpdate(old, statusOnly)
	if enqueued != 0 {
		t.Errorf("a status-only update was enqueued")
	}
	for _, change := range []func(*v1alpha1.ClusterStack){
		func(s *v1alpha1.ClusterStack) { s.Generation++ },
		func(s *v1alpha1.ClusterStack) { s.Annotations = map[string]string{"a": "b"} },
		func(s *v1alpha1.ClusterStack) { s.Labels = map[string]string{"a": "b"} },
		func(s *v1alpha1.ClusterStack) { now := metav1.Now(); s.DeletionTimestamp = &now },
	} {
		changed := old.DeepCopy()
		change(changed)
		h.OnUpdate(old, changed)
	}
	if enqueued != 4 {
		t.Errorf("%d of 4 spec/metadata changes enqueued", enqueued)
	}
}

// TestReconcileRequestRestartsBackoff: a new value of the reconcile-request
// annotation is echoed in status and makes the next failure wait the first
// backoff step again; the same value again changes nothing.
func TestReconcileRequestRestartsBackoff(t *testing.T) {
	p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil)
	p.jitter = func() float64 { return 0.5 } // no spread
	ctx := context.Background()
	transient := failure.Transientf(registry.ReasonRegistryUnavailable, "connection refused")
	stack := newStack()
	finish := func() time.Duration {
		t.Helper()
		ok, d := controller.IsRequeueKey(p.Finish(ctx, stack, transient))
		if !ok {
			t.Fatal("no requeue")
		}
		return d
	}
	for range 12 {
		finish()
	}
	if got := finish(); got != 5*time.Minute {
		t.Fatalf("before the request: %v, want the 5m cap", got)
	}

	stack.Annotations = map[string]string{v1alpha1.ReconcileRequestedAtAnnotation: "2026-12-03T08:00:00Z"}
	if got := finish(); got != time.Second {
		t.Errorf("after the request: %v, want 1s", got)
	}
	if got := stack.Status.LastHandledReconcileAt; got != "2026-12-03T08:00:00Z" {
		t.Errorf("lastHandledReconcileAt = %q", got)
	}
	if got := finish(); got != 2*time.Second {
		t.Errorf("the same request again: %v, want 2s (the backoff goes on)", got)
	}
}

// TestFailureKeepsTheNewestStatus: a failed reconcile that worked on a
// stale copy (the informer had not seen the last status write) records its
// conditions on the API server's status, not on the stale one.
func TestFailureKeepsTheNewestStatus(t *testing.T) {
	latest := newStack()
	latest.ResourceVersion = "8"
	latest.Status.BuildImage = v1alpha1.ResolvedImage{Image: "r.example/build:1", LatestImage: "r.example/build@sha256:aa"}
	latest.Status.MarkReady()
	p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, RefreshStatus(
		func(context.Context, string, string) (*v1alpha1.ClusterStack, error) { return latest.DeepCopy(), nil },
		func(dst, src *v1alpha1.ClusterStack) { dst.Status = src.Status }))

	stale := newStack()
	stale.ResourceVersion = "7" // before the Ready status was written
	p.Finish(context.Background(), stale, failure.Transientf(registry.ReasonRegistryUnavailable, "connection refused"))
	if stale.Status.BuildImage.LatestImage != latest.Status.BuildImage.LatestImage {
		t.Errorf("status.buildImage = %+v, want the API server's %+v", stale.Status.BuildImage, latest.Status.BuildImage)
	}
	// The newest status says the stack is usable: it stays Ready.
	if c := stale.Status.GetCondition(v1alpha1.ConditionReady); c == nil || !c.IsTrue() {
		t.Errorf("Ready = %+v, want the API server's True kept", c)
	}
	if c := stale.Status.GetCondition(v1alpha1.ConditionUpToDate); c == nil || !c.IsFalse() || c.Reason != registry.ReasonRegistryUnavailable {
		t.Errorf("UpToDate = %+v, want False %s", c, registry.ReasonRegistryUnavailable)
	}

	// A success keeps what the reconcile found: no refresh.
	fresh := newStack()
	fresh.ResourceVersion = "7"
	p.Finish(context.Background(), fresh, nil)
	if fresh.Status.BuildImage.LatestImage != "" {
		t.Errorf("a success took the API server's status: %+v", fresh.Status.BuildImage)
	}
}

// TestLongMessagesAreCut: an error quoting a registry's answer of any size
// gives a condition message of at most maxMessage bytes, still valid UTF-8,
// and saying it was cut; short messages are kept whole; control characters
// (C0 and C1, an escape sequence) are dropped, but newlines and tabs.
func TestLongMessagesAreCut(t *testing.T) {
	p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil)
	for _, tc := range []struct {
		name, message string
		cut           bool
		want          string
	}{
		{name: "short", message: "registry said no"},
		{name: "a 100 KiB answer", message: strings.Repeat("é", 50<<10), cut: true},
		{name: "control characters", message: "registry said \x1b[2J\x1b]0;owned\x07no\u0085\x00\n\tdetails \xff",
			want: "registry said [2J]0;ownedno\n\tdetails \uFFFD"},
		{name: "bidi overrides and separators", message: "image \u202egnp.exe\u202c ok\u2028\u2066x\u2069",
			want: "image gnp.exe okx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack()
			_ = p.Finish(context.Background(), s, failure.Permanentf(ReasonInvalidSpec, "%s", tc.message))
			got := s.Status.GetCondition(v1alpha1.ConditionReady).Message
			switch {
			case len(got) > maxMessage || !utf8.ValidString(got):
				t.Errorf("message of %d bytes (valid UTF-8: %v)", len(got), utf8.ValidString(got))
			case tc.cut && !strings.HasSuffix(got, "(cut)"):
				t.Errorf("a cut message that does not say so: …%q", got[len(got)-20:])
			case !tc.cut && got != cmp.Or(tc.want, tc.message):
				t.Errorf("message %q, want %q", got, cmp.Or(tc.want, tc.message))
			}
		})
	}
}

// TestUsableStaysReady: which failures keep a stack Ready (issue 26), what
// the conditions then say, and the state the metrics read from them.
func TestUsableStaysReady(t *testing.T) {
	transient := failure.Transientf(registry.ReasonRegistryUnavailable, "GET …: 503")
	for _, tc := range []struct {
		name      string
		usable    bool // Ready for its generation before the reconcile
		err       error
		ready     corev1.ConditionStatus
		upToDate  corev1.ConditionStatus
		state     string
		reconcile bool // Reconciling=True
	}{
		{"usable, transient: stays Ready", true, transient, corev1.ConditionTrue, corev1.ConditionFalse, StateStale, false},
		{"usable, transient while updating: not Ready", true, Updating(transient), corev1.ConditionFalse, corev1.ConditionFalse, StateReconciling, true},
		{"new generation, transient: not Ready", false, transient, corev1.ConditionFalse, corev1.ConditionFalse, StateReconciling, true},
		{"usable, waiting: not Ready", true, failure.Waitingf(registry.ReasonImageNotFound, "gone"), corev1.ConditionFalse, corev1.ConditionFalse, StateReconciling, true},
		{"usable, permanent: stalled", true, failure.Permanentf(ReasonInvalidSpec, "bad"), corev1.ConditionFalse, corev1.ConditionFalse, StateStalled, false},
		{"usable, success", true, nil, corev1.ConditionTrue, corev1.ConditionTrue, StateReady, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy("ClusterStack", DefaultOptions(), nil, nil, nil)
			s := newStack()
			s.Status.MarkReady()
			if !tc.usable {
				s.Generation++ // as the generated reconciler hands it over: Ready reset
				s.GetConditionSet().Manage(s.GetStatus()).MarkUnknown(v1alpha1.ConditionReady, "NewObservedGenFailure", "unsuccessfully observed a new generation")
			}
			p.Finish(context.Background(), s, tc.err)
			ready, upToDate := s.Status.GetCondition(v1alpha1.ConditionReady), s.Status.GetCondition(v1alpha1.ConditionUpToDate)
			if ready.Status != tc.ready || upToDate == nil || upToDate.Status != tc.upToDate {
				t.Errorf("Ready %+v, UpToDate %+v; want %s, %s", ready, upToDate, tc.ready, tc.upToDate)
			}
			if c := s.Status.GetCondition(v1alpha1.ConditionReconciling); (c != nil && c.IsTrue()) != tc.reconcile {
				t.Errorf("Reconciling %+v, want %v", c, tc.reconcile)
			}
			if got := StateOf(s); got.State != tc.state || got.Ready != string(tc.ready) {
				t.Errorf("state %+v, want %s with Ready %s", got, tc.state, tc.ready)
			}
			p.Finish(context.Background(), s, nil)
			if got := StateOf(s); got != (ObjectState{StateReady, "True", ""}) {
				t.Errorf("state after a success %+v, want ready", got)
			}
		})
	}
}

// TestOutcome: Finish returns its decision as a typed Outcome (class,
// requeue, delay) around what knative acts on, which knative still sees.
func TestOutcome(t *testing.T) {
	opts := DefaultOptions()
	for _, tc := range []struct {
		err            error
		usable         bool
		class, requeue string
	}{
		{nil, false, "ready", RequeueResync},
		{failure.Transientf(registry.ReasonRegistryUnavailable, "refused"), false, "transient", RequeueRetry},
		{failure.Transientf(registry.ReasonRegistryUnavailable, "refused"), true, "stale", RequeueRetry},
		{failure.Waitingf(registry.ReasonImageNotFound, "no such tag"), false, "waiting", RequeuePoll},
		{failure.Permanentf(ReasonInvalidSpec, "bad tag"), false, "permanent", RequeueNone},
	} {
		s := newStack()
		if tc.usable {
			s.Status.MarkReady()
		}
		got := NewPolicy("ClusterStack", opts, nil, nil, nil).Finish(context.Background(), s, tc.err)
		o := OutcomeOf(got)
		if o == nil || o.Class != tc.class || o.Requeue != tc.requeue {
			t.Errorf("%v: outcome %+v, want %s with requeue %s", tc.err, o, tc.class, tc.requeue)
			continue
		}
		requeued, delay := controller.IsRequeueKey(got)
		switch {
		case tc.requeue == RequeueNone:
			if !controller.IsPermanentError(got) || requeued {
				t.Errorf("%v: %v is not a permanent error to knative", tc.err, got)
			}
		case !requeued || delay != o.Delay || delay <= 0:
			t.Errorf("%v: knative sees a requeue %v after %v, the outcome says %v", tc.err, requeued, delay, o.Delay)
		}
	}
}
