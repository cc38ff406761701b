package replicas

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// sharesWorld is one replica's bucketShares against a fake API server, with
// a fake clock, and a peer whose Leases the test writes.
type sharesWorld struct {
	t      *testing.T
	kube   *fake.Clientset
	shares *bucketShares
	leases gatedLeases
	clock  *testingclock.FakeClock
}

const (
	testLease = 15 * time.Second
	testRetry = 2 * time.Second
)

func newSharesWorld(t *testing.T) *sharesWorld {
	w := &sharesWorld{t: t, kube: fake.NewClientset(), clock: testingclock.NewFakeClock(time.Unix(1000, 0))}
	w.shares = newBucketShares(w.kube.CoordinationV1().Leases("ns"), "ctl", "me", "1", 2, testLease, testRetry, w.clock)
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
		l.ResourceVersion = version(w.clock.Now())
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
	l.ResourceVersion = version(w.clock.Now())
	_, err = gated.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// pass steps the clock and refreshes as run would.
func (w *sharesWorld) pass(d time.Duration) {
	w.clock.Step(d)
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
	w.pass(testLease - time.Second)
	if _, err := w.kube.CoordinationV1().Leases("ns").Get(context.Background(), "ctl.replica.2", metav1.GetOptions{}); err != nil {
		t.Errorf("the Lease of a replica gone for less than two lease durations: %v", err)
	}
	w.pass(time.Second)
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

// run refreshes every retry period of its clock, and at once when kicked;
// once its context ends it deletes this replica's Lease.
func TestRunRefreshes(t *testing.T) {
	w := newSharesWorld(t)
	start := w.clock.Now()
	listed := make(chan struct{}, 10)
	w.kube.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		listed <- struct{}{}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.shares.run(ctx)
	}()
	// The real clock bounds the waits below only when a refresh is missed.
	guard := time.After(10 * time.Second)
	for !w.clock.HasWaiters() { // run's ticker
		select {
		case <-guard:
			t.Fatal("run started no ticker")
		default:
			goruntime.Gosched()
		}
	}
	refreshed := func(why string) *coordinationv1.Lease {
		t.Helper()
		select {
		case <-listed:
		case <-guard:
			t.Fatalf("no refresh %s", why)
		}
		own, err := w.kube.CoordinationV1().Leases("ns").Get(context.Background(), "ctl.replica.1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("this replica's Lease, refreshed %s: %v", why, err)
		}
		return own
	}

	w.clock.Step(testRetry)
	if own := refreshed("on the first tick"); !own.Spec.RenewTime.Time.Equal(start.Add(testRetry)) {
		t.Errorf("renewed at %s, want %s", own.Spec.RenewTime.Sub(start), testRetry)
	}
	w.shares.mu.Lock()
	w.shares.markElecting(bucket(0))
	w.shares.mu.Unlock()
	if own := refreshed("when kicked"); own.Annotations[electingAnnotation] != "ctl.queue/2" {
		t.Errorf("%s = %q once kicked, want ctl.queue/2", electingAnnotation, own.Annotations[electingAnnotation])
	}
	w.clock.Step(testRetry)
	if own := refreshed("on the second tick"); !own.Spec.RenewTime.Time.Equal(start.Add(2 * testRetry)) {
		t.Errorf("renewed at %s, want %s", own.Spec.RenewTime.Sub(start), 2*testRetry)
	}

	cancel()
	<-done
	if _, err := w.kube.CoordinationV1().Leases("ns").Get(context.Background(), "ctl.replica.1", metav1.GetOptions{}); err == nil {
		t.Error("this replica's Lease is still there once run has ended")
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
