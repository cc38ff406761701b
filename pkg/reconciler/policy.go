// Package reconciler holds what every buildsmith reconciler shares: the one
// mapping from how a reconcile ended to the object's conditions, an event and
// what the workqueue does next.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/kmeta"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Object is what every buildsmith kind is.
type Object interface {
	kmeta.Accessor
	duckv1.KRShaped
	GetGroupVersionKind() schema.GroupVersionKind
	Conditions() *v1alpha1.ConditionedStatus
}

// Policy turns the outcome of a reconcile into conditions, an event on a
// transition, and the requeue, as the class of the error says:
//
//	success    Ready=True, UpToDate=True; Reconciling and Stalled removed;
//	           backoff reset; requeue after the resync interval.
//	transient  a usable object (Ready for its current generation) whose
//	           reconcile was a re-check, not an update (see Updating):
//	           Ready stays True and the resolved status stays as it is;
//	           UpToDate=False says what failed and when it is tried
//	           again (MarkStale). Otherwise Ready=False, UpToDate=False,
//	           Reconciling=True. Either way: when the place it failed on
//	           (a registry or a repository) has an open circuit, wait on
//	           it, woken the moment a probe gets an answer, with a
//	           requeue after the maximum delay as a safety net only;
//	           else "retrying in 4s": requeue after the per-object
//	           exponential backoff (jittered ±20 %, never sooner than the
//	           server's Retry-After).
//	waiting    Ready=False, UpToDate=False, Reconciling=True; requeue after
//	           the poll interval (dependency changes requeue at once via
//	           trackers).
//	permanent  Ready=False, UpToDate=False, Stalled=True; no requeue until
//	           the object or a dependency changes; a Warning event with the
//	           reason.
//
// A Policy belongs to one controller: it holds that controller's backoffs.
type Policy struct {
	kind     string // keys circuit waits: a ClusterStore and a ClusterStack may share a name
	opts     Options
	circuits *registry.Circuits
	enqueue  func(types.NamespacedName)
	backoff  workqueue.TypedRateLimiter[string]
	// statusBackoff spaces the retries of status writes the API server
	// refused (see StatusWrites).
	statusBackoff workqueue.TypedRateLimiter[string]
	jitter        func() float64 // in [0, 1)
	refresh       func(context.Context, Object) error
	states        *kindStates // nil: not reported (tests)
}

// NewPolicy returns the Policy of the controller of kind: enqueue puts a
// woken object back on the controller's queue, and refresh (nil: the
// reconciled copy is trusted) replaces the status a failed reconcile
// started from with the API server's (see RefreshStatus). circuits may be
// nil.
func NewPolicy(kind string, opts Options, circuits *registry.Circuits,
	enqueue func(types.NamespacedName), refresh func(context.Context, Object) error) *Policy {
	return &Policy{
		kind:     kind,
		opts:     opts,
		circuits: circuits,
		enqueue:  enqueue,
		refresh:  refresh,
		backoff:  workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBaseDelay, opts.RetryMaxDelay),
		statusBackoff: workqueue.NewTypedItemExponentialFailureRateLimiter[string](
			min(250*time.Millisecond, opts.RetryBaseDelay), statusWriteRetryMax),
		jitter: rand.Float64,
	}
}

// RefreshStatus returns a refresh for objects of type T: get reads one from
// the API server, and when its resourceVersion differs from the reconciled
// copy's, copyStatus puts its status on that copy.
//
// Why: a reconcile may start from an informer copy older than the status the
// controller last wrote (an enqueue that beat the watch event). On failure
// only the conditions change, so the stale copy's resolved fields would be
// written back, and knative's generated status update, on the conflict,
// writes them over the newer status: a Ready builder's latestImage wiped by
// a registry outage (seen in the e2e fault matrix). One GET per failed
// reconcile, which backoff already spaces out.
func RefreshStatus[T Object](get func(ctx context.Context, namespace, name string) (T, error), copyStatus func(dst, src T)) func(context.Context, Object) error {
	return func(ctx context.Context, obj Object) error {
		latest, err := get(ctx, obj.GetNamespace(), obj.GetName())
		if err != nil {
			return err
		}
		if latest.GetResourceVersion() != obj.GetResourceVersion() {
			copyStatus(obj.(T), latest)
		}
		return nil
	}
}

