package reconciler

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// lendAfter is how long, in all, a reconcile may wait on something outside
// the process (worker.Wait) before its worker is lent to another reconcile:
// a registry answers a reconcile's calls well within it, and a tenant whose
// registry hangs then costs the others about a second of a worker per
// reconcile, not the 5 s answer timeout.
const lendAfter = time.Second

// Turns runs a controller's reconciles in turns by tenant (an object's
// namespace; cluster kinds are one tenant), on the controller's workers.
//
// knative's workqueue is one FIFO per controller: a namespace that enqueues
// 500 builders puts every other namespace's builders behind them, and a
// reconcile waiting on a registry that hangs holds its worker for the answer
// timeout. Turns sits where the workqueue hands keys to the reconciler (it
// is the impl's Reconciler): knative's workers only move keys into it, and
// it runs them itself, at most workers at once, choosing each time the
// tenant that has had the least worker time (a tenant that comes back from
// idle starts level with the last tenant chosen, not with credit), oldest
// key first within a tenant. A reconcile whose waits on something outside
// the process add up to lendAfter gives its worker up and finishes without
// one; each
// tenant has at most workers reconciles in flight, lent or not. So a slow
// or hostile tenant delays another's next reconcile by about one reconcile
// of its own, and a hanging registry costs its tenant's queue, not the
// others'.
//
// knative's queue still does what it does well: delays (requeue-after),
// deduplication of keys waiting, and leader election. A key enqueued while
// it runs here runs once more after; requeues go back through knative's
// queue. Reconcile returns at once: the reconciler wrapped ends every
// reconcile with nil, a skip, a permanent error or a requeue (StatusWrites),
// which Turns applies as knative would.
type Turns struct {
	leaderAwareReconciler // runs one reconcile, on the caller's goroutine
	kind                  metric.MeasurementOption
	requeue               func(types.NamespacedName, time.Duration)
	workers               int
	lendAfter             time.Duration
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

// NewTurns returns r, the reconciler of kind, run in turns on workers
// workers until ctx ends; requeue puts a key back on the controller's queue
// after a delay.
func NewTurns(ctx context.Context, kind string, r controller.Reconciler, workers int, requeue func(types.NamespacedName, time.Duration)) *Turns {
	return &Turns{leaderAwareReconciler: r.(leaderAwareReconciler), requeue: requeue, workers: max(workers, 1),
		kind:      metric.WithAttributes(attribute.String("kind", kind)),
		lendAfter: lendAfter, drain: drainFrom(ctx), stopped: ctx.Err,
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
	now := time.Now()
	t.keys[key] = &turnKey{ctx: ctx, tenant: tn, queued: true, since: now}
	t.enqueue(ctx, tn, key, now)
	t.dispatch()
	return nil
}

// Now runs one reconcile of key on the caller's goroutine, outside the
// turns (for tests).
func (t *Turns) Now(ctx context.Context, key string) error {
	return t.leaderAwareReconciler.Reconcile(ctx, key)
}

// dispatch starts reconciles while workers are free; t.mu must be held.
// Once the controller's context ends, none starts: those in flight end,
// those queued are left (whoever leads next reconciles every object).
func (t *Turns) dispatch() {
	now := time.Now()
	for t.stopped() == nil && t.working < t.workers {
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
		tr := &turn{turns: t, key: key, tenant: next, since: now}
		next.holding[tr] = true
		next.inFlight++
		t.working++
		t.drain.add(1)
		go t.run(tr, k.ctx)
	}
}

// servedAt is the tenant's worker time, its reconciles holding workers now
// included.
func (tn *tenant) servedAt(now time.Time) time.Duration {
	s := tn.served
	for tr := range tn.holding {
		s += now.Sub(tr.since)
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
	tr.done = true
	tr.release(time.Now())
	tn := tr.tenant
	tn.inFlight--
	if k := t.keys[tr.key]; k.again {
		now := time.Now()
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

// turn is one reconcile in flight. It is the worker.Waiter of its context.
type turn struct {
	turns  *Turns
	key    string
	tenant *tenant
	since  time.Time // when it took its worker

	// Guarded by turns.mu.
	done     bool
	released bool          // its worker given up: lent, or at the end
	waits    int           // waits in progress (they nest)
	wait     uint64        // waits begun from none: the lend timer's generation
	waitedAt time.Time     // when the current waits began
	waited   time.Duration // in waits that ended
	timer    *time.Timer
}

// Wait implements worker.Waiter: once the reconcile has waited lendAfter in
// all (a hang, or a run of slow answers and retries), its worker is lent.
func (tr *turn) Wait() (done func()) {
	t := tr.turns
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.done || tr.released {
		return func() {} // lent already, or a wait outliving the reconcile
	}
	if tr.waits++; tr.waits == 1 {
		tr.wait++
		tr.waitedAt = time.Now()
		if left := t.lendAfter - tr.waited; left <= 0 {
			tr.lendNow()
		} else {
			generation := tr.wait
			tr.timer = time.AfterFunc(left, func() { tr.lend(generation) })
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if tr.waits--; tr.waits == 0 {
				tr.waited += time.Since(tr.waitedAt)
				if tr.timer != nil {
					tr.timer.Stop()
					tr.timer = nil
				}
			}
		})
	}
}

// lend gives tr's worker to the next reconcile if the wait of generation
// goes on.
func (tr *turn) lend(generation uint64) {
	t := tr.turns
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.done || tr.released || tr.waits == 0 || tr.wait != generation {
		return
	}
	tr.lendNow()
}

// lendNow gives tr's worker to the next reconcile; t.mu must be held.
func (tr *turn) lendNow() {
	tr.release(time.Now())
	turnsLent.Add(context.Background(), 1, tr.turns.kind)
	tr.turns.dispatch()
}

// release gives up tr's worker, charging its tenant the time held; t.mu
// must be held.
func (tr *turn) release(now time.Time) {
	if tr.timer != nil {
		tr.timer.Stop()
		tr.timer = nil
	}
	if tr.released {
		return
	}
	tr.released = true
	tr.turns.working--
	tr.tenant.served += now.Sub(tr.since)
	delete(tr.tenant.holding, tr)
}

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
