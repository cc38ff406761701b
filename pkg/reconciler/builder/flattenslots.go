package builder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// DefaultConcurrentFlattens is how many pushes flatten at once by default.
const DefaultConcurrentFlattens = 2

// DefaultMaxFlattenDuration bounds a push that flattens, by default: 1 GiB
// of buildpack layers read and the flattened layers written at 1 MiB/s.
const DefaultMaxFlattenDuration = 30 * time.Minute

// Reasons of the flatten slots.
const (
	// ReasonFlattenQueued: the builder waits for one of the controller's
	// flatten slots (--max-concurrent-flattens).
	ReasonFlattenQueued = "FlattenQueued"
	// ReasonFlattenTimedOut: a push that flattens took longer than
	// --max-flatten-duration (its registries were too slow), and gave its
	// slot back.
	ReasonFlattenTimedOut = "FlattenTimedOut"
)

// flattenSlotWait is how long a push waits for a slot before its reconcile
// ends, Reconciling with ReasonFlattenQueued, to come back later.
const flattenSlotWait = 10 * time.Second

// FlattenSlots bound the pushes that flatten at once, controller-wide, and
// those of one namespace (the cluster kinds counting as one): flattening
// is disk (a scratch directory of up to --max-flattened-bytes each), CPU
// (decompressing and compressing) and registry downloads, and a reconcile
// waiting on a registry lends its worker, so a bound on workers bounds
// none of it. So the scratch space in use is at most the slots times
// --max-flattened-bytes, one tenant takes at most half the slots (at least
// one), and a slot is held at most maxHeld: a tenant's registry taking
// bytes slowly cannot keep it. Slots go to the pushes waiting in the order
// they came, a namespace at its share skipped.
type FlattenSlots struct {
	max, perNamespace int
	wait              time.Duration // for a slot, before giving up
	maxHeld           time.Duration

	mu          sync.Mutex
	inUse       int
	byNamespace map[string]int
	queue       []*slotWaiter
}

// slotWaiter is a push waiting for a slot; granted is closed when it has
// one.
type slotWaiter struct {
	namespace string
	granted   chan struct{}
}

// NewFlattenSlots allows n pushes to flatten at once, each for at most
// maxHeld (0: DefaultMaxFlattenDuration).
func NewFlattenSlots(n int, maxHeld time.Duration) *FlattenSlots {
	n = max(n, 1)
	if maxHeld <= 0 {
		maxHeld = DefaultMaxFlattenDuration
	}
	return &FlattenSlots{max: n, perNamespace: max(n/2, 1), wait: flattenSlotWait, maxHeld: maxHeld, byNamespace: map[string]int{}}
}

// errSlotHeldTooLong ends the context of a push that held its slot for
// maxHeld.
var errSlotHeldTooLong = errors.New("flatten slot held too long")

// acquire takes a slot for namespace, waiting up to s.wait (the worker
// lent meanwhile). It returns the context to push in, ending when the slot
// has been held for maxHeld, and what gives the slot back. A nil s has
// slots without end.
func (s *FlattenSlots) acquire(ctx context.Context, namespace string) (context.Context, func(), error) {
	if s == nil {
		return ctx, func() {}, nil
	}
	if err := s.waitFor(ctx, namespace); err != nil {
		return nil, nil, err
	}
	held, cancel := context.WithTimeoutCause(ctx, s.maxHeld, errSlotHeldTooLong)
	return held, func() { cancel(); s.give(namespace) }, nil
}

// waitFor returns once namespace has a slot, or fails when s.wait passed
// or ctx ended first.
func (s *FlattenSlots) waitFor(ctx context.Context, namespace string) error {
	s.mu.Lock()
	if len(s.queue) == 0 && s.free(namespace) {
		s.take(namespace)
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{namespace: namespace, granted: make(chan struct{})}
	s.queue = append(s.queue, w)
	s.grant() // a namespace at its share does not hold up the others
	s.mu.Unlock()

	defer worker.Wait(ctx)()
	timeout := time.NewTimer(s.wait)
	defer timeout.Stop()
	var err error
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout.C:
		err = failure.Transientf(ReasonFlattenQueued,
			"%d builders are flattening at once, the most the controller allows (--max-concurrent-flattens), or %d of this namespace's; waiting for a turn",
			s.max, s.perNamespace)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.granted: // granted meanwhile: given back, for the next
		s.release(namespace)
	default:
		s.queue = slices.DeleteFunc(s.queue, func(q *slotWaiter) bool { return q == w })
	}
	return err
}

// free says whether namespace may take a slot now; s.mu must be held.
func (s *FlattenSlots) free(namespace string) bool {
	return s.inUse < s.max && s.byNamespace[namespace] < s.perNamespace
}

func (s *FlattenSlots) take(namespace string) {
	s.inUse++
	s.byNamespace[namespace]++
}

// grant gives free slots to the waiters, in order; s.mu must be held.
func (s *FlattenSlots) grant() {
	for i := 0; i < len(s.queue) && s.inUse < s.max; {
		w := s.queue[i]
		if !s.free(w.namespace) {
			i++
			continue
		}
		s.take(w.namespace)
		close(w.granted)
		s.queue = slices.Delete(s.queue, i, i+1)
	}
}

// release gives namespace's slot back to the waiters; s.mu must be held.
func (s *FlattenSlots) release(namespace string) {
	s.inUse--
	if s.byNamespace[namespace]--; s.byNamespace[namespace] == 0 {
		delete(s.byNamespace, namespace)
	}
	s.grant()
}

func (s *FlattenSlots) give(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(namespace)
}

// heldTooLong returns err as ReasonFlattenTimedOut when ctx, a push's from
// acquire, ended because the slot was held for maxHeld.
func (s *FlattenSlots) heldTooLong(ctx context.Context, err error) error {
	if err == nil || s == nil || !errors.Is(context.Cause(ctx), errSlotHeldTooLong) {
		return err
	}
	return &failure.Error{Class: failure.Transient, Reason: ReasonFlattenTimedOut,
		Err: fmt.Errorf("the push flattening buildpacks took longer than %s (--max-flatten-duration), and gave its turn to others: %w", s.maxHeld, err)}
}
