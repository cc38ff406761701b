// Package replicas lets the replicas of the controller share the work:
// knative's standard bucket election, with a replica taking only its share
// of the buckets (docs/design.md § Replicas share the work).
package replicas

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
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
	lease   time.Duration
	retry   time.Duration
	now     func() time.Time
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

// seenLease is a Lease as this replica last saw it. As in client-go, a
// Lease is held until its duration has passed since this replica saw it
// change: the holder's clock is never compared with ours.
type seenLease struct {
	holder    string
	version   string
	duration  time.Duration
	changed   time.Time
	freeSince time.Time // zero while held
	// renewed: seen to change since first seen. A replica's Lease seen
	// once only may be a dead one's, not yet run out.
	renewed bool
	// electing: a replica's Lease's electingAnnotation.
	electing []string
}

func (l *seenLease) held(now time.Time) bool {
	return l.holder != "" && now.Before(l.changed.Add(l.duration))
}

// bucketLease matches knative's bucket Lease names:
// <component>.<queue>.<NN>-of-<MM>.
var bucketLease = regexp.MustCompile(`^(.+)\.(\d+)-of-(\d+)$`)

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
		int(cfg.Buckets), cfg.LeaseDuration, cfg.RetryPeriod)
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
func newBucketShares(leases coordinationclient.LeaseInterface, component, id, uid string, buckets int, lease, retry time.Duration) *bucketShares {
	prefix := component + ".replica."
	return &bucketShares{leases: leases, component: component, id: id, replica: prefix + uid, replicaPrefix: prefix,
		buckets: buckets, lease: lease, retry: retry, now: time.Now, started: time.Now(), kick: make(chan struct{}, 1),
		seen: map[string]*seenLease{}, taking: map[string]bool{}, electing: map[string]bool{}}
}

// run renews this replica's Lease and rereads the others every retry
// period, or at once when kicked; when ctx ends it deletes its Lease, so
// that the others count it gone at once (its electors release their buckets
// at the same time).
func (s *bucketShares) run(ctx context.Context) {
	tick := time.NewTicker(s.retry)
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
		case <-tick.C:
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
	start := s.now()
	list, err := s.leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		klog.ErrorS(err, "Listing Leases")
		return
	}
	var gone []coordinationv1.Lease
	s.mu.Lock()
	now := s.now()
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
	now := metav1.NewMicroTime(s.now())
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
	s.observe(own, s.now())
	s.mu.Unlock()
}

