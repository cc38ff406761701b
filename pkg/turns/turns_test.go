package turns

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// guard bounds every wait of these tests for something that must happen:
// it is reached only when a test fails.
const guard = 5 * time.Second

// recorder is a reconciler that runs do for each key and records the keys
// in the order they started and ended.
type recorder struct {
	do func(ctx context.Context, key string) error

	mu             sync.Mutex
	started, ended []string
	changed        chan struct{} // closed, and replaced, at each start and end
}

func newRecorder(do func(ctx context.Context, key string) error) *recorder {
	return &recorder{do: do, changed: make(chan struct{})}
}

func (r *recorder) Reconcile(ctx context.Context, key string) error {
	r.note(&r.started, key)
	err := r.do(ctx, key)
	r.note(&r.ended, key)
	return err
}

func (r *recorder) note(keys *[]string, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*keys = append(*keys, key)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) Promote(pkgreconciler.Bucket, func(pkgreconciler.Bucket, types.NamespacedName)) error {
	return nil
}
func (r *recorder) Demote(pkgreconciler.Bucket) {}

func (r *recorder) snapshot() (started, ended []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started), slices.Clone(r.ended)
}

// await returns once cond holds of the keys started and ended, woken by
// each start and end.
func (r *recorder) await(t *testing.T, what string, cond func(started, ended []string) bool) {
	t.Helper()
	for {
		r.mu.Lock()
		ok, changed := cond(r.started, r.ended), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-time.After(guard):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func hasStarted(key string) func(started, ended []string) bool {
	return func(started, _ []string) bool { return slices.Contains(started, key) }
}

func hasEnded(key string) func(started, ended []string) bool {
	return func(_, ended []string) bool { return slices.Contains(ended, key) }
}

func endedAll(n int) func(started, ended []string) bool {
	return func(_, ended []string) bool { return len(ended) == n }
}

// testTurns is Turns on a fake clock, made from a context carrying a
// Drain.
type testTurns struct {
	*Turns
	fake     *clocktesting.FakeClock
	drainer  *Drain
	stop     context.CancelFunc // ends the controller's context
	requeues *requeues
}

func newTestTurns(t *testing.T, r *recorder, workers int) *testTurns {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctx, drain := WithDrain(ctx)
	q := &requeues{}
	turns := New(ctx, "Test", r, workers, q.add)
	fake := clocktesting.NewFakeClock(time.Now())
	turns.clock = fake
	return &testTurns{Turns: turns, fake: fake, drainer: drain, stop: cancel, requeues: q}
}

// handOver hands keys over, as knative's workers do.
func (tt *testTurns) handOver(keys ...string) {
	for _, key := range keys {
		_ = tt.Reconcile(context.Background(), key)
	}
}

// queued reports whether key waits in its tenant's queue.
func (tt *testTurns) queued(key string) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	k := tt.keys[key]
	return k != nil && k.queued
}

// drained returns once no reconcile is in flight.
func (tt *testTurns) drained(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { tt.drainer.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("timed out waiting for the reconciles in flight")
	}
}

type requeues struct {
	mu   sync.Mutex
	keys []string
}

func (q *requeues) add(key types.NamespacedName, after time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.keys = append(q.keys, key.String()+" after "+after.String())
}

func (q *requeues) list() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.keys)
}

// TestTurnsByTenant: keys handed over behind another namespace's many run
// before them, each namespace in turn, the one that has had the least
// worker time first.
func TestTurnsByTenant(t *testing.T) {
	gate := make(chan struct{})
	r := newRecorder(func(_ context.Context, key string) error {
		if key == "noisy/0" {
			<-gate
		}
		return nil
	})
	turns := newTestTurns(t, r, 1)
	turns.handOver("noisy/0", "noisy/1", "noisy/2", "noisy/3", "a/1", "b/1", "a/2")
	r.await(t, "noisy/0 to start", hasStarted("noisy/0"))
	turns.fake.Step(20 * time.Millisecond) // noisy has had its worker 20 ms
	close(gate)
	turns.drained(t)
	started, _ := r.snapshot()
	// a and b came while noisy held the worker: level with it then, behind
	// it after. a/2 waits for b's turn; noisy's keys for the others'.
	want := []string{"noisy/0", "a/1", "b/1", "a/2", "noisy/1", "noisy/2", "noisy/3"}
	if !slices.Equal(started, want) {
		t.Errorf("ran %v, want %v", started, want)
	}
}

