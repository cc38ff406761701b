package replicas

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
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
	w.peerWith(name, holder, nil)
}

// peerReplica announces the peer replica, its electors asking for the
// buckets electing lists (electingAnnotation; "" before they start).
func (w *sharesWorld) peerReplica(electing string) {
	var annotations map[string]string
	if electing != "" {
		annotations = map[string]string{electingAnnotation: electing}
	}
	w.peerWith("ctl.replica.2", "peer", annotations)
}

func (w *sharesWorld) peerWith(name, holder string, annotations map[string]string) {
	ctx := context.Background()
	leases := w.kube.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		l = lease(name, holder)
		l.Annotations = annotations
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		l.Spec.HolderIdentity = &holder
		l.Annotations = annotations
		l.ResourceVersion = version(w.clock)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

// version is a ResourceVersion for a Lease written at now. The fake
// clientset neither sets nor checks ResourceVersions (it keeps what it is
// given), and the gate sees a Lease change by its ResourceVersion: the
// tests give each write a new one.
func version(now time.Time) string { return fmt.Sprint(now.UnixNano()) }

// take is this replica's elector writing itself as the holder of a bucket.
func (w *sharesWorld) take(i int) error {
	return w.takeWith(context.Background(), w.leases, i)
}

// takeWith is take with a context and a gate of its own.
func (w *sharesWorld) takeWith(ctx context.Context, gated gatedLeases, i int) error {
	l, err := w.kube.CoordinationV1().Leases("ns").Get(ctx, bucket(i), metav1.GetOptions{})
	if err != nil {
		_, err = gated.Create(ctx, lease(bucket(i), "me"), metav1.CreateOptions{})
		return err
	}
	me := "me"
	l.Spec.HolderIdentity = &me
	l.ResourceVersion = version(w.clock)
	_, err = gated.Update(ctx, l, metav1.UpdateOptions{})
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
	w.peerReplica("ctl.queue/2")
	w.pass(0)
	if err := w.take(0); err != nil {
		t.Fatalf("its share: %v", err)
	}
	if err := w.take(1); err == nil {
		t.Fatal("took a second bucket while the peer leads none")
	}
	// Nobody takes it: after a lease duration free, anyone may.
	w.peerReplica("ctl.queue/2") // renewed
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
	w.peerReplica("ctl.queue/2")
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
	w.peerReplica("ctl.queue/2")
	w.peer(bucket(1), "peer")
	w.pass(time.Second)
	if err := w.take(0); err != nil {
		t.Errorf("renewing bucket 0: %v", err)
	}
}

func TestTakesOverFromAReplicaGone(t *testing.T) {
	w := newSharesWorld(t)
	w.peerReplica("ctl.queue/2")
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
	w.peerReplica("ctl.queue/2")
	w.peer(bucket(0), "peer")
	w.peer(bucket(1), "peer")
	w.pass(0)
	if got := fmt.Sprint(w.shares.led()); got != "map[queue:0]" {
		t.Errorf("led = %s, want 0 buckets of queue", got)
	}
}

// Its elector may find a peer's bucket run out before this replica's view
// does: beyond its share, a bucket it sees held is not taken.
func TestLeavesWhatItSeesHeld(t *testing.T) {
	w := newSharesWorld(t)
	w.peerReplica("ctl.queue/2")
	w.pass(0)
	if err := w.take(0); err != nil {
		t.Fatal(err)
	}
	w.pass(testLease / 2)
	if err := w.take(0); err != nil {
		t.Fatal(err)
	}
	w.peerReplica("ctl.queue/2")
	w.peer(bucket(1), "peer")
	w.pass(testLease/2 + time.Second)
	if err := w.take(1); err == nil {
		t.Error("took a bucket its peer holds")
	}
}

// hungLeases is an API server whose writes of one Lease hang until
// released (or their context ends).
type hungLeases struct {
	coordinationclient.LeaseInterface
	name    string
	entered chan struct{} // a write of name has begun
	release chan struct{}
}

func (h hungLeases) hang(ctx context.Context, name string) error {
	if name != h.name {
		return nil
	}
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h hungLeases) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if err := h.hang(ctx, l.Name); err != nil {
		return nil, err
	}
	return h.LeaseInterface.Create(ctx, l, opts)
}

func (h hungLeases) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if err := h.hang(ctx, l.Name); err != nil {
		return nil, err
	}
	return h.LeaseInterface.Update(ctx, l, opts)
}

// hangTake starts a take of bucket i whose write hangs until the returned
// function is called, which waits for the take to end and returns its
// error.
func (w *sharesWorld) hangTake(i int) (release func() error) {
	h := hungLeases{w.kube.CoordinationV1().Leases("ns"), bucket(i), make(chan struct{}), make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- w.takeWith(context.Background(), gatedLeases{h, w.shares}, i) }()
	select {
	case <-h.entered:
	case err := <-done:
		w.t.Fatalf("the take of bucket %d ended before its write: %v", i, err)
	}
	return func() error {
		close(h.release)
		return <-done
	}
}

