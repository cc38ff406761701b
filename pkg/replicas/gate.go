package replicas

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
)

// write runs an elector's write of lease, unless this replica names itself
// its holder and may not; what it wrote is seen at once, so that the next
// decision counts it. No lock is held during the write: a take is reserved
// in taking first (and dropped after), a renewal needs no reservation.
func (s *bucketShares) write(lease *coordinationv1.Lease, do func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == s.id {
		s.mu.Lock()
		s.markElecting(lease.Name)
		now := s.clock.Now()
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
		s.observe(written, s.clock.Now())
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