// TestTurnsLendWaitingWorker: a reconcile that waits on something outside
// the process past lendAfter gives its worker to another namespace's, and
// finishes without one; its own namespace gets no more reconciles in
// flight than there are workers.
func TestTurnsLendWaitingWorker(t *testing.T) {
	waiting, release := make(chan struct{}), make(chan struct{})
	r := newRecorder(func(ctx context.Context, key string) error {
		if key == "hang/1" {
			done := worker.Wait(ctx)
			defer done()
			close(waiting)
			<-release
		}
		return nil
	})
	turns := newTestTurns(t, r, 1)
	turns.handOver("hang/1")
	<-waiting
	turns.handOver("hang/2", "calm/1")
	turns.fake.Step(lendAfter - time.Nanosecond)
	if !turns.queued("calm/1") {
		t.Fatal("calm/1 left the queue before hang/1 had waited lendAfter")
	}
	turns.fake.Step(time.Nanosecond)
	r.await(t, "calm/1 to end while hang/1 waits", hasEnded("calm/1"))
	if started, _ := r.snapshot(); slices.Contains(started, "hang/2") {
		t.Errorf("hang/2 started while hang/1 was in flight: its namespace had the one worker's worth (%v)", started)
	}
	close(release)
	turns.drained(t)
	if _, ended := r.snapshot(); !slices.Equal(ended, []string{"calm/1", "hang/1", "hang/2"}) {
		t.Errorf("ended %v", ended)
	}
}

// TestTurnsShortWaitKeepsWorker: waits shorter than lendAfter in all do
// not lend the worker.
func TestTurnsShortWaitKeepsWorker(t *testing.T) {
	waiting, proceed, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	r := newRecorder(func(ctx context.Context, key string) error {
		if key == "a/1" {
			done := worker.Wait(ctx) // a short wait
			waiting <- struct{}{}
			<-proceed
			done()
			done = worker.Wait(ctx) // a second, nested in none, longer
			waiting <- struct{}{}
			<-release
			done()
		}
		return nil
	})
	turns := newTestTurns(t, r, 1)
	turns.handOver("a/1")
	<-waiting
	turns.handOver("b/1")
	turns.fake.Step(lendAfter / 4)
	close(proceed)
	<-waiting
	turns.fake.Step(lendAfter*3/4 - time.Nanosecond)
	// The lend timer has not fired (a fake clock's timers fire within
	// Step), so b/1 is still waiting for the only worker.
	if !turns.fake.HasWaiters() || !turns.queued("b/1") {
		t.Errorf("b/1 left the queue while a/1 held the only worker, waiting less than lendAfter in all")
	}
	close(release)
	turns.drained(t)
	if started, _ := r.snapshot(); !slices.Equal(started, []string{"a/1", "b/1"}) {
		t.Errorf("started %v", started)
	}
}

