// Package replicas lets the replicas of the controller share the work:
// knative's standard bucket election, with a replica taking only its share
// of the buckets (docs/design.md § Replicas share the work).
package replicas

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"knative.dev/pkg/leaderelection"
)

// Replicas share the work (docs/design.md § Replicas share the work).
// knative's standard election runs one elector per bucket, each taking its
// Lease whenever it finds it free, so the replica that starts first leads
// every bucket and the others idle until it dies. bucketShares sits in front
// of the electors' Lease writes and refuses some of them:
//
//   - a replica takes a bucket while it leads fewer than its share of that
//     reconciler's buckets (the buckets split over the replicas alive, which
//     renew a Lease of their own, "<component>.replica.<uid>"); beyond its
//     share, only a bucket that nobody took for a lease duration;
//   - a replica leading more than its share while another, electing the
//     same buckets, leads less stops renewing its extra buckets: its elector
//     steps down after the renew deadline, and the other takes them once the
//     Lease runs out. A replica announces itself before its electors start
//     (sharedmain waits for its informers first): it marks its Lease with
//     the buckets its electors ask for (electingAnnotation), and only a
//     replica so marked is handed buckets.
//
// It writes no bucket Lease itself: a refused write is, for client-go's
// elector, a failed one, handled as any other. It holds no lock during an
// API call: a renewal never waits for another elector's write.
type bucketShares struct {
	leases    coordinationclient.LeaseInterface
	component string
	id        string // the holder identity of every Lease this replica writes
	replica   string // the name of this replica's own Lease
	// replicaPrefix starts the names of the replicas' own Leases.
	replicaPrefix string
	buckets       int
	// lease is config-leader-election's lease duration: how long a Lease
	// not renewed stays held, and how long a free bucket waits for a
	// replica below its share before any replica may take it.
	lease time.Duration
	retry time.Duration
	// clock: a fake one in tests, to step through lease durations.
	clock   clock.WithTicker
	started time.Time

	// kick asks run for a refresh now: this replica's electors asked for
	// buckets not yet in its Lease's electingAnnotation.
	kick chan struct{}

	mu   sync.Mutex
	seen map[string]*seenLease
	// taking: the buckets this replica is writing itself the holder of,
	// not held before. A take is reserved here before its write and counted
	// as led, so that two electors do not both take the last of a share;
	// the write itself runs without a lock.
	taking map[string]bool
	// electing: electingKey of each group this replica's electors asked
	// for, written to its Lease.
	electing map[string]bool
	own      *coordinationv1.Lease
}

// electingAnnotation on a replica's own Lease lists, comma-separated, the
// buckets its electors ask for, as electingKey: one "<group>/<bucket count>"
// per reconciler. A replica hands buckets back only to a replica electing
// them.
const electingAnnotation = "buildsmith.dev/electing"

func electingKey(group string, buckets int) string { return group + "/" + strconv.Itoa(buckets) }

// WithSharedBuckets sets up knative's standard bucket election for the
// controllers sharedmain starts, its Lease writes gated by bucketShares, and
// starts announcing this replica. It reads config-leader-election itself,
// as sharedmain would. stop ends the announcing and deletes this replica's
// Lease (5 s at most) before it returns: the caller runs it before exiting,
// once sharedmain has returned.
func WithSharedBuckets(ctx context.Context, kc kubernetes.Interface, namespace, component string) (_ context.Context, stop func(), _ error) {
	cm, err := kc.CoreV1().ConfigMaps(namespace).Get(ctx, leaderelection.ConfigMapName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", leaderelection.ConfigMapName(), err)
	}
	cfg, err := leaderelection.NewConfigFromConfigMap(cm)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", leaderelection.ConfigMapName(), err)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, nil, err
	}
	uid := string(uuid.NewUUID())
	s := newBucketShares(kc.CoordinationV1().Leases(namespace), component, host+"_"+uid, uid,
		int(cfg.Buckets), cfg.LeaseDuration, cfg.RetryPeriod, clock.RealClock{})
	if err := s.registerMetrics(); err != nil {
		return nil, nil, err
	}
	// Others learn of this replica before its electors ask for anything.
	s.refresh(ctx)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(runCtx)
	}()

	cc := cfg.GetComponentConfig(component)
	cc.Identity = s.id // one identity for all the reconcilers' Leases: shares are counted by it
	ctx = leaderelection.WithConfig(ctx, cfg)
	return leaderelection.WithStandardLeaderElectorBuilder(ctx, gatedClient{kc, s}, cc), func() { cancel(); <-done }, nil
}