// Reconcile runs do, the reconcile of obj, on the context it is to use, and
// records how it ended (Finish): every ReconcileKind is this call.
//
// An object whose status says nothing of its current generation yet (new,
// or just edited) is reconciled without waiting out any Retry-After inside
// registry calls: a call under a rate limit could otherwise wait 10 s at a
// time, ten times over, before its first status is written, leaving a user
// who just applied it in silence. Its first reconcile fails fast instead
// (RateLimited, in status within seconds), waits on the circuit, and the
// next one, with a status to show, waits out short holds as every other.
func (p *Policy) Reconcile(ctx context.Context, obj Object, do func(context.Context) error) pkgreconciler.Event {
	if obj.GetStatus().ObservedGeneration != obj.GetGeneration() {
		ctx = registry.WithMaxHoldWait(ctx, 0)
	}
	return p.Finish(ctx, obj, do(ctx))
}

// Updating marks err as having happened while the object was being brought
// to new inputs (a builder pushing an image for a new fingerprint), rather
// than while re-checking inputs that did not change as far as the controller
// knows: a usable object does not stay Ready through it, since what it
// offers is no longer what its inputs ask for.
func Updating(err error) error {
	if err == nil {
		return nil
	}
	return &updatingError{err}
}

type updatingError struct{ error }

func (e *updatingError) Unwrap() error { return e.error }

// Finish records on obj's status how reconciling it ended (err nil for
// success) and returns what ReconcileKind returns.
func (p *Policy) Finish(ctx context.Context, obj Object, err error) pkgreconciler.Event {
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if err != nil && p.refresh != nil {
		// Failures keep the status: the newest one. (If the API server
		// cannot be read, the copy is all there is.)
		_ = p.refresh(ctx, obj)
	}
	conditions := obj.Conditions()
	before := transitionOf(conditions)
	// Usable: the resolved status is good for this generation, as the newest
	// status says (a new generation starts with Ready Unknown).
	usable := conditions.IsUsable(obj.GetGeneration())
	if requested := obj.GetAnnotations()[v1alpha1.ReconcileRequestedAtAnnotation]; requested != "" &&
		requested != conditions.LastHandledReconcileAt {
		// Someone asked for this reconcile (its annotation's change
		// enqueued it at once): a failure now starts the backoff afresh
		// rather than waiting minutes after an old streak.
		p.backoff.Forget(key.String())
		conditions.LastHandledReconcileAt = requested
	}

	if err == nil {
		return p.succeeded(ctx, obj, key, before)
	}
	return p.failed(ctx, obj, key, before, usable, err)
}

// succeeded records on obj's status that reconciling it succeeded; before
// is how its conditions stood.
func (p *Policy) succeeded(ctx context.Context, obj Object, key types.NamespacedName, before transition) pkgreconciler.Event {
	obj.Conditions().MarkReady()
	p.Forget(key)
	p.recordTransition(ctx, obj, before, "")
	if p.opts.ResyncInterval > 0 {
		delay := p.jittered(p.opts.ResyncInterval)
		return p.end(ctx, "ready", RequeueResync, delay, controller.NewRequeueAfter(delay))
	}
	return p.end(ctx, "ready", RequeueResync, 0, nil)
}

// failed records on obj's status that reconciling it failed with err;
// before is how its conditions stood, usable whether its resolved status
// was good for its generation.
func (p *Policy) failed(ctx context.Context, obj Object, key types.NamespacedName, before transition, usable bool, err error) pkgreconciler.Event {
	conditions := obj.Conditions()
	f := Classify(err)
	// The whole chain: what wrapped the classified error says where it
	// happened ("system pre buildpacks: …", "in meta-buildpack …: …").
	message := capMessage(err.Error())
	// A re-check that failed for a passing reason: what the object offers
	// is as good as before (every resolved field is kept), so it stays
	// Ready, and UpToDate says what failed.
	var updating *updatingError
	stale := f.Class == failure.Transient && usable && !errors.As(err, &updating)
	switch f.Class {
	case failure.Permanent:
		return p.stalled(ctx, obj, key, before, f, message)
	case failure.Waiting:
		p.backoff.Forget(key.String())
		p.forgetWaits(key) // it moved on from any failing place
		conditions.MarkRetrying(f.Reason, message,
			fmt.Sprintf("retrying in %s, or when a dependency changes", p.opts.PollInterval))
		p.recordTransition(ctx, obj, before, message)
		delay := p.jittered(p.opts.PollInterval)
		return p.end(ctx, "waiting", RequeuePoll, delay, controller.NewRequeueAfter(delay))
	default:
		delay, requeue, retry := p.transient(key, f)
		class := "transient"
		if stale {
			conditions.MarkStale(f.Reason, message+"; "+retry)
			class = "stale"
		} else {
			conditions.MarkRetrying(f.Reason, message, retry)
		}
		p.recordTransition(ctx, obj, before, message)
		return p.end(ctx, class, requeue, delay, controller.NewRequeueAfter(delay))
	}
}

