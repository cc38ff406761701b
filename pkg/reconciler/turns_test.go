package reconciler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// recorder is a reconciler that runs do for each key and records the keys
// in the order they started and ended.
type recorder struct {
	do func(ctx context.Context, key string) error

	mu             sync.Mutex
	started, ended []string
}

func (r *recorder) Reconcile(ctx context.Context, key string) error {
	r.mu.Lock()
	r.started = append(r.started, key)
	r.mu.Unlock()
	err := r.do(ctx, key)
	r.mu.Lock()
	r.ended = append(r.ended, key)
	r.mu.Unlock()
	return err
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

func newTestTurns(t *testing.T, r *recorder, workers int) (*Turns, *requeues) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	q := &requeues{}
	return NewTurns(ctx, "Test", r, workers, q.add), q
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
	r := &recorder{do: func(_ context.Context, key string) error {
		if key == "noisy/0" {
			<-gate
		}
		return nil
	}}
	turns, _ := newTestTurns(t, r, 1)
	ctx := context.Background()
	for _, key := range []string{"noisy/0", "noisy/1", "noisy/2", "noisy/3", "a/1", "b/1", "a/2"} {
		_ = turns.Reconcile(ctx, key)
	}
	time.Sleep(20 * time.Millisecond) // noisy has had its worker 20 ms
	close(gate)
	waitFor(t, "every key", func() bool { _, ended := r.snapshot(); return len(ended) == 7 })
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
	release := make(chan struct{})
	r := &recorder{do: func(ctx context.Context, key string) error {
		if key == "hang/1" {
			done := worker.Wait(ctx)
			defer done()
			<-release
		}
		return nil
	}}
	turns, _ := newTestTurns(t, r, 1)
	turns.lendAfter = 20 * time.Millisecond
	ctx := context.Background()
	_ = turns.Reconcile(ctx, "hang/1")
	waitFor(t, "hang/1 to start", func() bool { started, _ := r.snapshot(); return len(started) == 1 })
	_ = turns.Reconcile(ctx, "hang/2")
	_ = turns.Reconcile(ctx, "calm/1")
	waitFor(t, "calm/1 to end while hang/1 waits", func() bool {
		_, ended := r.snapshot()
		return slices.Contains(ended, "calm/1")
	})
	if started, _ := r.snapshot(); slices.Contains(started, "hang/2") {
		t.Errorf("hang/2 started while hang/1 was in flight: its namespace had the one worker's worth (%v)", started)
	}
	close(release)
	waitFor(t, "every key", func() bool { _, ended := r.snapshot(); return len(ended) == 3 })
	if _, ended := r.snapshot(); !slices.Equal(ended, []string{"calm/1", "hang/1", "hang/2"}) {
		t.Errorf("ended %v", ended)
	}
}

// TestTurnsShortWaitKeepsWorker: a wait shorter than lendAfter does not
// lend the worker.
func TestTurnsShortWaitKeepsWorker(t *testing.T) {
	release := make(chan struct{})
	r := &recorder{do: func(ctx context.Context, key string) error {
		if key == "a/1" {
			worker.Wait(ctx)()       // a short wait, over at once
			done := worker.Wait(ctx) // a second, nested in none, long
			<-release
			done()
		}
		return nil
	}}
	turns, _ := newTestTurns(t, r, 1)
	turns.lendAfter = time.Hour
	ctx := context.Background()
	_ = turns.Reconcile(ctx, "a/1")
	waitFor(t, "a/1 to start", func() bool { started, _ := r.snapshot(); return len(started) == 1 })
	_ = turns.Reconcile(ctx, "b/1")
	time.Sleep(30 * time.Millisecond)
	if started, _ := r.snapshot(); len(started) != 1 {
		t.Errorf("started %v while a/1 held the only worker", started)
	}
	close(release)
	waitFor(t, "b/1", func() bool { _, ended := r.snapshot(); return len(ended) == 2 })
}

