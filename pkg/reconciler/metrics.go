package reconciler

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Reconcile metrics, through OpenTelemetry's global meter provider, which
// knative's sharedmain sets up from config-observability (Prometheus on
// --metrics-port when metrics-protocol is "prometheus"). Instruments made
// before that are bound to it when it is set.
var (
	meter = otel.Meter("buildsmith.dev/reconciler")

	reconciles, _ = meter.Int64Counter("buildsmith.reconciles",
		metric.WithDescription("Reconciles by kind and outcome: ready, stale (a usable object kept Ready through a passing failure), transient, waiting or permanent."))
	requeueDelays, _ = meter.Float64Histogram("buildsmith.requeue.delay",
		metric.WithDescription("The delay before an object is reconciled again, by kind and outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.5, 1, 2, 4, 8, 16, 32, 64, 128, 300, 600, 1200))
)

func recordOutcome(ctx context.Context, kind, outcome string, delay time.Duration) {
	attrs := metric.WithAttributes(attribute.String("kind", kind), attribute.String("outcome", outcome))
	reconciles.Add(ctx, 1, attrs)
	if delay > 0 {
		requeueDelays.Record(ctx, delay.Seconds(), attrs)
	}
}

// staleObjects counts the objects that are Ready while their last re-check
// failed for a passing reason (UpToDate=False): the number to alert on when
// a registry stays unreachable, since Ready alone no longer shows it.
var staleObjects, _ = meter.Int64UpDownCounter("buildsmith.stale",
	metric.WithDescription("Ready objects whose last re-check failed for a passing reason (UpToDate=False), by kind."))

// staleSet is a controller's stale objects, kept so that each is counted
// once and uncounted when it succeeds, fails otherwise or is deleted. It
// holds at most one key per object of the kind.
type staleSet struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]struct{}
}

func (s *staleSet) add(ctx context.Context, kind string, key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; ok {
		return
	}
	if s.keys == nil {
		s.keys = map[types.NamespacedName]struct{}{}
	}
	s.keys[key] = struct{}{}
	staleObjects.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
}

func (s *staleSet) remove(ctx context.Context, kind string, key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; !ok {
		return
	}
	delete(s.keys, key)
	staleObjects.Add(ctx, -1, metric.WithAttributes(attribute.String("kind", kind)))
}

// removeIf uncounts the stale objects drop says to.
func (s *staleSet) removeIf(kind string, drop func(types.NamespacedName) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.keys {
		if drop(key) {
			delete(s.keys, key)
			staleObjects.Add(context.Background(), -1, metric.WithAttributes(attribute.String("kind", kind)))
		}
	}
}

// len is the number of stale objects.
func (s *staleSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}