// TestTurnsKeyHandedOverAgain: a key handed over while it runs runs once
// more after, never twice at once; handed over twice while queued, once.
func TestTurnsKeyHandedOverAgain(t *testing.T) {
	gate := make(chan struct{}, 1)
	var running, most int
	var mu sync.Mutex
	r := newRecorder(func(_ context.Context, key string) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		if key == "a/1" {
			<-gate
		}
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	turns := newTestTurns(t, r, 4)
	turns.handOver("a/1")
	r.await(t, "a/1 to start", hasStarted("a/1"))
	turns.handOver("a/1", "a/1")
	gate <- struct{}{}
	gate <- struct{}{}
	turns.drained(t)
	if started, _ := r.snapshot(); len(started) != 2 || most != 1 {
		t.Errorf("a/1 ran %d times, %d at once; want 2, 1", len(started), most)
	}
	if turns.queued("a/1") {
		t.Error("a/1 is queued for a third run")
	}
}

// TestTurnsEndings: requeues go back to the controller's queue after their
// delay; a permanent error, a skip and success are not requeued; anything
// else is, after a second.
func TestTurnsEndings(t *testing.T) {
	r := newRecorder(func(_ context.Context, key string) error {
		switch key {
		case "ns/requeue":
			return controller.NewRequeueAfter(7 * time.Second)
		case "ns/permanent":
			return controller.NewPermanentError(errors.New("bad spec"))
		case "ns/skip":
			return controller.NewSkipKey(key)
		case "ns/odd":
			return errors.New("odd")
		}
		return nil
	})
	turns := newTestTurns(t, r, 2)
	turns.handOver("ns/requeue", "ns/permanent", "ns/skip", "ns/odd", "ns/ok", "cluster-wide")
	turns.drained(t) // every ending handled
	if _, ended := r.snapshot(); len(ended) != 6 {
		t.Fatalf("ended %v, want every key", ended)
	}
	got := turns.requeues.list()
	slices.Sort(got)
	if want := []string{"ns/odd after 1s", "ns/requeue after 7s"}; !slices.Equal(got, want) {
		t.Errorf("requeued %v, want %v", got, want)
	}
}

// TestTurnsDrain: once the controller's context ends nothing new starts;
// the drain waits for the reconciles in flight.
func TestTurnsDrain(t *testing.T) {
	release := make(chan struct{})
	r := newRecorder(func(_ context.Context, key string) error {
		if key == "a/1" {
			<-release
		}
		return nil
	})
	turns := newTestTurns(t, r, 1)
	turns.handOver("a/1", "a/2")
	r.await(t, "a/1 to start", hasStarted("a/1"))
	turns.stop()
	drained := make(chan struct{})
	go func() { turns.drainer.Wait(); close(drained) }()
	turns.drainer.mu.Lock()
	inFlight := turns.drainer.inFlight
	turns.drainer.mu.Unlock()
	if inFlight != 1 {
		t.Fatalf("the drain counts %d reconciles in flight while a/1 runs, want 1", inFlight)
	}
	close(release)
	select {
	case <-drained:
	case <-time.After(guard):
		t.Fatal("not drained after a/1 ended")
	}
	if started, _ := r.snapshot(); !slices.Equal(started, []string{"a/1"}) {
		t.Errorf("started %v after the context ended", started)
	}
}

// TestTurnsNoCreditForIdleTime: a tenant whose queue fills again starts
// no lower than the tenant chosen last, even when a lent reconcile of its
// own kept it known meanwhile with little worker time.
func TestTurnsNoCreditForIdleTime(t *testing.T) {
	r := newRecorder(func(context.Context, string) error { return nil })
	turns := newTestTurns(t, r, 1)
	turns.mu.Lock()
	turns.floor = time.Second // the tenant chosen last had had a second
	back := &tenant{holding: map[*turn]bool{}, served: 10 * time.Millisecond, inFlight: 1}
	turns.tenants["back"] = back
	turns.mu.Unlock()

	turns.handOver("back/1")
	turns.mu.Lock()
	served := back.served
	turns.mu.Unlock()
	if served < time.Second {
		t.Errorf("back starts at %s of worker time, below the floor of 1s", served)
	}
}

// TestTurnsLendAfterManyShortWaits: waits count together — a run of short
// ones (slow answers, retries) lends the worker once they add up to
// lendAfter.
func TestTurnsLendAfterManyShortWaits(t *testing.T) {
	waiting, resume, hold := make(chan int), make(chan struct{}), make(chan struct{})
	r := newRecorder(func(ctx context.Context, key string) error {
		if key == "slow/1" {
			for i := range 3 {
				done := worker.Wait(ctx)
				waiting <- i
				<-resume
				done()
			}
			<-hold // working, not waiting: the worker is lent already
		}
		return nil
	})
	turns := newTestTurns(t, r, 1)
	turns.handOver("slow/1", "calm/1")
	for range 3 {
		i := <-waiting
		turns.fake.Step(lendAfter * 2 / 5) // 400 ms a wait: the third passes lendAfter
		if i < 2 && !turns.queued("calm/1") {
			t.Fatalf("calm/1 left the queue after %d short waits of slow/1", i+1)
		}
		if i == 2 {
			r.await(t, "calm/1 to run while slow/1 is held", hasEnded("calm/1"))
		}
		resume <- struct{}{}
	}
	close(hold)
	turns.drained(t)
}