// newBucketShares: id is this replica's holder identity, uid names its own
// Lease.
func newBucketShares(leases coordinationclient.LeaseInterface, component, id, uid string, buckets int, lease, retry time.Duration,
	clk clock.WithTicker) *bucketShares {
	prefix := component + ".replica."
	return &bucketShares{leases: leases, component: component, id: id, replica: prefix + uid, replicaPrefix: prefix,
		buckets: buckets, lease: lease, retry: retry, clock: clk, started: clk.Now(), kick: make(chan struct{}, 1),
		seen: map[string]*seenLease{}, taking: map[string]bool{}, electing: map[string]bool{}}
}

// run renews this replica's Lease and rereads the others every retry
// period, or at once when kicked; when ctx ends it deletes its Lease, so
// that the others count it gone at once (its electors release their buckets
// at the same time).
func (s *bucketShares) run(ctx context.Context) {
	tick := s.clock.NewTicker(s.retry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.leases.Delete(ctx, s.replica, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				klog.ErrorS(err, "Deleting this replica's Lease", "lease", s.replica)
			}
			return
		case <-tick.C():
			s.refresh(ctx)
		case <-s.kick:
			s.refresh(ctx)
		}
	}
}

// refresh renews this replica's Lease, reads every Lease of the namespace
// and deletes the Leases of replicas gone for a lease duration.
func (s *bucketShares) refresh(ctx context.Context) {
	s.announce(ctx)
	start := s.clock.Now()
	list, err := s.leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		klog.ErrorS(err, "Listing Leases")
		return
	}
	var gone []coordinationv1.Lease
	s.mu.Lock()
	now := s.clock.Now()
	names := map[string]bool{}
	for i := range list.Items {
		l := &list.Items[i]
		names[l.Name] = true
		if seen := s.seen[l.Name]; seen != nil && seen.changed.After(start) {
			continue // written by this replica while the list was read: newer than the list
		}
		s.observe(l, now)
		if s.isReplica(l.Name) && l.Name != s.replica && !s.seen[l.Name].held(now.Add(-s.lease)) {
			gone = append(gone, *l)
		}
	}
	for name, seen := range s.seen {
		if !names[name] && !seen.changed.After(start) {
			delete(s.seen, name)
		}
	}
	s.mu.Unlock()
	for _, l := range gone {
		// Only as seen: a Lease renewed meanwhile is kept.
		err := s.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.ErrorS(err, "Deleting the Lease of a replica gone", "lease", l.Name)
		}
	}
}

// announce creates or renews this replica's Lease, with the buckets its
// electors asked for so far.
func (s *bucketShares) announce(ctx context.Context) {
	now := metav1.NewMicroTime(s.clock.Now())
	s.mu.Lock()
	own := s.own.DeepCopy()
	electing := slices.Sorted(maps.Keys(s.electing))
	s.mu.Unlock()
	var annotations map[string]string
	if len(electing) > 0 {
		annotations = map[string]string{electingAnnotation: strings.Join(electing, ",")}
	}
	var err error
	if own != nil {
		own.Annotations = annotations
		own.Spec.RenewTime = &now
		if own, err = s.leases.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				klog.ErrorS(err, "Renewing this replica's Lease", "lease", s.replica)
				return
			}
			// Deleted (another replica saw this one gone) or changed:
			// written afresh.
			_ = s.leases.Delete(ctx, s.replica, metav1.DeleteOptions{})
			own = nil
		}
	}
	if own == nil {
		seconds := int32(s.lease / time.Second)
		own, err = s.leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.replica, Annotations: annotations},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &s.id, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}},
			metav1.CreateOptions{})
		if err != nil {
			klog.ErrorS(err, "Creating this replica's Lease", "lease", s.replica)
			return
		}
	}
	s.mu.Lock()
	s.own = own
	s.observe(own, s.clock.Now())
	s.mu.Unlock()
}
