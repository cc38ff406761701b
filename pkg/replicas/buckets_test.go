package replicas

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		buckets int
		alive   []string
		counts  map[string]int
		want    map[string]int
	}{
		{2, []string{"a"}, nil, map[string]int{"a": 2}},
		{2, []string{"a", "b"}, map[string]int{"a": 2}, map[string]int{"a": 1, "b": 1}},
		// The remainder stays with those leading already: a third replica
		// (a rolling update's surge) moves nothing.
		{2, []string{"c", "a", "b"}, map[string]int{"a": 1, "b": 1}, map[string]int{"a": 1, "b": 1, "c": 0}},
		{3, []string{"a", "b"}, map[string]int{"b": 2, "a": 1}, map[string]int{"a": 1, "b": 2}},
		{4, []string{"a", "b", "c"}, nil, map[string]int{"a": 2, "b": 1, "c": 1}},
	} {
		got := fairShares(tc.buckets, tc.alive, tc.counts, map[string]bool{"a": true, "b": true, "c": true})
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("fairShares(%d, %v, %v) = %v, want %v", tc.buckets, tc.alive, tc.counts, got, tc.want)
		}
	}
	// A replica not seen renewing (perhaps dead) comes after the others.
	if got := fairShares(2, []string{"a", "b", "c"}, map[string]int{"c": 1}, map[string]bool{"b": true, "c": true}); got["a"] != 0 {
		t.Errorf("the remainder went to a replica not seen renewing: %v", got)
	}
}

// sharesWorld is one replica's bucketShares against a fake API server, with
// a clock of its own, and a peer whose Leases the test writes.
type sharesWorld struct {
	t      *testing.T
	kube   *fake.Clientset
	shares *bucketShares
	leases gatedLeases
	clock  time.Time
}

const testLease = 15 * time.Second

func newSharesWorld(t *testing.T) *sharesWorld {
	w := &sharesWorld{t: t, kube: fake.NewClientset(), clock: time.Unix(1000, 0)}
	w.shares = newBucketShares(w.kube.CoordinationV1().Leases("ns"), "ctl", "me", "1", 2, testLease, 2*time.Second)
	w.shares.now = func() time.Time { return w.clock }
	w.shares.started = w.clock
	w.leases = gatedLeases{w.kube.CoordinationV1().Leases("ns"), w.shares}
	return w
}

func bucket(i int) string { return fmt.Sprintf("ctl.queue.%02d-of-02", i) }

func lease(name, holder string) *coordinationv1.Lease {
	seconds := int32(testLease / time.Second)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds}}
}

