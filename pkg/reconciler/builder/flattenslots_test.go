package builder

import (
	"context"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// TestFlattenSlots: at most max pushes flatten at once, and one namespace
// at most half of them; a push waiting longer than its wait ends with
// FlattenQueued, and one waiting when a slot is given back takes it.
func TestFlattenSlots(t *testing.T) {
	ctx := context.Background()
	slots := NewFlattenSlots(2)
	slots.wait = 50 * time.Millisecond
	queued := func(err error) bool {
		f, ok := failure.As(err)
		return ok && f.Class == failure.Transient && f.Reason == ReasonFlattenQueued
	}

	releaseA, err := slots.acquire(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slots.acquire(ctx, "tenant-a"); !queued(err) {
		t.Fatalf("a second slot for tenant-a: %v, want %s", err, ReasonFlattenQueued)
	}
	releaseB, err := slots.acquire(ctx, "tenant-b")
	if err != nil {
		t.Fatalf("tenant-b, while tenant-a holds its share: %v", err)
	}
	if _, err := slots.acquire(ctx, "tenant-c"); !queued(err) {
		t.Fatalf("a third slot: %v, want %s", err, ReasonFlattenQueued)
	}

	slots.wait = time.Minute
	got := make(chan error, 1)
	go func() {
		release, err := slots.acquire(ctx, "tenant-c")
		if err == nil {
			defer release()
		}
		got <- err
	}()
	releaseA()
	if err := <-got; err != nil {
		t.Errorf("tenant-c, waiting when tenant-a gave its slot back: %v", err)
	}
	releaseB()
	if slots.inUse != 0 || len(slots.byNamespace) != 0 {
		t.Errorf("%d slots in use (%v) after every push gave its slot back", slots.inUse, slots.byNamespace)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	a, _ := slots.acquire(ctx, "tenant-a")
	b, _ := slots.acquire(ctx, "tenant-b")
	if _, err := slots.acquire(cancelled, "tenant-c"); err != context.Canceled {
		t.Errorf("a cancelled wait: %v", err)
	}
	a()
	b()
}
