package builder

import (
	"context"
	"sync"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// DefaultConcurrentFlattens is how many pushes flatten at once by default.
const DefaultConcurrentFlattens = 2

// ReasonFlattenQueued: the builder waits for one of the controller's
// flatten slots (--max-concurrent-flattens).
const ReasonFlattenQueued = "FlattenQueued"

// flattenSlotWait is how long a push waits for a slot before its reconcile
// ends, Reconciling with ReasonFlattenQueued, to come back later.
const flattenSlotWait = 10 * time.Second

// FlattenSlots bound the pushes that flatten at once, controller-wide, and
// those of one namespace (the cluster kinds counting as one): flattening
// is disk (a scratch directory of up to --max-flattened-bytes each), CPU
// (decompressing and compressing) and registry downloads, and a reconcile
// waiting on a registry lends its worker, so a bound on workers bounds
// none of it. So the scratch space in use is at most the slots times
// --max-flattened-bytes, and one tenant takes at most half the slots
// (at least one), leaving the rest to the others.
type FlattenSlots struct {
	max, perNamespace int
	wait              time.Duration // for a slot, before giving up

	mu          sync.Mutex
	inUse       int
	byNamespace map[string]int
	freed       chan struct{} // closed, and replaced, when a slot is given back
}

// NewFlattenSlots allows n pushes to flatten at once.
func NewFlattenSlots(n int) *FlattenSlots {
	n = max(n, 1)
	return &FlattenSlots{max: n, perNamespace: max(n/2, 1), wait: flattenSlotWait, byNamespace: map[string]int{}, freed: make(chan struct{})}
}

// acquire takes a slot for namespace, waiting up to flattenSlotWait (the
// worker lent meanwhile), and returns what gives it back. A nil s has
// slots without end.
func (s *FlattenSlots) acquire(ctx context.Context, namespace string) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	timeout := time.NewTimer(s.wait)
	defer timeout.Stop()
	var done func()
	defer func() {
		if done != nil {
			done()
		}
	}()
	for {
		freed, ok := s.take(namespace)
		if ok {
			return func() { s.give(namespace) }, nil
		}
		if done == nil {
			done = worker.Wait(ctx)
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout.C:
			return nil, failure.Transientf(ReasonFlattenQueued,
				"%d builders are flattening at once, the most the controller allows (--max-concurrent-flattens), or %d of this namespace's; waiting for a turn",
				s.max, s.perNamespace)
		}
	}
}

// take takes a slot when one is free for namespace; else it returns what
// is closed when one is given back.
func (s *FlattenSlots) take(namespace string) (freed chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse >= s.max || s.byNamespace[namespace] >= s.perNamespace {
		return s.freed, false
	}
	s.inUse++
	s.byNamespace[namespace]++
	return nil, true
}

func (s *FlattenSlots) give(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse--
	if s.byNamespace[namespace]--; s.byNamespace[namespace] == 0 {
		delete(s.byNamespace, namespace)
	}
	close(s.freed)
	s.freed = make(chan struct{})
}