// peer writes a Lease as another replica would (not through the gate).
func (w *sharesWorld) peer(name, holder string) {
	ctx := context.Background()
	leases := w.kube.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		_, err = leases.Create(ctx, lease(name, holder), metav1.CreateOptions{})
	} else {
		l.Spec.HolderIdentity = &holder
		l.ResourceVersion = fmt.Sprint(w.clock.UnixNano()) // the fake keeps what it is given
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

// take is this replica's elector writing itself as the holder of a bucket.
func (w *sharesWorld) take(i int) error {
	ctx := context.Background()
	l, err := w.kube.CoordinationV1().Leases("ns").Get(ctx, bucket(i), metav1.GetOptions{})
	if err != nil {
		_, err = w.leases.Create(ctx, lease(bucket(i), "me"), metav1.CreateOptions{})
		return err
	}
	me := "me"
	l.Spec.HolderIdentity = &me
	l.ResourceVersion = fmt.Sprint(w.clock.UnixNano())
	_, err = w.leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func (w *sharesWorld) pass(d time.Duration) {
	w.clock = w.clock.Add(d)
	w.shares.refresh(context.Background())
}

func TestAloneTakesEveryBucket(t *testing.T) {
	w := newSharesWorld(t)
	w.pass(0)
	for i := range 2 {
		if err := w.take(i); err != nil {
			t.Errorf("bucket %d: %v", i, err)
		}
	}
}

func TestTakesItsShareAndLeavesTheRest(t *testing.T) {
	w := newSharesWorld(t)
	w.peer("ctl.replica.2", "peer")
	w.pass(0)
	if err := w.take(0); err != nil {
		t.Fatalf("its share: %v", err)
	}
	if err := w.take(1); err == nil {
		t.Fatal("took a second bucket while the peer leads none")
	}
	// Nobody takes it: after a lease duration free, anyone may.
	w.peer("ctl.replica.2", "peer") // renewed
	w.pass(testLease - time.Second)
	if err := w.take(1); err == nil {
		t.Fatal("took the second bucket before it was free for a lease duration")
	}
	w.pass(time.Second)
	if err := w.take(1); err != nil {
		t.Fatalf("the second bucket, free for a lease duration: %v", err)
	}
}

func TestHandsBackWhatIsBeyondItsShare(t *testing.T) {
	w := newSharesWorld(t)
	w.pass(0)
	for i := range 2 {
		if err := w.take(i); err != nil {
			t.Fatal(err)
		}
	}
	// A peer arrives: bucket 1 is no longer renewed; bucket 0 is.
	w.peer("ctl.replica.2", "peer")
	w.pass(2 * time.Second)
	if err := w.take(0); err != nil {
		t.Errorf("renewing bucket 0: %v", err)
	}
	if err := w.take(1); err == nil {
		t.Error("renewed bucket 1 with a peer leading none")
	}
	// The peer takes it once it has run out; this replica renews its share
	// meanwhile, and after.
	w.pass(testLease / 2)
	if err := w.take(0); err != nil {
		t.Errorf("renewing bucket 0: %v", err)
	}
	w.pass(testLease / 2)
	w.peer("ctl.replica.2", "peer")
	w.peer(bucket(1), "peer")
	w.pass(time.Second)
	if err := w.take(0); err != nil {
		t.Errorf("renewing bucket 0: %v", err)
	}
}

func TestTakesOverFromAReplicaGone(t *testing.T) {
	w := newSharesWorld(t)
	w.peer("ctl.replica.2", "peer")
	w.peer(bucket(1), "peer")
	w.pass(0)
	if err := w.take(0); err != nil {
		t.Fatal(err)
	}
	// The peer stops renewing: once its Leases run out its buckets are
	// this replica's share, at once.
	w.pass(testLease)
	if err := w.take(1); err != nil {
		t.Errorf("the share of a replica gone: %v", err)
	}
	// Its own Lease is deleted once gone for another lease duration.
	w.pass(testLease)
	if _, err := w.kube.CoordinationV1().Leases("ns").Get(context.Background(), "ctl.replica.2", metav1.GetOptions{}); err == nil {
		t.Error("the Lease of a replica gone for two lease durations is still there")
	}
	if _, err := w.kube.CoordinationV1().Leases("ns").Get(context.Background(), "ctl.replica.1", metav1.GetOptions{}); err != nil {
		t.Errorf("this replica's own Lease: %v", err)
	}
}

func TestLedCountsStandingBy(t *testing.T) {
	w := newSharesWorld(t)
	w.peer("ctl.replica.2", "peer")
	w.peer(bucket(0), "peer")
	w.peer(bucket(1), "peer")
	w.pass(0)
	if got := fmt.Sprint(w.shares.led()); got != "map[ctl.queue:0]" {
		t.Errorf("led = %s, want 0 buckets of ctl.queue", got)
	}
}

// Its elector may find a peer's bucket run out before this replica's view
// does: beyond its share, a bucket it sees held is not taken.
func TestLeavesWhatItSeesHeld(t *testing.T) {
	w := newSharesWorld(t)
	w.peer("ctl.replica.2", "peer")
	w.pass(0)
	if err := w.take(0); err != nil {
		t.Fatal(err)
	}
	w.pass(testLease / 2)
	if err := w.take(0); err != nil {
		t.Fatal(err)
	}
	w.peer("ctl.replica.2", "peer")
	w.peer(bucket(1), "peer")
	w.pass(testLease/2 + time.Second)
	if err := w.take(1); err == nil {
		t.Error("took a bucket its peer holds")
	}
}
