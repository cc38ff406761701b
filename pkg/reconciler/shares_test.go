package reconciler

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestShares: a tenant alone uses every worker; once another has work
// queued, the first keeps one worker free for it, and uses all again when
// the other's work is done.
func TestShares(t *testing.T) {
	s := NewShares(4)
	key := func(ns string, i int) types.NamespacedName {
		return types.NamespacedName{Namespace: ns, Name: string(rune('a' + i))}
	}
	take := func(k types.NamespacedName) func() {
		t.Helper()
		release, ok := s.Acquire(k)
		if !ok {
			t.Fatalf("%s refused a share", k)
		}
		return release
	}

	// Alone: all four workers.
	var hog []func()
	for i := range 4 {
		s.Queue(key("hog", i))
		hog = append(hog, take(key("hog", i)))
	}
	// small's builder is queued behind many of hog's: when one of hog's
	// reconciles ends, hog's next may not take the free worker.
	s.Queue(key("hog", 4))
	s.Queue(key("small", 0))
	hog[0]()
	hog[0]() // a second release of the same share changes nothing
	hog = hog[1:]
	if _, ok := s.Acquire(key("hog", 4)); ok {
		t.Fatal("hog took the worker that came free while small has work queued")
	}
	small := take(key("small", 0))
	// small's one reconcile runs: hog still keeps to three.
	if _, ok := s.Acquire(key("hog", 4)); ok {
		t.Fatal("hog took a fourth worker while small's reconcile runs")
	}
	small()
	// small has nothing left: hog may use every worker again.
	hog = append(hog, take(key("hog", 4)))
	if len(hog) != 4 {
		t.Fatalf("hog runs %d", len(hog))
	}
	for _, release := range hog {
		release()
	}
	if len(s.running) != 0 || len(s.queued) != 0 {
		t.Errorf("left after every release: running %v, queued %v", s.running, s.queued)
	}
}

// TestSharesForget: a deleted key queued in one tenant no longer holds the
// others back; with one worker, nobody is refused for lack of a spare one.
func TestSharesForget(t *testing.T) {
	s := NewShares(2)
	gone := types.NamespacedName{Namespace: "small", Name: "deleted"}
	s.Queue(gone)
	first := types.NamespacedName{Namespace: "hog", Name: "a"}
	release := func() func() { r, _ := s.Acquire(first); return r }()
	if _, ok := s.Acquire(types.NamespacedName{Namespace: "hog", Name: "b"}); ok {
		t.Fatal("hog took both workers while small has a builder queued")
	}
	s.Forget(gone)
	second, ok := s.Acquire(types.NamespacedName{Namespace: "hog", Name: "b"})
	if !ok {
		t.Fatal("hog refused its second worker after small's builder was deleted")
	}
	release()
	second()

	one := NewShares(1)
	one.Queue(types.NamespacedName{Namespace: "b", Name: "x"})
	if r, ok := one.Acquire(types.NamespacedName{Namespace: "a", Name: "y"}); !ok {
		t.Fatal("refused with one worker and nothing running")
	} else {
		r()
	}
}
