package reconciler

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// leaderAwareReconciler is what the generated reconcilers are.
type leaderAwareReconciler interface {
	controller.Reconciler
	pkgreconciler.LeaderAware
}

// statusWriteRetryMax caps the delay before a status write that the API
// server refused for a passing reason (5xx, 429, a conflict, a timeout) is
// tried again: the work is done, only its record is missing, and a reconcile
// that finds the work done costs one registry HEAD at most. 4 s (jittered,
// at most 4.8 s) keeps Ready within 5 s of the API server answering again
// while an outage of it costs each object a HEAD every 4 s, not every 2.
const statusWriteRetryMax = 4 * time.Second

// StatusWrites wraps a generated reconciler so that a failure of its own —
// writing the status (or finalizers) after ReconcileKind — is retried on the
// policy's terms. Unwrapped, such an error drops the requeue Finish decided
// and leaves the key to the workqueue's global rate limiter, whose delay
// grows with every failure of any key (5 ms to 1000 s): after an outage of
// the API server, objects pushed long before became Ready many seconds after
// it answered again (TestStatusWritesRefusedAfterPush in test/e2e
// checks the bound now met). Now a passing API-server error is retried after a
// per-object backoff capped at 4 s (never sooner than a 429's
// Retry-After), and anything else after the policy's transient backoff.
func (p *Policy) StatusWrites(r controller.Reconciler) controller.Reconciler {
	return &statusWriteRetry{leaderAwareReconciler: r.(leaderAwareReconciler), policy: p}
}

type statusWriteRetry struct {
	leaderAwareReconciler
	policy *Policy
}

func (s *statusWriteRetry) Reconcile(ctx context.Context, key string) error {
	err := s.leaderAwareReconciler.Reconcile(ctx, key)
	// The policy's keys are NamespacedName strings ("/name" for cluster
	// kinds, whose queue keys are "name").
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	policyKey := types.NamespacedName{Namespace: namespace, Name: name}.String()
	if requeue, _ := controller.IsRequeueKey(err); err == nil || requeue ||
		controller.IsPermanentError(err) || controller.IsSkipKey(err) {
		s.policy.statusBackoff.Forget(policyKey)
		return err
	}
	return controller.NewRequeueAfter(s.policy.statusWriteDelay(policyKey, err))
}

// statusWriteDelay is the wait before the object whose status write failed
// with err is reconciled again.
func (p *Policy) statusWriteDelay(key string, err error) time.Duration {
	f := Classify(err)
	if f.Class == failure.Transient && isAPIServerPassing(err) {
		return max(p.jittered(p.statusBackoff.When(key)), f.RetryAfter)
	}
	return max(min(p.jittered(p.backoff.When(key)), p.opts.RetryMaxDelay), f.RetryAfter)
}

// isAPIServerPassing reports the API server's answers that pass by
// themselves: it is busy, restarting or electing a leader, or the object
// changed under us.
func isAPIServerPassing(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		apierrors.IsUnexpectedServerError(err)
}
