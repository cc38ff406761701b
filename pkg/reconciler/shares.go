package reconciler

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Shares keeps one tenant (a namespace) from holding every worker of a
// controller while another tenant has work. A tenant alone may use them
// all; while another has work queued or running, each may run at most
// workers-1 reconciles at once, so a worker is always left for the others.
// A tenant whose registry is slow (a push moving at a crawl holds its
// worker for minutes) or whose builders are many then delays another's
// builder by about one reconcile: the time for a worker to come free, not
// the length of the queue ahead of it.
//
// The workqueue is knative's, one FIFO for all keys: Shares learns what is
// queued from the controller's enqueues (Queue), and a reconcile refused a
// share is not run but requeued shortly behind the others (Policy.Queued).
type Shares struct {
	workers int

	mu      sync.Mutex
	running map[string]int
	queued  map[string]map[types.NamespacedName]bool // by tenant
}

// NewShares returns the Shares of a controller with workers workers.
func NewShares(workers int) *Shares {
	return &Shares{workers: max(workers, 1), running: map[string]int{},
		queued: map[string]map[types.NamespacedName]bool{}}
}

// Queue notes that key was put on the queue; its namespace is its tenant.
func (s *Shares) Queue(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queued[key.Namespace]
	if q == nil {
		q = map[types.NamespacedName]bool{}
		s.queued[key.Namespace] = q
	}
	q[key] = true
}

// Forget drops key (deleted).
func (s *Shares) Forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dequeue(key)
}

func (s *Shares) dequeue(key types.NamespacedName) {
	if q := s.queued[key.Namespace]; q != nil {
		delete(q, key)
		if len(q) == 0 {
			delete(s.queued, key.Namespace)
		}
	}
}

// Acquire takes a share for a reconcile of key: release gives it back;
// false when key's tenant already runs its limit (key then counts as
// queued, as it will be requeued).
func (s *Shares) Acquire(key types.NamespacedName) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tenant := key.Namespace
	limit := s.workers
	if s.othersHaveWork(tenant) {
		limit = s.Limit()
	}
	if s.running[tenant] >= limit {
		if s.queued[tenant] == nil {
			s.queued[tenant] = map[types.NamespacedName]bool{}
		}
		s.queued[tenant][key] = true
		return nil, false
	}
	s.dequeue(key)
	s.running[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.running[tenant]--; s.running[tenant] <= 0 {
				delete(s.running, tenant)
			}
		})
	}, true
}

// othersHaveWork reports whether a tenant other than tenant has a
// reconcile queued or running; s.mu must be held.
func (s *Shares) othersHaveWork(tenant string) bool {
	for t := range s.queued {
		if t != tenant {
			return true
		}
	}
	for t := range s.running {
		if t != tenant {
			return true
		}
	}
	return false
}

// Limit is the most reconciles one tenant may run while others have work.
func (s *Shares) Limit() int { return max(s.workers-1, 1) }