// stalled records on obj's status the permanent failure f, said by
// message; before is how its conditions stood.
func (p *Policy) stalled(ctx context.Context, obj Object, key types.NamespacedName, before transition, f *failure.Error, message string) pkgreconciler.Event {
	conditions := obj.Conditions()
	conditions.MarkStalled(f.Reason, message)
	p.Forget(key)
	if !conditionChanged(before.ready, conditions.GetCondition(v1alpha1.ConditionReady)) {
		// Same failure as last time (a tracked Secret changed, the
		// controller restarted): no event again. A skip key is
		// forgotten by the queue without the generated reconciler's
		// "InternalError" event.
		return p.end(ctx, "permanent", RequeueNone, 0, controller.NewPermanentError(controller.NewSkipKey(key.String())))
	}
	// The event travels inside the permanent error: the generated
	// reconciler records it (instead of an "InternalError") and the
	// queue forgets the key.
	return p.end(ctx, "permanent", RequeueNone, 0,
		controller.NewPermanentError(pkgreconciler.NewEvent(corev1.EventTypeWarning, f.Reason, "%s", message)))
}

// transient returns when to try again after a transient failure f, how
// (RequeueCircuit or RequeueRetry), and says so for a condition's message.
func (p *Policy) transient(key types.NamespacedName, f *failure.Error) (time.Duration, string, string) {
	place, outcome := p.waitOnCircuit(key, f)
	if outcome == registry.Waiting {
		// The place failed for everyone: its circuit's probe tries again
		// for all its waiters, so this object's own backoff would only
		// add requests and delay.
		delay := max(p.jittered(p.opts.RetryMaxDelay), f.RetryAfter)
		if f.RetryAfter > p.opts.RetryMaxDelay {
			// Not probed before the registry's Retry-After.
			return delay, RequeueCircuit, fmt.Sprintf("retrying in %s (%s asked to be left alone until then; its circuit is probed then, for every object waiting on it)",
				f.RetryAfter.Round(time.Second), place)
		}
		return delay, RequeueCircuit, WaitingMessage(place, p.opts.RetryMaxDelay)
	}
	// Jitter first, then the cap, then the server's wish: the cap is a
	// promise to the user, Retry-After a promise to the server.
	delay := max(min(p.jittered(p.backoff.When(key.String())), p.opts.RetryMaxDelay), f.RetryAfter)
	if outcome == registry.TenantLimit {
		return delay, RequeueRetry, fmt.Sprintf("retrying in %s: the objects of namespace %s already wait on %d other failing registries "+
			"(--max-failing-registries-per-namespace)", delay.Round(time.Second), key.Namespace, p.circuits.HostsPerTenant())
	}
	return delay, RequeueRetry, fmt.Sprintf("retrying in %s", delay.Round(time.Second))
}

// maxMessage bounds a condition's (and event's) message: errors may quote
// a registry's answer, which can be any size, and a status the API server
// refuses as too large would never be written.
const maxMessage = 1024

// capMessage cuts m to maxMessage bytes, on a rune boundary, saying so,
// and makes it printable: a registry's answer quoted in it may hold control
// characters (escape sequences a terminal running kubectl would obey) and
// bytes that are not UTF-8. Newlines and tabs stay.
func capMessage(m string) string {
	m = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		// Controls, and what reorders or breaks the text a terminal shows
		// (bidi overrides, line and paragraph separators).
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.In(r, unicode.Zl, unicode.Zp) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(m, "\uFFFD"))
	if len(m) <= maxMessage {
		return m
	}
	const cut = " … (cut)"
	end := maxMessage - len(cut)
	for end > 0 && !utf8.RuneStart(m[end]) {
		end--
	}
	return m[:end] + cut
}

// WaitingMessage is the Reconciling message of an object waiting on the
// circuit of place, with a safety-net requeue after safetyNet.
func WaitingMessage(place registry.Place, safetyNet time.Duration) string {
	return fmt.Sprintf("retrying when %s answers again (probed about every second), at the latest in %s", place, safetyNet)
}

