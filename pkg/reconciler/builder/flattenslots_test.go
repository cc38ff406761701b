package builder

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

func queuedError(err error) bool {
	f, ok := failure.As(err)
	return ok && f.Class == failure.Transient && f.Reason == ReasonFlattenQueued
}

// TestFlattenSlots: at most max pushes flatten at once, and one namespace
// at most half of them; a push waiting longer than its wait ends with
// FlattenQueued; slots go to the pushes waiting in the order they came, a
// namespace at its share skipped.
func TestFlattenSlots(t *testing.T) {
	ctx := context.Background()
	slots := NewFlattenSlots(2, 0)
	slots.wait = 50 * time.Millisecond
	acquire := func(ns string) (func(), error) {
		_, release, err := slots.acquire(ctx, ns)
		return release, err
	}

	releaseA, err := acquire("tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("tenant-a"); !queuedError(err) {
		t.Fatalf("a second slot for tenant-a: %v, want %s", err, ReasonFlattenQueued)
	}
	releaseB, err := acquire("tenant-b")
	if err != nil {
		t.Fatalf("tenant-b, while tenant-a holds its share: %v", err)
	}
	if _, err := acquire("tenant-c"); !queuedError(err) {
		t.Fatalf("a third slot: %v, want %s", err, ReasonFlattenQueued)
	}
	if len(slots.queue) != 0 {
		t.Fatalf("%d waiters left in the queue after they gave up", len(slots.queue))
	}

	// Waiting in order: tenant-c, then tenant-d; tenant-b's second push,
	// at its share, waits behind them without holding them up.
	slots.wait = time.Minute
	order := make(chan string, 3)
	for _, ns := range []string{"tenant-c", "tenant-b", "tenant-d"} {
		go func() {
			release, err := acquire(ns)
			if err != nil {
				order <- "error: " + err.Error()
				return
			}
			order <- ns
			time.Sleep(10 * time.Millisecond)
			release()
		}()
		waitQueued(t, slots, ns)
	}
	releaseA()
	if got := <-order; got != "tenant-c" {
		t.Errorf("the first slot given back went to %s, want tenant-c, the first waiting", got)
	}
	releaseB()
	for range 2 {
		if got := <-order; got != "tenant-d" && got != "tenant-b" {
			t.Errorf("then %s", got)
		}
	}
	inUse := func() int { slots.mu.Lock(); defer slots.mu.Unlock(); return slots.inUse }
	deadline := time.Now().Add(5 * time.Second)
	for inUse() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if slots.inUse != 0 || len(slots.byNamespace) != 0 || len(slots.queue) != 0 {
		t.Errorf("%d slots in use (%v), %d waiting, after every push gave its slot back", slots.inUse, slots.byNamespace, len(slots.queue))
	}
}

// waitQueued waits until a push of ns waits in the queue.
func waitQueued(t *testing.T, s *FlattenSlots, ns string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		for _, w := range s.queue {
			if w.namespace == ns {
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s never waited", ns)
}

// TestFlattenSlotHeldTooLong: a push holding its slot past maxHeld has its
// context ended, and its error says FlattenTimedOut naming the flag; the
// slot goes back when it releases; a cancelled wait leaves no waiter.
func TestFlattenSlotHeldTooLong(t *testing.T) {
	slots := NewFlattenSlots(1, 20*time.Millisecond)
	ctx, release, err := slots.acquire(context.Background(), "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	err = slots.heldTooLong(ctx, ctx.Err())
	if f, ok := failure.As(err); !ok || f.Reason != ReasonFlattenTimedOut || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("held too long: %v, want %s wrapping the deadline", err, ReasonFlattenTimedOut)
	}
	if other := errors.New("other"); slots.heldTooLong(context.Background(), other) != other {
		t.Error("an error of a push within its time was changed")
	}
	release()

	_, release, _ = slots.acquire(context.Background(), "tenant-a")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := slots.acquire(cancelled, "tenant-b"); err != context.Canceled {
		t.Errorf("a cancelled wait: %v", err)
	}
	release()
	if slots.inUse != 0 || len(slots.queue) != 0 {
		t.Errorf("%d in use, %d waiting", slots.inUse, len(slots.queue))
	}
}