// observe records a Lease as seen now. mu is held.
func (s *bucketShares) observe(l *coordinationv1.Lease, now time.Time) {
	seen, known := s.seen[l.Name]
	if !known {
		seen = &seenLease{}
		s.seen[l.Name] = seen
	}
	if !known || seen.version != l.ResourceVersion {
		seen.renewed = known
		seen.version, seen.changed, seen.holder, seen.duration = l.ResourceVersion, now, "", 0
		if l.Spec.HolderIdentity != nil {
			seen.holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseDurationSeconds != nil {
			seen.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		seen.electing = nil
		if v := l.Annotations[electingAnnotation]; v != "" {
			seen.electing = strings.Split(v, ",")
		}
	}
	switch {
	case seen.held(now):
		seen.freeSince = time.Time{}
	case seen.freeSince.IsZero():
		seen.freeSince = now
	}
}

// isReplica says whether a Lease is a replica's own (announcing it).
func (s *bucketShares) isReplica(name string) bool {
	return strings.HasPrefix(name, s.replicaPrefix)
}

// bucketOf parses a bucket Lease's name into its reconciler's Lease prefix
// ("<component>.<queue>") and the bucket's index, for this component's
// Leases of the configured bucket count only (Leases of another count are
// left over from an earlier configuration, or a rollout's other pods').
func (s *bucketShares) bucketOf(name string) (group string, index int, ok bool) {
	m := bucketLease.FindStringSubmatch(name)
	if m == nil || !strings.HasPrefix(m[1], s.component+".") {
		return "", 0, false
	}
	index, err1 := strconv.Atoi(m[2])
	of, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || of != s.buckets {
		return "", 0, false
	}
	return m[1], index, true
}

// leads says whether this replica holds the bucket Lease name, as far as
// it knows. mu is held.
func (s *bucketShares) leads(name string, now time.Time) bool {
	l := s.seen[name]
	return l != nil && l.held(now) && l.holder == s.id
}

// decide says whether this replica may write itself as the holder of the
// bucket Lease name now: nil, or why not. mu is held.
func (s *bucketShares) decide(name string, now time.Time) error {
	group, index, ok := s.bucketOf(name)
	if !ok {
		return nil
	}
	// The replicas alive (announced, electing yet or not), those electing
	// this group's buckets, and how many of them each leads.
	key := electingKey(group, s.buckets)
	alive, renewing, electing := []string{s.id}, map[string]bool{s.id: true}, map[string]bool{s.id: true}
	for n, l := range s.seen {
		if s.isReplica(n) && l.held(now) && l.holder != s.id {
			alive = append(alive, l.holder)
			renewing[l.holder] = l.renewed
			electing[l.holder] = slices.Contains(l.electing, key)
		}
	}
	counts := map[string]int{}
	var mine []int
	for n, l := range s.seen {
		if g, i, ok := s.bucketOf(n); ok && g == group && l.held(now) && !s.taking[n] {
			counts[l.holder]++
			if l.holder == s.id {
				mine = append(mine, i)
			}
		}
	}
	for n := range s.taking {
		if g, i, _ := s.bucketOf(n); g == group {
			counts[s.id]++
			mine = append(mine, i)
		}
	}
	share := fairShares(s.buckets, alive, counts, renewing)
	if s.leads(name, now) {
		// A renewal: keep the first buckets of the share, hand the others
		// back while a replica electing them is below its share (not one
		// that has only announced itself: it cannot take them yet).
		slices.Sort(mine)
		if slices.Index(mine, index) < share[s.id] {
			return nil
		}
		for _, id := range alive {
			if electing[id] && counts[id] < share[id] {
				return fmt.Errorf("handing %s to a replica below its share: this one leads %d of %d buckets, its share is %d",
					name, counts[s.id], s.buckets, share[s.id])
			}
		}
		return nil
	}
	if counts[s.id] < share[s.id] {
		return nil
	}
	free := s.started // not there yet: free since this replica started
	if l := s.seen[name]; l != nil {
		free = l.freeSince
		switch {
		case l.held(now):
			free = now // held still, as far as this replica knows (its elector may know better)
		case free.IsZero():
			// Held when last seen, run out since without this replica
			// seeing it again (a refresh failed): free since it ran out.
			free = l.changed.Add(l.duration)
		}
	}
	if now.Sub(free) >= s.lease {
		return nil // nobody below their share took it
	}
	return fmt.Errorf("leaving %s to a replica below its share until it has been free for %s: this one leads %d of %d buckets, its share is %d",
		name, s.lease, counts[s.id], s.buckets, share[s.id])
}

// fairShares splits buckets over the replicas alive: as evenly as they
// go, the remainder to those leading most already, so that a new count moves
// as few buckets as it can; then to those seen renewing their Lease (a
// Lease seen once may be a dead replica's); then by identity.
func fairShares(buckets int, alive []string, counts map[string]int, renewing map[string]bool) map[string]int {
	order := slices.Clone(alive)
	slices.SortFunc(order, func(a, b string) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		if renewing[a] != renewing[b] {
			if renewing[a] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	share := map[string]int{}
	for i, id := range order {
		share[id] = buckets / len(order)
		if i < buckets%len(order) {
			share[id]++
		}
	}
	return share
}

// write runs an elector's write of lease, unless this replica names itself
// its holder and may not; what it wrote is seen at once, so that the next
// decision counts it. No lock is held during the write: a take is reserved
// in taking first (and dropped after), a renewal needs no reservation.
func (s *bucketShares) write(lease *coordinationv1.Lease, do func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == s.id {
		s.mu.Lock()
		s.markElecting(lease.Name)
		now := s.now()
		err := s.decide(lease.Name, now)
		_, _, bucket := s.bucketOf(lease.Name)
		if err == nil && bucket && !s.leads(lease.Name, now) {
			s.taking[lease.Name] = true
			defer func() {
				s.mu.Lock()
				delete(s.taking, lease.Name)
				s.mu.Unlock()
			}()
		}
		s.mu.Unlock()
		if err != nil {
			// client-go logs the refused write as a failed one.
			klog.V(1).InfoS("Refused a bucket Lease write", "lease", lease.Name, "reason", err.Error())
			return nil, err
		}
	}
	written, err := do()
	if err == nil {
		s.mu.Lock()
		s.observe(written, s.now())
		s.mu.Unlock()
	}
	return written, err
}

// markElecting records that this replica's electors ask for the bucket
// Lease name, and has run write it to this replica's Lease if that is new.
// mu is held.
func (s *bucketShares) markElecting(name string) {
	group, _, ok := s.bucketOf(name)
	if !ok || s.electing[electingKey(group, s.buckets)] {
		return
	}
	s.electing[electingKey(group, s.buckets)] = true
	select {
	case s.kick <- struct{}{}:
	default: // a refresh is asked for already
	}
}

// led is how many buckets of each reconciler this replica leads, as far as
// it knows, by reconciler: its work queue's name, as in its bucket Leases'
// names (without the component).
func (s *bucketShares) led() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	led := map[string]int{}
	for n, l := range s.seen {
		if g, _, ok := s.bucketOf(n); ok {
			reconciler := strings.TrimPrefix(g, s.component+".")
			led[reconciler] += 0
			if l.holder == s.id && l.held(now) {
				led[reconciler]++
			}
		}
	}
	return led
}

func (s *bucketShares) registerMetrics() error {
	meter := otel.Meter("buildsmith.dev/leaderelection")
	gauge, err := meter.Int64ObservableGauge("buildsmith.leader.buckets",
		metric.WithDescription("Buckets this replica leads, by reconciler (its work queue's name, as in its bucket Leases' names): 0 for a replica standing by."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for reconciler, n := range s.led() {
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(attribute.String("reconciler", reconciler)))
		}
		return nil
	}, gauge)
	return err
}

// gatedClient is the Kubernetes client knative's electors get: its Leases
// go through bucketShares.
type gatedClient struct {
	kubernetes.Interface
	shares *bucketShares
}

func (c gatedClient) CoordinationV1() coordinationclient.CoordinationV1Interface {
	return gatedCoordination{c.Interface.CoordinationV1(), c.shares}
}

type gatedCoordination struct {
	coordinationclient.CoordinationV1Interface
	shares *bucketShares
}

func (c gatedCoordination) Leases(namespace string) coordinationclient.LeaseInterface {
	return gatedLeases{c.CoordinationV1Interface.Leases(namespace), c.shares}
}

type gatedLeases struct {
	coordinationclient.LeaseInterface
	shares *bucketShares
}

// Get is how an elector starts asking for its bucket: this replica marks
// its Lease as electing it.
func (l gatedLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	l.shares.mu.Lock()
	l.shares.markElecting(name)
	l.shares.mu.Unlock()
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l gatedLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return l.shares.write(lease, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Create(ctx, lease, opts) })
}

func (l gatedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return l.shares.write(lease, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Update(ctx, lease, opts) })
}