// Forget drops the object's backoff and circuit waits (on success and when
// it is deleted).
func (p *Policy) Forget(key types.NamespacedName) {
	p.backoff.Forget(key.String())
	p.statusBackoff.Forget(key.String())
	p.forgetWaits(key)
}

// forgetWaits drops the object's circuit waits: a circuit nobody waits on
// is no longer probed.
func (p *Policy) forgetWaits(key types.NamespacedName) {
	if p.circuits != nil {
		p.circuits.Forget(p.waitKey(key))
	}
}

// waitOnCircuit registers the object as a waiter on the circuit of the
// place f failed on, its namespace being its tenant (a cluster kind's, ""
// is none: those are the operator's, whose registries are not bounded),
// and forgets what it waited on before.
func (p *Policy) waitOnCircuit(key types.NamespacedName, f *failure.Error) (registry.Place, registry.WaitOutcome) {
	failed, ok := registry.PlaceOf(f)
	if !ok || failed.Host == "" || p.circuits == nil || p.enqueue == nil {
		p.forgetWaits(key) // it moved on from any failing place
		return registry.Place{}, registry.NotFailing
	}
	return failed.Place, p.circuits.Wait(failed.Host, failed.Repository, registry.Waiter{Tenant: key.Namespace, Key: p.waitKey(key)},
		func() { p.enqueue(key) })
}

func (p *Policy) waitKey(key types.NamespacedName) string { return p.kind + ":" + key.String() }

// conditionChanged reports whether a condition's status or reason differ.
func conditionChanged(before, after *apis.Condition) bool {
	if before == nil || after == nil {
		return before != after
	}
	return before.Status != after.Status || before.Reason != after.Reason
}

// transition is what events are recorded for: Ready and UpToDate.
type transition struct{ ready, upToDate *apis.Condition }

func transitionOf(c *v1alpha1.ConditionedStatus) transition {
	return transition{ready: c.GetCondition(v1alpha1.ConditionReady).DeepCopy(),
		upToDate: c.GetCondition(v1alpha1.ConditionUpToDate).DeepCopy()}
}

// recordTransition records an event when Ready's status or reason changed;
// when only UpToDate's did, one when a re-check starts failing (or fails
// for another reason) and one when it succeeds again — not every retry.
// message is the failure's, without the retry the condition adds.
func (p *Policy) recordTransition(ctx context.Context, obj Object, before transition, message string) {
	recorder := controller.GetEventRecorder(ctx)
	if recorder == nil {
		return
	}
	after := transitionOf(obj.Conditions())
	kind := obj.GetGroupVersionKind().Kind
	switch {
	case after.ready != nil && conditionChanged(before.ready, after.ready):
		if after.ready.IsTrue() {
			recorder.Event(obj, corev1.EventTypeNormal, "Ready", fmt.Sprintf("%s is Ready", kind))
			return
		}
		recorder.Event(obj, corev1.EventTypeWarning, after.ready.Reason, after.ready.Message)
	case after.upToDate == nil || !conditionChanged(before.upToDate, after.upToDate):
	case after.upToDate.IsFalse():
		recorder.Event(obj, corev1.EventTypeWarning, after.upToDate.Reason, message)
	case before.upToDate != nil: // True again; an object from before UpToDate existed gets no event
		recorder.Event(obj, corev1.EventTypeNormal, "UpToDate", fmt.Sprintf("%s is up to date again", kind))
	}
}

// jittered spreads d by ±20 %, so that objects that failed together do not
// retry together.
func (p *Policy) jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*p.jitter()))
}

// Classify returns err's classification. Errors classified where they arose
// (registry, image assembly, spec validation) keep theirs; Kubernetes API
// errors are placed here; anything else is Transient "InternalError".
func Classify(err error) *failure.Error {
	if f, ok := failure.As(err); ok {
		return f
	}
	switch {
	case apierrors.IsTooManyRequests(err):
		delay, _ := apierrors.SuggestsClientDelay(err)
		return &failure.Error{Class: failure.Transient, Reason: "APIServerThrottled", Err: err,
			RetryAfter: time.Duration(delay) * time.Second}
	case apierrors.IsConflict(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return &failure.Error{Class: failure.Transient, Reason: "APIServerUnavailable", Err: err}
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return &failure.Error{Class: failure.Waiting, Reason: "Forbidden", Err: err}
	}
	return &failure.Error{Class: failure.Transient, Reason: "InternalError", Err: err}
}

// ReasonInvalidSpec is the reason of a spec that fails validation.
const ReasonInvalidSpec = "InvalidSpec"
