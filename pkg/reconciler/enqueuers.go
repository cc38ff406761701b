package reconciler

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Enqueuers are the queues of the process's controllers, by the kind each
// reconciles: what wakes objects of other controllers' kinds (a Receiver's
// notification) puts their keys there. On a replica that does not lead an
// object's bucket, its key is dropped by the generated reconciler; the
// replica that leads it wakes it too (every replica sees the same events).
type Enqueuers struct {
	mu     sync.RWMutex
	byKind map[string]func(types.NamespacedName)
}

type enqueuersKey struct{}

// WithEnqueuers returns ctx carrying Enqueuers that the controllers made
// from it add their queues to (NewBase).
func WithEnqueuers(ctx context.Context) context.Context {
	return context.WithValue(ctx, enqueuersKey{}, &Enqueuers{byKind: map[string]func(types.NamespacedName){}})
}

// EnqueuersFrom returns ctx's Enqueuers, nil when it carries none.
func EnqueuersFrom(ctx context.Context) *Enqueuers {
	e, _ := ctx.Value(enqueuersKey{}).(*Enqueuers)
	return e
}

func (e *Enqueuers) add(kind string, enqueue func(types.NamespacedName)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byKind[kind] = enqueue
}

// Enqueue puts key on the queue of the controller of kind, and reports
// whether there is one.
func (e *Enqueuers) Enqueue(kind string, key types.NamespacedName) bool {
	e.mu.RLock()
	enqueue, ok := e.byKind[kind]
	e.mu.RUnlock()
	if ok {
		enqueue(key)
	}
	return ok
}