// A renewal never waits for another elector's write: an elector that
// stayed leader while it waited could stay past its renew deadline, the
// other replica taking its Lease meanwhile.
func TestRenewalNotBlockedByAHungTake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(w *sharesWorld) // bucket 1 before the hung take
	}{
		{"hung create", func(*sharesWorld) {}},
		{"hung update", func(w *sharesWorld) {
			w.peer(bucket(1), "gone")
			w.pass(testLease) // run out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSharesWorld(t)
			w.pass(0)
			if err := w.take(0); err != nil {
				t.Fatal(err)
			}
			tc.before(w)
			release := w.hangTake(1)
			defer release()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			renewed := make(chan error, 1)
			go func() { renewed <- w.takeWith(ctx, w.leases, 0) }()
			select {
			case err := <-renewed:
				if err != nil {
					t.Errorf("renewing bucket 0: %v", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the renewal of bucket 0 waited for the hung take of bucket 1 past its context")
			}
		})
	}
}

// A take in flight counts as led: a second one beyond the share is
// refused meanwhile, and the reservation goes once the take has ended.
func TestTakeInFlightCounts(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("take fails: ", fail), func(t *testing.T) {
			w := newSharesWorld(t)
			w.peerReplica("ctl.queue/2")
			w.pass(0)
			release := w.hangTake(0)
			if err := w.take(1); err == nil {
				t.Error("took bucket 1 beyond its share while taking bucket 0")
			}
			if fail {
				w.kube.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
					l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
					return l.Name == bucket(0), nil, errors.New("refused")
				})
			}
			if err := release(); (err != nil) != fail {
				t.Fatalf("the take of bucket 0: %v", err)
			}
			if len(w.shares.taking) != 0 {
				t.Errorf("reservations left after the take: %v", w.shares.taking)
			}
			// A failed take leaves the share free: bucket 1 may be taken.
			if err := w.take(1); (err == nil) != fail {
				t.Errorf("bucket 1 after the take of bucket 0 (failed: %v): %v", fail, err)
			}
		})
	}
}

// Only a replica whose electors ask for the same buckets is handed buckets:
// one that has announced itself but is not electing yet (informers still
// syncing, crash-looping, another bucket count or other reconcilers) could
// not take them.
func TestHandsBackOnlyToAReplicaElectingTheBuckets(t *testing.T) {
	for _, tc := range []struct {
		electing string
		handsOff bool
	}{
		{"", false},
		{"ctl.queue/3", false},
		{"ctl.other/2", false},
		{"other.queue/2", false},
		{"ctl.queue/2", true},
		{"ctl.other/2,ctl.queue/2", true},
	} {
		t.Run(tc.electing, func(t *testing.T) {
			w := newSharesWorld(t)
			w.pass(0)
			for i := range 2 {
				if err := w.take(i); err != nil {
					t.Fatal(err)
				}
			}
			w.peerReplica(tc.electing)
			w.pass(2 * time.Second)
			if err := w.take(1); (err != nil) != tc.handsOff {
				t.Errorf("renewing bucket 1 with a peer electing %q: %v, want refused: %v", tc.electing, err, tc.handsOff)
			}
			if err := w.take(0); err != nil {
				t.Errorf("renewing bucket 0: %v", err)
			}
		})
	}
}

// An elector's first Get marks this replica's Lease as electing its
// buckets' reconciler and count.
func TestMarksItsLeaseElecting(t *testing.T) {
	w := newSharesWorld(t)
	w.pass(0)
	for _, name := range []string{bucket(1), "ctl.other.00-of-02", "ctl.queue.00-of-03", "other.queue.00-of-02"} {
		_, _ = w.leases.Get(context.Background(), name, metav1.GetOptions{})
	}
	select {
	case <-w.shares.kick:
	default:
		t.Error("no refresh asked for")
	}
	w.pass(0)
	own, err := w.kube.CoordinationV1().Leases("ns").Get(context.Background(), "ctl.replica.1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := own.Annotations[electingAnnotation]; got != "ctl.other/2,ctl.queue/2" {
		t.Errorf("%s = %q, want ctl.other/2,ctl.queue/2", electingAnnotation, got)
	}
}

func TestBucketOf(t *testing.T) {
	w := newSharesWorld(t)
	for _, tc := range []struct {
		name  string
		group string
		index int
		ok    bool
	}{
		{"ctl.queue.01-of-02", "ctl.queue", 1, true},
		{"ctl.queue.01-of-03", "", 0, false},    // another bucket count
		{"other.queue.01-of-02", "", 0, false},  // another component's
		{"ctlx.queue.01-of-02", "", 0, false},   // another component's, ours a prefix of its name
		{"ctl.replica.01-of-02x", "", 0, false}, // not a bucket
	} {
		group, index, ok := w.shares.bucketOf(tc.name)
		if group != tc.group || index != tc.index || ok != tc.ok {
			t.Errorf("bucketOf(%q) = %q, %d, %v, want %q, %d, %v", tc.name, group, index, ok, tc.group, tc.index, tc.ok)
		}
	}
}

// stop deletes this replica's Lease before it returns, whether or not the
// context has ended.
func TestStopDeletesTheReplicaLease(t *testing.T) {
	kube := fake.NewClientset()
	leases := kube.CoordinationV1().Leases("ns")
	replicaLeases := func() int {
		list, err := leases.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range list.Items {
			if strings.HasPrefix(l.Name, "ctl.replica.") {
				n++
			}
		}
		return n
	}
	_, stop, err := WithSharedBuckets(context.Background(), kube, "ns", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	if n := replicaLeases(); n != 1 {
		t.Fatalf("%d replica Leases once started, want 1", n)
	}
	stop()
	if n := replicaLeases(); n != 0 {
		t.Errorf("%d replica Leases once stopped, want 0", n)
	}
}
