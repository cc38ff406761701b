// Package turns runs a controller's reconciles in turns by tenant, on the
// controller's workers, and lends a reconcile's worker while it waits on
// something outside the process (docs/design.md, § Turns). Drain lets the
// process wait for the reconciles in flight when it stops.
package turns

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// lendAfter is how long, in all, a reconcile may wait on something outside
// the process (worker.Wait) before its worker is lent to another reconcile:
// a registry answers a reconcile's calls well within it, and a tenant whose
// registry hangs then costs the others about a second of a worker per
// reconcile, not the 5 s answer timeout.
const lendAfter = time.Second

// Turns runs a controller's reconciles in turns by tenant (an object's
// namespace; cluster kinds are one tenant), on the controller's workers. It
// is the impl's Reconciler: knative's workers only hand keys over, and Turns
// runs them itself, at most workers at once, the tenant with the least
// worker time first; a reconcile that waits lendAfter in all lends its
// worker. Reconcile returns at once; how the wrapped reconcile ended is
// applied as knative's queue would. Why, and the rules: docs/design.md
// § Turns.
type Turns struct {
	leaderAwareReconciler // runs one reconcile, on the caller's goroutine
	kind                  metric.MeasurementOption
	requeue               func(types.NamespacedName, time.Duration)
	workers               int
	lendAfter             time.Duration
	clock                 clock.WithDelayedExecution
	drain                 *Drain // may be nil
	stopped               func() error

	mu      sync.Mutex
	working int // reconciles holding a worker
	keys    map[string]*turnKey
	tenants map[string]*tenant // those with keys queued or in flight
	turnSeq uint64             // orders tenants' arrivals and turns: ties go to the longest unchosen
	// floor is the worker time of the tenant chosen last, never going down
	// (a scheduler's "minimum virtual time"): a tenant whose queue fills
	// again starts no lower, so time spent idle, or with only a lent
	// reconcile in flight, earns no credit against the tenants that waited.
	floor time.Duration
}

// leaderAwareReconciler is what the generated reconcilers are.
type leaderAwareReconciler interface {
	controller.Reconciler
	pkgreconciler.LeaderAware
}

// turnKey is a key queued or in flight.
type turnKey struct {
	ctx    context.Context // from the latest hand-over: its logger names the key
	since  time.Time       // queued since
	tenant *tenant
	queued bool // waiting in its tenant's queue
	again  bool // in flight, and handed over again meanwhile
}

type tenant struct {
	queue    []string // keys, oldest first
	inFlight int      // reconciles running, holding a worker or lent
	holding  map[*turn]bool
	served   time.Duration // worker time of reconciles that ended or were lent
	lastTurn uint64        // when it last had a turn (or came)
}

// New returns r, the reconciler of kind (a generated reconciler, or one
// wrapping it), run in turns on workers workers until ctx ends; requeue
// puts a key back on the controller's queue after a delay. The reconciles
// are counted in the Drain of ctx, if it carries one (WithDrain).
func New(ctx context.Context, kind string, r controller.Reconciler, workers int, requeue func(types.NamespacedName, time.Duration)) *Turns {
	return &Turns{leaderAwareReconciler: r.(leaderAwareReconciler), requeue: requeue, workers: max(workers, 1),
		kind:      metric.WithAttributes(attribute.String("kind", kind)),
		lendAfter: lendAfter, clock: clock.RealClock{}, drain: drainFrom(ctx), stopped: ctx.Err,
		keys: map[string]*turnKey{}, tenants: map[string]*tenant{}}
}

// enqueue puts key at the end of tn's queue; t.mu must be held. A queue
// filling again starts at the floor.
func (t *Turns) enqueue(ctx context.Context, tn *tenant, key string, now time.Time) {
	if len(tn.queue) == 0 {
		if behind := t.floor - tn.servedAt(now); behind > 0 {
			tn.served += behind
		}
	}
	tn.queue = append(tn.queue, key)
	turnsQueued.Add(ctx, 1, t.kind)
}

