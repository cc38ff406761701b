package reconciler

import (
	"context"
	"errors"
	"time"

	pkgreconciler "knative.dev/pkg/reconciler"
)

// How a reconcile asks to be run again (Outcome.Requeue).
const (
	// RequeueResync: it succeeded, and runs again at the resync interval.
	RequeueResync = "resync"
	// RequeueRetry: a transient failure, run again after its backoff.
	RequeueRetry = "retry"
	// RequeuePoll: waiting on something outside (a dependency, a tag),
	// run again at the poll interval or when a dependency changes.
	RequeuePoll = "poll"
	// RequeueCircuit: waiting on the circuit of the registry that failed,
	// whose probe wakes every object waiting on it.
	RequeueCircuit = "circuit"
	// RequeueNone: a permanent failure, run again only when the object or
	// what it reads changes.
	RequeueNone = "none"
)

// Outcome is how the Policy ended a reconcile: its class (the reconciles
// metric's outcome: ready, stale, transient, waiting or permanent) and how
// it asks to be run again. Policy.Finish returns it around what the
// generated reconciler and the queue act on (an event, a requeue), so that
// whoever asks — a test — reads the decision itself rather than the words
// of the conditions that tell users about it.
type Outcome struct {
	Class   string
	Requeue string
	Delay   time.Duration // with RequeueResync, RequeueRetry, RequeuePoll or RequeueCircuit
	event   error         // never nil
}

func (o *Outcome) Error() string { return o.event.Error() }
func (o *Outcome) Unwrap() error { return o.event }

// OutcomeOf is the Outcome of what ReconcileKind returned; nil when there
// is none (a success with no resync).
func OutcomeOf(err error) *Outcome {
	var o *Outcome
	if errors.As(err, &o) {
		return o
	}
	return nil
}

// end records a reconcile of p's kind ending as class (requeue, after
// delay) and returns event (nil: none) as ReconcileKind returns it.
func (p *Policy) end(ctx context.Context, class, requeue string, delay time.Duration, event error) pkgreconciler.Event {
	p.record(ctx, class, delay)
	if event == nil {
		return nil
	}
	return &Outcome{Class: class, Requeue: requeue, Delay: delay, event: event}
}
