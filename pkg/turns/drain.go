package turns

import (
	"context"
	"sync"
)

// Drain lets the process wait, when it stops, for the reconciles in flight
// in every Turns made from a context carrying it: a push under way ends
// rather than being cut by the exit.
type Drain struct {
	mu       sync.Mutex
	inFlight int
	idle     sync.Cond
}

type drainKey struct{}

// WithDrain returns ctx carrying a new Drain.
func WithDrain(ctx context.Context) (context.Context, *Drain) {
	d := &Drain{}
	d.idle.L = &d.mu
	return context.WithValue(ctx, drainKey{}, d), d
}

// Wait returns when no reconcile is in flight.
func (d *Drain) Wait() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.inFlight > 0 {
		d.idle.Wait()
	}
}

// add counts reconciles starting (1) and ending (-1); a nil Drain counts
// nothing.
func (d *Drain) add(n int) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inFlight += n; d.inFlight == 0 {
		d.idle.Broadcast()
	}
}

func drainFrom(ctx context.Context) *Drain {
	d, _ := ctx.Value(drainKey{}).(*Drain)
	return d
}