// Reconcile queues key for its turn and returns.
func (t *Turns) Reconcile(ctx context.Context, key string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := t.keys[key]; k != nil {
		k.ctx = ctx
		k.again = !k.queued
		return nil
	}
	namespace, _, _ := cache.SplitMetaNamespaceKey(key)
	tn := t.tenants[namespace]
	if tn == nil {
		t.turnSeq++
		tn = &tenant{holding: map[*turn]bool{}, lastTurn: t.turnSeq}
		t.tenants[namespace] = tn
	}
	now := t.clock.Now()
	t.keys[key] = &turnKey{ctx: ctx, tenant: tn, queued: true, since: now}
	t.enqueue(ctx, tn, key, now)
	t.dispatch()
	return nil
}

// Unwrap returns the reconciler t runs in turns, as wrappers of an
// http.ResponseWriter unwrap for http.ResponseController: for whoever
// must see how a reconcile ends, which Reconcile does not say.
func (t *Turns) Unwrap() controller.Reconciler { return t.leaderAwareReconciler }

// dispatch starts reconciles while workers are free; t.mu must be held.
// Once the controller's context ends, none starts: those in flight end,
// those queued are left (whoever leads next reconciles every object).
func (t *Turns) dispatch() {
	now := t.clock.Now()
	for t.stopped() == nil && t.working < t.workers {
		next := t.nextTenant(now)
		if next == nil {
			return
		}
		t.floor = max(t.floor, next.servedAt(now))
		key := next.queue[0]
		next.queue[0] = ""
		next.queue = next.queue[1:]
		k := t.keys[key]
		k.queued = false
		turnsQueued.Add(k.ctx, -1, t.kind)
		turnsWait.Record(k.ctx, now.Sub(k.since).Seconds(), t.kind)
		t.turnSeq++
		next.lastTurn = t.turnSeq
		tr := &turn{turns: t, key: key, tenant: next, heldSince: now}
		next.holding[tr] = true
		next.inFlight++
		t.working++
		t.drain.add(1)
		go t.run(tr, k.ctx)
	}
}

// nextTenant is the tenant whose turn it is, nil when none may run a
// reconcile; t.mu must be held.
func (t *Turns) nextTenant(now time.Time) *tenant {
	var next *tenant
	for _, tn := range t.tenants {
		if len(tn.queue) == 0 || tn.inFlight >= t.workers {
			continue
		}
		if next == nil || tn.servedAt(now) < next.servedAt(now) ||
			(tn.servedAt(now) == next.servedAt(now) && tn.lastTurn < next.lastTurn) {
			next = tn
		}
	}
	return next
}

// servedAt is the tenant's worker time, its reconciles holding workers now
// included.
func (tn *tenant) servedAt(now time.Time) time.Duration {
	s := tn.served
	for tr := range tn.holding {
		s += now.Sub(tr.heldSince)
	}
	return s
}

func (t *Turns) run(tr *turn, ctx context.Context) {
	defer t.finish(tr)
	err := t.leaderAwareReconciler.Reconcile(worker.With(ctx, tr), tr.key)
	t.handle(ctx, tr.key, err)
}

// handle does what knative's queue does with how a reconcile ended.
func (t *Turns) handle(ctx context.Context, key string, err error) {
	if err == nil || controller.IsSkipKey(err) {
		return
	}
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	nn := types.NamespacedName{Namespace: namespace, Name: name}
	if requeue, delay := controller.IsRequeueKey(err); requeue {
		t.requeue(nn, delay)
		return
	}
	logging.FromContext(ctx).Errorw("Reconcile error", zap.Error(err))
	if !controller.IsPermanentError(err) {
		t.requeue(nn, time.Second) // not expected: StatusWrites requeues
	}
}

// finish ends tr: its worker (unless lent) is free, and its key runs again
// if it was handed over meanwhile.
func (t *Turns) finish(tr *turn) {
	defer t.drain.add(-1)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	tr.done = true
	tr.release(now)
	tn := tr.tenant
	tn.inFlight--
	if k := t.keys[tr.key]; k.again {
		k.again, k.queued, k.since = false, true, now
		t.enqueue(k.ctx, tn, tr.key, now)
	} else {
		delete(t.keys, tr.key)
	}
	if len(tn.queue) == 0 && tn.inFlight == 0 {
		namespace, _, _ := cache.SplitMetaNamespaceKey(tr.key)
		delete(t.tenants, namespace)
	}
	t.dispatch()
}
