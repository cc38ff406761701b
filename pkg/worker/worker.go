// Package worker lets code that waits on something outside the process (a
// registry's answer, an upload, a Retry-After) say so, without knowing who
// runs it: the worker pool that runs a reconcile (turns.Turns) then
// lends the reconcile's worker to another one while it waits, so that a
// registry that hangs holds goroutines, not the workers every tenant shares.
package worker

import "context"

// Waiter is told when the code running on a context waits, and when the
// wait is over.
type Waiter interface {
	Wait() (done func())
}

type waiterKey struct{}

// With returns ctx carrying w; nil: waits on ctx are nobody's (work
// shared by several callers, each of which waits on it itself).
func With(ctx context.Context, w Waiter) context.Context {
	return context.WithValue(ctx, waiterKey{}, w)
}

// Wait marks the code running on ctx as waiting on something outside the
// process until done is called; waits may nest. Without a Waiter in ctx it
// does nothing.
func Wait(ctx context.Context) (done func()) {
	if w, ok := ctx.Value(waiterKey{}).(Waiter); ok {
		return w.Wait()
	}
	return func() {}
}