// TestTurnsKeyHandedOverAgain: a key handed over while it runs runs once
// more after, never twice at once; handed over twice while queued, once.
func TestTurnsKeyHandedOverAgain(t *testing.T) {
	gate := make(chan struct{}, 1)
	var running, most int
	var mu sync.Mutex
	r := &recorder{do: func(_ context.Context, key string) error {
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
	}}
	turns, _ := newTestTurns(t, r, 4)
	ctx := context.Background()
	_ = turns.Reconcile(ctx, "a/1")
	waitFor(t, "a/1 to start", func() bool { started, _ := r.snapshot(); return len(started) == 1 })
	_ = turns.Reconcile(ctx, "a/1")
	_ = turns.Reconcile(ctx, "a/1")
	gate <- struct{}{}
	gate <- struct{}{}
	waitFor(t, "the second run", func() bool { _, ended := r.snapshot(); return len(ended) == 2 })
	time.Sleep(20 * time.Millisecond)
	if started, _ := r.snapshot(); len(started) != 2 || most != 1 {
		t.Errorf("a/1 ran %d times, %d at once; want 2, 1", len(started), most)
	}
}

// TestTurnsEndings: requeues go back to the controller's queue after their
// delay; a permanent error, a skip and success are not requeued; anything
// else is, after a second.
func TestTurnsEndings(t *testing.T) {
	r := &recorder{do: func(_ context.Context, key string) error {
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
	}}
	turns, q := newTestTurns(t, r, 2)
	for _, key := range []string{"ns/requeue", "ns/permanent", "ns/skip", "ns/odd", "ns/ok", "cluster-wide"} {
		_ = turns.Reconcile(context.Background(), key)
	}
	waitFor(t, "every key", func() bool { _, ended := r.snapshot(); return len(ended) == 6 })
	time.Sleep(10 * time.Millisecond) // the last ending handled
	got := q.list()
	slices.Sort(got)
	if want := []string{"ns/odd after 1s", "ns/requeue after 7s"}; !slices.Equal(got, want) {
		t.Errorf("requeued %v, want %v", got, want)
	}
}

// TestTurnsDrain: once the controller's context ends nothing new starts;
// the drain waits for the reconciles in flight.
func TestTurnsDrain(t *testing.T) {
	release := make(chan struct{})
	r := &recorder{do: func(_ context.Context, key string) error {
		if key == "a/1" {
			<-release
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx, drain := WithDrain(ctx)
	turns := NewTurns(ctx, "Test", r, 1, func(types.NamespacedName, time.Duration) {})
	_ = turns.Reconcile(ctx, "a/1")
	_ = turns.Reconcile(ctx, "a/2")
	waitFor(t, "a/1 to start", func() bool { started, _ := r.snapshot(); return len(started) == 1 })
	cancel()
	drained := make(chan struct{})
	go func() { drain.Wait(); close(drained) }()
	select {
	case <-drained:
		t.Fatal("drained while a/1 was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
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
	r := &recorder{do: func(context.Context, string) error { return nil }}
	turns, _ := newTestTurns(t, r, 1)
	turns.mu.Lock()
	turns.floor = time.Second // the tenant chosen last had had a second
	back := &tenant{holding: map[*turn]bool{}, served: 10 * time.Millisecond, inFlight: 1}
	turns.tenants["back"] = back
	turns.mu.Unlock()

	_ = turns.Reconcile(context.Background(), "back/1")
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
	hold := make(chan struct{})
	r := &recorder{do: func(ctx context.Context, key string) error {
		if key == "slow/1" {
			for range 3 {
				done := worker.Wait(ctx)
				time.Sleep(15 * time.Millisecond)
				done()
			}
			<-hold // working, not waiting: the worker is lent already
		}
		return nil
	}}
	turns, _ := newTestTurns(t, r, 1)
	turns.lendAfter = 30 * time.Millisecond
	ctx := context.Background()
	_ = turns.Reconcile(ctx, "slow/1")
	_ = turns.Reconcile(ctx, "calm/1")
	waitFor(t, "calm/1 to run while slow/1 is held", func() bool {
		_, ended := r.snapshot()
		return slices.Contains(ended, "calm/1")
	})
	close(hold)
}
